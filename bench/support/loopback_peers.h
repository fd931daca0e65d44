// What the A/B harnesses in bench/ share: a ringcast-sink child on its own core, wrk as the
// peer that sends the same signed 1 KB request, CPU time from rusage, and the median.
// Loopback only; every child is waited for. Invariant: a harness pins itself (pin_to) before
// it starts any thread, so every thread it starts later runs on the same core.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ringcast::bench {

inline const std::string kSecret = "bench-secret-0123456789";
inline const std::string kMessageId = "msg_bench_0001";

std::string make_body();  // a 1 KB JSON payload (exactly 1024 bytes)

std::string self_dir();  // the directory of this executable
void pin_to(int cpu);    // the calling thread, and the threads it starts later
double user_seconds(const rusage& r);
double cpu_seconds(const rusage& r);  // utime + stime
pid_t spawn(const std::vector<std::string>& argv, int cpu, const std::string& out_path);
std::string read_file(const std::string& path);
uint64_t json_number(const std::string& json, const std::string& key);
double median(std::vector<double> v);

// A ringcast-sink on 127.0.0.1, pinned to `cpu`, verifying standard signatures with kSecret;
// `extra` is appended to its command line (TLS flags). Exits the process if it does not start.
struct Sink {
  pid_t pid = -1;
  uint16_t port = 0;
  std::string stats_file;
};
Sink start_sink(const std::string& sink_path, const std::string& dir, int id, int cpu,
                const std::vector<std::string>& extra = {});
std::string stop_sink(Sink& s);  // SIGTERM, wait; its stats JSON

struct PeerResult {
  double user_us_per_req = 0;
  double sys_us_per_req = 0;
  double wall_rps = 0;
  double req_per_cpu_s = 0;
  uint64_t requests = 0;
  // io_uring_enter calls per request in the timed window; 0 when the peer does not count them
  // (wrk).
  double syscalls_per_req = 0;
  double allocs_per_req = 0;  // heap allocations of the process per request, where counted
};

// `wrk -t1 -c<conns> -d<seconds>s` on `cpu`, POSTing make_body() with the headers ringcast
// sends (one pre-computed standard signature); its CPU time comes from wait4().
struct WrkRun {
  std::string wrk = "/usr/bin/wrk";
  int conns = 32;
  int seconds = 3;
  int cpu = 0;
  uint16_t port = 0;
  bool tls = false;
  std::string dir;  // for its Lua script and output
};
PeerResult run_wrk(const WrkRun& w);

}  // namespace ringcast::bench
