// Fuzz target: net::ResponseParser, the reader of a receiver's HTTP/1.1 answer (untrusted: any
// endpoint URL is somebody else's server). Whatever the bytes and however they are cut into
// reads, the parser stays within its caps, and the outcome does not depend on the cutting.
#include <string>
#include <vector>

#include "net/http_response.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using ringcast::net::ResponseLimits;
using ringcast::net::ResponseParser;

struct Outcome {
  ResponseParser::State state = ResponseParser::State::kNeedMore;
  int status = 0;
  int error_errno = 0;
  bool headers_complete = false;
  bool capped = false;
  bool keep_alive = false;
  uint32_t informational = 0;
  std::string retry_after;
  std::string body_prefix;
  uint64_t body_bytes = 0;
  size_t consumed = 0;

  bool same(const Outcome& o) const {
    if (state != o.state || capped != o.capped) return false;
    // Which error is found first (a cap counted per span, or a bad byte) may depend on where a
    // read ends; what was read before it too.
    if (state == ResponseParser::State::kError) return true;
    if (status != o.status || headers_complete != o.headers_complete ||
        informational != o.informational || retry_after != o.retry_after ||
        body_prefix != o.body_prefix || keep_alive != o.keep_alive) {
      return false;
    }
    // At the body cap the last read's span decides how far it got.
    return capped || (body_bytes == o.body_bytes && consumed == o.consumed);
  }
  void print(const char* what) const {
    std::fprintf(stderr,
                 "%s: state %d status %d errno %d headers %d capped %d keep-alive %d 1xx %u "
                 "retry-after '%s' prefix %zu body %llu consumed %zu\n",
                 what, static_cast<int>(state), status, error_errno, headers_complete, capped,
                 keep_alive, informational, retry_after.c_str(), body_prefix.size(),
                 static_cast<unsigned long long>(body_bytes), consumed);
  }
};

Outcome run(std::string_view bytes, uint8_t cut_seed, bool eof, const ResponseLimits& limits) {
  ResponseParser p(limits);
  Outcome o;
  size_t pos = 0;
  uint32_t lcg = cut_seed;
  std::string buf;  // one buffer reused for every read, like the connection's
  while (pos < bytes.size() && o.state == ResponseParser::State::kNeedMore) {
    size_t n = bytes.size() - pos;
    if (cut_seed != 0) {
      lcg = lcg * 1103515245u + 12345u;
      n = std::min<size_t>(n, 1 + (lcg >> 16) % 17);
    }
    buf.assign(bytes.substr(pos, n));
    size_t used = 0;
    o.state = p.feed(buf.data(), buf.size(), &used);
    FUZZ_CHECK(used <= buf.size());
    FUZZ_CHECK(o.state != ResponseParser::State::kNeedMore || used == buf.size());
    o.consumed += used;
    pos += n;
  }
  if (eof && o.state == ResponseParser::State::kNeedMore) o.state = p.finish_eof();
  o.status = p.status();
  o.error_errno = p.error_errno();
  o.headers_complete = p.headers_complete();
  o.capped = p.body_capped();
  o.keep_alive = p.keep_alive();
  o.informational = p.informational_skipped();
  o.retry_after = p.retry_after();
  o.body_prefix = p.body_prefix();
  o.body_bytes = p.body_bytes();

  // The caps hold whatever was sent.
  FUZZ_CHECK(o.retry_after.size() <= 256);
  FUZZ_CHECK(o.body_prefix.size() <= limits.body_prefix_bytes);
  FUZZ_CHECK(o.body_prefix.size() <= o.body_bytes);
  FUZZ_CHECK(o.consumed <= bytes.size());
  if (o.state == ResponseParser::State::kDone) {
    FUZZ_CHECK(o.headers_complete);
    // 1xx are skipped, 101 is an error, a status without a class (000-099) is not HTTP.
    FUZZ_CHECK(o.status >= 200 && o.status <= 999);
    if (o.capped) FUZZ_CHECK(o.body_bytes > limits.body_drain_max && !o.keep_alive);
  }
  if (o.state == ResponseParser::State::kError) {
    FUZZ_CHECK(o.error_errno != 0);
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringcast::fuzz::Input in(data, size);
  const uint8_t flags = in.u8();
  const uint8_t cut_seed = in.u8();
  const std::string_view bytes = in.rest();
  ResponseLimits limits;  // small caps, so the fuzzer reaches them
  limits.header_bytes_max = 1024;
  limits.headers_max = 12;
  limits.body_prefix_bytes = 64;
  limits.body_drain_max = 2048;
  const bool eof = flags & 1;
  Outcome whole = run(bytes, 0, eof, limits);
  Outcome cut = run(bytes, cut_seed | 1, eof, limits);
  if (!whole.same(cut)) {
    whole.print("whole");
    cut.print("cut");
  }
  FUZZ_CHECK(whole.same(cut));
  return 0;
}
