// Intake from NATS JetStream (docs/operations.md §6 "NATS JetStream"): one `[[intake.nats]]`
// source = one thread with its own net::Loop running a NATS connection (nats/connection.h), a
// durable pull consumer on one stream, handing messages to Engine::submit_batch.
// Invariants (those of intake/redis_source.h, in JetStream's terms):
//   - a message is `+ACK`ed only once the engine answered it durable (accepted or duplicate,
//     SPEC R12.2 / R12.5): a crash before the ack leaves it unacknowledged in the consumer, which
//     delivers it again after ack_wait (to this node after a restart, or to another node on the
//     same durable), and it is then a duplicate;
//   - a bad message (a missing field, a payload that is not JSON, an unknown tenant, a conflict:
//     intake/entry.h's rules) is published to dead_letter_subject with a JetStream publish, and
//     `+TERM`ed only once its PubAck came back (the copy keeps the original's headers and body,
//     plus Ringcast-Error-Code / Ringcast-Error-Message and where it came from, and a
//     Nats-Msg-Id of the source stream and sequence, so that a crash between the two
//     dead-letters it once within the stream's duplicate window, never zero times);
//   - a transient refusal (shutting_down, unavailable, a store error) is never dead-lettered:
//     the message is `-NAK`ed with nak_delay and delivered again;
//   - bounded memory: at most max_unacked messages are held (pulled and not yet acked, naked or
//     terminated, pulls in flight counted at their batch size); pulling pauses at the cap;
//     messages held longer than half of ack_wait get `+WPI` so the server does not redeliver them
//     meanwhile;
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
#include "intake/redis_source.h"
#include "nats/connection.h"

namespace ringcast::intake {

// Where a message's fields are: its NATS headers (the body is the payload), or a JSON object
// body with them as members (the payload member's value, byte for byte).
enum class NatsEnvelope : uint8_t { kHeaders, kJson };

struct NatsSourceOptions {
  std::string name = "nats";  // metrics label, status
  std::vector<std::string> servers{"127.0.0.1:4222"};
  std::string token;
  std::string user;
  std::string password;
  std::string nkey_seed_file;  // NKEY auth: read (and checked) at start()
  nats::TlsOptions tls;
  std::string stream;
  std::string durable = "ringcast";
  std::string filter_subject;  // empty: every subject of the stream
  NatsEnvelope envelope = NatsEnvelope::kHeaders;
  FieldNames fields;  // header names (kHeaders: `payload` unused) or JSON members (kJson)
  EntryLimits limits;
  std::string dead_letter_subject = "ringcast.dead-letter";
  uint32_t batch = 256;                      // messages per pull request
  Duration expires = seconds(1);             // a pull request's expiry at the server
  uint32_t max_unacked = 16384;              // held here, not yet acked (memory bound)
  uint32_t max_ack_pending = 0;              // the consumer's; 0: 4 x max_unacked
  Duration ack_wait = seconds(30);           // the consumer's: redelivery of what a dead node held
  Duration nak_delay = milliseconds(500);    // transient refusals: redelivered after this
  Duration retry_delay = milliseconds(500);  // consumer creation, dead letters, acks
  Duration status_interval = seconds(1);     // CONSUMER.INFO for lag / pending
  Duration request_timeout = seconds(2);     // JetStream API requests and PubAcks
  Duration ping_interval = seconds(5);       // keepalive (2 unanswered: reconnect)
};

// The header names kHeaders uses when a *_field is not set.
FieldNames default_nats_header_fields();

// Counters as RedisSource's (redelivered: messages whose delivery count was above 1).
struct NatsCounters {
  std::atomic<uint64_t> read{0};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> duplicate{0};
  std::atomic<uint64_t> dead_lettered{0};  // published to the DLQ (PubAck) and terminated
  std::atomic<uint64_t> retried{0};        // transient refusals, naked
  std::atomic<uint64_t> acked{0};
  std::atomic<uint64_t> redelivered{0};
  std::atomic<uint64_t> nats_errors{0};  // API requests / publishes that failed (retried)
  std::atomic<uint64_t> reconnects{0};
  std::atomic<int64_t> lag{-1};      // the consumer's num_pending
  std::atomic<int64_t> pending{-1};  // the consumer's num_ack_pending (every node's)
  std::atomic<int64_t> unacked{0};   // held here
  std::atomic<uint8_t> state{static_cast<uint8_t>(SourceState::kStarting)};
  mutable std::mutex error_mu;
  std::string last_error;  // guarded by error_mu: why the connection or the consumer is down
  std::string connection_error() const {
    std::lock_guard<std::mutex> lock(error_mu);
    return last_error;
  }
};

class NatsSource {
 public:
  // Checks the options (kInvalidArgument naming the problem) and starts the thread. `engine`
  // must outlive the source.
  static Result<std::unique_ptr<NatsSource>> start(NatsSourceOptions options, Engine& engine);
  ~NatsSource();  // stop() with no grace
  NatsSource(const NatsSource&) = delete;
  NatsSource& operator=(const NatsSource&) = delete;

  // Stops pulling, waits up to `grace` for the engine's answers to what is held and for their
  // acks (and a PING's PONG, so that they reached the server), then closes. What is left is
  // delivered again after ack_wait.
  void stop(Duration grace);

  const NatsSourceOptions& options() const { return options_; }
  const NatsCounters& counters() const { return counters_; }
  SourceState state() const { return static_cast<SourceState>(counters_.state.load()); }

  struct Impl;

 private:
  NatsSource(NatsSourceOptions options, Engine& engine);
  NatsSourceOptions options_;
  std::string nkey_seed_;  // the seed file's content (never logged)
  Engine& engine_;
  NatsCounters counters_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

// Prometheus text for these sources: the families of render_metrics(RedisSource) (label source)
// plus ringcast_intake_nats_errors_total and the entries' result="redelivered".
std::string render_metrics(const std::vector<const NatsSource*>& sources);
// The sources' objects for GET /v1/intake ({"name","kind":"nats","state","stream","durable",
// "filter_subject","dead_letter_subject","lag","pending","unacked","read","accepted",
// "duplicate","dead_lettered","retried","acked","redelivered","reconnects","connection_error"}),
// comma-separated, without the surrounding array.
std::string render_status_items(const std::vector<const NatsSource*>& sources);

// Both kinds of source in one answer: /metrics text with each family once (its HELP and TYPE
// once, the samples of both kinds under it), and {"sources":[...]}.
std::string render_intake_metrics(const std::vector<const RedisSource*>& redis,
                                  const std::vector<const NatsSource*>& nats);
std::string render_intake_status(const std::vector<const RedisSource*>& redis,
                                 const std::vector<const NatsSource*>& nats);
// Prometheus texts as one: each family (by its HELP / TYPE lines) once, in the order families
// first appear, with the samples of every part under it.
std::string merge_metric_families(const std::vector<std::string>& parts);

// Reads a JSON envelope body ({"tenant":…, "id":…, "type":…, "payload":<any JSON>,
// "ordering_key":…}, member names as `names` says) into fields for EntryMapper: string members
// as their (unescaped) value, the payload member as its raw JSON text, byte for byte. Other
// members are ignored; the first of a repeated member wins. An error (invalid_json) for a body
// that is not one JSON object, invalid_value for a named member that is not a string.
class EnvelopeReader {
 public:
  EnvelopeReader();
  ~EnvelopeReader();
  EnvelopeReader(const EnvelopeReader&) = delete;
  EnvelopeReader& operator=(const EnvelopeReader&) = delete;
  std::optional<EntryError> read(const std::string& body, const FieldNames& names, Fields& out);

 private:
  struct Parser;
  std::unique_ptr<Parser> parser_;
  std::string scratch_;  // a padded copy of a body without room past its end
};

}  // namespace ringcast::intake
