// Fuzz target: nats::Parser, the reader of what a NATS server sends (the bus intake's peer: a
// misbehaving or hostile server must not crash the daemon), and the readers of what the pieces of
// a JetStream delivery carry (header blocks, $JS.ACK subjects, API answers, stored messages).
// Whatever the bytes and however they are cut into reads, the parser stays within its limits and
// yields the same ops, and a failed parser yields nothing more.
#include <string>
#include <vector>

#include "nats/jetstream.h"
#include "nats/protocol.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using ringcast::nats::Op;
using ringcast::nats::OpKind;
using ringcast::nats::OpSink;
using ringcast::nats::Parser;
using ringcast::nats::ParserLimits;

struct Record final : OpSink {
  std::string log;  // every op, serialised
  size_t ops = 0;
  const ParserLimits* limits = nullptr;
  bool on_op(Op& op) override {
    ++ops;
    if (op.kind == OpKind::kMsg) {
      FUZZ_CHECK(op.msg.headers.size() + op.msg.data.size() <= limits->max_payload);
      FUZZ_CHECK(op.msg.data.capacity() >= op.msg.data.size() + ringcast::nats::kPayloadSlack);
      FUZZ_CHECK(!op.msg.subject.empty());
      if (!op.msg.headers.empty()) {
        FUZZ_CHECK(op.msg.headers.compare(0, 5, "NATS/") == 0);
        (void)ringcast::nats::parse_headers(op.msg.headers);
        (void)ringcast::nats::header_status(op.msg.headers);
      }
      (void)ringcast::nats::parse_ack_subject(op.msg.reply);
    } else {
      FUZZ_CHECK(op.text.size() <= limits->max_control_line);
    }
    log += std::to_string(static_cast<int>(op.kind));
    log += '|';
    log += op.text;
    log += '|';
    log += op.msg.subject;
    log += '|';
    log += std::to_string(op.msg.sid);
    log += '|';
    log += op.msg.reply;
    log += '|';
    log += op.msg.headers;
    log += '|';
    log += op.msg.data;
    log += '\n';
    return true;
  }
};

struct Outcome {
  std::string log;
  bool failed = false;
};

Outcome run(std::string_view bytes, uint8_t cut_seed, const ParserLimits& limits) {
  Parser p(limits);
  Record r;
  r.limits = &limits;
  Outcome o;
  size_t pos = 0;
  uint32_t lcg = cut_seed;
  std::string buf;
  while (pos < bytes.size()) {
    size_t n = bytes.size() - pos;
    if (cut_seed != 0) {
      lcg = lcg * 1103515245u + 12345u;
      n = std::min<size_t>(n, 1 + (lcg >> 16) % 23);
    }
    buf.assign(bytes.substr(pos, n));
    auto res = p.feed(buf.data(), buf.size(), r);
    pos += n;
    FUZZ_CHECK(p.buffered() <= limits.max_control_line + limits.max_payload + 2);
    if (!res.ok()) {
      o.failed = true;
      FUZZ_CHECK(p.failed());
      const size_t before = r.ops;
      FUZZ_CHECK(!p.feed("PING\r\n", 6, r).ok());  // failed stays failed
      FUZZ_CHECK(r.ops == before);
      break;
    }
  }
  o.log = std::move(r.log);
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringcast::fuzz::Input in(data, size);
  const uint8_t cut_seed = in.u8();
  const std::string_view bytes = in.rest();
  ParserLimits limits;  // small, so that the fuzzer reaches them
  limits.max_control_line = 256;
  limits.max_payload = 1024;
  const Outcome whole = run(bytes, 0, limits);
  const Outcome cut = run(bytes, cut_seed | 1, limits);
  FUZZ_CHECK(whole.failed == cut.failed);
  // A failure may be found at another op when the cut decides where a line's length is
  // measured; what was parsed before it is the same prefix.
  if (!whole.failed) {
    FUZZ_CHECK(whole.log == cut.log);
  } else {
    const std::string& a = whole.log.size() < cut.log.size() ? whole.log : cut.log;
    const std::string& b = whole.log.size() < cut.log.size() ? cut.log : whole.log;
    FUZZ_CHECK(b.compare(0, a.size(), a) == 0);
  }
  // The JetStream readers take any bytes.
  bool gone = false;
  (void)ringcast::nats::parse_api_reply(bytes);
  (void)ringcast::nats::parse_stored_msg(bytes, &gone);
  (void)ringcast::nats::parse_ack_subject(bytes);
  return 0;
}
