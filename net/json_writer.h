// A small streaming JSON writer for API responses. Invariant: whatever strings it is given
// (control characters, quotes, invalid UTF-8 from a receiver's response body), the output is
// valid JSON in valid UTF-8: invalid bytes become U+FFFD.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ringcast::net {

// Appends `s` as a JSON string literal (with the quotes).
void append_json_string(std::string& out, std::string_view s);

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);  // inside an object, before each value

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b);
  JsonWriter& value(int64_t v);
  JsonWriter& value(uint64_t v);
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(unsigned v) { return value(static_cast<uint64_t>(v)); }
  JsonWriter& value(double v);  // non-finite → null
  JsonWriter& null();
  JsonWriter& raw(std::string_view json);  // already valid JSON (e.g. a stored payload)

  // key + value in one call.
  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void before_value();
  std::string out_;
  std::vector<bool> need_comma_;  // one per open container
  bool after_key_ = false;
};

}  // namespace ringcast::net
