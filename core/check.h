// Invariant checks that stay on in every build (STYLE 8: assert on bugs). RC_CHECK is for what
// costs a compare or two — a timer linked twice, a Result read on the wrong side, a responder
// answered twice — where running on would corrupt state or send twice: the process stops with
// the expression and its place instead. Expected failures (a peer, the disk, the network) are
// never RC_CHECKs: they are Results with a counter and a test.
#pragma once

namespace ringcast {

[[noreturn]] void check_failed(const char* expression, const char* file, int line);

}  // namespace ringcast

#define RC_CHECK(cond)                          \
  (__builtin_expect(static_cast<bool>(cond), 1) \
       ? static_cast<void>(0)                   \
       : ::ringcast::check_failed(#cond, __FILE__, __LINE__))
