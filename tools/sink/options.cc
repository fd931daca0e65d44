#include "tools/sink/options.h"

#include <openssl/base64.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace ringcast::sink {
namespace {

[[noreturn]] void bad(const std::string& msg) {
  throw std::invalid_argument(msg);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    size_t p = s.find(sep);
    out.push_back(trim(s.substr(0, p)));
    if (p == std::string_view::npos) break;
    s.remove_prefix(p + 1);
  }
  return out;
}

uint64_t parse_u64(std::string_view s, const char* what) {
  std::string str(s);
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(str.c_str(), &end, 10);
  if (str.empty() || *end != '\0' || errno != 0 || str[0] == '-') {
    bad(std::string("bad ") + what + ": '" + str + "'");
  }
  return v;
}

double parse_probability(std::string_view s) {
  std::string str(s);
  char* end = nullptr;
  double v = std::strtod(str.c_str(), &end);
  if (str.empty() || *end != '\0' || !(v >= 0 && v <= 1)) {
    bad("bad probability '" + str + "' (want 0..1)");
  }
  return v;
}

int parse_status(std::string_view s) {
  uint64_t v = parse_u64(s, "status");
  if (v < 100 || v > 599) bad("bad status '" + std::string(s) + "'");
  return static_cast<int>(v);
}

// "name[:p]" -> probability (1 when absent).
double mode_probability(std::string_view item, std::string_view name) {
  if (item == name) return 1;
  return parse_probability(item.substr(name.size() + 1));
}

bool is_mode(std::string_view item, std::string_view name) {
  return item == name || (item.size() > name.size() && item.substr(0, name.size()) == name &&
                          item[name.size()] == ':');
}

}  // namespace

Micros parse_duration(std::string_view s) {
  s = trim(s);
  size_t i = 0;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
  std::string num(s.substr(0, i));
  std::string_view unit = s.substr(i);
  char* end = nullptr;
  double v = std::strtod(num.c_str(), &end);
  if (num.empty() || *end != '\0' || v < 0) bad("bad duration '" + std::string(s) + "'");
  double scale;
  if (unit.empty() || unit == "ms") {
    scale = 1e3;
  } else if (unit == "us") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1e6;
  } else if (unit == "m") {
    scale = 60e6;
  } else {
    bad("bad duration unit in '" + std::string(s) + "' (us, ms, s, m)");
  }
  return Micros(static_cast<int64_t>(v * scale));
}

FaultRule parse_fault_rule(std::string_view arg) {
  FaultRule rule;
  std::string_view spec = trim(arg);
  if (!spec.empty() && spec.front() == '/') {
    size_t eq = spec.find('=');
    if (eq == std::string_view::npos) bad("fault '" + std::string(arg) + "': want /prefix=spec");
    rule.prefix = std::string(spec.substr(0, eq));
    spec = spec.substr(eq + 1);
  }
  FaultSpec& f = rule.spec;
  f.text = std::string(spec);
  double mix_total = 0;
  for (std::string_view item : split(spec, ';')) {
    if (item.empty() || item == "none") continue;
    size_t eq = item.find('=');
    std::string_view key = item.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? "" : trim(item.substr(eq + 1));
    if (key == "status") {
      for (std::string_view part : split(value, ',')) {
        size_t colon = part.find(':');
        StatusWeight w;
        w.status = parse_status(part.substr(0, colon));
        w.probability =
            colon == std::string_view::npos ? 1 : parse_probability(part.substr(colon + 1));
        mix_total += w.probability;
        f.status_mix.push_back(w);
      }
      if (mix_total > 1 + 1e-9) bad("fault '" + std::string(arg) + "': status weights sum > 1");
    } else if (key == "ok") {
      f.ok_status = parse_status(value);
    } else if (key == "delay") {
      // delay=10ms-200ms[:p]
      size_t colon = value.find(':');
      if (colon != std::string_view::npos) {
        f.delay_probability = parse_probability(value.substr(colon + 1));
        value = value.substr(0, colon);
      }
      size_t dash = value.find('-');
      f.delay_min = parse_duration(value.substr(0, dash));
      f.delay_max =
          dash == std::string_view::npos ? f.delay_min : parse_duration(value.substr(dash + 1));
      if (f.delay_max < f.delay_min) bad("fault delay: max < min");
    } else if (key == "retry_after") {
      if (value.empty()) bad("retry_after needs a value");
      f.retry_after = std::string(value);
    } else if (key == "redirect") {
      if (value.empty()) bad("redirect needs a URL");
      f.redirect = std::string(value);
    } else if (key == "trickle") {
      f.trickle = parse_duration(value);
      if (f.trickle.count() <= 0) bad("trickle needs an interval > 0");
    } else if (key == "big_headers") {
      f.big_headers_kib = parse_u64(value, "big_headers");
      if (f.big_headers_kib > (64 << 10)) bad("big_headers: at most 65536 KiB");
    } else if (key == "body_bytes") {
      f.body_bytes = parse_u64(value, "body_bytes");
      if (f.body_bytes > (1u << 30)) bad("body_bytes: at most 1 GiB");
    } else if (key == "limit") {
      f.limit = parse_u64(value, "limit");
    } else if (eq == std::string_view::npos && is_mode(item, "hang")) {
      f.hang = mode_probability(item, "hang");
    } else if (eq == std::string_view::npos && is_mode(item, "reset")) {
      f.reset = mode_probability(item, "reset");
    } else if (eq == std::string_view::npos && is_mode(item, "drop")) {
      f.drop = mode_probability(item, "drop");
    } else if (eq == std::string_view::npos && is_mode(item, "close")) {
      f.close = mode_probability(item, "close");
    } else if (eq == std::string_view::npos && is_mode(item, "endless_chunked")) {
      f.endless_chunked = mode_probability(item, "endless_chunked");
    } else {
      bad("fault '" + std::string(arg) + "': unknown item '" + std::string(item) + "'");
    }
  }
  return rule;
}

VerifyMode parse_verify_mode(std::string_view s) {
  if (s == "none") return VerifyMode::kNone;
  if (s == "any") return VerifyMode::kAny;
  if (s == "standard") return VerifyMode::kStandard;
  if (s == "xhub") return VerifyMode::kXhub;
  if (s == "smengo") return VerifyMode::kSmengo;
  bad("bad --verify '" + std::string(s) + "' (none, any, standard, xhub, smengo)");
}

const char* verify_mode_name(VerifyMode m) {
  switch (m) {
    case VerifyMode::kNone:
      return "none";
    case VerifyMode::kAny:
      return "any";
    case VerifyMode::kStandard:
      return "standard";
    case VerifyMode::kXhub:
      return "xhub";
    case VerifyMode::kSmengo:
      return "smengo";
  }
  return "?";
}

bool base64_decode(std::string_view in, std::string& out) {
  std::string s(in);
  for (char& c : s) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  while (s.size() % 4 != 0) s.push_back('=');
  size_t max_len = 0;
  if (!EVP_DecodedLength(&max_len, s.size())) return false;
  out.resize(max_len);
  size_t len = 0;
  if (!EVP_DecodeBase64(reinterpret_cast<uint8_t*>(out.data()), &len, max_len,
                        reinterpret_cast<const uint8_t*>(s.data()), s.size())) {
    return false;
  }
  out.resize(len);
  return true;
}

const char* const kUsage = R"(ringcast-sink: a webhook receiver for tests, demos and benchmarks.

Usage: ringcast-sink [options]
  --listen HOST:PORT       address to listen on (default 127.0.0.1:0; IPv6 as [::1]:0).
                           Prints "listening on HOST:PORT" on stdout once ready.
  --port-file FILE         also write the bound port number to FILE (atomically)
  --tls-cert FILE          serve TLS (1.2+) with this PEM certificate chain ...
  --tls-key FILE           ... and this PEM private key
  --secret KEY             signing secret, repeatable (rotation); "whsec_<base64>" is decoded,
                           anything else is used as raw bytes
  --verify MODE            none | any | standard | xhub | smengo (default: any when a secret
                           is given, else none). Bad or missing signatures get 401.
  --timestamp-tolerance S  also reject signed requests whose timestamp is more than S seconds
                           away from now (default 0: not checked)
  --ids-file FILE          append "<id> <attempt> <status>" per request carrying a delivery id
                           (an empty FILE: none)
                           (webhook-id, X-Webhook-Id or Smengo-Delivery-Id), written before the
                           answer; status is the HTTP status or reset / hang
  --headers-file FILE      append one JSON line per request carrying a delivery id, with its
                           headers: {"id","attempt","status","target","headers":[["Name","value"],...]}
  --stats-file FILE        write the final /_stats JSON here at exit
  --status                 answer GET .../status/<id>: 200 when a request with that delivery id
                           was recorded (whatever it was answered), else 404 (a receiver's
                           status lookup for reconciliation; fault rules match first)
  --fault [/PREFIX=]SPEC   fault rule, repeatable; the longest matching path prefix wins
                           (no prefix: "/"). SPEC is ';'-separated items:
                             status=503:0.3,410:0.01  status mix, the rest gets ok (200)
                             ok=204                   the success status
                             delay=50ms | delay=10ms-200ms[:p]   fixed or uniform delay
                             retry_after=VALUE        Retry-After header on the answers
                             redirect=URL             302 with Location: URL
                             hang[:p]                 read, record, never answer
                             reset[:p]                read, record the id, then RST
                             drop[:p]                 read, then RST, record nothing (lost
                                                      before the receiver saw it)
                             close[:p]                answer with Connection: close, close
                             trickle=1s               send the answer one byte per interval
                             big_headers=N            N KiB of extra response headers
                             endless_chunked[:p]      200 with a never-ending chunked body
                             body_bytes=N             response body of N bytes (default "ok")
                             limit=N                  the rule applies to its first N matches
  --seed N                 seed of the random choices (default 1)
  --threads N              worker threads sharing the listener (default 1)
  --max-body BYTES         request body limit, larger gets 413 (default 16 MiB)
  --idle-timeout DURATION  close keep-alive connections idle this long (default: never)
  --max-requests-per-connection N   close a connection after N answers (default: unlimited)
  --stall                  accept connections, read and discard, never answer anything
                           (a TLS handshake stall with --tls-cert; connect-then-silence)
  --quiet                  no log lines on stderr
  --help                   this text

Control endpoints (not counted as requests): GET /_stats (JSON), GET /_health,
POST /_reset (zero the counters and the id set), GET /_fault (the rules),
POST /_fault (body: rules, one per line, replacing all rules; empty body clears them).
SIGTERM / SIGINT: print the final stats JSON on stdout and exit 0.
)";

Options parse_options(int argc, char** argv) {
  Options o;
  bool verify_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_inline = false;
    if (arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      // --fault=/x=status=503 keeps everything after the first '='.
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_inline = true;
      }
    }
    auto next = [&]() -> std::string {
      if (has_inline) return value;
      if (i + 1 >= argc) bad(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--listen") {
      std::string v = next();
      size_t colon = v.rfind(':');
      if (colon == std::string::npos) bad("--listen wants HOST:PORT");
      std::string host = v.substr(0, colon);
      if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
      }
      if (host.empty()) host = "127.0.0.1";
      uint64_t port = parse_u64(v.substr(colon + 1), "port");
      if (port > 65535) bad("bad port");
      o.listen_host = host;
      o.listen_port = static_cast<uint16_t>(port);
    } else if (arg == "--port-file") {
      o.port_file = next();
    } else if (arg == "--tls-cert") {
      o.tls_cert = next();
    } else if (arg == "--tls-key") {
      o.tls_key = next();
    } else if (arg == "--secret") {
      std::string v = next();
      if (v.rfind("whsec_", 0) == 0) {
        std::string key;
        if (!base64_decode(v.substr(6), key)) bad("--secret: bad base64 after whsec_");
        o.secrets.push_back(key);
      } else {
        o.secrets.push_back(v);
      }
    } else if (arg == "--verify") {
      o.verify = parse_verify_mode(next());
      verify_given = true;
    } else if (arg == "--timestamp-tolerance") {
      o.timestamp_tolerance_s = static_cast<int64_t>(parse_u64(next(), "--timestamp-tolerance"));
    } else if (arg == "--ids-file") {
      o.ids_file = next();
    } else if (arg == "--status") {
      o.status_route = true;
    } else if (arg == "--headers-file") {
      o.headers_file = next();
    } else if (arg == "--stats-file") {
      o.stats_file = next();
    } else if (arg == "--fault") {
      o.faults.push_back(parse_fault_rule(next()));
    } else if (arg == "--seed") {
      o.seed = parse_u64(next(), "--seed");
    } else if (arg == "--threads") {
      uint64_t t = parse_u64(next(), "--threads");
      if (t < 1 || t > 256) bad("--threads: 1..256");
      o.threads = static_cast<int>(t);
    } else if (arg == "--max-body") {
      o.max_body_bytes = parse_u64(next(), "--max-body");
    } else if (arg == "--idle-timeout") {
      o.idle_timeout = parse_duration(next());
    } else if (arg == "--max-requests-per-connection") {
      o.max_requests_per_connection = parse_u64(next(), "--max-requests-per-connection");
    } else if (arg == "--stall") {
      o.stall = true;
    } else if (arg == "--quiet") {
      o.quiet = true;
    } else {
      bad("unknown option '" + arg + "' (see --help)");
    }
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) bad("--tls-cert and --tls-key go together");
  if (!verify_given && !o.secrets.empty()) o.verify = VerifyMode::kAny;
  // smengo without a secret checks only the Smengo-Delivery-Id header.
  if (o.verify != VerifyMode::kNone && o.verify != VerifyMode::kSmengo && o.secrets.empty()) {
    bad("--verify needs --secret");
  }
  return o;
}

}  // namespace ringcast::sink
