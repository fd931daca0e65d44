// The storage boundary converts rocksdb::Status into the project's Error (STYLE 7).
#pragma once

#include <rocksdb/status.h>

#include "core/result.h"

namespace ringcast::storage {

Error to_error(const rocksdb::Status& s);
// An I/O failure of the store's own files (kIo), with the errno when there is one.
Error io_error(const char* what, int sys_errno = 0);

}  // namespace ringcast::storage
