// core/input_rules: the e-mail address rule (SPEC R8.4) — nothing that could end an SMTP command
// or a header line is an address.
#include "core/input_rules.h"

#include <gtest/gtest.h>

#include <string>

namespace ringcast {
namespace {

TEST(ValidEmail, TakesOrdinaryAddresses) {
  for (const char* ok : {"a@b", "ops@acme.example", "first.last+tag@mail.acme-corp.example",
                         "x_y-z@sub.domain.example", "o'brien@example.com"}) {
    EXPECT_TRUE(valid_email(ok)) << ok;
  }
  EXPECT_TRUE(valid_email(std::string(64, 'l') + "@" + std::string(63, 'd') + ".example"));
}

TEST(ValidEmail, RefusesWhatCouldInjectOrIsNoAddress) {
  for (const char* bad : {"",
                          "@",
                          "a@",
                          "@b.example",
                          "no-at-sign",
                          "a@b@c.example",
                          "a b@c.example",
                          "a@b.example\r\nBcc: x@y",
                          "a@b.example\n",
                          "a\r@b.example",
                          "<a@b.example>",
                          "a@b..example",
                          "a@.b.example",
                          "a@b.example.",
                          "a@-b.example",
                          "a@b-.example",
                          "a@b_c.example",
                          "\"a\"@b.example",
                          "a,b@c.example",
                          "a@[127.0.0.1]",
                          "ä@b.example"}) {
    EXPECT_FALSE(valid_email(bad)) << bad;
  }
  EXPECT_FALSE(valid_email(std::string(65, 'l') + "@b.example"));               // local > 64
  EXPECT_FALSE(valid_email("a@" + std::string(64, 'd') + ".example"));          // label > 63
  EXPECT_FALSE(valid_email("a@" + std::string(250, 'd').replace(60, 1, ".")));  // > 254
}

}  // namespace
}  // namespace ringcast
