// Real nats-server processes (Debian nats-server 2.9) for the NATS and intake tests: one server
// with JetStream (`nats-server -js -a 127.0.0.1 -p <free port> -sd <dir>/js`, plus a config file
// for token / user auth and TLS) as a child process, and a blocking client of its own as the
// test's oracle (plain sockets, independent of nats/; it cannot sign an NKEY nonce: give an
// NKEY server a user + password for it): requests to the JetStream API,
// publishes, direct reads of a stream's messages. Invariants: servers listen on 127.0.0.1 only,
// keep their JetStream files under their dir (so a restart on the same dir keeps streams and
// consumers), and die with the test (Process: SIGKILL on destruction and PR_SET_PDEATHSIG); every
// wait is bounded. The oracle speaks plain TCP: against a TLS server the code under test is its own
// witness.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/process.h"

namespace ringcast::test {

struct NatsServerTls {
  std::string cert_file;  // the server's certificate and key (PEM, e.g. TestCa::write_files())
  std::string key_file;
};

struct NatsServerOptions {
  std::string token;  // authorization { token }
  std::string user;   // authorization { user, password }
  std::string password;
  // authorization { users = [{ nkey }] }: an NKEY user's public key ("U…"); with user and
  // password set too, that user is in the list as well (the oracle connects as it).
  std::string nkey;
  std::optional<NatsServerTls> tls;  // tls { cert_file, key_file }: every client must speak TLS
};

// A message as the oracle read it.
struct NatsReply {
  int status = 0;       // the header block's status (503 no responders, 404, ...), 0 without one
  std::string headers;  // the raw header block ("" for a MSG)
  std::string data;
  // The first value of header `key` ("" when absent).
  std::string header(const std::string& key) const;
};

class NatsServer {
 public:
  static constexpr const char* kBinary = "/usr/sbin/nats-server";
  static bool available();

  // Starts nats-server on a free port (retrying another port if the bind races) and waits
  // until its log says it is ready. Throws std::runtime_error with the log.
  static std::unique_ptr<NatsServer> start(
      const std::string& dir, const NatsServerOptions& options = {},
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~NatsServer();

  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return process_.pid(); }
  bool running() { return process_.running(); }

  void stop(std::chrono::milliseconds grace = std::chrono::seconds(5));  // SIGTERM, then KILL
  // stop() (if running), then start again on the same port and dir; waits until ready.
  void restart(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  void kill();    // SIGKILL and reap: a crash (restart() brings it back)
  void pause();   // SIGSTOP, and waits until the process is stopped (it answers nothing)
  void resume();  // SIGCONT
  std::string log() const;

  // --- the oracle (a fresh connection per call; throws std::runtime_error on I/O failure) ---
  // A request; the reply (status 503 when nobody listens), or throws on timeout.
  NatsReply request(const std::string& subject, const std::string& data,
                    const std::string& headers = "",
                    std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  // Publishes each (subject, headers, data) in order, then PING/PONG (all processed).
  void publish(const std::vector<std::tuple<std::string, std::string, std::string>>& msgs) const;
  // $JS.API.STREAM.CREATE.<name> with these subjects (allow_direct on, file storage); throws
  // with the API's answer when it reports an error.
  void create_stream(const std::string& name, const std::vector<std::string>& subjects) const;
  // $JS.API.<what> (e.g. "STREAM.INFO.EV", "CONSUMER.INFO.EV.ringcast") → the JSON answer.
  std::string api(const std::string& what, const std::string& body = "") const;
  // The stream's messages, 1..last, read with $JS.API.DIRECT.GET (headers and data as stored).
  std::vector<NatsReply> stream_messages(const std::string& stream) const;
  // One integer field of an API answer ("num_pending", "messages", ...); -1 if absent.
  static int64_t json_int(const std::string& json, const std::string& key);

 private:
  NatsServer() = default;
  void launch();
  bool wait_ready(std::chrono::milliseconds timeout);
  std::string dir_;
  uint16_t port_ = 0;
  NatsServerOptions options_;
  Process process_;
  int generation_ = 0;
};

}  // namespace ringcast::test
