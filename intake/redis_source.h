// Intake from Redis Streams (docs/operations.md §6): one `[[intake.redis]]` source = one thread
// with its own net::Loop running the Redis client, reading a consumer group (XREADGROUP) and
// handing entries to Engine::submit_batch.
// Invariants:
//   - an entry is XACKed only once the engine answered it durable (accepted or duplicate, SPEC
//     R12.2 / R12.5): a crash before the XACK leaves it pending, it is read again (own pending
//     entries at start, XAUTOCLAIM by another consumer) and is then a duplicate;
//   - a bad entry (a missing field, a payload that is not JSON, an unknown tenant, a conflict)
//     is XADDed to the dead-letter stream with its fields plus error_code / error_message and
//     XACKed only after that XADD succeeded; a crash between the two dead-letters it twice
//     (the copy carries source_stream + source_id, so the repeat is recognisable), never zero
//     times;
//   - a transient refusal (shutting_down, unavailable, a store error) is never dead-lettered:
//     the entry stays pending and is submitted again after retry_delay;
//   - bounded memory: at most max_unacked entries are read but not yet acked; reading pauses
//     at the cap (the engine's durable answers release it);
//   - nothing on the loop thread blocks; engine answers come back through Loop::post.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "core/result.h"
#include "core/time.h"
#include "intake/entry.h"
#include "redis/tls_options.h"

namespace ringcast::intake {

struct RedisSourceOptions {
  std::string name = "redis";                          // metrics label, status
  std::vector<std::string> servers{"127.0.0.1:6379"};  // one server, or the cluster's seeds
  bool cluster = false;
  std::string username;
  std::string password;
  redis::TlsOptions tls;  // TLS to Redis (SPEC R14, [[intake.redis]] tls*)
  int db = 0;
  std::vector<std::string> streams;
  std::string group = "ringcast";  // created at "0" with MKSTREAM when missing
  std::string consumer;            // must be stable across restarts of one node
  FieldNames fields;
  EntryLimits limits;
  std::string dead_letter_stream;
  uint64_t dead_letter_max_len = 0;          // XADD MAXLEN ~ (0: the stream is never trimmed)
  uint32_t batch = 512;                      // COUNT of one XREADGROUP
  Duration block = seconds(1);               // BLOCK of one XREADGROUP
  uint32_t max_unacked = 16384;              // entries read but not yet acked (memory bound)
  Duration claim_idle = seconds(30);         // XAUTOCLAIM min-idle-time
  Duration claim_interval = seconds(5);      // how often to look for others' stale entries
  Duration retry_delay = milliseconds(500);  // transient failures (engine, Redis)
  Duration status_interval = seconds(1);     // XINFO GROUPS for lag / pending
  Duration command_timeout = seconds(2);     // non-blocking commands
};

enum class SourceState : uint8_t {
  kStarting,    // creating the group(s)
  kRecovering,  // reading this consumer's own pending entries
  kReading,     // reading new entries
  kPaused,      // at max_unacked: waiting for durable answers
  kDown,        // Redis unreachable (retrying)
  kStopped,
};
const char* source_state_name(SourceState s);

// Counters are monotonic; gauges are the last observed value (-1: not known yet).
struct SourceCounters {
  std::atomic<uint64_t> read{0};  // entries taken from the stream (incl. claimed)
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> duplicate{0};
  std::atomic<uint64_t> dead_lettered{0};  // XADDed to the dead-letter stream and acked
  std::atomic<uint64_t> retried{0};        // transient refusals, submitted again
  std::atomic<uint64_t> acked{0};
  std::atomic<uint64_t> claimed{0};       // taken over with XAUTOCLAIM
  std::atomic<uint64_t> redis_errors{0};  // commands that failed (no reply or an error reply)
  std::atomic<uint64_t> reconnects{0};
  std::atomic<int64_t> lag{-1};      // XINFO GROUPS "lag", summed over the streams
  std::atomic<int64_t> pending{-1};  // XINFO GROUPS "pending" (the whole group)
  std::atomic<int64_t> unacked{0};   // read here, not yet acked
  std::atomic<uint8_t> state{static_cast<uint8_t>(SourceState::kStarting)};
  // Why its Redis connection is down ("redis_tls_cert: …"), empty while it is up: a source
  // that cannot connect says why in /v1/intake and once in the log (SPEC R14: a TLS or ACL
  // refusal is not a silent retry loop).
  mutable std::mutex error_mu;
  std::string last_error;  // guarded by error_mu
  std::string connection_error() const {
    std::lock_guard<std::mutex> lock(error_mu);
    return last_error;
  }
};

class RedisSource {
 public:
  // Checks the options (kInvalidArgument naming the problem) and starts the thread. `engine`
  // must outlive the source.
  static Result<std::unique_ptr<RedisSource>> start(RedisSourceOptions options, Engine& engine);
  // stop() with no grace.
  ~RedisSource();
  RedisSource(const RedisSource&) = delete;
  RedisSource& operator=(const RedisSource&) = delete;

  // Stops reading, waits up to `grace` for the engine's answers to what was read and for their
  // XACKs, then closes. What is left stays pending in Redis (read again at the next start).
  void stop(Duration grace);

  const RedisSourceOptions& options() const { return options_; }
  const SourceCounters& counters() const { return counters_; }
  SourceState state() const { return static_cast<SourceState>(counters_.state.load()); }

  struct Impl;

 private:
  RedisSource(RedisSourceOptions options, Engine& engine);
  RedisSourceOptions options_;
  Engine& engine_;
  SourceCounters counters_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

// Prometheus text for these sources (labels: source only, never tenants).
std::string render_metrics(const std::vector<const RedisSource*>& sources);
// {"sources":[{"name","state","streams","group","consumer","lag","pending","unacked",
// "read","accepted","duplicate","dead_lettered","retried","reconnects","connection_error"}]}
std::string render_status_json(const std::vector<const RedisSource*>& sources);

// A consumer name that stays the same across restarts of this node: "<hostname>-<8 hex of a
// hash of the data dir's absolute path>".
std::string default_consumer_name(const std::string& data_dir);

}  // namespace ringcast::intake
