// The RESP codec (redis/reply.h): bytes fed to the hiredis-backed reader become owned Reply
// trees; every type, nesting, errors with the server's message, split input, limits, encoding.
#include "redis/reply.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace ringcast::redis {
namespace {

// Feeds `bytes` in chunks of `chunk` and collects every complete reply.
std::vector<Reply> parse_all(const std::string& bytes, size_t chunk = 0) {
  ReplyReader reader;
  std::vector<Reply> out;
  if (chunk == 0) chunk = bytes.size();
  for (size_t off = 0; off < bytes.size(); off += chunk) {
    const size_t n = std::min(chunk, bytes.size() - off);
    EXPECT_TRUE(reader.feed(bytes.data() + off, n).ok());
    for (;;) {
      auto r = reader.next();
      EXPECT_TRUE(r.ok());
      if (!r.ok() || !r->has_value()) break;
      out.push_back(std::move(**r));
    }
  }
  return out;
}

TEST(RedisReplyTest, DecodesEveryScalarType) {
  std::string b = "+OK\r\n-ERR unknown command 'FOO'\r\n:-42\r\n$5\r\nhel";
  b.push_back('\0');  // a bulk string is binary: the NUL must survive
  b += "o\r\n$-1\r\n$0\r\n\r\n";
  auto replies = parse_all(b);
  ASSERT_EQ(replies.size(), 6u);
  EXPECT_TRUE(replies[0].is_status());
  EXPECT_EQ(replies[0].str(), "OK");
  EXPECT_TRUE(replies[1].is_error());
  EXPECT_EQ(replies[1].str(), "ERR unknown command 'FOO'");
  EXPECT_EQ(replies[1].error_code(), "ERR");
  EXPECT_TRUE(replies[2].is_integer());
  EXPECT_EQ(replies[2].integer_value(), -42);
  EXPECT_TRUE(replies[3].is_string());
  EXPECT_EQ(replies[3].str(), std::string("hel\0o", 5));
  EXPECT_TRUE(replies[4].is_nil());
  EXPECT_TRUE(replies[5].is_string());
  EXPECT_EQ(replies[5].str(), "");
}

TEST(RedisReplyTest, DecodesNestedArraysWithMixedTypes) {
  // [1, ["a", nil, [+x, -MOVED 3999 127.0.0.1:6381]], [], nil-array]
  const std::string b =
      "*4\r\n:1\r\n*3\r\n$1\r\na\r\n$-1\r\n*2\r\n+x\r\n-MOVED 3999 127.0.0.1:6381\r\n*0\r\n*-1\r\n";
  for (size_t chunk : {size_t{0}, size_t{1}, size_t{3}, size_t{7}}) {
    SCOPED_TRACE(chunk);
    auto replies = parse_all(b, chunk);
    ASSERT_EQ(replies.size(), 1u);
    const Reply& r = replies[0];
    const Reply expected = Reply::array({
        Reply::integer(1),
        Reply::array(
            {Reply::string("a"), Reply::nil(),
             Reply::array({Reply::status("x"), Reply::error("MOVED 3999 127.0.0.1:6381")})}),
        Reply::array({}),
        Reply::nil(),
    });
    EXPECT_EQ(r, expected) << r.debug_string();
    EXPECT_EQ(r[1][2][1].error_code(), "MOVED");
    EXPECT_TRUE(r[1][2][1].error_is("MOVED"));
    EXPECT_FALSE(r[1][2][1].error_is("ASK"));
  }
}

TEST(RedisReplyTest, DeepNestingWithinHiredisLimitAndBeyond) {
  // Seven levels parse (XREADGROUP/XAUTOCLAIM nest about five); hiredis 0.14 refuses deeper.
  std::string seven;
  for (int i = 0; i < 7; ++i) seven += "*1\r\n";
  seven += ":7\r\n";
  auto ok = parse_all(seven);
  ASSERT_EQ(ok.size(), 1u);
  const Reply* r = &ok[0];
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(r->is_array());
    r = &(*r)[0];
  }
  EXPECT_EQ(r->integer_value(), 7);

  std::string nine;
  for (int i = 0; i < 9; ++i) nine += "*1\r\n";
  nine += ":9\r\n";
  ReplyReader reader;
  ASSERT_TRUE(reader.feed(nine.data(), nine.size()).ok());
  auto bad = reader.next();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Errc::kCorruption);
}

TEST(RedisReplyTest, IncompleteReplyIsNeverReturned) {
  ReplyReader reader;
  const std::string part = "$10\r\n01234";
  ASSERT_TRUE(reader.feed(part.data(), part.size()).ok());
  auto r = reader.next();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_GT(reader.buffered_bytes(), 0u);
  reader.reset();
  EXPECT_EQ(reader.buffered_bytes(), 0u);
  const std::string whole = "$2\r\nok\r\n";
  ASSERT_TRUE(reader.feed(whole.data(), whole.size()).ok());
  auto r2 = reader.next();
  ASSERT_TRUE(r2.ok() && r2->has_value());
  EXPECT_EQ((*r2)->str(), "ok");
}

TEST(RedisReplyTest, ProtocolErrorIsAnError) {
  ReplyReader reader;
  const std::string junk = "?what\r\n";
  ASSERT_TRUE(reader.feed(junk.data(), junk.size()).ok());
  auto r = reader.next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kCorruption);
  EXPECT_STRNE(reader.last_error_text(), "");
}

TEST(RedisReplyTest, LimitsRefuseHugeArraysAndBuffers) {
  ReaderLimits limits;
  limits.max_array_elements = 10;
  limits.max_buffered_bytes = 100;
  {
    ReplyReader reader(limits);
    const std::string big = "*11\r\n";
    ASSERT_TRUE(reader.feed(big.data(), big.size()).ok());
    auto r = reader.next();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::kLimitExceeded);
  }
  {
    ReplyReader reader(limits);
    const std::string fits = "*10\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n:8\r\n:9\r\n:0\r\n";
    ASSERT_TRUE(reader.feed(fits.data(), fits.size()).ok());
    auto r = reader.next();
    ASSERT_TRUE(r.ok() && r->has_value());
    EXPECT_EQ((*r)->size(), 10u);
  }
  {
    ReplyReader reader(limits);
    const std::string head = "$1000\r\n";
    ASSERT_TRUE(reader.feed(head.data(), head.size()).ok());
    const std::string body(200, 'x');
    auto f = reader.feed(body.data(), body.size());
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.error().code, Errc::kLimitExceeded);
  }
}

TEST(RedisReplyTest, EncodesCommandsAsRespArrays) {
  std::string out;
  const std::string_view args[] = {"SET", "k", std::string_view("a\0b", 3)};
  ASSERT_TRUE(encode_command(args, &out).ok());
  static constexpr char kWire[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\na\0b\r\n";
  EXPECT_EQ(out, std::string(kWire, sizeof(kWire) - 1));
  std::vector<std::string> many(40, "x");
  std::vector<std::string_view> views(many.begin(), many.end());
  std::string out2;
  ASSERT_TRUE(encode_command(views, &out2).ok());
  EXPECT_EQ(out2.substr(0, 5), "*40\r\n");
  EXPECT_FALSE(encode_command({}, &out2).ok());
}

// The same bytes as hiredis's own formatter, for commands of every shape: no argument empty
// or many, binary bytes, lengths across the digit boundaries.
TEST(RedisReplyTest, EncodingMatchesHiredis) {
  std::mt19937 rng(7);
  const size_t lengths[] = {0, 1, 9, 10, 99, 100, 999, 1000, 10000, 100000};
  for (int round = 0; round < 300; ++round) {
    const size_t n = 1 + rng() % (round % 10 == 0 ? 120 : 12);
    std::vector<std::string> args(n);
    for (auto& a : args) {
      a.resize(lengths[rng() % std::size(lengths)] + rng() % 3);
      for (char& c : a) c = static_cast<char>(rng());
    }
    std::vector<std::string_view> views(args.begin(), args.end());
    std::string ours = "prefix";  // appended to what is there
    ASSERT_TRUE(encode_command(views, &ours).ok());
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    char* theirs = nullptr;
    const int len = redisFormatCommandArgv(&theirs, static_cast<int>(n), argv.data(), lens.data());
    ASSERT_GT(len, 0);
    EXPECT_EQ(ours, "prefix" + std::string(theirs, static_cast<size_t>(len))) << "round " << round;
    redisFreeCommand(theirs);
  }
}

}  // namespace
}  // namespace ringcast::redis
