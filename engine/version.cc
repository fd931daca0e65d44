#include "engine/version.h"

namespace ringcast {

const char* version_string() {
  return RINGCAST_VERSION;
}

}  // namespace ringcast
