#include "tests/support/nginx.h"

#include <unistd.h>

#include <stdexcept>

#include "tests/support/test_ca.h"

namespace ringcast::test {
namespace {

std::string config(const std::string& dir, const NginxOptions& o, uint16_t port) {
  std::string host =
      o.listen_host.find(':') != std::string::npos ? "[" + o.listen_host + "]" : o.listen_host;
  std::string c;
  c += "daemon off;\nmaster_process off;\nworker_processes 1;\n";
  c += "pid " + dir + "/nginx.pid;\n";
  c += "error_log " + dir + "/error.log info;\n";
  c += "events { worker_connections 1024; }\n";
  c += "http {\n";
  c += "  access_log " + dir + "/access.log;\n";
  for (const char* t : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"}) {
    c += "  " + std::string(t) + "_temp_path " + dir + "/" + t + "_temp;\n";
  }
  c += "  keepalive_requests 1000000;\n  keepalive_timeout 60s;\n";
  c += "  default_type text/plain;\n";
  c += o.extra_http + "\n";
  c += "  server {\n";
  c += "    listen " + host + ":" + std::to_string(port) + (o.tls ? " ssl" : "") + ";\n";
  c += "    server_name localhost;\n";
  if (o.tls) {
    c += "    ssl_certificate " + o.cert_file + ";\n";
    c += "    ssl_certificate_key " + o.key_file + ";\n";
    c += "    ssl_protocols TLSv1.2 TLSv1.3;\n";
  }
  c += o.extra_server + "\n";
  c += "    location / { return 200 \"ok\"; }\n";
  c += "  }\n}\n";
  return c;
}

}  // namespace

bool Nginx::available() {
  return ::access(kBinary, X_OK) == 0;
}

std::string Nginx::base_url() const {
  std::string h = host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_;
  return std::string(tls_ ? "https://" : "http://") + h + ":" + std::to_string(port_);
}

Nginx Nginx::start(const std::string& dir, const NginxOptions& options,
                   std::chrono::milliseconds timeout) {
  if (!available()) throw std::runtime_error("nginx is not installed (tools/install-deps.sh)");
  if (options.tls && (options.cert_file.empty() || options.key_file.empty())) {
    throw std::runtime_error("Nginx: tls needs cert_file and key_file");
  }
  // free_tcp_port() can race with another process; retry with a new port if bind fails.
  std::string last_error;
  for (int attempt = 0; attempt < 5; ++attempt) {
    uint16_t port = free_tcp_port();
    const std::string conf = dir + "/nginx.conf";
    write_file(conf, config(dir, options, port));
    ProcessOptions po;
    po.stdout_path = dir + "/nginx.stdout";
    po.stderr_path = dir + "/nginx.stderr";
    Nginx n;
    n.dir_ = dir;
    n.host_ = options.listen_host;
    n.port_ = port;
    n.tls_ = options.tls;
    // -e: the startup error log goes to our dir too (nginx >= 1.19.5).
    n.process_ =
        Process::start({kBinary, "-p", dir + "/", "-c", conf, "-e", dir + "/error.log"}, po);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (wait_for_port(options.listen_host, port, std::chrono::milliseconds(20))) return n;
      if (!n.process_.running()) break;
    }
    last_error = read_file(dir + "/error.log") + read_file(po.stderr_path);
    n.process_.kill();
    if (last_error.find("Address already in use") == std::string::npos) break;
  }
  throw std::runtime_error("nginx did not start:\n" + last_error);
}

}  // namespace ringcast::test
