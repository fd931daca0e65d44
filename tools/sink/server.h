// ringcast-sink's server: a listening socket shared by N epoll worker threads, HTTP/1.1
// keep-alive (optionally over BoringSSL TLS), signature checks, the ids file, counters and
// fault modes (docs/sink.md). Invariant: every request carrying a delivery id is appended to
// the ids file before any byte of its answer is sent (or before the reset / hang), so a test
// can judge at-least-once delivery even after the sink is killed (SPEC R12.9).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "tools/sink/options.h"

namespace ringcast::sink {

struct Shared;

class Sink {
 public:
  // Binds, listens, loads the TLS certificate, opens the ids file. Throws std::runtime_error.
  explicit Sink(Options options);
  ~Sink();
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  uint16_t port() const;
  std::string address() const;  // "127.0.0.1:40123" or "[::1]:40123"
  // Runs the workers until stop(); blocks.
  void run();
  // Async-signal-unsafe; call from a normal thread (main's sigwait loop).
  void stop();
  std::string stats_json() const;

 private:
  std::unique_ptr<Shared> shared_;
};

}  // namespace ringcast::sink
