// Internal to the configuration's files (engine/config*.cc), not part of the engine's interface:
// the key table (KeyDef) that loading and printing walk, the value to assign (Input) and
// assign(), fail() and trim() (docs/operations.md §2 "Configuration"). Invariant: a KeyDef's
// field() maps the root of its table (config_keys(): a Config; policy_keys(): a PolicyConfig;
// redis_intake_keys(): a RedisIntakeConfig; nats_intake_keys(): a NatsIntakeConfig) to a member of
// the type its kind names.
#pragma once

#include <toml++/toml.h>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringcast::config_detail {

// ---------------------------------------------------------------------------------------------
// Key registry: one entry per leaf key. `field` maps the root object (Config or PolicyConfig)
// to the member; `kind` says how to parse and print it.

enum class Kind : uint8_t {
  kString,
  kSecret,  // a string that is masked when printed
  kBool,
  kU32,
  kBytes,  // uint64, integer or "64KiB"
  kDouble,
  kDuration,
  kStringList,
  kPortList,
  kSync,
  kDurationList,
  kOptDouble,
  kOptDuration,
  kOptBool,
  kMoneyRules,  // std::optional<std::vector<MoneyRule>>; file only
};

struct KeyDef {
  const char* path;  // relative to the root: "server.listen" or (policies) "ladder"
  Kind kind;
  std::function<void*(void*)> field;
  double min = 0;
  double max = 0;
};

// The key tables (config_keys.cc): Config's keys, one [policies.<name>] table's, one
// [[intake.redis]] table's, one [[intake.nats]] table's.
const std::vector<KeyDef>& config_keys();
const std::vector<KeyDef>& policy_keys();
const std::vector<KeyDef>& redis_intake_keys();
const std::vector<KeyDef>& nats_intake_keys();

// Throws ConfigError "<where>: <key>: <what>" (no "<where>: " when `where` is empty).
[[noreturn]] void fail(const std::string& where, const std::string& key, const std::string& what);

// `s` without leading and trailing white space.
std::string_view trim(std::string_view s);

// A value to assign: either a TOML node or an environment string.
struct Input {
  const toml::node* node = nullptr;
  std::optional<std::string_view> text;  // from the environment
  std::string where;
};

// Converts `in` as k.kind says and stores it in k's member of `root` (the Config,
// PolicyConfig, RedisIntakeConfig or NatsIntakeConfig of k's table); throws ConfigError naming
// `key`.
void assign(const KeyDef& k, const std::string& key, void* root, const Input& in);

}  // namespace ringcast::config_detail
