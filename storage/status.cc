#include "storage/status.h"

namespace ringcast::storage {

Error to_error(const rocksdb::Status& s) {
  if (s.IsNotFound()) return make_error(Errc::kNotFound, "not found in the store");
  if (s.IsCorruption()) return make_error(Errc::kCorruption, "the store reports corruption");
  if (s.IsIOError()) return make_error(Errc::kIo, "the store hit an I/O error");
  if (s.IsInvalidArgument()) return make_error(Errc::kInvalidArgument, "invalid store argument");
  if (s.IsBusy() || s.IsTryAgain() || s.IsIncomplete() || s.IsShutdownInProgress())
    return make_error(Errc::kUnavailable, "the store is busy or shutting down");
  return make_error(Errc::kInternal, "unexpected store status");
}

Error io_error(const char* what, int sys_errno) {
  Error e = make_error(Errc::kIo, what);
  e.sys_errno = sys_errno;
  return e;
}

}  // namespace ringcast::storage
