#include "tests/e2e/json.h"

#include <cstdlib>
#include <ctime>

namespace ringcast::e2e {

namespace {
const Json& null_json() {
  static const Json kNull;
  return kNull;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}
}  // namespace

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}

  bool value(Json& out, int depth) {
    if (depth > 64) return false;
    ws();
    if (p_ >= s_.size()) return false;
    char c = s_[p_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out.type_ = Json::Type::kString;
      return string(out.text_);
    }
    if (lit("true")) {
      out.type_ = Json::Type::kBool;
      out.bool_ = true;
      return true;
    }
    if (lit("false")) {
      out.type_ = Json::Type::kBool;
      return true;
    }
    if (lit("null")) {
      out.type_ = Json::Type::kNull;
      return true;
    }
    return number(out);
  }

  bool at_end() {
    ws();
    return p_ == s_.size();
  }

 private:
  void ws() {
    while (p_ < s_.size() &&
           (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r')) {
      ++p_;
    }
  }
  bool lit(std::string_view w) {
    if (s_.substr(p_, w.size()) != w) return false;
    p_ += w.size();
    return true;
  }
  bool number(Json& out) {
    size_t start = p_;
    if (p_ < s_.size() && s_[p_] == '-') ++p_;
    bool digits = false;
    while (p_ < s_.size() && ((s_[p_] >= '0' && s_[p_] <= '9') || s_[p_] == '.' || s_[p_] == 'e' ||
                              s_[p_] == 'E' || s_[p_] == '+' || s_[p_] == '-')) {
      digits |= s_[p_] >= '0' && s_[p_] <= '9';
      ++p_;
    }
    if (!digits) return false;
    out.type_ = Json::Type::kNumber;
    out.text_ = std::string(s_.substr(start, p_ - start));
    return true;
  }
  bool hex4(uint32_t& v) {
    if (p_ + 4 > s_.size()) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[p_++];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v |= static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v |= static_cast<uint32_t>(h - 'A' + 10);
      } else {
        return false;
      }
    }
    return true;
  }
  bool string(std::string& out) {
    ++p_;  // opening quote
    while (p_ < s_.size()) {
      char c = s_[p_++];
      if (c == '"') return true;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= s_.size()) return false;
      char e = s_[p_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(p_, 2) == "\\u") {
            p_ += 2;
            uint32_t lo = 0;
            if (!hex4(lo)) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  bool array(Json& out, int depth) {
    out.type_ = Json::Type::kArray;
    ++p_;
    ws();
    if (p_ < s_.size() && s_[p_] == ']') {
      ++p_;
      return true;
    }
    for (;;) {
      Json v;
      if (!value(v, depth + 1)) return false;
      out.values_.push_back(std::move(v));
      ws();
      if (p_ >= s_.size()) return false;
      if (s_[p_] == ',') {
        ++p_;
        continue;
      }
      if (s_[p_] == ']') {
        ++p_;
        return true;
      }
      return false;
    }
  }
  bool object(Json& out, int depth) {
    out.type_ = Json::Type::kObject;
    ++p_;
    ws();
    if (p_ < s_.size() && s_[p_] == '}') {
      ++p_;
      return true;
    }
    for (;;) {
      ws();
      if (p_ >= s_.size() || s_[p_] != '"') return false;
      std::string key;
      if (!string(key)) return false;
      ws();
      if (p_ >= s_.size() || s_[p_] != ':') return false;
      ++p_;
      Json v;
      if (!value(v, depth + 1)) return false;
      out.keys_.push_back(std::move(key));
      out.values_.push_back(std::move(v));
      ws();
      if (p_ >= s_.size()) return false;
      if (s_[p_] == ',') {
        ++p_;
        continue;
      }
      if (s_[p_] == '}') {
        ++p_;
        return true;
      }
      return false;
    }
  }

  std::string_view s_;
  size_t p_ = 0;
};

Json Json::parse(std::string_view text) {
  JsonParser p(text);
  Json out;
  if (!p.value(out, 0) || !p.at_end()) {
    Json bad;
    bad.type_ = Type::kInvalid;
    return bad;
  }
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
