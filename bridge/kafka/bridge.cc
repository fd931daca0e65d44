#include "bridge/kafka/bridge.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>

#include "bridge/kafka/log.h"

namespace ringcast::kafka_bridge {
namespace {

constexpr Millis kPollSlice{100};  // a stop is noticed within this while idle
constexpr Millis kCommittedTimeout{2000};
// How long a member whose commit met a rebalance waits (paused) for the rebalance to reach it.
constexpr Millis kRebalanceWait{10000};
constexpr int kCommitAttempts = 5;
// Dead-letter headers (docs/operations.md §6, "Kafka bridge").
constexpr const char* kHeaderCode = "ringcast-error-code";
constexpr const char* kHeaderMessage = "ringcast-error-message";
constexpr const char* kHeaderTopic = "ringcast-source-topic";
constexpr const char* kHeaderPartition = "ringcast-source-partition";
constexpr const char* kHeaderOffset = "ringcast-source-offset";

std::string where(const rd_kafka_message_t* m) {
  std::string w = rd_kafka_topic_name(m->rkt);
  w += '[';
  w += std::to_string(m->partition);
  w += "]@";
  w += std::to_string(m->offset);
  return w;
}

// Sets each property, naming the key when librdkafka refuses it.
void set_all(rd_kafka_conf_t* conf, const Properties& props, const std::string& section) {
  char err[512];
  for (const auto& [name, value] : props) {
    if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      std::string m = section;
      m += '.';
      m += name;
      m += ": ";
      m += err;
      throw std::runtime_error(m);
    }
  }
}

std::string partitions_text(const rd_kafka_topic_partition_list_t* parts) {
  std::map<std::string, std::vector<int32_t>> by_topic;
  for (int i = 0; i < parts->cnt; ++i) {
    by_topic[parts->elems[i].topic].push_back(parts->elems[i].partition);
  }
  std::string out;
  for (auto& [topic, ps] : by_topic) {
    std::sort(ps.begin(), ps.end());
    if (!out.empty()) out += ' ';
    out += topic;
    out += '[';
    for (size_t i = 0; i < ps.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(ps[i]);
    }
    out += ']';
  }
  return out.empty() ? std::string("none") : out;
}

bool commit_gives_up(rd_kafka_resp_err_t e) {
  // The member's generation is gone (a rebalance): the partition's next owner reads from the last
  // commit, which is safe (at-least-once); retrying cannot succeed.
  return e == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS ||
         e == RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION || e == RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID ||
         e == RD_KAFKA_RESP_ERR__STATE || e == RD_KAFKA_RESP_ERR__NO_OFFSET ||
         e == RD_KAFKA_RESP_ERR__FATAL;
}

}  // namespace

Bridge::Bridge(const BridgeConfig& config, Counters& counters)
    : config_(config),
      counters_(counters),
      mapper_(config.mapping),
      http_(config.ringcast.url, config.ringcast.connect_timeout, config.ringcast.request_timeout),
      rng_(std::random_device{}()) {
  char err[512];
  // The consumer: the bridge's defaults, the operator's properties, then what its guarantees
  // rest on (config.cc refuses those keys in the tables).
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  set_all(conf, {{"auto.offset.reset", "earliest"}}, "kafka");
  set_all(conf, config_.kafka.properties, "kafka.properties");
  set_all(conf, config_.kafka.consumer_properties, "kafka.consumer_properties");
  {
    char reset[64];
    size_t len = sizeof reset;
    reset_earliest_ =
        rd_kafka_conf_get(conf, "auto.offset.reset", reset, &len) == RD_KAFKA_CONF_OK &&
        (std::strcmp(reset, "earliest") == 0 || std::strcmp(reset, "smallest") == 0 ||
         std::strcmp(reset, "beginning") == 0);
  }
  set_all(conf,
          {{"bootstrap.servers", config_.kafka.brokers},
           {"group.id", config_.kafka.group_id},
           {"client.id", config_.kafka.client_id},
           {"enable.auto.commit", "false"},
           {"enable.auto.offset.store", "false"},
           {"enable.partition.eof", "false"}},
          "kafka");
  rd_kafka_conf_set_opaque(conf, this);
  rd_kafka_conf_set_rebalance_cb(conf, &Bridge::rebalance_cb);
  rd_kafka_conf_set_log_cb(conf, &Bridge::log_cb);
  rd_kafka_conf_set_error_cb(conf, &Bridge::error_cb);
  consumer_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (!consumer_) {
    rd_kafka_conf_destroy(conf);
    throw std::runtime_error(std::string("kafka: cannot create the consumer: ") + err);
  }
  rd_kafka_poll_set_consumer(consumer_);

  // The dead-letter producer: a delivery report within dead_letter.timeout, else retried.
  rd_kafka_conf_t* pconf = rd_kafka_conf_new();
  set_all(pconf, {{"message.timeout.ms", std::to_string(config_.dead_letter.timeout.count())}},
          "dead_letter");
  set_all(pconf, config_.kafka.properties, "kafka.properties");
  set_all(pconf, config_.kafka.producer_properties, "kafka.producer_properties");
  set_all(pconf,
          {{"bootstrap.servers", config_.kafka.brokers}, {"client.id", config_.kafka.client_id}},
          "kafka");
  rd_kafka_conf_set_opaque(pconf, this);
  rd_kafka_conf_set_dr_msg_cb(pconf, &Bridge::dr_msg_cb);
  rd_kafka_conf_set_log_cb(pconf, &Bridge::log_cb);
  rd_kafka_conf_set_error_cb(pconf, &Bridge::error_cb);
  producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, err, sizeof err);
  if (!producer_) {
    rd_kafka_conf_destroy(pconf);
    rd_kafka_destroy(consumer_);
    throw std::runtime_error(std::string("kafka: cannot create the dead-letter producer: ") + err);
  }

  rd_kafka_topic_partition_list_t* topics =
      rd_kafka_topic_partition_list_new(static_cast<int>(config_.kafka.topics.size()));
  for (const auto& t : config_.kafka.topics) {
    rd_kafka_topic_partition_list_add(topics, t.c_str(), RD_KAFKA_PARTITION_UA);
  }
  rd_kafka_resp_err_t e = rd_kafka_subscribe(consumer_, topics);
  rd_kafka_topic_partition_list_destroy(topics);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_destroy(producer_);
    rd_kafka_destroy(consumer_);
    throw std::runtime_error(std::string("kafka.topics: cannot subscribe: ") + rd_kafka_err2str(e));
  }
  batch_.reserve(config_.ringcast.batch_max_events);
}

Bridge::~Bridge() {
  release_batch();
  if (consumer_) rd_kafka_destroy(consumer_);
  if (producer_) rd_kafka_destroy(producer_);
}

// -- librdkafka callbacks (on this thread: inside consumer_poll / poll / consumer_close) --

void Bridge::rebalance_cb(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t* parts, void* opaque) {
  auto* self = static_cast<Bridge*>(opaque);
  const bool cooperative = std::strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    self->on_assign(parts);
    if (cooperative) {
      if (rd_kafka_error_t* e = rd_kafka_incremental_assign(rk, parts)) {
        log::error(std::string("kafka: incremental assign failed: ") + rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
      }
    } else {
      rd_kafka_assign(rk, parts);
    }
  } else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
    self->on_revoke(parts, rd_kafka_assignment_lost(rk) != 0);
    if (cooperative) {
      if (rd_kafka_error_t* e = rd_kafka_incremental_unassign(rk, parts)) {
        log::error(std::string("kafka: incremental unassign failed: ") + rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
      }
    } else {
      rd_kafka_assign(rk, nullptr);
    }
  } else {
    log::error(std::string("kafka: rebalance failed: ") + rd_kafka_err2str(err));
    self->on_revoke(parts, true);
    rd_kafka_assign(rk, nullptr);
  }
}

void Bridge::on_assign(const rd_kafka_topic_partition_list_t* parts) {
  counters_.rebalances++;
  {
    std::lock_guard<std::mutex> lock(counters_.mu);
    for (int i = 0; i < parts->cnt; ++i) {
      TopicPartition tp{parts->elems[i].topic, parts->elems[i].partition};
      assigned_.insert(tp);
      counters_.partitions[tp] = PartitionGauge{};
    }
  }
  counters_.assigned.store(static_cast<int64_t>(assigned_.size()));
  refresh_committed_ = true;
  rebalancing_ = false;  // the rebalance reached this member
  rd_kafka_resume_partitions(consumer_, const_cast<rd_kafka_topic_partition_list_t*>(parts));
  log::info("kafka: assigned " + partitions_text(parts));
}

void Bridge::on_revoke(const rd_kafka_topic_partition_list_t* parts, bool lost) {
  counters_.rebalances++;
  std::set<TopicPartition> gone;
  if (parts) {
    for (int i = 0; i < parts->cnt; ++i)
      gone.emplace(parts->elems[i].topic, parts->elems[i].partition);
  } else {
    gone = assigned_;
  }
  // What was done on these partitions but not yet committed: committed now (the usual place,
  // before the partitions go), else left to the next owner to read again.
  std::set<TopicPartition> owed_here;
  for (const auto& tp : gone) {
    if (owed_.count(tp)) owed_here.insert(tp);
  }
  if (!owed_here.empty() && !lost) {
    static const std::atomic<int> kRunning{0};
    commit_owed(kRunning, &owed_here);
  }
  for (const auto& tp : owed_here) {
    auto it = owed_.find(tp);
    if (it != owed_.end()) {
      counters_.abandoned += it->second.records;
      owed_.erase(it);
    }
  }
  rebalancing_ = false;  // the rebalance reached this member
  {
    std::lock_guard<std::mutex> lock(counters_.mu);
    for (const auto& tp : gone) {
      assigned_.erase(tp);
      counters_.partitions.erase(tp);
    }
  }
  counters_.assigned.store(static_cast<int64_t>(assigned_.size()));
  // Records of these partitions that were collected but not sent: dropped, not committed; the
  // next owner reads them from the committed offset. (Revocations come only inside
  // consumer_poll, i.e. while collecting: a batch being sent is never revoked under it.)
  size_t dropped = 0;
  auto keep = batch_.begin();
  for (auto it = batch_.begin(); it != batch_.end(); ++it) {
    TopicPartition tp{rd_kafka_topic_name(it->msg->rkt), it->msg->partition};
    if (gone.count(tp)) {
      batch_bytes_ -= std::min(batch_bytes_, it->msg->len + it->msg->key_len);
      rd_kafka_message_destroy(it->msg);
      it->msg = nullptr;
      ++dropped;
    } else {
      if (keep != it) *keep = std::move(*it);
      ++keep;
    }
  }
  batch_.erase(keep, batch_.end());
  counters_.abandoned += dropped;
  counters_.in_flight.store(static_cast<int64_t>(batch_.size()));
  std::string m = lost ? "kafka: lost " : "kafka: revoked ";
  m += parts ? partitions_text(parts) : std::string("every partition");
  if (dropped) {
    m += " (";
    m += std::to_string(dropped);
    m += " records not yet sent are left to the next owner)";
  }
  log::info(m);
}

void Bridge::dr_msg_cb(rd_kafka_t*, const rd_kafka_message_t* msg, void* opaque) {
  auto* self = static_cast<Bridge*>(opaque);
  auto id = reinterpret_cast<uintptr_t>(msg->_private);
  auto it = self->reports_.find(id);
  if (it == self->reports_.end()) return;  // not awaited any more
  it->second.done = true;
  it->second.err = msg->err;
}

void Bridge::log_cb(const rd_kafka_t*, int level, const char* fac, const char* buf) {
  std::string m = "kafka: ";
  m += fac;
  m += ": ";
  m += buf;
  if (level <= 3) {
    log::error(m);
  } else if (level == 4) {
    log::warn(m);
  } else if (level <= 6) {
    log::info(m);
  } else {
    log::debug(m);
  }
}

void Bridge::error_cb(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
  auto* self = static_cast<Bridge*>(opaque);
  self->counters_.consume_errors++;
  auto e = static_cast<rd_kafka_resp_err_t>(err);
  if (e == RD_KAFKA_RESP_ERR__FATAL) {
    char why[512];
    rd_kafka_fatal_error(rk, why, sizeof why);
    log::error(std::string("kafka: fatal error: ") + why);
    self->fatal_.store(true);
    return;
  }
  log::warn(std::string("kafka: ") + rd_kafka_err2name(e) + ": " + reason);
}

// -- the loop --

StopLevel Bridge::stop_level(const std::atomic<int>& stop) const {
  return static_cast<StopLevel>(stop.load());
}

StopLevel Bridge::note_stop(const std::atomic<int>& stop) {
  const StopLevel s = stop_level(stop);
  if (s != StopLevel::kRun && !stop_noted_) {
    stop_noted_ = true;
    stop_seen_ = Clock::now();
    log::info("stopping: finishing the batch in hand (" + std::to_string(batch_.size()) +
              " records, shutdown_grace " +
              std::to_string(config_.ringcast.shutdown_grace.count()) +
              "ms), then committing and leaving the group");
  }
  return s;
}

int Bridge::run(const std::atomic<int>& stop) {
  log::info("consuming " + std::to_string(config_.kafka.topics.size()) + " topic(s) as group " +
            config_.kafka.group_id + " from " + config_.kafka.brokers + " into " +
            config_.ringcast.url.text);
  auto last_gauges = Clock::now() - std::chrono::hours(1);
  while (stop_level(stop) == StopLevel::kRun && !fatal_.load()) {
    if (rebalancing_) await_rebalance(stop);
    collect(stop);
    if (!batch_.empty()) {
      process(stop);
      commit(stop);
      release_batch();
    } else if (!owed_.empty() && !rebalancing_) {
      commit_owed(stop, nullptr);  // a commit that failed before, with no batch to carry it
    }
    if (refresh_committed_ || Clock::now() - last_gauges > std::chrono::seconds(1)) {
      refresh_partition_gauges();
      last_gauges = Clock::now();
    }
  }
  note_stop(stop);
  if (!batch_.empty()) {  // collected when the stop came
    process(stop);
    commit(stop);
    release_batch();
  }
  // Leaves the group: its partitions go to the other members at once, from what was committed.
  rd_kafka_resp_err_t e = rd_kafka_consumer_close(consumer_);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    log::warn(std::string("kafka: closing the consumer: ") + rd_kafka_err2str(e));
  }
  rd_kafka_flush(producer_, 1000);
  if (fatal_.load()) return 1;
  log::info("stopped: consumed " + std::to_string(counters_.consumed.load()) + ", acked " +
            std::to_string(counters_.acked.load()) + ", dead-lettered " +
            std::to_string(counters_.dead_lettered.load()) + ", committed " +
            std::to_string(counters_.committed.load()));
  return 0;
}

void Bridge::collect(const std::atomic<int>& stop) {
  const auto& rc = config_.ringcast;
  Clock::time_point close_at = Clock::time_point::max();
  while (batch_.size() < rc.batch_max_events && batch_bytes_ < rc.batch_max_bytes) {
    if (stop_level(stop) != StopLevel::kRun || fatal_.load()) return;
    Millis wait = kPollSlice;
    if (!batch_.empty()) {
      if (close_at == Clock::time_point::max()) close_at = Clock::now() + rc.batch_max_wait;
      auto left = std::chrono::duration_cast<Millis>(close_at - Clock::now());
      if (left <= Millis(0)) return;
      wait = std::min(wait, left);
    }
    rd_kafka_message_t* msg = rd_kafka_consumer_poll(consumer_, static_cast<int>(wait.count()));
    if (!msg) continue;
    if (msg->err) {
      if (msg->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        counters_.consume_errors++;
        std::string m = "kafka: ";
        m += rd_kafka_message_errstr(msg);
        if (msg->rkt) {
          m += " (";
          m += rd_kafka_topic_name(msg->rkt);
          m += ')';
        }
        log::warn(m);
      }
      rd_kafka_message_destroy(msg);
      continue;
    }
    take(msg);
  }
}

void Bridge::take(rd_kafka_message_t* msg) {
  counters_.consumed++;
  Item item;
  item.msg = msg;
  RecordView v;
  v.topic = rd_kafka_topic_name(msg->rkt);
  v.partition = msg->partition;
  v.offset = msg->offset;
  if (msg->key) v.key = std::string_view(static_cast<const char*>(msg->key), msg->key_len);
  if (msg->payload) {
    v.value = std::string_view(static_cast<const char*>(msg->payload), msg->len);
  }
  size_t header_bytes = 0;
  rd_kafka_headers_t* hdrs = nullptr;
  if (rd_kafka_message_headers(msg, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR && hdrs) {
    const char* name;
    const void* value;
    size_t size;
    for (size_t i = 0;
         rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      v.headers.emplace_back(name, value ? std::optional<std::string_view>(std::string_view(
                                               static_cast<const char*>(value), size))
                                         : std::nullopt);
      header_bytes += std::strlen(name) + size;
    }
  }
  if (auto bad = mapper_.map(v, item.ev)) {
    item.state = State::kDeadLetter;
    item.code = bad->code;
    item.message = std::move(bad->message);
  }
  batch_bytes_ += msg->len + msg->key_len + header_bytes;
  batch_.push_back(std::move(item));
  counters_.in_flight.store(static_cast<int64_t>(batch_.size()));
}

void Bridge::process(const std::atomic<int>& stop) {
  Millis backoff = config_.ringcast.retry_initial;
  for (uint32_t round = 0;; ++round) {
    const StopLevel s = note_stop(stop);
    // SIGTERM leaves shutdown_grace to finish the batch (one round at least); a second signal
    // leaves at once.
    if (s == StopLevel::kNow) break;
    if (s == StopLevel::kGraceful && round > 0 &&
        Clock::now() - stop_seen_ > config_.ringcast.shutdown_grace) {
      break;
    }
    send_pending();
    dead_letter(stop);
    size_t left = 0, pending = 0, dead = 0;
    for (const Item& it : batch_) {
      if (it.state == State::kPending) ++pending;
      if (it.state == State::kDeadLetter) ++dead;
    }
    left = pending + dead;
    if (left == 0) return;
    counters_.transient_retries++;
    const auto now = Clock::now();
    if (round == 0 || now - last_transient_log_ > std::chrono::seconds(10)) {
      last_transient_log_ = now;
      log::warn(std::to_string(pending) + " record(s) not taken by ringcast and " +
                std::to_string(dead) + " dead letter(s) not yet produced: sending again in " +
                std::to_string(backoff.count()) + "ms (round " + std::to_string(round + 1) + ")");
    }
    // Full jitter around the backoff, so that bridges restarted together do not retry in step.
    std::uniform_int_distribution<int64_t> jitter(backoff.count() / 2, backoff.count());
    if (!sleep_interruptible(Millis(jitter(rng_)), stop)) {
      // A second signal: leave now (the loop head abandons the rest).
      continue;
    }
    backoff = std::min(config_.ringcast.retry_max, backoff * 2);
  }
  size_t abandoned = 0;
  for (Item& it : batch_) {
    if (it.state == State::kPending || it.state == State::kDeadLetter) {
      it.state = State::kAbandoned;
      ++abandoned;
    }
  }
  counters_.abandoned += abandoned;
  log::warn("stopping with " + std::to_string(abandoned) +
            " record(s) not done: their offsets are not committed (read again at the next start, "
            "duplicates are absorbed by ringcast's idempotency)");
}

bool Bridge::sleep_interruptible(Millis d, const std::atomic<int>& stop) {
  const auto until = Clock::now() + d;
  const StopLevel at_start = stop_level(stop);
  while (Clock::now() < until) {
    if (stop_level(stop) != at_start) return false;
    // Serves the dead-letter producer's events meanwhile.
    rd_kafka_poll(producer_, 0);
    std::this_thread::sleep_for(
        std::min<Millis>(Millis(50), std::chrono::duration_cast<Millis>(until - Clock::now())));
  }
  return true;
}

void Bridge::send_pending() {
  std::vector<size_t> run;
  for (size_t i = 0; i < batch_.size(); ++i) {
    if (batch_[i].state != State::kPending) continue;
    if (needs_single_route(batch_[i].ev)) {
      // Batch order is kept: the run before it goes first (per-key order, SPEC R13.1).
      if (!run.empty()) send_bulk(run);
      run.clear();
      send_single(i);
    } else {
      run.push_back(i);
    }
  }
  if (!run.empty()) send_bulk(run);
}

void Bridge::send_bulk(const std::vector<size_t>& run) {
  size_t chunk = run.size();
  size_t at = 0;
  while (at < run.size()) {
    const size_t n = std::min(chunk, run.size() - at);
    bulk_body_.clear();
    for (size_t k = 0; k < n; ++k) append_bulk_line(batch_[run[at + k]].ev, bulk_body_);
    counters_.requests++;
    counters_.sent += n;
    HttpAnswer a =
        http_.post("/v1/events/bulk", "application/x-ndjson", bulk_body_, config_.ringcast.token);
    if (a.status == 0) counters_.request_failures++;
    BulkVerdict v = read_bulk_answer(a, n);
    switch (v.kind) {
      case BulkVerdict::Kind::kLines:
        for (size_t k = 0; k < n; ++k) apply(run[at + k], v.lines[k]);
        at += n;
        break;
      case BulkVerdict::Kind::kTooLarge:
        if (n == 1) {
          apply(run[at], LineResult{Outcome::kPermanent, 413, "too_large", v.reason});
          at += 1;
        } else {
          // The daemon's limits are below the bridge's batch: fewer lines per request.
          chunk = std::max<size_t>(1, n / 2);
          log::warn("ringcast refused a bulk request of " + std::to_string(n) + " lines (" +
                    v.reason + "): sending " + std::to_string(chunk) +
                    " at a time (lower ringcast.batch_max_events / batch_max_bytes)");
        }
        break;
      case BulkVerdict::Kind::kTransient:
        // Nothing of this request is known to be taken; the rest of the run waits for the next
        // round too (the daemon is unavailable or refusing: no point pressing on).
        if (Clock::now() - last_transient_log_ > std::chrono::seconds(10)) {
          // The bridge's own configuration is the likely cause of these: said as an error.
          if (a.status == 401 || a.status == 403) {
            log::error("ringcast refused the bridge's credentials (" + v.reason +
                       "): check ringcast.token / token_file; the records wait");
          } else if (a.status == 404 || a.status == 405) {
            log::error("ringcast has no bulk route at " + config_.ringcast.url.text + " (" +
                       v.reason + "): check ringcast.url; the records wait");
          } else {
            log::warn("ringcast did not take a bulk request of " + std::to_string(n) +
                      " lines: " + v.reason);
          }
        }
        return;
    }
  }
}

void Bridge::send_single(size_t i) {
  const EventInput& ev = batch_[i].ev;
  std::string path = "/v1/tenants/";
  path += ev.tenant;  // the tenant alphabet needs no escaping in a path segment (core rules)
  path += "/events";
  counters_.requests++;
  counters_.sent++;
  HttpAnswer a = http_.post(path, "application/json", single_body(ev), config_.ringcast.token);
  if (a.status == 0) counters_.request_failures++;
  apply(i, read_single_answer(a));
}

void Bridge::apply(size_t i, const LineResult& r) {
  Item& it = batch_[i];
  switch (r.outcome) {
    case Outcome::kAccepted:
      it.state = State::kDone;
      counters_.acked++;
      break;
    case Outcome::kDuplicate:
      it.state = State::kDone;
      counters_.acked++;
      counters_.duplicates++;
      break;
    case Outcome::kPermanent:
      it.state = State::kDeadLetter;
      it.code = r.code;
      it.message = r.message;
      break;
    case Outcome::kTransient:
      break;  // stays pending
  }
}

void Bridge::dead_letter(const std::atomic<int>& stop) {
  std::vector<std::pair<size_t, uint64_t>> sent;  // item, report id
  for (size_t i = 0; i < batch_.size(); ++i) {
    Item& it = batch_[i];
    if (it.state != State::kDeadLetter) continue;
    rd_kafka_headers_t* hdrs = nullptr;
    rd_kafka_headers_t* orig = nullptr;
    if (rd_kafka_message_headers(it.msg, &orig) == RD_KAFKA_RESP_ERR_NO_ERROR && orig) {
      hdrs = rd_kafka_headers_copy(orig);
    } else {
      hdrs = rd_kafka_headers_new(5);
    }
    for (const char* h :
         {kHeaderCode, kHeaderMessage, kHeaderTopic, kHeaderPartition, kHeaderOffset}) {
      rd_kafka_header_remove(hdrs, h);  // a record fed back from a dead-letter topic
    }
    const std::string partition = std::to_string(it.msg->partition);
    const std::string offset = std::to_string(it.msg->offset);
    const char* topic = rd_kafka_topic_name(it.msg->rkt);
    rd_kafka_header_add(hdrs, kHeaderCode, -1, it.code.data(),
                        static_cast<ssize_t>(it.code.size()));
    rd_kafka_header_add(hdrs, kHeaderMessage, -1, it.message.data(),
                        static_cast<ssize_t>(it.message.size()));
    rd_kafka_header_add(hdrs, kHeaderTopic, -1, topic, -1);
    rd_kafka_header_add(hdrs, kHeaderPartition, -1, partition.data(),
                        static_cast<ssize_t>(partition.size()));
    rd_kafka_header_add(hdrs, kHeaderOffset, -1, offset.data(),
                        static_cast<ssize_t>(offset.size()));
    const uint64_t id = next_dr_++;
    reports_[id] = DeliveryReport{};
    rd_kafka_resp_err_t e = rd_kafka_producev(
        producer_, RD_KAFKA_V_TOPIC(config_.dead_letter.topic.c_str()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(it.msg->key, it.msg->key_len),
        RD_KAFKA_V_VALUE(it.msg->payload, it.msg->len), RD_KAFKA_V_HEADERS(hdrs),
        RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(static_cast<uintptr_t>(id))), RD_KAFKA_V_END);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_headers_destroy(hdrs);  // not taken: still ours
      reports_.erase(id);
      counters_.dead_letter_failures++;
      log::warn("dead letter for " + where(it.msg) + " not queued: " + rd_kafka_err2str(e));
      continue;
    }
    sent.emplace_back(i, id);
  }
  if (sent.empty()) return;
  // Every report comes within message.timeout.ms (= dead_letter.timeout); a second signal cuts
  // the wait: what is still in the producer is purged and its report says so.
  const auto deadline = Clock::now() + config_.dead_letter.timeout + std::chrono::seconds(5);
  auto all_done = [&] {
    for (auto& [i, id] : sent) {
      if (!reports_[id].done) return false;
    }
    return true;
  };
  bool purged = false;
  Clock::time_point give_up = Clock::time_point::max();
  while (!all_done() && Clock::now() < give_up) {
    rd_kafka_poll(producer_, 50);
    if (!purged && (Clock::now() > deadline || stop_level(stop) == StopLevel::kNow)) {
      rd_kafka_purge(producer_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
      purged = true;
      give_up = Clock::now() + std::chrono::seconds(10);  // purged reports come at once
    }
  }
  size_t ok = 0;
  std::string first_reason;
  for (auto& [i, id] : sent) {
    Item& it = batch_[i];
    const DeliveryReport r = reports_[id];
    reports_.erase(id);  // a late report finds no entry and is ignored
    if (r.done && r.err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      it.state = State::kDone;
      counters_.dead_lettered++;
      if (first_reason.empty()) first_reason = where(it.msg) + ": " + it.code;
      ++ok;
    } else {
      counters_.dead_letter_failures++;
      log::warn("dead letter for " + where(it.msg) + " not delivered to " +
                config_.dead_letter.topic + ": " +
                (r.done ? rd_kafka_err2str(r.err) : "no delivery report") + " (produced again)");
    }
  }
  if (ok) {
    log::info("dead-lettered " + std::to_string(ok) + " record(s) to " + config_.dead_letter.topic +
              " (first: " + first_reason + ")");
  }
}

void Bridge::commit(const std::atomic<int>& stop) {
  // Per partition, the offset after the last record of the unbroken done run from the batch's
  // first record of that partition (records of one partition are in offset order in the batch).
  // They join what an earlier commit could not yet write (owed_).
  std::set<TopicPartition> broken;
  for (const Item& it : batch_) {
    TopicPartition tp{rd_kafka_topic_name(it.msg->rkt), it.msg->partition};
    if (broken.count(tp)) continue;
    if (it.state != State::kDone) {
      broken.insert(tp);
      continue;
    }
    if (!assigned_.count(tp)) continue;  // revoked meanwhile: the next owner's to read
    Owed& o = owed_[tp];
    o.next = std::max(o.next, it.msg->offset + 1);
    o.records++;
  }
  commit_owed(stop, /*only=*/nullptr);
}

bool Bridge::commit_owed(const std::atomic<int>& stop, const std::set<TopicPartition>* only) {
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(4);
  size_t records = 0;
  for (const auto& [tp, o] : owed_) {
    if (only && !only->count(tp)) continue;
    rd_kafka_topic_partition_list_add(list, tp.first.c_str(), tp.second)->offset = o.next;
    records += o.records;
  }
  if (list->cnt == 0) {
    rd_kafka_topic_partition_list_destroy(list);
    return true;
  }
  if (rd_kafka_resp_err_t e = rd_kafka_offsets_store(consumer_, list)) {
    log::debug(std::string("kafka: offsets_store: ") + rd_kafka_err2str(e));
  }
  // Inside a rebalance callback (only != nullptr) one attempt: the partitions are being revoked.
  const int attempts = only ? 1 : kCommitAttempts;
  Millis backoff = config_.ringcast.retry_initial;
  bool ok = false;
  for (int attempt = 1;; ++attempt) {
    rd_kafka_resp_err_t e = rd_kafka_commit(consumer_, list, /*async=*/0);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
      for (int i = 0; i < list->cnt; ++i) {
        if (list->elems[i].err) e = list->elems[i].err;
      }
    }
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
      ok = true;
      rebalancing_ = false;
      counters_.committed += records;
      std::lock_guard<std::mutex> lock(counters_.mu);
      for (int i = 0; i < list->cnt; ++i) {
        TopicPartition tp{list->elems[i].topic, list->elems[i].partition};
        owed_.erase(tp);
        auto g = counters_.partitions.find(tp);
        if (g != counters_.partitions.end()) g->second.committed = list->elems[i].offset;
      }
      break;
    }
    counters_.commit_failures++;
    if (e == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS) {
      // The group is rebalancing: the offsets stay owed and the loop stops taking records until
      // the rebalance is through (await_rebalance), so that no work is done twice for nothing.
      if (!rebalancing_) log::info("kafka: the group is rebalancing; the offset commit waits");
      rebalancing_ = true;
      break;
    }
    if (commit_gives_up(e) || attempt >= attempts || stop_level(stop) == StopLevel::kNow) {
      // Still owed: the next commit carries them (a revocation drops them; the partition's next
      // owner reads those records again and ringcast answers them as duplicates).
      log::warn(std::string("kafka: offset commit failed: ") + rd_kafka_err2str(e) +
                " (retried with the next commit)");
      break;
    }
    sleep_interruptible(backoff, stop);
    backoff = std::min(config_.ringcast.retry_max, backoff * 2);
  }
  rd_kafka_topic_partition_list_destroy(list);
  return ok;
}

void Bridge::await_rebalance(const std::atomic<int>& stop) {
  // Pause what is assigned (librdkafka drops what it had fetched for it) and serve the group until
  // the rebalance reaches this member (a callback), or the owed offsets commit after all (a
  // cooperative rebalance that leaves this member's partitions alone calls back nothing).
  rd_kafka_topic_partition_list_t* list =
      rd_kafka_topic_partition_list_new(static_cast<int>(assigned_.size()) + 1);
  for (const auto& tp : assigned_)
    rd_kafka_topic_partition_list_add(list, tp.first.c_str(), tp.second);
  rd_kafka_pause_partitions(consumer_, list);
  rd_kafka_topic_partition_list_destroy(list);
  const uint64_t seen = counters_.rebalances.load();
  const auto until = Clock::now() + kRebalanceWait;
  auto next_try = Clock::now() + Millis(500);
  while (rebalancing_ && counters_.rebalances.load() == seen && Clock::now() < until &&
         stop_level(stop) == StopLevel::kRun && !fatal_.load()) {
    rd_kafka_message_t* msg =
        rd_kafka_consumer_poll(consumer_, static_cast<int>(kPollSlice.count()));
    if (msg) {
      if (msg->err) {
        rd_kafka_message_destroy(msg);
      } else {
        take(msg);  // a partition that is not paused (assigned meanwhile): kept for the batch
      }
    }
    if (Clock::now() >= next_try) {
      commit_owed(stop, nullptr);
      next_try = Clock::now() + Millis(500);
    }
  }
  rebalancing_ = false;
  // Resume whatever is assigned now (an assignment made meanwhile was not paused; resuming it is
  // harmless).
  list = rd_kafka_topic_partition_list_new(static_cast<int>(assigned_.size()) + 1);
  for (const auto& tp : assigned_)
    rd_kafka_topic_partition_list_add(list, tp.first.c_str(), tp.second);
  rd_kafka_resume_partitions(consumer_, list);
  rd_kafka_topic_partition_list_destroy(list);
}

void Bridge::release_batch() {
  for (Item& it : batch_) {
    if (it.msg) rd_kafka_message_destroy(it.msg);
    it.msg = nullptr;
  }
  batch_.clear();
  batch_bytes_ = 0;
  counters_.in_flight.store(0);
}

void Bridge::refresh_partition_gauges() {
  if (assigned_.empty()) {
    refresh_committed_ = false;
    return;
  }
  if (refresh_committed_) {
    refresh_committed_ = false;
    rd_kafka_topic_partition_list_t* list =
        rd_kafka_topic_partition_list_new(static_cast<int>(assigned_.size()));
    for (const auto& tp : assigned_) {
      rd_kafka_topic_partition_list_add(list, tp.first.c_str(), tp.second);
    }
    if (rd_kafka_committed(consumer_, list, static_cast<int>(kCommittedTimeout.count())) ==
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      std::lock_guard<std::mutex> lock(counters_.mu);
      for (int i = 0; i < list->cnt; ++i) {
        auto g = counters_.partitions.find({list->elems[i].topic, list->elems[i].partition});
        if (g != counters_.partitions.end() && list->elems[i].offset >= 0) {
          g->second.committed = list->elems[i].offset;
        }
      }
    } else {
      refresh_committed_ = true;  // the next round asks again
    }
    rd_kafka_topic_partition_list_destroy(list);
  }
  std::lock_guard<std::mutex> lock(counters_.mu);
  for (const auto& tp : assigned_) {
    int64_t lo = -1, hi = -1;
    if (rd_kafka_get_watermark_offsets(consumer_, tp.first.c_str(), tp.second, &lo, &hi) ==
            RD_KAFKA_RESP_ERR_NO_ERROR &&
        hi >= 0) {
      auto g = counters_.partitions.find(tp);
      if (g != counters_.partitions.end()) {
        g->second.high = hi;
        g->second.start = reset_earliest_ ? lo : -1;
      }
    }
  }
}

}  // namespace ringcast::kafka_bridge
