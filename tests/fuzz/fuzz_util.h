// Shared by the libFuzzer targets (tests/fuzz/*.cc): reading structured choices off the front
// of an input, and a check that stops the fuzzer with a message (an invariant of the code
// under test broke: libFuzzer saves the input as a crash artifact).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

namespace ringcast::fuzz {

// Takes bytes off the front of the input; past the end every read yields 0 / empty.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  uint8_t u8() { return p_ < end_ ? *p_++ : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | u8();
    return v;
  }
  std::string_view bytes(size_t n) {
    n = n < remaining() ? n : remaining();
    std::string_view s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::string_view rest() { return bytes(remaining()); }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace ringcast::fuzz
