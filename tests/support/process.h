// A child process for integration tests (ringcast-sink, nginx, the daemon): fork/exec with argv,
// env and output files, readiness waits, signals, bounded reaping. Invariant: a Process that is
// destroyed while its child still runs kills it with SIGKILL and reaps it; the child also gets
// SIGKILL if the test process dies (PR_SET_PDEATHSIG), so no test leaves a process behind.
// PR_SET_PDEATHSIG fires when the *thread* that forked exits, so start() refuses (throws
// std::logic_error) anywhere but the main thread: a server restarted from a helper thread
// died silently when that thread ended (it once passed for a product bug).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ringcast::test {

struct ProcessOptions {
  std::vector<std::string>
      argv;  // argv[0] is the program path (no PATH lookup unless it has no '/')
  std::vector<std::string> env;  // "KEY=VALUE" added to (or overriding) the current environment
  std::string stdout_path;       // empty: inherit the test's stdout
  std::string stderr_path;       // empty: inherit the test's stderr
  std::string cwd;               // empty: the test's cwd
};

// How a child ended (from waitpid).
struct ExitStatus {
  bool exited = false;  // exited normally; `code` is the exit code
  int code = 0;
  bool signaled = false;  // killed by `signal`
  int signal = 0;
  bool ok() const { return exited && code == 0; }
  std::string str() const;
};

class Process {
 public:
  // Forks and execs argv (argv[0]: a path, or a name looked up in PATH when it has no '/');
  // throws std::runtime_error if exec fails (e.g. no such binary).
  static Process start(std::vector<std::string> argv, ProcessOptions options = {});

  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();  // kill(SIGKILL) + reap if still running

  pid_t pid() const { return pid_; }
  bool running();  // false once the child has been reaped (reaps it if it has exited)
  bool signal(int sig);
  // Waits up to `timeout` for the child to end; nullopt if it is still running.
  std::optional<ExitStatus> wait(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after `grace`; always returns the final status.
  ExitStatus stop(std::chrono::milliseconds grace = std::chrono::seconds(5));
  ExitStatus kill();  // SIGKILL and reap
  std::optional<ExitStatus> status() const { return status_; }

  // Polls options.stdout_path (or stderr_path) until a line containing `needle` appears;
  // returns that line. Gives up after `timeout` or when the child exits (nullopt).
  std::optional<std::string> wait_for_stdout_line(const std::string& needle,
                                                  std::chrono::milliseconds timeout);
  std::optional<std::string> wait_for_stderr_line(const std::string& needle,
                                                  std::chrono::milliseconds timeout);
  const ProcessOptions& options() const { return options_; }
  const std::vector<std::string>& argv() const { return argv_; }

 private:
  std::optional<std::string> wait_for_line(const std::string& path, const std::string& needle,
                                           std::chrono::milliseconds timeout);
  std::vector<std::string> argv_;
  ProcessOptions options_;
  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
};

// ringcast-sink (RINGCAST_BINARY_DIR/tools/ringcast-sink) as a child process, for the net and
// e2e tests. start() adds --listen 127.0.0.1:0 (unless args has --listen), --ids-file
// <dir>/sink-ids.txt, and output files in `dir`, then waits for "listening on".
struct SinkProcess {
  static SinkProcess start(const std::vector<std::string>& args, const std::string& dir,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10));
  std::string base_url(bool tls = false) const;  // "http://127.0.0.1:<port>"
  std::string stats_json() const;                // GET /_stats over a fresh connection
  // One number out of the stats JSON ("requests", "resets", "unique_ids", ...); -1 if absent.
  // by_status entries are "status_<code>", e.g. stats_value("status_503").
  int64_t stats_value(const std::string& key) const;
  struct IdLine {
    std::string id;
    uint32_t attempt = 0;
    std::string status;  // "200", "503", "401", "reset", "hang"
  };
  std::vector<IdLine> ids() const;  // the ids file, parsed

  Process process;
  bool tls = false;  // started with --tls-cert: the helpers above talk TLS (without verifying)
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string ids_file;
};

// A blocking HTTP/1.1 exchange on a fresh loopback connection: sends `raw` and reads until
// the peer closes or a Content-Length body is complete; returns what was read ("" on error).
// With tls, the exchange runs over TLS without certificate verification (loopback only).
std::string http_exchange(const std::string& host, uint16_t port, const std::string& raw,
                          std::chrono::milliseconds timeout = std::chrono::seconds(5),
                          bool tls = false);
// Extracts an integer value of "key": from flat JSON text; -1 if absent.
int64_t json_int(const std::string& json, const std::string& key);

// A TCP port on 127.0.0.1 that was free a moment ago (bind port 0, read it, close). Racy by
// nature: prefer letting the program bind port 0 itself and report it when it can.
uint16_t free_tcp_port();

// Waits until a TCP connect to host:port succeeds (127.0.0.1 or ::1 only).
bool wait_for_port(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);
// Waits until `path` exists and is not empty.
bool wait_for_file(const std::string& path, std::chrono::milliseconds timeout);
// The whole content of `path`; empty if it does not exist.
std::string read_file(const std::string& path);

}  // namespace ringcast::test
