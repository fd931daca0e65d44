#include "nats/jetstream.h"

#include <openssl/base64.h>
#include <simdjson.h>

#include <charconv>
#include <chrono>

#include "nats/protocol.h"

namespace ringcast::nats {
namespace {

bool to_u64(std::string_view s, uint64_t& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

int64_t ns(Duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

std::string subject_of(std::string_view prefix, std::string_view stream, std::string_view name) {
  std::string s(prefix);
  s += stream;
  s += '.';
  s += name;
  return s;
}

}  // namespace

std::optional<AckMeta> parse_ack_subject(std::string_view reply) {
  // One pass over the tokens (every delivery's reply subject goes through here).
  std::string_view t[13];
  size_t n = 0;
  size_t start = 0;
  for (size_t i = 0; i <= reply.size(); ++i) {
    if (i < reply.size() && reply[i] != '.') continue;
    if (n == 13) return std::nullopt;
    t[n++] = reply.substr(start, i - start);
    start = i + 1;
  }
  if (n < 9 || t[0] != "$JS" || t[1] != "ACK") return std::nullopt;
  // v1: 9 tokens; v2: a domain and an account hash after ACK, maybe a random token at the end.
  size_t at = 2;
  if (n == 11 || n == 12) {
    at = 4;
  } else if (n != 9) {
    return std::nullopt;
  }
  AckMeta m;
  uint64_t ts = 0;
  if (!to_u64(t[at + 2], m.delivered) || !to_u64(t[at + 3], m.stream_seq) ||
      !to_u64(t[at + 4], m.consumer_seq) || !to_u64(t[at + 5], ts) ||
      !to_u64(t[at + 6], m.pending) || t[at].empty() || t[at + 1].empty()) {
    return std::nullopt;
  }
  m.stream.assign(t[at]);
  m.consumer.assign(t[at + 1]);
  m.timestamp_ns = static_cast<int64_t>(ts);
  return m;
}

std::string consumer_create_subject(std::string_view stream, std::string_view durable) {
  return subject_of("$JS.API.CONSUMER.DURABLE.CREATE.", stream, durable);
}

std::string consumer_info_subject(std::string_view stream, std::string_view durable) {
  return subject_of("$JS.API.CONSUMER.INFO.", stream, durable);
}

std::string pull_subject(std::string_view stream, std::string_view durable) {
  return subject_of("$JS.API.CONSUMER.MSG.NEXT.", stream, durable);
}

std::string consumer_create_body(std::string_view stream, const ConsumerConfig& c) {
  std::string b = "{\"stream_name\":";
  append_json_string(b, stream);
  b += ",\"config\":{\"durable_name\":";
  append_json_string(b, c.durable);
  b += ",\"deliver_policy\":\"all\",\"ack_policy\":\"explicit\",\"ack_wait\":";
  b += std::to_string(ns(c.ack_wait));
  b += ",\"max_deliver\":-1";
  if (!c.filter_subject.empty()) {
    b += ",\"filter_subject\":";
    append_json_string(b, c.filter_subject);
  }
  b += ",\"replay_policy\":\"instant\",\"max_ack_pending\":";
  b += std::to_string(c.max_ack_pending);
  b += "}}";
  return b;
}

std::string pull_body(uint32_t batch, Duration expires) {
  std::string b = "{\"batch\":";
  b += std::to_string(batch);
  b += ",\"expires\":";
  b += std::to_string(ns(expires));
  b += '}';
  return b;
}

std::string nak_body(Duration delay) {
  std::string b = "-NAK {\"delay\":";
  b += std::to_string(ns(delay));
  b += '}';
  return b;
}

ApiReply parse_api_reply(std::string_view body) {
  ApiReply r;
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(simdjson::padded_string(body)).get(obj) != simdjson::SUCCESS) return r;
  r.json = true;
  simdjson::dom::object e;
  if (obj["error"].get(e) == simdjson::SUCCESS) {
    r.error = true;
    int64_t v = 0;
    if (e["code"].get(v) == simdjson::SUCCESS) r.code = static_cast<int>(v);
    if (e["err_code"].get(v) == simdjson::SUCCESS) r.err_code = static_cast<int>(v);
    std::string_view d;
    if (e["description"].get(d) == simdjson::SUCCESS) r.description.assign(d);
  }
  int64_t v = 0;
  if (obj["num_pending"].get(v) == simdjson::SUCCESS) r.num_pending = v;
  if (obj["num_ack_pending"].get(v) == simdjson::SUCCESS) r.num_ack_pending = v;
  if (obj["num_redelivered"].get(v) == simdjson::SUCCESS) r.num_redelivered = v;
  std::string_view s;
  if (obj["stream"].get(s) == simdjson::SUCCESS) r.stream.assign(s);
  uint64_t seq = 0;
  if (obj["seq"].get(seq) == simdjson::SUCCESS) r.seq = seq;
  bool dup = false;
  if (obj["duplicate"].get(dup) == simdjson::SUCCESS) r.duplicate = dup;
  return r;
}

std::string msg_get_subject(std::string_view stream) {
  std::string s = "$JS.API.STREAM.MSG.GET.";
  s += stream;
  return s;
}

std::string msg_get_body(uint64_t seq) {
  std::string b = "{\"seq\":";
  b += std::to_string(seq);
  b += '}';
  return b;
}

namespace {
// Standard base64 (with padding) into `out`, reserving kPayloadSlack past its end.
bool base64_decode(std::string_view in, std::string& out) {
  size_t max = 0;
  if (!EVP_DecodedLength(&max, in.size())) return false;
  out.clear();
  out.reserve(max + kPayloadSlack);
  out.resize(max);
  size_t n = 0;
  if (!EVP_DecodeBase64(reinterpret_cast<uint8_t*>(out.data()), &n, max,
                        reinterpret_cast<const uint8_t*>(in.data()), in.size()))
    return false;
  out.resize(n);
  return true;
}
}  // namespace

std::optional<StoredMsg> parse_stored_msg(std::string_view body, bool* gone) {
  *gone = false;
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(simdjson::padded_string(body)).get(obj) != simdjson::SUCCESS)
    return std::nullopt;
  simdjson::dom::object e;
  if (obj["error"].get(e) == simdjson::SUCCESS) {
    int64_t code = 0;
    *gone = e["code"].get(code) == simdjson::SUCCESS && code == 404;
    return std::nullopt;
  }
  simdjson::dom::object m;
  if (obj["message"].get(m) != simdjson::SUCCESS) return std::nullopt;
  StoredMsg out;
  std::string_view v;
  if (m["subject"].get(v) == simdjson::SUCCESS) out.subject.assign(v);
  if (m["hdrs"].get(v) == simdjson::SUCCESS && !base64_decode(v, out.headers)) return std::nullopt;
  if (m["data"].get(v) == simdjson::SUCCESS) {
    if (!base64_decode(v, out.data)) return std::nullopt;
  } else {
    out.data.reserve(kPayloadSlack);
  }
  return out;
}

}  // namespace ringcast::nats
