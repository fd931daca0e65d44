// The storage boundary converts rocksdb::Status into the project's Error (STYLE 7).
#pragma once

#include <rocksdb/status.h>

#include "core/result.h"

namespace ringcast::storage {

Error to_error(const rocksdb::Status& s);

}  // namespace ringcast::storage
