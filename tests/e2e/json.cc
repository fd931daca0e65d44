#include "tests/e2e/json.h"

#include <simdjson.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace ringcast::e2e {

namespace {
const Json& null_json() {
  static const Json kNull;
  return kNull;
}
}  // namespace

// Builds the tree from simdjson's DOM (the parser the daemon's API uses too).
class JsonParser {
 public:
  static void from(simdjson::dom::element e, Json& out) {
    using T = simdjson::dom::element_type;
    switch (e.type()) {
      case T::ARRAY: {
        simdjson::dom::array arr;
        if (e.get_array().get(arr)) return;  // cannot fail: the type says it is one
        out.type_ = Json::Type::kArray;
        for (simdjson::dom::element v : arr) {
          out.values_.emplace_back();
          from(v, out.values_.back());
        }
        return;
      }
      case T::OBJECT: {
        simdjson::dom::object obj;
        if (e.get_object().get(obj)) return;
        out.type_ = Json::Type::kObject;
        for (simdjson::dom::key_value_pair f : obj) {
          out.keys_.emplace_back(f.key);
          out.values_.emplace_back();
          from(f.value, out.values_.back());
        }
        return;
      }
      case T::INT64:
        out.type_ = Json::Type::kNumber;
        out.text_ = std::to_string(e.get_int64().value_unsafe());
        return;
      case T::UINT64:
        out.type_ = Json::Type::kNumber;
        out.text_ = std::to_string(e.get_uint64().value_unsafe());
        return;
      case T::DOUBLE: {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", e.get_double().value_unsafe());
        out.type_ = Json::Type::kNumber;
        out.text_ = buf;
        return;
      }
      case T::STRING:
        out.type_ = Json::Type::kString;
        out.text_ = std::string(e.get_string().value_unsafe());
        return;
      case T::BOOL:
        out.type_ = Json::Type::kBool;
        out.bool_ = e.get_bool().value_unsafe();
        return;
      case T::NULL_VALUE:
        out.type_ = Json::Type::kNull;
        return;
    }
  }
};

Json Json::parse(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  Json out;
  if (parser.parse(text.data(), text.size()).get(root)) {
    out.type_ = Type::kInvalid;
    return out;
  }
  JsonParser::from(root, out);
  return out;
}

const Json& Json::operator[](std::string_view key) const {
  if (type_ != Type::kObject) return null_json();
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) return values_[i];
  }
  return null_json();
}

const Json& Json::operator[](size_t i) const {
  if (type_ != Type::kArray || i >= values_.size()) return null_json();
  return values_[i];
}

bool Json::has(std::string_view key) const {
  for (const auto& k : keys_) {
    if (k == key) return true;
  }
  return false;
}

size_t Json::size() const {
  return type_ == Type::kArray || type_ == Type::kObject ? values_.size() : 0;
}

double Json::num() const {
  return type_ == Type::kNumber ? std::strtod(text_.c_str(), nullptr) : 0;
}

int64_t Json::i64() const {
  return type_ == Type::kNumber ? std::strtoll(text_.c_str(), nullptr, 10) : 0;
}

int64_t rfc3339_ms(std::string_view t) {
  // YYYY-MM-DDTHH:MM:SS[.fff]Z
  if (t.size() < 20) return -1;
  auto num = [&](size_t pos, size_t len) -> int {
    int v = 0;
    for (size_t i = pos; i < pos + len; ++i) {
      if (t[i] < '0' || t[i] > '9') return -1;
      v = v * 10 + (t[i] - '0');
    }
    return v;
  };
  struct tm tm {};
  tm.tm_year = num(0, 4) - 1900;
  tm.tm_mon = num(5, 2) - 1;
  tm.tm_mday = num(8, 2);
  tm.tm_hour = num(11, 2);
  tm.tm_min = num(14, 2);
  tm.tm_sec = num(17, 2);
  if (tm.tm_mon < 0 || tm.tm_mday < 0 || tm.tm_hour < 0 || tm.tm_min < 0 || tm.tm_sec < 0) {
    return -1;
  }
  int64_t ms = 0;
  size_t p = 19;
  if (p < t.size() && t[p] == '.') {
    ++p;
    int64_t scale = 100;
    while (p < t.size() && t[p] >= '0' && t[p] <= '9') {
      ms += (t[p] - '0') * scale;
      scale /= 10;
      ++p;
    }
  }
  if (p >= t.size() || t[p] != 'Z') return -1;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
}

}  // namespace ringcast::e2e
