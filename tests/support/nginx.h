// A real nginx (Debian nginx-light) started by a test as a child process with a generated config
// in a temp dir: one server on a loopback port, optionally TLS with a test_ca certificate, for
// interoperability tests. Invariant: it listens only on 127.0.0.1 / ::1 and dies with the test.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "tests/support/process.h"

namespace ringcast::test {

struct NginxOptions {
  bool tls = false;                       // listen with "ssl"; needs cert_file and key_file
  std::string cert_file;                  // PEM chain (TestCa::write_files: cert.pem)
  std::string key_file;                   // PEM key (key.pem)
  std::string listen_host = "127.0.0.1";  // or "::1"
  // Extra directives inside server { }, e.g. "location /fail { return 503; }". The default
  // location is `location / { return 200 "ok"; }`.
  std::string extra_server;
  std::string extra_http;  // extra directives inside http { }
};

class Nginx {
 public:
  static constexpr const char* kBinary = "/usr/sbin/nginx";
  static bool available();  // the binary is installed

  // Writes <dir>/nginx.conf, starts `nginx -p <dir> -c <dir>/nginx.conf` on a free port and
  // waits until it accepts connections. Throws std::runtime_error (with the error log) if not.
  static Nginx start(const std::string& dir, const NginxOptions& options = {},
                     std::chrono::milliseconds timeout = std::chrono::seconds(10));

  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }
  std::string base_url() const;  // "http://127.0.0.1:<port>" or "https://..."
  std::string error_log() const { return read_file(dir_ + "/error.log"); }
  std::string access_log() const { return read_file(dir_ + "/access.log"); }
  ExitStatus stop() { return process_.stop(std::chrono::seconds(5)); }  // SIGTERM: fast shutdown
  Process& process() { return process_; }

 private:
  Process process_;
  std::string dir_;
  std::string host_;
  uint16_t port_ = 0;
  bool tls_ = false;
};

}  // namespace ringcast::test
