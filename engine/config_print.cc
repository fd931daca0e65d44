// Config::to_toml (docs/operations.md §2 "Configuration", `ringcast config print`): the
// effective configuration as TOML, key by key from the key table, secrets masked unless asked.
#include "engine/config.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config_internal.h"

namespace ringcast {

using config_detail::config_keys;
using config_detail::KeyDef;
using config_detail::Kind;
using config_detail::nats_intake_keys;
using config_detail::policy_keys;
using config_detail::redis_intake_keys;

namespace {

// --- printing --------------------------------------------------------------------------------

std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string format_double(double v) {
  std::ostringstream os;
  os.precision(15);
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// The printed value, or nullopt when an optional is unset.
std::optional<std::string> format_value(const KeyDef& k, void* root, bool mask) {
  void* f = k.field(root);
  switch (k.kind) {
    case Kind::kString:
      return toml_string(*static_cast<std::string*>(f));
    case Kind::kSecret: {
      const auto& s = *static_cast<std::string*>(f);
      return toml_string(mask && !s.empty() ? "***" : s);
    }
    case Kind::kBool:
      return *static_cast<bool*>(f) ? "true" : "false";
    case Kind::kU32:
      return std::to_string(*static_cast<uint32_t*>(f));
    case Kind::kBytes: {
      uint64_t v = *static_cast<uint64_t*>(f);
      std::string s = format_bytes(v);
      return s == std::to_string(v) ? s : toml_string(s);
    }
    case Kind::kDouble:
      return format_double(*static_cast<double*>(f));
    case Kind::kDuration:
      return toml_string(format_duration(*static_cast<Duration*>(f)));
    case Kind::kSync: {
      switch (*static_cast<SyncPolicy*>(f)) {
        case SyncPolicy::kAlways:
          return "\"always\"";
        case SyncPolicy::kInterval:
          return "\"interval\"";
        case SyncPolicy::kNone:
          return "\"none\"";
      }
      return "\"interval\"";
    }
    case Kind::kStringList: {
      std::string out = "[";
      const auto& v = *static_cast<std::vector<std::string>*>(f);
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_string(v[i]);
      return out + "]";
    }
    case Kind::kPortList: {
      std::string out = "[";
      const auto& v = *static_cast<std::vector<uint16_t>*>(f);
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
      return out + "]";
    }
    case Kind::kDurationList: {
      const auto& v = *static_cast<std::vector<Duration>*>(f);
      if (v.empty()) return std::nullopt;
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i)
        out += (i ? ", " : "") + toml_string(format_duration(v[i]));
      return out + "]";
    }
    case Kind::kOptDouble: {
      const auto& v = *static_cast<std::optional<double>*>(f);
      if (!v) return std::nullopt;
      return format_double(*v);
    }
    case Kind::kOptDuration: {
      const auto& v = *static_cast<std::optional<Duration>*>(f);
      if (!v) return std::nullopt;
      return toml_string(format_duration(*v));
    }
    case Kind::kOptBool: {
      const auto& v = *static_cast<std::optional<bool>*>(f);
      if (!v) return std::nullopt;
      return *v ? "true" : "false";
    }
    case Kind::kMoneyRules: {
      const auto& v = *static_cast<std::optional<std::vector<MoneyRule>>*>(f);
      if (!v) return std::nullopt;
      std::string out = "[";
      for (size_t i = 0; i < v->size(); ++i) {
        const MoneyRule& r = (*v)[i];
        out += (i ? ", " : "") + std::string("{type = ") + toml_string(r.event_type);
        if (!r.field_path.empty()) {
          out += ", field = " + toml_string(r.field_path) + ", values = [";
          for (size_t j = 0; j < r.values.size(); ++j) {
            out += (j ? ", " : "") + toml_string(r.values[j]);
          }
          out += "]";
        }
        out += "}";
      }
      return out + "]";
    }
  }
  return std::nullopt;
}

}  // namespace

std::string Config::to_toml(bool mask_secrets) const {
  std::string out;
  if (!source.empty()) out += "# effective configuration (" + source + " + environment)\n";
  std::string section;
  Config& self = const_cast<Config&>(*this);  // format_value only reads
  for (const auto& k : config_keys()) {
    std::string_view path = k.path;
    size_t dot = path.rfind('.');
    std::string sec(path.substr(0, dot));
    if (sec != section) {
      out += (out.empty() ? "[" : "\n[") + sec + "]\n";
      section = sec;
    }
    if (auto v = format_value(k, &self, mask_secrets)) {
      out += std::string(path.substr(dot + 1)) + " = " + *v + "\n";
    }
  }
  for (auto& [name, p] : self.policies) {
    out += "\n[policies." + name + "]\n";
    for (const auto& k : policy_keys()) {
      if (auto v = format_value(k, &p, mask_secrets))
        out += std::string(k.path) + " = " + *v + "\n";
    }
  }
  for (auto& r : self.intake.redis) {
    out += "\n[[intake.redis]]\n";
    for (const auto& k : redis_intake_keys()) {
      if (auto v = format_value(k, &r, mask_secrets))
        out += std::string(k.path) + " = " + *v + "\n";
    }
  }
  for (auto& n : self.intake.nats) {
    out += "\n[[intake.nats]]\n";
    for (const auto& k : nats_intake_keys()) {
      if (auto v = format_value(k, &n, mask_secrets))
        out += std::string(k.path) + " = " + *v + "\n";
    }
  }
  return out;
}

}  // namespace ringcast
