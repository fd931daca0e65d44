#include "core/input_rules.h"

#include <cctype>

namespace ringcast {

bool valid_tenant(std::string_view t, size_t max) {
  if (t.empty() || t.size() > max) return false;
  for (unsigned char c : t) {
    if (!(std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == ':' || c == '@' || c == '~' ||
          c == '+')) {
      return false;
    }
  }
  return true;
}

bool printable_text(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

bool valid_email(std::string_view s) {
  if (s.size() > 254) return false;
  const size_t at = s.find('@');
  if (at == std::string_view::npos || at == 0 || at > 64) return false;
  for (unsigned char c : s.substr(0, at)) {
    if (c <= 0x20 || c >= 0x7f) return false;
    if (std::string_view("(),:;<>@[\\]\"").find(static_cast<char>(c)) != std::string_view::npos)
      return false;
  }
  std::string_view domain = s.substr(at + 1);
  if (domain.empty()) return false;
  size_t label = 0;
  char prev = '.';
  for (char c : domain) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (c == '.') {
      if (label == 0 || prev == '-') return false;
      label = 0;
    } else if (alnum || (c == '-' && label > 0)) {
      if (++label > 63) return false;
    } else {
      return false;
    }
    prev = c;
  }
  return label > 0 && prev != '-';
}

bool valid_type(std::string_view t) {
  for (unsigned char c : t) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

}  // namespace ringcast
