// The transport's speed against wrk and against a bare io_uring client (docs/benchmarks.md "The
// transport alone"), plus micro benchmarks of the per-request work (signing, request head,
// response parsing).
//
//   bench_net_transport                       Google Benchmark micro benchmarks
//   bench_net_transport --ab [--trials=5] [--seconds=3] [--conns=64] [--mode=plain|tls|both]
//                            [--sink=PATH] [--wrk=PATH] [--peers=ringcast,wrk,bare]
//                            [--side=ringcast|wrk|bare]
//   bench_net_transport --make-certs=DIR      writes DIR/cert.pem and DIR/key.pem (the harness's
//                                             self-signed certificate, below) and exits: the
//                                             certificate of bench/e2e_delivery.sh's TLS mode
//                                             (docs/benchmarks.md "End to end"), made without
//                                             the openssl CLI. Exit 1 with a message when DIR is
//                                             not a directory or a file cannot be written.
//
// The A/B harness: a fresh ringcast-sink per trial pinned to CPU 1 (signature verification on),
// the client pinned to CPU 0, one of three peers with `conns` requests always in flight:
//   ringcast  this process driving net::HttpTransport;
//   wrk       `wrk -t1 -c<conns>` with a Lua script carrying the same headers and the same 1 KB
//             body, with one signature computed beforehand and replayed;
//   bare      this process driving the smallest io_uring client that sends the same requests,
//             each signed afresh (bench/support/bare_uring_client.h): the floor, what the kernel
//             and the signature cost with no transport around them. Plain HTTP only: it is
//             skipped in TLS mode.
// --peers picks the peers; trial t runs the list rotated by t, so that every peer runs in every
// position (two peers: A B, B A, ...). --side=X is --peers=X (one peer: for profiling).
// Each trial prints wall requests/s, requests per CPU-second of the client process (utime +
// stime), io_uring_enter calls per request (ringcast and bare; n/a for wrk) and full TLS
// handshakes per 10,000 requests (counted by the sink); each mode ends with every peer's medians
// and the medians of the per-trial ratios ringcast/wrk (the figure to quote), ringcast/bare and
// bare/wrk. Loopback only.
#include <benchmark/benchmark.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/mem.h>
#include <openssl/nid.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/support/bare_uring_client.h"
#include "bench/support/loopback_peers.h"
#include "net/http_client.h"
#include "net/http_response.h"
#include "net/loop.h"
#include "net/signing.h"

namespace ringcast::net {
namespace {

using namespace ringcast::bench;  // NOLINT(google-build-using-namespace): the shared harness

// --- micro benchmarks ---------------------------------------------------------------------------

void BM_SignStandard1KB(benchmark::State& state) {
  const std::string body = make_body();
  std::vector<std::string> secrets = {kSecret};
  std::string out;
  int64_t ts = 1'700'000'000;
  for (auto _ : state) {
    out.clear();
    SignInput in;
    in.message_id = kMessageId;
    in.timestamp_s = ts++;
    in.body = body;
    in.secrets = &secrets;
    append_signature_headers(in, out);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_SignStandard1KB);

void BM_ParseResponse(benchmark::State& state) {
  const std::string r =
      "HTTP/1.1 200 OK\r\nServer: x\r\nDate: Mon, 01 Jan 2026 00:00:00 GMT\r\nContent-Type: "
      "text/plain\r\nContent-Length: 2\r\n\r\nok";
  ResponseParser p;
  for (auto _ : state) {
    p.reset();
    benchmark::DoNotOptimize(p.feed(r.data(), r.size()));
  }
}
BENCHMARK(BM_ParseResponse);

// --- A/B harness
// ----------------------------------------------------------------------------------

struct Args {
  int trials = 5;
  int seconds = 3;
  int conns = 64;
  std::string mode = "both";
  std::string sink;
  std::string wrk = "/usr/bin/wrk";
  std::string peers = "ringcast,wrk,bare";  // comma-separated, each at most once
  std::string side = "both";                // ringcast | wrk | bare: --peers=<it>; both: as --peers
  std::vector<std::string> peer_list;       // `peers`, split
};

struct Certs {
  std::string cert_file, key_file;
};

// Writes one PEM file with write(bio) (a PEM_write_bio_* call, 1 on success); false, with a
// line on stderr, when the file cannot be opened, written or flushed.
template <typename Write>
bool write_pem(const std::string& file, Write write) {
  bssl::UniquePtr<BIO> b(BIO_new_file(file.c_str(), "w"));
  if (!b || write(b.get()) != 1 || BIO_flush(b.get()) != 1) {
    std::cerr << "cannot write " << file << "\n";
    return false;
  }
  return true;
}

// A self-signed ECDSA P-256 certificate for localhost / 127.0.0.1 (CA:TRUE), made in-process,
// written as dir/cert.pem and dir/key.pem; the client trusts it as its own anchor. nullopt,
// with a line on stderr, when it cannot be made or written.
std::optional<Certs> make_certs(const std::string& dir) {
  bssl::UniquePtr<EC_KEY> ec(EC_KEY_new_by_curve_name(NID_X9_62_prime256v1));
  if (!ec || EC_KEY_generate_key(ec.get()) != 1) {
    std::cerr << "cannot generate the P-256 key\n";
    return std::nullopt;
  }
  bssl::UniquePtr<EVP_PKEY> key(EVP_PKEY_new());
  EVP_PKEY_assign_EC_KEY(key.get(), ec.release());
  bssl::UniquePtr<X509> x(X509_new());
  X509_set_version(x.get(), X509_VERSION_3);
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(x.get()), 4242);
  X509_gmtime_adj(X509_getm_notBefore(x.get()), -86400);
  X509_gmtime_adj(X509_getm_notAfter(x.get()), 86400);
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const uint8_t*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(x.get(), name);
  X509_set_pubkey(x.get(), key.get());
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                            {NID_key_usage, "critical,digitalSignature,keyCertSign"},
                            {NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1"}}) {
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, x.get(), x.get(), nullptr, nullptr, 0);
    bssl::UniquePtr<X509_EXTENSION> ext(X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value));
    X509_add_ext(x.get(), ext.get(), -1);
  }
  if (X509_sign(x.get(), key.get(), EVP_sha256()) <= 0) {
    std::cerr << "cannot sign the certificate\n";
    return std::nullopt;
  }
  Certs c{dir + "/cert.pem", dir + "/key.pem"};
  if (!write_pem(c.cert_file, [&](BIO* b) { return PEM_write_bio_X509(b, x.get()); }) ||
      !write_pem(c.key_file, [&](BIO* b) {
        return PEM_write_bio_PrivateKey(b, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
      })) {
    return std::nullopt;
  }
  return c;
}

// --make-certs=DIR: make_certs(DIR), for bench/e2e_delivery.sh's TLS mode.
int make_certs_main(const std::string& dir) {
  struct stat st {};
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::cerr << "--make-certs: \"" << dir << "\" is not a directory\n";
    return 1;
  }
  return make_certs(dir) ? 0 : 1;
}

// A: this process, net::HttpTransport, `conns` requests always in flight.
PeerResult run_ringcast(const Args& a, uint16_t port, const Certs* tls) {
  pin_to(0);
  auto loop = std::move(Loop::create({})).value();
  HttpTransportOptions o;
  o.url_policy.allow_http = true;
  o.allow_list = {*parse_cidr("127.0.0.0/8")};
  o.max_connections_per_host = static_cast<uint32_t>(a.conns);
  if (tls) {
    o.tls.ca_file = "";
    o.tls.extra_ca_file = tls->cert_file;
  }
  auto transport = std::move(HttpTransport::create(*loop, o)).value();
  const std::string url =
      std::string(tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port) + "/bench";
  const std::string body = make_body();
  struct Req final : SendOp {
    HttpTransport* t = nullptr;
    uint64_t* done = nullptr;
    uint64_t* errors = nullptr;
    bool* running = nullptr;
    void on_complete() override {
      ++*done;
      if (result.http_status != 200) ++*errors;
      if (*running) t->send(this);
    }
  };
  uint64_t done = 0, errors = 0;
  bool running = true;
  std::vector<Req> reqs(static_cast<size_t>(a.conns));
  rusage r0{}, r1{};
  const uint64_t enters0 = loop->stats().submits;
  ::getrusage(RUSAGE_SELF, &r0);
  const auto start = std::chrono::steady_clock::now();
  for (auto& r : reqs) {
    r.t = transport.get();
    r.done = &done;
    r.errors = &errors;
    r.running = &running;
    r.request.url = url;
    r.request.message_id = kMessageId;
    r.request.secrets = {kSecret};
    r.request.body = body;
    transport->send(&r);
  }
  const auto end = start + std::chrono::seconds(a.seconds);
  while (std::chrono::steady_clock::now() < end) loop->run_once(milliseconds(10));
  const uint64_t counted = done;
  const auto stop = std::chrono::steady_clock::now();
  ::getrusage(RUSAGE_SELF, &r1);
  const uint64_t enters = loop->stats().submits - enters0;
  running = false;
  while (transport->in_flight() > 0) loop->run_once(milliseconds(10));
  PeerResult tr;
  tr.requests = counted;
  const double wall = std::chrono::duration<double>(stop - start).count();
  tr.wall_rps = static_cast<double>(counted) / wall;
  tr.req_per_cpu_s = static_cast<double>(counted) / (cpu_seconds(r1) - cpu_seconds(r0));
  tr.user_us_per_req = 1e6 * (user_seconds(r1) - user_seconds(r0)) / static_cast<double>(counted);
  tr.sys_us_per_req =
      1e6 * (cpu_seconds(r1) - cpu_seconds(r0)) / static_cast<double>(counted) - tr.user_us_per_req;
  tr.syscalls_per_req = static_cast<double>(enters) / static_cast<double>(counted);
  if (errors > 0) std::cerr << "ringcast: " << errors << " non-200 answers\n";
  if (std::getenv("RINGCAST_BENCH_VERBOSE")) {
    const LoopStats& ls = loop->stats();
    std::fprintf(stderr, "  loop: turns %llu cqes %llu enters %llu timers %llu\n",
                 static_cast<unsigned long long>(ls.turns),
                 static_cast<unsigned long long>(ls.cqes),
                 static_cast<unsigned long long>(ls.submits),
                 static_cast<unsigned long long>(ls.timers_fired));
  }
  transport.reset();
  return tr;
}

// "n/a" for a peer that does not count its io_uring_enter calls (wrk).
std::string syscalls_text(double per_req) {
  if (per_req <= 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", per_req);
  return buf;
}

// One peer's figures in one mode, one entry per trial.
struct Series {
  std::vector<double> rps, cpu, handshakes, syscalls;
};

// The median over the trials of num[t] / den[t]; a trial where either is 0 (a failed run,
// reported on stderr) is left out.
double median_ratio(const std::vector<double>& num, const std::vector<double>& den) {
  std::vector<double> ratios;
  for (size_t i = 0; i < std::min(num.size(), den.size()); ++i) {
    if (num[i] > 0 && den[i] > 0) ratios.push_back(num[i] / den[i]);
  }
  return median(ratios);
}

void run_ab(const Args& a, bool tls, const std::string& dir, const Certs& certs) {
  std::vector<std::string> peers;
  for (const std::string& p : a.peer_list) {
    if (tls && p == "bare") {
      std::printf("tls: the bare peer does no TLS, skipped\n");
      continue;
    }
    peers.push_back(p);
  }
  if (peers.empty()) return;
  const size_t n = peers.size();
  std::map<std::string, Series> got;
  for (int t = 0; t < a.trials; ++t) {
    for (size_t k = 0; k < n; ++k) {
      // The list rotated by t: every peer runs in every position, so none is always the one
      // that runs first (or right after another one) in a trial.
      const std::string& peer = peers[(k + static_cast<size_t>(t)) % n];
      const int id = t * static_cast<int>(n) + static_cast<int>(k) + (tls ? 1000 : 0);
      std::vector<std::string> tls_flags;
      if (tls) tls_flags = {"--tls-cert", certs.cert_file, "--tls-key", certs.key_file};
      Sink s = start_sink(a.sink, dir, id, 1, tls_flags);
      PeerResult r;
      if (peer == "ringcast") {
        r = run_ringcast(a, s.port, tls ? &certs : nullptr);
      } else if (peer == "wrk") {
        r = run_wrk({a.wrk, a.conns, a.seconds, 0, s.port, tls, dir});
      } else {
        r = run_bare({a.conns, a.seconds, 0, s.port});
      }
      const std::string stats = stop_sink(s);
      const uint64_t sink_requests = json_number(stats, "requests");
      const uint64_t full = json_number(stats, "tls_handshakes");
      const uint64_t bad = json_number(stats, "bad_signatures");
      const double handshakes_per_10k =
          sink_requests ? 10000.0 * static_cast<double>(full) / static_cast<double>(sink_requests)
                        : 0;
      std::printf(
          "  %-5s trial %d %-8s wall %9.0f req/s  %9.0f req/CPU-s (user %.1f + sys %.1f us/req)  "
          "syscalls/req %s  full handshakes %llu (%.2f /10k)  sink saw %llu (bad signatures "
          "%llu)\n",
          tls ? "tls" : "plain", t, peer.c_str(), r.wall_rps, r.req_per_cpu_s, r.user_us_per_req,
          r.sys_us_per_req, syscalls_text(r.syscalls_per_req).c_str(),
          static_cast<unsigned long long>(full), handshakes_per_10k,
          static_cast<unsigned long long>(sink_requests), static_cast<unsigned long long>(bad));
      std::fflush(stdout);
      Series& sr = got[peer];
      sr.rps.push_back(r.wall_rps);
      sr.cpu.push_back(r.req_per_cpu_s);
      sr.handshakes.push_back(handshakes_per_10k);
      sr.syscalls.push_back(r.syscalls_per_req);
    }
  }
  std::printf("%s, %d conns, %d s x %d trials (median):\n", tls ? "TLS" : "plain HTTP", a.conns,
              a.seconds, a.trials);
  for (const std::string& peer : peers) {
    const Series& sr = got[peer];
    std::printf("  %-9s %9.0f req/s  %9.0f req/CPU-s  %.2f full handshakes/10k  syscalls/req %s\n",
                peer == "wrk" ? "wrk -t1" : peer.c_str(), median(sr.rps), median(sr.cpu),
                median(sr.handshakes), syscalls_text(median(sr.syscalls)).c_str());
  }
  // The peers of a trial ran back to back: their ratio cancels the machine's drift between
  // trials, so the median of those ratios is the figure to quote (the ratio of the medians
  // mixes trials run minutes apart). ringcast/bare is what the transport costs above the
  // floor; bare/wrk, how far wrk itself is from it.
  const std::pair<const char*, const char*> pairs[] = {
      {"ringcast", "wrk"}, {"ringcast", "bare"}, {"bare", "wrk"}};
  for (const auto& [num, den] : pairs) {
    if (got.count(num) == 0 || got.count(den) == 0) continue;
    const Series& x = got[num];
    const Series& y = got[den];
    const std::string name = std::string(num) + "/" + den;
    std::printf(
        "  %-13s median of per-trial ratios %5.2fx wall  %5.2fx per CPU-second  "
        "(ratio of the medians %5.2fx wall  %5.2fx per CPU-second)\n",
        name.c_str(), median_ratio(x.rps, y.rps), median_ratio(x.cpu, y.cpu),
        median(x.rps) / median(y.rps), median(x.cpu) / median(y.cpu));
  }
  std::fflush(stdout);
}

int ab_main(int argc, char** argv) {
  Args a;
  a.sink = self_dir() + "/../tools/ringcast-sink";
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto val = [&](const char* k) -> const char* {
      const size_t n = std::strlen(k);
      return s.compare(0, n, k) == 0 ? s.c_str() + n : nullptr;
    };
    if (auto v = val("--trials=")) a.trials = std::atoi(v);
    if (auto v = val("--seconds=")) a.seconds = std::atoi(v);
    if (auto v = val("--conns=")) a.conns = std::atoi(v);
    if (auto v = val("--mode=")) a.mode = v;
    if (auto v = val("--sink=")) a.sink = v;
    if (auto v = val("--wrk=")) a.wrk = v;
    if (auto v = val("--peers=")) a.peers = v;
    if (auto v = val("--side=")) a.side = v;
  }
  if (a.side != "both") a.peers = a.side;
  for (size_t from = 0; from <= a.peers.size();) {
    size_t comma = a.peers.find(',', from);
    if (comma == std::string::npos) comma = a.peers.size();
    const std::string p = a.peers.substr(from, comma - from);
    if ((p != "ringcast" && p != "wrk" && p != "bare") ||
        std::find(a.peer_list.begin(), a.peer_list.end(), p) != a.peer_list.end()) {
      std::cerr << "--peers: ringcast, wrk and bare, each at most once (got \"" << a.peers
                << "\")\n";
      return 1;
    }
    a.peer_list.push_back(p);
    from = comma + 1;
  }
  const bool need_wrk =
      std::find(a.peer_list.begin(), a.peer_list.end(), "wrk") != a.peer_list.end();
  if (::access(a.sink.c_str(), X_OK) != 0 || (need_wrk && ::access(a.wrk.c_str(), X_OK) != 0)) {
    std::cerr << "need " << a.sink << (need_wrk ? " and " + a.wrk : "") << "\n";
    return 1;
  }
  char tmpl[] = "/tmp/ringcast-bench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::optional<Certs> certs = make_certs(dir);
  ::signal(SIGPIPE, SIG_IGN);
  if (certs) {
    if (a.mode == "plain" || a.mode == "both") run_ab(a, false, dir, *certs);
    if (a.mode == "tls" || a.mode == "both") run_ab(a, true, dir, *certs);
  }
  std::string cleanup = "rm -rf " + dir;
  const bool cleaned = std::system(cleanup.c_str()) == 0;
  return certs && cleaned ? 0 : 1;
}

}  // namespace
}  // namespace ringcast::net

int main(int argc, char** argv) {
  constexpr std::string_view kMakeCerts = "--make-certs=";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--ab") return ringcast::net::ab_main(argc, argv);
    if (arg.starts_with(kMakeCerts)) {
      return ringcast::net::make_certs_main(std::string(arg.substr(kMakeCerts.size())));
    }
    if (arg == "--make-certs") {
      std::cerr << "usage: bench_net_transport --make-certs=DIR\n";
      return 1;
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
