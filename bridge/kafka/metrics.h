// The bridge's counters and its Prometheus listener (docs/operations.md §6, "Kafka bridge"):
// records consumed, sent, acked by ringcast (duplicates among them), dead-lettered and committed;
// transient retries, rebalances, commit failures; per assigned partition the lag of the committed
// offset behind the high watermark. Labels are topics and partitions only, never tenants or header
// values. Invariant: the listener only reads; it never blocks the consume loop (a mutex held for
// a copy of the partition table).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace ringcast::kafka_bridge {

struct PartitionGauge {
  int64_t committed = -1;  // the next offset the group will read (-1: not known, none yet)
  int64_t high = -1;       // the partition's high watermark (-1: not known yet)
  // Where the group starts when nothing is committed: the low watermark under
  // auto.offset.reset = earliest (the bridge's default), -1 otherwise or not known.
  int64_t start = -1;
};

struct Counters {
  std::atomic<uint64_t> consumed{0};       // records taken from Kafka
  std::atomic<uint64_t> sent{0};           // lines sent to ringcast, each attempt counted
  std::atomic<uint64_t> acked{0};          // records ringcast holds durably (202 or 200)
  std::atomic<uint64_t> duplicates{0};     // of acked: a 200, already held (SPEC R12.5)
  std::atomic<uint64_t> dead_lettered{0};  // produced to the dead-letter topic, delivery reported
  std::atomic<uint64_t> committed{0};      // records whose offset was committed
  std::atomic<uint64_t> abandoned{0};      // left uncommitted (revoked, or shutdown's grace over)
  std::atomic<uint64_t> transient_retries{0};     // rounds a batch waited and sent again
  std::atomic<uint64_t> requests{0};              // HTTP requests to ringcast
  std::atomic<uint64_t> request_failures{0};      // of which: no answer (refused, timeout, ...)
  std::atomic<uint64_t> dead_letter_failures{0};  // dead-letter produces that failed (retried)
  std::atomic<uint64_t> commit_failures{0};
  std::atomic<uint64_t> rebalances{0};  // assignments and revocations
  std::atomic<uint64_t> consume_errors{0};
  std::atomic<int64_t> in_flight{0};  // records held in the batch in hand
  std::atomic<int64_t> assigned{0};   // partitions assigned to this member

  std::mutex mu;
  std::map<std::pair<std::string, int32_t>, PartitionGauge> partitions;  // guarded by mu
};

std::string render_metrics(Counters& c);

// GET /metrics (Prometheus text) and GET /healthz on its own thread.
class MetricsListener {
 public:
  // Binds `listen` ("host:port"); throws std::runtime_error naming metrics.listen on failure.
  MetricsListener(const std::string& listen, Counters& counters);
  ~MetricsListener();
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;
  std::string address() const { return address_; }

 private:
  void run();
  void serve(int fd);
  Counters& counters_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd
  std::string address_;
  std::thread thread_;
};

}  // namespace ringcast::kafka_bridge
