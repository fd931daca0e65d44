#include "core/money.h"

#include <cstdint>

namespace ringcast {
namespace {

// A minimal, allocation-light JSON reader over raw bytes: enough to walk objects by key and
// skip every other value. It validates only what it needs to stay in bounds.
class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  void ws() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
      ++i_;
    }
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool peek(char c) {
    ws();
    return i_ < s_.size() && s_[i_] == c;
  }

  // Reads a JSON string (the opening quote is next) into `out`, unescaping.
  bool string(std::string* out) {
    if (!eat('"')) return false;
    // Fast path: no escape before the closing quote (the common case).
    for (size_t j = i_; j < s_.size(); ++j) {
      const char c = s_[j];
      if (c == '"') {
        if (out) out->assign(s_.data() + i_, j - i_);
        i_ = j + 1;
        return true;
      }
      if (c == '\\' || static_cast<unsigned char>(c) < 0x20) break;
    }
    if (out) out->clear();
    while (i_ < s_.size()) {
      char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        if (out) out->push_back(c);
        continue;
      }
      if (i_ >= s_.size()) return false;
      char e = s_[i_++];
      char plain = 0;
      switch (e) {
        case '"':
          plain = '"';
          break;
        case '\\':
          plain = '\\';
          break;
        case '/':
          plain = '/';
          break;
        case 'b':
          plain = '\b';
          break;
        case 'f':
          plain = '\f';
          break;
        case 'n':
          plain = '\n';
          break;
        case 'r':
          plain = '\r';
          break;
        case 't':
          plain = '\t';
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // surrogate pair
            uint32_t lo = 0;
            if (i_ + 1 >= s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') return false;
            i_ += 2;
            if (!hex4(&lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return false;
          }
          if (out) utf8(cp, out);
          continue;
        }
        default:
          return false;
      }
      if (out) out->push_back(plain);
    }
    return false;
  }

  // Skips any value. `depth` bounds nesting.
  bool skip_value(int depth) {
    if (depth > kMaxJsonDepth) return false;
    ws();
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '"') return string(nullptr);
    if (c == '{') {
      ++i_;
      if (eat('}')) return true;
      do {
        if (!string(nullptr) || !eat(':') || !skip_value(depth + 1)) return false;
      } while (eat(','));
      return eat('}');
    }
    if (c == '[') {
      ++i_;
      if (eat(']')) return true;
      do {
        if (!skip_value(depth + 1)) return false;
      } while (eat(','));
      return eat(']');
    }
    // number, true, false, null: a run of literal characters.
    size_t start = i_;
    while (i_ < s_.size()) {
      char d = s_[i_];
      bool lit = (d >= '0' && d <= '9') || (d >= 'a' && d <= 'z') || d == '-' || d == '+' ||
                 d == '.' || d == 'E';
      if (!lit) break;
      ++i_;
    }
    return i_ > start;
  }

 private:
  bool hex4(uint32_t* cp) {
    if (i_ + 4 > s_.size()) return false;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= static_cast<uint32_t>(h - 'A' + 10);
      else
        return false;
    }
    *cp = v;
    return true;
  }
  static void utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<std::string> json_string_field(std::string_view json, std::string_view path) {
  Scanner sc(json);
  std::string key;
  int depth = 0;
  while (true) {
    size_t dot = path.find('.');
    std::string_view want = path.substr(0, dot);
    bool last = dot == std::string_view::npos;
    if (++depth > kMaxJsonDepth) return std::nullopt;
    if (!sc.eat('{')) return std::nullopt;
    if (sc.eat('}')) return std::nullopt;
    bool descended = false;
    do {
      if (!sc.string(&key) || !sc.eat(':')) return std::nullopt;
      if (key == want) {
        if (last) {
          std::string value;
          if (!sc.peek('"') || !sc.string(&value)) return std::nullopt;
          return value;
        }
        if (!sc.peek('{')) return std::nullopt;
        path = path.substr(dot + 1);
        descended = true;
        break;
      }
      if (!sc.skip_value(depth)) return std::nullopt;
    } while (sc.eat(','));
    if (!descended) return std::nullopt;  // closed the object (or malformed): not found
  }
}

bool MoneyRules::is_money(std::string_view event_type, std::string_view payload) const {
  std::optional<std::string> cached;
  std::string_view cached_path;
  bool have_cached = false;
  for (const MoneyRule& r : rules) {
    if (r.event_type != event_type) continue;
    if (r.field_path.empty()) return true;
    if (!have_cached || cached_path != r.field_path) {
      cached = json_string_field(payload, r.field_path);
      cached_path = r.field_path;
      have_cached = true;
    }
    if (!cached) continue;
    for (const std::string& v : r.values) {
      if (v == *cached) return true;
    }
  }
  return false;
}

MoneyRules MoneyRules::xhub_default() {
  MoneyRules m;
  m.rules = {
      {"payment.status_changed", "status", {"paid", "settled", "refunded"}},
      {"withdrawal.status_changed", "status", {"completed"}},
      {"exchange.status_changed", "status", {"completed"}},
      {"refund.completed", "", {}},
      {"refund.reversed", "", {}},
  };
  return m;
}

}  // namespace ringcast
