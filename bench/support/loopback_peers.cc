#include "bench/support/loopback_peers.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "net/signing.h"

namespace ringcast::bench {

std::string make_body() {
  std::string body =
      R"({"type":"payment.status_changed","id":"evt_1","data":{"status":"paid","pad":")";
  const std::string tail = "\"}}";
  body.append(1024 - body.size() - tail.size(), 'x');
  body += tail;
  return body;
}

std::string self_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ::sched_setaffinity(0, sizeof(set), &set);
}

double user_seconds(const rusage& r) {
  return static_cast<double>(r.ru_utime.tv_sec) + static_cast<double>(r.ru_utime.tv_usec) / 1e6;
}

double cpu_seconds(const rusage& r) {
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

pid_t spawn(const std::vector<std::string>& argv, int cpu, const std::string& out_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    pin_to(cpu);
    int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> av;
    for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    ::execv(av[0], av.data());
    ::_exit(127);
  }
  return pid;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint64_t json_number(const std::string& json, const std::string& key) {
  auto p = json.find("\"" + key + "\":");
  if (p == std::string::npos) return 0;
  return std::strtoull(json.c_str() + p + key.size() + 3, nullptr, 10);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Sink start_sink(const std::string& sink_path, const std::string& dir, int id, int cpu,
                const std::vector<std::string>& extra) {
  Sink s;
  const std::string port_file = dir + "/port-" + std::to_string(id);
  s.stats_file = dir + "/stats-" + std::to_string(id) + ".json";
  ::unlink(port_file.c_str());
  std::vector<std::string> argv = {sink_path, "--listen",     "127.0.0.1:0", "--port-file",
                                   port_file, "--stats-file", s.stats_file,  "--secret",
                                   kSecret,   "--verify",     "standard",    "--quiet"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const std::string log = dir + "/sink-" + std::to_string(id) + ".log";
  s.pid = spawn(argv, cpu, log);
  for (int i = 0; i < 500; ++i) {
    std::string p = read_file(port_file);
    if (!p.empty() && p.back() == '\n') {
      s.port = static_cast<uint16_t>(std::stoi(p));
      return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::cerr << "sink did not start; see " << log << "\n";
  std::exit(1);
}

std::string stop_sink(Sink& s) {
  ::kill(s.pid, SIGTERM);
  int status = 0;
  ::waitpid(s.pid, &status, 0);
  return read_file(s.stats_file);
}

PeerResult run_wrk(const WrkRun& w) {
  const std::string body = make_body();
  const std::string ts = std::to_string(::time(nullptr));
  const std::string sig = net::standard_signature(kSecret, kMessageId, ts, body);
  const std::string script = w.dir + "/bench.lua";
  {
    std::ofstream f(script);
    f << "wrk.method = \"POST\"\n"
      << "wrk.body = [[" << body << "]]\n"
      << "wrk.headers[\"Content-Type\"] = \"application/json\"\n"
      << "wrk.headers[\"User-Agent\"] = \"ringcast/" << RINGCAST_VERSION << "\"\n"
      << "wrk.headers[\"webhook-id\"] = \"" << kMessageId << "\"\n"
      << "wrk.headers[\"webhook-timestamp\"] = \"" << ts << "\"\n"
      << "wrk.headers[\"webhook-signature\"] = \"" << sig << "\"\n";
  }
  const std::string url =
      std::string(w.tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(w.port) + "/bench";
  const std::string out = w.dir + "/wrk.out";
  pid_t pid = spawn({w.wrk, "-t1", "-c" + std::to_string(w.conns),
                     "-d" + std::to_string(w.seconds) + "s", "-s", script, url},
                    w.cpu, out);
  int status = 0;
  rusage ru{};
  ::wait4(pid, &status, 0, &ru);
  const std::string text = read_file(out);
  PeerResult r;
  // "  123456 requests in 3.00s, ..." and "Requests/sec: 41152.00"
  auto p = text.find(" requests in ");
  if (p != std::string::npos) {
    auto b = text.rfind('\n', p);
    r.requests = std::strtoull(text.c_str() + (b == std::string::npos ? 0 : b + 1), nullptr, 10);
  }
  auto q = text.find("Requests/sec:");
  if (q != std::string::npos) r.wall_rps = std::strtod(text.c_str() + q + 13, nullptr);
  if (r.requests == 0 || cpu_seconds(ru) <= 0) {
    std::cerr << "wrk: no requests counted; see " << out << "\n";
    return r;
  }
  r.req_per_cpu_s = static_cast<double>(r.requests) / cpu_seconds(ru);
  r.user_us_per_req = 1e6 * user_seconds(ru) / static_cast<double>(r.requests);
  r.sys_us_per_req = 1e6 * cpu_seconds(ru) / static_cast<double>(r.requests) - r.user_us_per_req;
  if (text.find("Non-2xx") != std::string::npos) std::cerr << "wrk: non-2xx answers\n";
  return r;
}

}  // namespace ringcast::bench
