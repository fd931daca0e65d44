#include "tests/support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ringcast::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(5);

ExitStatus decode(int wstatus) {
  ExitStatus s;
  if (WIFEXITED(wstatus)) {
    s.exited = true;
    s.code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    s.signaled = true;
    s.signal = WTERMSIG(wstatus);
  }
  return s;
}

std::vector<std::string> merged_env(const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  auto key_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    bool overridden = false;
    for (const auto& x : extra) overridden |= key_of(x) == key_of(kv);
    if (!overridden) out.push_back(kv);
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

std::vector<char*> c_array(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Only async-signal-safe calls between fork and exec.
[[noreturn]] void child_fail(int pipe_fd) {
  int err = errno;
  ssize_t ignored = ::write(pipe_fd, &err, sizeof(err));
  (void)ignored;
  ::_exit(127);
}

}  // namespace

std::string ExitStatus::str() const {
  if (exited) return "exit " + std::to_string(code);
  if (signaled) return std::string("signal ") + ::strsignal(signal);
  return "unknown";
}

Process Process::start(std::vector<std::string> argv_in, ProcessOptions options) {
  if (argv_in.empty()) throw std::runtime_error("Process::start: empty argv");
  if (::gettid() != ::getpid()) {
    throw std::logic_error(
        "Process::start: call it from the main thread (the child's PR_SET_PDEATHSIG would kill "
        "it when this thread ends)");
  }
  std::vector<std::string> argv = argv_in;
  std::vector<std::string> env = merged_env(options.env);
  std::vector<char*> c_argv = c_array(argv);
  std::vector<char*> c_env = c_array(env);
  const pid_t parent = ::getpid();

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    ::setpgid(0, 0);                          // a terminal's Ctrl-C goes to the test only
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    auto redirect = [&](const std::string& path, int target) {
      if (path.empty()) return;
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0 || ::dup2(fd, target) < 0) child_fail(fds[1]);
      ::close(fd);
    };
    redirect(options.stdout_path, STDOUT_FILENO);
    redirect(options.stderr_path, STDERR_FILENO);
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) child_fail(fds[1]);
    if (argv[0].find('/') == std::string::npos) {
      ::execvpe(c_argv[0], c_argv.data(), c_env.data());
    } else {
      ::execve(c_argv[0], c_argv.data(), c_env.data());
    }
    child_fail(fds[1]);
  }
  ::close(fds[1]);
  int err = 0;
  ssize_t n;
  do {
    n = ::read(fds[0], &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  ::close(fds[0]);
  if (n == sizeof(err)) {
    int wstatus = 0;
    ::waitpid(pid, &wstatus, 0);
    throw std::runtime_error("cannot start " + argv_in[0] + ": " + std::strerror(err));
  }
  Process p;
  p.argv_ = std::move(argv_in);
  p.options_ = std::move(options);
  p.pid_ = pid;
  return p;
}

Process::Process(Process&& other) noexcept
    : argv_(std::move(other.argv_)),
      options_(std::move(other.options_)),
      pid_(other.pid_),
      status_(other.status_) {
  other.pid_ = -1;
}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !status_) kill();
    argv_ = std::move(other.argv_);
    options_ = std::move(other.options_);
    pid_ = other.pid_;
    status_ = other.status_;
    other.pid_ = -1;
  }
  return *this;
}

Process::~Process() {
  if (pid_ > 0 && !status_) kill();
}

bool Process::running() {
  if (pid_ <= 0 || status_) return false;
  int wstatus = 0;
  pid_t r = ::waitpid(pid_, &wstatus, WNOHANG);
  if (r == pid_) {
    status_ = decode(wstatus);
    return false;
  }
  return r == 0;
}

bool Process::signal(int sig) {
  if (pid_ <= 0 || status_) return false;
  return ::kill(pid_, sig) == 0;
}

std::optional<ExitStatus> Process::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  const auto deadline = Clock::now() + timeout;
  while (running()) {
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(kPollInterval);
  }
  return status_;
}

ExitStatus Process::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return {};
  signal(SIGTERM);
  if (auto s = wait(grace)) return *s;
  return kill();
}

ExitStatus Process::kill() {
  if (pid_ <= 0) return {};
  if (status_) return *status_;
  ::kill(pid_, SIGKILL);
  int wstatus = 0;
  while (::waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {
  }
  status_ = decode(wstatus);
  return *status_;
}

std::optional<std::string> Process::wait_for_line(const std::string& path,
                                                  const std::string& needle,
                                                  std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    std::istringstream in(read_file(path));
    std::string line;
    while (std::getline(in, line)) {
      if (line.find(needle) != std::string::npos) return line;
    }
    if (!running()) {
      // One last look: the line may have been written just before the exit.
      std::istringstream last(read_file(path));
      while (std::getline(last, line)) {
        if (line.find(needle) != std::string::npos) return line;
      }
      return std::nullopt;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::optional<std::string> Process::wait_for_stdout_line(const std::string& needle,
                                                         std::chrono::milliseconds timeout) {
  if (options_.stdout_path.empty()) return std::nullopt;
  return wait_for_line(options_.stdout_path, needle, timeout);
}

std::optional<std::string> Process::wait_for_stderr_line(const std::string& needle,
                                                         std::chrono::milliseconds timeout) {
  if (options_.stderr_path.empty()) return std::nullopt;
  return wait_for_line(options_.stderr_path, needle, timeout);
}

uint16_t free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind 127.0.0.1:0 failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool wait_for_port(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (host.find(':') != std::string::npos) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(port);
    if (::inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) != 1) return false;
    if (!IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr)) return false;  // loopback only
    len = sizeof(*a6);
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(port);
    if (::inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1) return false;
    if ((ntohl(a4->sin_addr.s_addr) >> 24) != 127) return false;  // loopback only
    len = sizeof(*a4);
  }
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    int r = ::connect(fd, reinterpret_cast<sockaddr*>(&ss), len);
    ::close(fd);
    if (r == 0) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
}

bool wait_for_file(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && st.st_size > 0) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ringcast::test

namespace ringcast::test {
namespace {

int connect_loopback(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (host.find(':') != std::string::npos) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(port);
    if (::inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) != 1 ||
        !IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr)) {
      return -1;
    }
    len = sizeof(*a6);
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(port);
    if (::inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1 ||
        (ntohl(a4->sin_addr.s_addr) >> 24) != 127) {
      return -1;
    }
    len = sizeof(*a4);
  }
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::string http_exchange(const std::string& host, uint16_t port, const std::string& raw,
                          std::chrono::milliseconds timeout, bool tls) {
  int fd = connect_loopback(host, port, timeout);
  if (fd < 0) return {};
  bssl::UniquePtr<SSL_CTX> ctx;
  bssl::UniquePtr<SSL> ssl;
  if (tls) {
    ctx.reset(SSL_CTX_new(TLS_method()));
    ssl.reset(SSL_new(ctx.get()));
    SSL_set_fd(ssl.get(), fd);
    if (SSL_connect(ssl.get()) != 1) {
      ::close(fd);
      return {};
    }
  }
  size_t off = 0;
  while (off < raw.size()) {
    ssize_t n = ssl ? SSL_write(ssl.get(), raw.data() + off, static_cast<int>(raw.size() - off))
                    : ::send(fd, raw.data() + off, raw.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      ::close(fd);
      return {};
    }
    off += static_cast<size_t>(n);
  }
  std::string got;
  char buf[16384];
  for (;;) {
    size_t head_end = got.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      std::string head = got.substr(0, head_end);
      for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t cl = head.find("\r\ncontent-length:");
      if (cl != std::string::npos) {
        size_t want = std::strtoull(head.c_str() + cl + 17, nullptr, 10);
        if (got.size() >= head_end + 4 + want) break;
      }
    }
    ssize_t n = ssl ? SSL_read(ssl.get(), buf, sizeof(buf)) : ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ssl.reset();
  ::close(fd);
  return got;
}

int64_t json_int(const std::string& json, const std::string& key) {
  std::string needle = "\"" + key + "\":";
  size_t p = json.find(needle);
  if (p == std::string::npos) return -1;
  return std::strtoll(json.c_str() + p + needle.size(), nullptr, 10);
}

SinkProcess SinkProcess::start(const std::vector<std::string>& args, const std::string& dir,
                               std::chrono::milliseconds timeout) {
  std::vector<std::string> argv{std::string(RINGCAST_BINARY_DIR) + "/tools/ringcast-sink"};
  bool has_listen = false, has_ids = false;
  for (const auto& a : args) {
    has_listen |= a.rfind("--listen", 0) == 0;
    has_ids |= a.rfind("--ids-file", 0) == 0;
  }
  SinkProcess s;
  for (const auto& a : args) s.tls |= a.rfind("--tls-cert", 0) == 0;
  if (!has_listen) argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
  if (!has_ids) {
    s.ids_file = dir + "/sink-ids.txt";
    argv.insert(argv.end(), {"--ids-file", s.ids_file});
  }
  for (size_t i = 0; i < args.size(); ++i) {
    argv.push_back(args[i]);
    if (args[i] == "--ids-file" && i + 1 < args.size()) s.ids_file = args[i + 1];
    if (args[i].rfind("--ids-file=", 0) == 0) s.ids_file = args[i].substr(11);
  }
  ProcessOptions o;
  // A fresh output file per start: a restarted sink must not match the old "listening" line.
  static int counter = 0;
  std::string tag = std::to_string(::getpid()) + "-" + std::to_string(counter++);
  o.stdout_path = dir + "/sink-" + tag + ".out";
  o.stderr_path = dir + "/sink-" + tag + ".err";
  s.process = Process::start(argv, o);
  auto line = s.process.wait_for_stdout_line("listening on ", timeout);
  if (!line) {
    throw std::runtime_error("ringcast-sink did not start: " + read_file(o.stderr_path));
  }
  std::string addr = line->substr(line->find("listening on ") + 13);
  size_t colon = addr.rfind(':');
  s.host = addr.substr(0, colon);
  if (s.host.size() >= 2 && s.host.front() == '[') s.host = s.host.substr(1, s.host.size() - 2);
  s.port = static_cast<uint16_t>(std::stoi(addr.substr(colon + 1)));
  return s;
}

std::string SinkProcess::base_url(bool tls) const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return std::string(tls ? "https://" : "http://") + h + ":" + std::to_string(port);
}

std::string SinkProcess::stats_json() const {
  std::string r =
      http_exchange(host, port, "GET /_stats HTTP/1.1\r\nHost: sink\r\nConnection: close\r\n\r\n",
                    std::chrono::seconds(5), tls);
  size_t p = r.find("\r\n\r\n");
  return p == std::string::npos ? std::string() : r.substr(p + 4);
}

int64_t SinkProcess::stats_value(const std::string& key) const {
  std::string j = stats_json();
  if (key.rfind("status_", 0) == 0) {
    size_t b = j.find("\"by_status\":{");
    if (b == std::string::npos) return -1;
    std::string by = j.substr(b, j.find('}', b) - b);
    int64_t v = json_int(by, key.substr(7));
    return v < 0 ? 0 : v;
  }
  return json_int(j, key);
}

std::vector<SinkProcess::IdLine> SinkProcess::ids() const {
  std::vector<IdLine> out;
  std::istringstream in(read_file(ids_file));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    IdLine l;
    if (ls >> l.id >> l.attempt >> l.status) out.push_back(l);
  }
  return out;
}

}  // namespace ringcast::test
