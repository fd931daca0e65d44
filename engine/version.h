// The product version, from the CMake project version.
#pragma once

namespace ringcast {

const char* version_string();

}  // namespace ringcast
