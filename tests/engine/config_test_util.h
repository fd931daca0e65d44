// What the configuration tests share: a config from TOML text, and the message a bad one
// throws.
#pragma once

#include <string>
#include <string_view>

#include "engine/config.h"

namespace ringcast::testing_config {

// The message of the ConfigError that `fn` throws ("" when it does not throw).
template <class F>
std::string error_of(F fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

inline Config load(std::string_view text, const Environment& env = {}) {
  return load_config_from_string(text, env, "test.toml");
}

}  // namespace ringcast::testing_config
