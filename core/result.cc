#include "core/result.h"

namespace ringcast {

const char* errc_name(Errc c) {
  switch (c) {
    case Errc::kOk:
      return "ok";
    case Errc::kInvalidArgument:
      return "invalid_argument";
    case Errc::kNotFound:
      return "not_found";
    case Errc::kConflict:
      return "conflict";
    case Errc::kCorruption:
      return "corruption";
    case Errc::kIo:
      return "io_error";
    case Errc::kUnavailable:
      return "unavailable";
    case Errc::kLimitExceeded:
      return "limit_exceeded";
    case Errc::kInternal:
      return "internal";
  }
  return "unknown";
}

}  // namespace ringcast
