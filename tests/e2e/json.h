// A JSON tree for the end-to-end tests (parsed with simdjson): enough to look into the daemon's
// API answers.
// Invariant: parse() never throws; a lookup that misses returns a shared null value, so chains
// like j["delivery"]["status"].str() are safe on any input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ringcast::e2e {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject, kInvalid };

  // The value in `text`; Type::kInvalid when the text is not one JSON value.
  static Json parse(std::string_view text);

  Type type() const { return type_; }
  bool valid() const { return type_ != Type::kInvalid; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_object() const { return type_ == Type::kObject; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_string() const { return type_ == Type::kString; }

  // Object member; the shared null when absent or not an object.
  const Json& operator[](std::string_view key) const;
  const Json& operator[](const char* key) const { return (*this)[std::string_view(key)]; }
  // Array element; the shared null when out of range or not an array.
  const Json& operator[](size_t i) const;
  const Json& operator[](int i) const {  // a literal 0 would otherwise match const char*
    return i < 0 ? (*this)[size_t{1} << 62] : (*this)[static_cast<size_t>(i)];
  }
  bool has(std::string_view key) const;
  size_t size() const;                                        // array length or member count
  const std::vector<Json>& items() const { return values_; }  // array elements / member values
  const std::vector<std::string>& keys() const { return keys_; }

  const std::string& str() const { return text_; }  // string value ("" otherwise)
  double num() const;                               // number value (0 otherwise)
  int64_t i64() const;                              // integer value (0 otherwise)
  bool boolean() const { return type_ == Type::kBool && bool_; }

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool bool_ = false;
  std::string text_;  // string value, or the number's text
  std::vector<std::string> keys_;
  std::vector<Json> values_;
};

// "2024-05-01T12:00:00.123Z" → milliseconds since the Unix epoch; -1 when malformed.
int64_t rfc3339_ms(std::string_view text);

}  // namespace ringcast::e2e
