// Fuzz target: the TOML configuration loader (engine/config.cc load_config_from_string, on
// toml++). Any text either loads or throws ConfigError (nothing else escapes, nothing
// crashes); a loaded configuration passed validate(), and its effective TOML (to_toml, what
// `ringcast check` prints) loads again into a configuration that prints the same.
#include <string>

#include "engine/config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ringcast::Environment env;  // no RINGCAST_* variables
  std::string printed;
  try {
    ringcast::Config cfg = ringcast::load_config_from_string(text, env, "fuzz.toml");
    printed = cfg.to_toml(false);
  } catch (const ringcast::ConfigError&) {
    return 0;  // refused, with a message: fine
  }
  std::string again;
  try {
    again = ringcast::load_config_from_string(printed, env, "fuzz.toml").to_toml(false);
  } catch (const ringcast::ConfigError& e) {
    std::fprintf(stderr, "the effective TOML does not load: %s\n---\n%s---\n", e.what(),
                 printed.c_str());
    FUZZ_CHECK(false);
  }
  FUZZ_CHECK(again == printed);
  return 0;
}
