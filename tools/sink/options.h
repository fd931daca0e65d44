// ringcast-sink's command line and fault specifications (docs/sink.md). Parsing happens once at
// start-up (or on POST /_fault) and throws std::invalid_argument with a readable message.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace ringcast::sink {

using Micros = std::chrono::microseconds;

struct StatusWeight {
  int status = 200;
  double probability = 0;  // in [0, 1]; the weights of one spec sum to at most 1
};

// What the sink does with a request whose path matches a rule. Every mode may carry a
// probability ("reset:0.3"); the status mix picks a status, the rest of the mass gets ok_status.
struct FaultSpec {
  std::vector<StatusWeight> status_mix;
  int ok_status = 200;
  Micros delay_min{0}, delay_max{0};  // uniform in [min, max]
  double delay_probability = 1;
  std::string retry_after;  // Retry-After header value on every answer of this rule
  std::string redirect;     // 302 with this Location
  double hang = 0;          // probability: read, record, never answer
  double reset = 0;         // probability: read, record, RST (SPEC R12.9)
  double drop = 0;          // probability: read, RST, record nothing (it never "arrived")
  double close = 0;         // probability: answer with Connection: close, then close
  double endless_chunked = 0;
  Micros trickle{0};                 // > 0: the response goes out one byte per interval
  size_t big_headers_kib = 0;        // extra response header bytes, in KiB
  size_t body_bytes = kDefaultBody;  // response body size (kDefaultBody: "ok")
  uint64_t limit = std::numeric_limits<uint64_t>::max();  // applies to the first N matches
  std::string text;                                       // the spec as given, for /_stats

  static constexpr size_t kDefaultBody = std::numeric_limits<size_t>::max();
};

struct FaultRule {
  std::string prefix = "/";  // request-target prefix; the longest matching prefix wins
  FaultSpec spec;
};

// "[/prefix=]item;item;..." with items: status=503:0.3,410:0.01 | ok=204 | delay=50ms |
// delay=10ms-200ms[:p] | retry_after=V | redirect=URL | hang[:p] | reset[:p] | drop[:p] | close[:p]
// | endless_chunked[:p] | trickle=1s | big_headers=N | body_bytes=N | limit=N | none
FaultRule parse_fault_rule(std::string_view arg);
// A duration: "50ms", "1s", "1.5s", "200us", "2m"; a bare number is milliseconds.
Micros parse_duration(std::string_view s);

enum class VerifyMode { kNone, kAny, kStandard, kXhub, kSmengo };
VerifyMode parse_verify_mode(std::string_view s);
const char* verify_mode_name(VerifyMode m);

struct Options {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;
  std::string port_file;
  std::string tls_cert;
  std::string tls_key;
  std::vector<std::string> secrets;  // key bytes ("whsec_<base64>" is decoded)
  VerifyMode verify = VerifyMode::kNone;
  int64_t timestamp_tolerance_s = 0;  // 0: timestamps are not checked
  std::string ids_file;
  std::string headers_file;  // one JSON line with the request's headers per recorded id
  std::string stats_file;    // the final /_stats JSON is written here at exit
  std::vector<FaultRule> faults;
  uint64_t seed = 1;
  int threads = 1;
  size_t max_body_bytes = 16 << 20;
  size_t max_header_bytes = 64 << 10;
  Micros idle_timeout{0};                    // 0: keep idle connections forever
  uint64_t max_requests_per_connection = 0;  // 0: unlimited
  bool stall = false;  // accept, read and discard, never answer (TLS: no ServerHello)
  // Answer status checks (SPEC R12.11 reconciliation): GET .../status/<id> → 200 when a request
  // with that delivery id was recorded (any answer, a reset or hang included: it "acted"),
  // 404 when not. Fault rules match the check's path first (e.g. status=202: processing).
  bool status_route = false;
  bool quiet = false;
};

// Parses argv; prints help and exits 0 on --help; throws std::invalid_argument on errors.
Options parse_options(int argc, char** argv);
extern const char* const kUsage;

// Decodes standard or URL-safe base64 (padding optional); false on bad input.
bool base64_decode(std::string_view in, std::string& out);

}  // namespace ringcast::sink
