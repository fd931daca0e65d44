// The Kafka → ringcast bridge (docs/operations.md §6, "Kafka bridge"): a consumer-group member that
// turns each poll cycle's records into one NDJSON POST to /v1/events/bulk and commits offsets only
// for records ringcast holds or the dead-letter topic holds.
// Invariants (at-least-once; ringcast's idempotency absorbs the repeats, SPEC R12.5):
//   - a record's offset is committed only when it and every record before it in its partition is
//     done: acked by ringcast (202 accepted, 200 duplicate) or produced to the dead-letter topic
//     with its reason and that produce's delivery reported;
//   - a permanent refusal (400, 404 unknown_tenant, 409, 413, 422; a record that maps to no valid
//     event) is dead-lettered, never retried; a transient one (429, 5xx, 401/403, no answer) is
//     sent again after a backoff, never skipped and never dead-lettered;
//   - offsets are stored and committed synchronously (enable.auto.commit and
//     enable.auto.offset.store are off), per partition the offset after the last done record;
//   - a revoked partition's records that were not sent are dropped from the batch and not
//     committed (its next owner reads them from the committed offset);
//   - bounded memory: one batch (batch_max_events, batch_max_bytes) plus librdkafka's queues.
#pragma once

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bridge/kafka/answers.h"
#include "bridge/kafka/config.h"
#include "bridge/kafka/http_client.h"
#include "bridge/kafka/mapping.h"
#include "bridge/kafka/metrics.h"

namespace ringcast::kafka_bridge {

// What the signal handlers ask for.
enum class StopLevel : int {
  kRun = 0,
  kGraceful = 1,  // SIGTERM / SIGINT: stop consuming, finish the batch (shutdown_grace), commit
  kNow = 2,       // a second signal: abandon the batch (nothing past what was done is committed)
};

class Bridge {
 public:
  // Creates the consumer and the dead-letter producer and subscribes; throws std::runtime_error
  // naming the key (kafka.properties.<name>: ...) when librdkafka refuses the configuration.
  Bridge(const BridgeConfig& config, Counters& counters);
  ~Bridge();
  Bridge(const Bridge&) = delete;
  Bridge& operator=(const Bridge&) = delete;

  // Consumes until `stop` says so, then commits what was done and leaves the group. Returns the
  // process exit code: 0 after a stop, 1 after a fatal Kafka error.
  int run(const std::atomic<int>& stop);

 private:
  enum class State : uint8_t { kPending, kDeadLetter, kDone, kAbandoned };
  struct Item {
    rd_kafka_message_t* msg = nullptr;  // owned; its key, value and headers go to a dead letter
    EventInput ev{};
    State state = State::kPending;
    std::string code{};     // why it is dead-lettered (ringcast-error-code)
    std::string message{};  // ringcast-error-message
  };
  struct Owed {
    int64_t next = 0;    // the offset to commit
    size_t records = 0;  // records it covers, for the committed counter
  };
  struct DeliveryReport {
    bool done = false;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  };
  using Clock = std::chrono::steady_clock;
  using TopicPartition = std::pair<std::string, int32_t>;

  static void rebalance_cb(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                           rd_kafka_topic_partition_list_t* parts, void* opaque);
  static void dr_msg_cb(rd_kafka_t* rk, const rd_kafka_message_t* msg, void* opaque);
  static void log_cb(const rd_kafka_t* rk, int level, const char* fac, const char* buf);
  static void error_cb(rd_kafka_t* rk, int err, const char* reason, void* opaque);

  void on_assign(const rd_kafka_topic_partition_list_t* parts);
  void on_revoke(const rd_kafka_topic_partition_list_t* parts, bool lost);

  StopLevel stop_level(const std::atomic<int>& stop) const;
  // The stop level, noting (and logging) when a stop was first seen.
  StopLevel note_stop(const std::atomic<int>& stop);
  // Polls records into batch_ until it is full, batch_max_wait after its first record, or a stop.
  void collect(const std::atomic<int>& stop);
  void take(rd_kafka_message_t* msg);
  // Sends, dead-letters and retries until every item is done or abandoned.
  void process(const std::atomic<int>& stop);
  // One round: sends the pending items in batch order (runs of bulk lines, single events alone).
  void send_pending();
  void send_bulk(const std::vector<size_t>& run);
  void send_single(size_t i);
  void apply(size_t i, const LineResult& r);
  // Produces the dead-letter items and waits for their delivery reports.
  void dead_letter(const std::atomic<int>& stop);
  // Adds the batch's done prefixes to owed_ and commits owed_.
  void commit(const std::atomic<int>& stop);
  // Commits owed_ (only the partitions in `only` when given); true when it was written.
  bool commit_owed(const std::atomic<int>& stop, const std::set<TopicPartition>* only);
  // After a commit met a rebalance: pauses the assignment and serves the group until it is
  // through.
  void await_rebalance(const std::atomic<int>& stop);
  void release_batch();
  void refresh_partition_gauges();
  bool sleep_interruptible(Millis d, const std::atomic<int>& stop);

  BridgeConfig config_;
  Counters& counters_;
  RecordMapper mapper_;
  HttpClient http_;
  rd_kafka_t* consumer_ = nullptr;
  rd_kafka_t* producer_ = nullptr;
  std::vector<Item> batch_;
  size_t batch_bytes_ = 0;
  std::set<TopicPartition> assigned_;
  bool refresh_committed_ = false;
  // Done records whose offsets are not committed yet (a commit failed or met a rebalance).
  std::map<TopicPartition, Owed> owed_;
  bool rebalancing_ = false;  // a commit was refused: the group is rebalancing
  // auto.offset.reset is earliest: a partition without a commit starts at its low watermark.
  bool reset_earliest_ = true;
  std::atomic<bool> fatal_{false};
  uint64_t next_dr_ = 1;
  std::unordered_map<uint64_t, DeliveryReport> reports_;  // delivery reports awaited, by id
  std::string bulk_body_;
  Clock::time_point stop_seen_{};
  bool stop_noted_ = false;
  Clock::time_point last_transient_log_{};
  std::minstd_rand rng_;
};

}  // namespace ringcast::kafka_bridge
