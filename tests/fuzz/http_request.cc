// Fuzz target: net::RequestParser, the API server's HTTP/1.1 request framing (any client on
// the network). Every request it hands on meets the parser's invariant (RFC 9112 strict:
// one Host, token names, no controls, one framing, body within the limit); the same bytes
// give the same requests however they are cut into reads (what tells a value split across
// reads from obs-fold), with and without pausing after each request.
#include <string>
#include <vector>

#include "net/http_request_parser.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using ringcast::net::HttpRequest;
using ringcast::net::kBodyPadding;
using ringcast::net::RequestLimits;
using ringcast::net::RequestParser;

bool tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
         (c != 0 &&
          std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos);
}

struct Recorder final : RequestParser::Sink {
  size_t limit = 0;
  bool pause = false;
  std::vector<std::string> requests;

  size_t body_limit(const HttpRequest& head) override {
    FUZZ_CHECK(!head.method.empty());
    return limit;
  }
  bool on_request(HttpRequest&& r, const RequestParser::RequestInfo& info) override {
    FUZZ_CHECK(!r.method.empty());
    FUZZ_CHECK(!r.target.empty());
    for (unsigned char c : r.target) FUZZ_CHECK(c > 0x20 && c < 0x7f);
    int hosts = 0;
    std::string line = r.method + " " + r.target + (info.http10 ? " 1.0" : " 1.1") +
                       (info.keep_alive ? " ka" : " close");
    for (const auto& h : r.headers) {
      FUZZ_CHECK(!h.name.empty());
      for (unsigned char c : h.name) FUZZ_CHECK(tchar(c));  // lower-case tokens
      for (unsigned char c : h.value) FUZZ_CHECK((c >= 0x20 && c != 0x7f) || c == '\t');
      if (!h.value.empty()) {
        FUZZ_CHECK(h.value.front() != ' ' && h.value.front() != '\t');
        FUZZ_CHECK(h.value.back() != ' ' && h.value.back() != '\t');
      }
      if (h.name == "host") hosts++;
      if (h.name == "transfer-encoding") FUZZ_CHECK(!info.http10);
      line += "|" + h.name + ":" + h.value;
    }
    FUZZ_CHECK(info.http10 ? hosts <= 1 : hosts == 1);
    FUZZ_CHECK(r.body.size() <= limit);
    FUZZ_CHECK(r.body.capacity() >= r.body.size() + kBodyPadding);
    line += "|" + r.body;
    requests.push_back(std::move(line));
    return !pause;
  }
};

struct Outcome {
  std::vector<std::string> requests;
  bool failed = false;
  bool upgrade = false;
  bool in_message = false;
};

Outcome run(std::string_view bytes, uint8_t cut_seed, bool pause, size_t limit) {
  Recorder sink;
  sink.limit = limit;
  sink.pause = pause;
  RequestParser p(sink, RequestLimits{1024, 12});
  Outcome o;
  size_t pos = 0;
  uint32_t lcg = cut_seed;
  std::string buf;  // one buffer reused for every read, like the connection's
  while (pos < bytes.size() && !o.failed && !o.upgrade) {
    size_t n = bytes.size() - pos;
    if (cut_seed != 0) {
      lcg = lcg * 1103515245u + 12345u;
      n = std::min<size_t>(n, 1 + (lcg >> 16) % 23);
    }
    buf.assign(bytes.substr(pos, n));
    size_t off = 0;
    while (true) {
      RequestParser::Feed f = p.feed(buf.data() + off, buf.size() - off);
      FUZZ_CHECK(f.consumed <= buf.size() - off);
      if (f.status == RequestParser::Status::kPaused) {
        p.resume();
        off += f.consumed;
        continue;
      }
      if (f.status == RequestParser::Status::kFailed) {
        const int s = p.error().status;
        FUZZ_CHECK(s == 400 || s == 413 || s == 431 || s == 501 || s == 505);
        FUZZ_CHECK(p.error().close);
        FUZZ_CHECK(!p.in_message());
        o.failed = true;
      }
      if (f.status == RequestParser::Status::kUpgrade) o.upgrade = true;
      if (f.status == RequestParser::Status::kNeedMore) FUZZ_CHECK(f.consumed == buf.size() - off);
      break;
    }
    pos += n;
  }
  o.requests = std::move(sink.requests);
  o.in_message = p.in_message();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringcast::fuzz::Input in(data, size);
  const size_t limit = in.u8() * 8;
  const uint8_t cut_seed = in.u8();
  const std::string_view bytes = in.rest();
  const Outcome whole = run(bytes, 0, false, limit);
  const Outcome cut = run(bytes, cut_seed | 1, true, limit);
  // Which error is reported first may depend on where a read ends (a span is counted, then
  // checked); that there is one, and every request before it, may not.
  FUZZ_CHECK(whole.requests == cut.requests);
  FUZZ_CHECK(whole.failed == cut.failed);
  FUZZ_CHECK(whole.upgrade == cut.upgrade);
  if (!whole.failed) FUZZ_CHECK(whole.in_message == cut.in_message);
  return 0;
}
