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

bool valid_type(std::string_view t) {
  for (unsigned char c : t) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

}  // namespace ringcast
