// net/http_request_parser, sans-I/O: the same bytes give the same requests (or the same error)
// however they are cut into reads, which is what tells a value split across two reads from
// obs-fold; pausing after a request and resuming.
#include "net/http_request_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ringcast::net {
namespace {

using ::testing::HasSubstr;

struct Collect final : RequestParser::Sink {
  size_t body_limit(const HttpRequest&) override { return 1024; }
  bool on_request(HttpRequest&& r, const RequestParser::RequestInfo&) override {
    std::string line = r.method + " " + r.target;
    for (const auto& h : r.headers) line += " [" + h.name + "=" + h.value + "]";
    line += " " + r.body;
    requests.push_back(line);
    return !pause;
  }
  std::vector<std::string> requests;
  bool pause = false;
};

// Feeds `raw` cut at `cuts` (ascending offsets); returns the requests and, after a failure,
// "error <status>" as the last entry.
std::vector<std::string> parse(std::string_view raw, const std::vector<size_t>& cuts) {
  Collect sink;
  RequestParser p(sink, RequestLimits{});
  size_t pos = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(raw.size());
  for (size_t end : ends) {
    // A fresh buffer per read, reusing one address as the server's receive buffer does.
    static std::string buf;
    buf.assign(raw.substr(pos, end - pos));
    RequestParser::Feed f = p.feed(buf.data(), buf.size());
    if (f.status == RequestParser::Status::kFailed) {
      sink.requests.push_back("error " + std::to_string(p.error().status));
      break;
    }
    EXPECT_EQ(f.status, RequestParser::Status::kNeedMore);
    pos = end;
  }
  return sink.requests;
}

TEST(RequestParserTest, AValueSplitAcrossReadsAtAnyByteIsNotObsFold) {
  const std::string raw =
      "POST /a HTTP/1.1\r\nHost: h\r\nX-Long: one two  three\r\nContent-Length: 2\r\n\r\nhi"
      "GET /b HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::vector<std::string> whole = parse(raw, {});
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0], "POST /a [host=h] [x-long=one two  three] [content-length=2] hi");
  for (size_t cut = 1; cut < raw.size(); ++cut) {
    EXPECT_EQ(parse(raw, {cut}), whole) << "cut at " << cut;
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < raw.size(); ++i) every.push_back(i);
  EXPECT_EQ(parse(raw, every), whole);
}

TEST(RequestParserTest, ObsFoldIsFoundWhereverTheReadsAreCut) {
  const std::string raw = "GET /a HTTP/1.1\r\nHost: h\r\nX-A: b\r\n  c\r\n\r\n";
  EXPECT_THAT(parse(raw, {}), ::testing::ElementsAre("error 400"));
  for (size_t cut = 1; cut < raw.size(); ++cut) {
    EXPECT_THAT(parse(raw, {cut}), ::testing::ElementsAre("error 400")) << "cut at " << cut;
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < raw.size(); ++i) every.push_back(i);
  EXPECT_THAT(parse(raw, every), ::testing::ElementsAre("error 400"));
}

TEST(RequestParserTest, PausesAfterARequestAndResumesWithTheRest) {
  Collect sink;
  sink.pause = true;
  RequestParser p(sink, RequestLimits{});
  const std::string raw = "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n";
  RequestParser::Feed f = p.feed(raw.data(), raw.size());
  ASSERT_EQ(f.status, RequestParser::Status::kPaused);
  EXPECT_EQ(f.consumed, raw.size() / 2);
  ASSERT_EQ(sink.requests.size(), 1u);
  p.resume();
  sink.pause = false;
  f = p.feed(raw.data() + f.consumed, raw.size() - f.consumed);
  EXPECT_EQ(f.status, RequestParser::Status::kNeedMore);
  ASSERT_EQ(sink.requests.size(), 2u);
  EXPECT_THAT(sink.requests[1], HasSubstr("GET /2"));
  EXPECT_FALSE(p.in_message());
}

TEST(RequestParserTest, AfterAFailureNothingMoreIsParsed) {
  Collect sink;
  RequestParser p(sink, RequestLimits{});
  const std::string bad = "GET /a HTTP/1.1\r\nHost : h\r\n\r\n";
  EXPECT_EQ(p.feed(bad.data(), bad.size()).status, RequestParser::Status::kFailed);
  EXPECT_EQ(p.error().status, 400);
  EXPECT_TRUE(p.error().close);
  const std::string good = "GET /b HTTP/1.1\r\nHost: h\r\n\r\n";
  EXPECT_EQ(p.feed(good.data(), good.size()).status, RequestParser::Status::kFailed);
  EXPECT_TRUE(sink.requests.empty());
}

}  // namespace
}  // namespace ringcast::net
