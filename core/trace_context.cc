#include "core/trace_context.h"

#include <cmath>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ringcast {

namespace {

constexpr char kHex[] = "0123456789abcdef";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // W3C: lower-case only
}

// `n` bytes from 2n lower-case hex digits; false on any other character.
bool read_hex(std::string_view text, uint8_t* out, size_t n) {
  if (text.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    const int hi = hex_value(text[2 * i]);
    const int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

void append_hex(std::string& out, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kHex[p[i] >> 4]);
    out.push_back(kHex[p[i] & 15]);
  }
}

void store_be64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}

// A span id from the trace id and two words, never zero. The seeds keep the kinds apart.
SpanId derive(const TraceId& trace, uint64_t a, uint64_t b, uint64_t seed) {
  uint8_t buf[32];
  std::memcpy(buf, trace.data(), 16);
  store_be64(buf + 16, a);
  store_be64(buf + 24, b);
  uint64_t h = XXH3_64bits_withSeed(buf, sizeof buf, seed);
  if (h == 0) h = 1;
  SpanId out;
  store_be64(out.data(), h);
  return out;
}

constexpr uint64_t kIntakeSeed = 0x696e74616b65ULL;        // "intake"
constexpr uint64_t kDeliverySeed = 0x64656c6976657279ULL;  // "delivery"
constexpr uint64_t kAttemptSeed = 0x617474656d7074ULL;     // "attempt"

}  // namespace

std::optional<TraceContext> parse_traceparent(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  if (text.size() < kTraceparentChars) return std::nullopt;
  uint8_t version = 0;
  if (!read_hex(text.substr(0, 2), &version, 1) || version == 0xff) return std::nullopt;
  // Version 00 is exactly 55 characters; a later one may carry more after a '-'.
  if (version == 0 ? text.size() != kTraceparentChars
                   : text.size() > kTraceparentChars && text[kTraceparentChars] != '-') {
    return std::nullopt;
  }
  if (text[2] != '-' || text[35] != '-' || text[52] != '-') return std::nullopt;
  TraceContext c;
  if (!read_hex(text.substr(3, 32), c.trace_id.data(), 16) ||
      !read_hex(text.substr(36, 16), c.span_id.data(), 8) ||
      !read_hex(text.substr(53, 2), &c.flags, 1)) {
    return std::nullopt;
  }
  if (!c.valid()) return std::nullopt;
  return c;
}

void append_traceparent(std::string& out, const TraceId& trace_id, const SpanId& span_id,
                        uint8_t flags) {
  out.append("00-");
  append_hex(out, trace_id.data(), trace_id.size());
  out.push_back('-');
  append_hex(out, span_id.data(), span_id.size());
  out.push_back('-');
  append_hex(out, &flags, 1);
}

std::string traceparent(const TraceContext& c) {
  std::string out;
  out.reserve(kTraceparentChars);
  append_traceparent(out, c.trace_id, c.span_id, c.flags);
  return out;
}

std::string hex_id(const TraceId& id) {
  std::string out;
  out.reserve(32);
  append_hex(out, id.data(), id.size());
  return out;
}

std::string hex_id(const SpanId& id) {
  std::string out;
  out.reserve(16);
  append_hex(out, id.data(), id.size());
  return out;
}

TraceId trace_id_of_message(std::string_view message_id) {
  TraceId out{};
  // The id's own 128 bits (core/types.h message_id_bits); another form is hashed.
  const MessageIdBits bits = message_id_bits(message_id);
  uint64_t hi = bits.hi, lo = bits.lo;
  if (bits.empty()) {
    const XXH128_hash_t h = XXH3_128bits(message_id.data(), message_id.size());
    hi = h.high64;
    lo = h.low64;
  }
  if (hi == 0 && lo == 0) lo = 1;  // W3C: an all-zero trace id is invalid
  store_be64(out.data(), hi);
  store_be64(out.data() + 8, lo);
  return out;
}

SpanId intake_span_id(const TraceId& trace, std::string_view message_id) {
  return derive(trace, XXH3_64bits(message_id.data(), message_id.size()), 0, kIntakeSeed);
}

SpanId delivery_span_id(const TraceId& trace, DeliveryId delivery) {
  return derive(trace, delivery, 0, kDeliverySeed);
}

SpanId attempt_span_id(const TraceId& trace, DeliveryId delivery, uint16_t attempt) {
  return derive(trace, delivery, attempt, kAttemptSeed);
}

TraceContext event_trace(const Event& e) {
  if (e.trace.valid()) return e.trace;
  TraceContext c;
  c.trace_id = trace_id_of_message(e.message_id);
  c.span_id = intake_span_id(c.trace_id, e.message_id);
  return c;
}

TraceContext stored_trace(const TraceContext& parent, std::string_view message_id) {
  if (!parent.valid()) return TraceContext{};
  TraceContext c;
  c.trace_id = parent.trace_id;
  c.span_id = intake_span_id(parent.trace_id, message_id);
  c.flags = parent.flags;
  return c;
}

bool ratio_sampled(const TraceId& trace, double ratio) {
  if (!(ratio > 0)) return false;  // NaN too
  if (ratio >= 1) return true;
  // 53 bits of a hash of the id against the ratio (exact in a double).
  const uint64_t h = XXH3_64bits(trace.data(), trace.size()) >> 11;
  return static_cast<double>(h) < std::ldexp(ratio, 53);
}

bool event_sampled(const Event& e, double ratio) {
  if (e.trace.valid()) return e.trace.sampled();
  return ratio_sampled(trace_id_of_message(e.message_id), ratio);
}

}  // namespace ringcast
