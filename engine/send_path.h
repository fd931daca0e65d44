// The shard's send path (SPEC R12.2: prepared in the turn, on the wire after its commit): each
// request from its event and endpoint (R11.3, R12.11), each result back to the scheduler with its
// metrics (R2.3, R12.8). Invariant: a send goes out only once its batch is durable and its
// partition sendable at the epoch it was leased at. Shard thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/scheduler.h"
#include "core/time.h"
#include "core/transport.h"
#include "core/types.h"
#include "engine/intake_part.h"
#include "engine/shard_core.h"
#include "trace/span.h"

namespace ringcast::engine {

class SendPath {
 public:
  SendPath(ShardCore& core, ShardIntake& intake) : core_(core), intake_(intake) {}
  SendPath(const SendPath&) = delete;
  SendPath& operator=(const SendPath&) = delete;

  // A due send of this turn: its request is built (the payload from the cache, this turn's
  // intake or the store), to go on the wire after the commit.
  void prepare_send(const SendCommand& cmd);
  // Sends prepared in a turn whose batch was not written go back unsent (no attempt spent).
  void withhold_sends();
  // After the turn's commit: its prepared sends go on the wire, or, with a store that confirms
  // later (Redis), wait until its batch is durable.
  void send_turn(MonoTime mono);
  void release_held_sends();
  void refresh_gauges();

  // A written batch ended delivery `d` (TurnBatch::Listener, through Shard): its outcome
  // counters and its UNKNOWN clock.
  void delivery_ended(const Delivery& d, WallTime now);
  // The delivery is pending again (a resend): its UNKNOWN clock is gone.
  void drop_unknown(DeliveryId id);
  // The partitions left this shard (the hand-over): their UNKNOWN clocks are gone.
  void forget(const PartitionSet& ps);

  uint32_t in_flight() const { return in_flight_; }
  uint32_t loads_in_flight() const { return loads_in_flight_; }
  bool holding() const { return !held_sends_.empty(); }

 private:
  // A pooled, pinned send operation (STYLE 4): one per attempt on the wire.
  class Slot final : public SendOp {
   public:
    explicit Slot(SendPath* path) : path_(path) {}
    void on_complete() override { path_->on_send_complete(this); }
    SendCommand cmd{};
    uint64_t epoch = 0;                  // cluster mode: the partition's epoch when it was taken
    std::shared_ptr<const Event> event;  // owns request.body while the request is out
    void release() {                     // the request is done: let go of its event
      request.body = {};
      event.reset();
    }

   private:
    SendPath* path_;
  };

  // The rest of prepare_send once the event is known (from the cache, this turn, or the store).
  void finish_prepare(Slot* slot, std::shared_ptr<const Event> ev);
  void on_send_complete(Slot* slot);
  // Tracing (docs/tracing.md; only with core_.options.tracer): the span of an attempt, and of a
  // delivery from its creation to its end, in its event's trace (core/trace_context.h: the ids
  // are derived, nothing per delivery is kept beyond the end's turn).
  void trace_attempt(const Slot& slot, const ResultReport& report, WallTime now);
  void trace_delivery(const Delivery& d, WallTime now);
  void emit_delivery_span(const Delivery& d, const TraceContext& tc, WallTime now);
  // A prepared send whose batch is durable goes on the wire, or, when its partition is not
  // sendable here at the epoch it was leased at (handed over, lost, its ownership past its
  // deadline) or that batch was fenced, comes back unsent: no attempt spent, the scheduler
  // releases the lease (SPEC R2.3).
  void send_now(Slot* slot, MonoTime mono);

  ShardCore& core_;
  ShardIntake& intake_;  // this turn's events (turn_event)
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> free_slots_;
  uint32_t in_flight_ = 0;
  std::vector<Slot*> to_send_;  // prepared this turn, sent after the commit
  // Store::durable_on_write() false: prepared sends waiting for their batch (seq) to be durable.
  struct HeldSend {
    uint64_t seq;
    Slot* slot;
  };
  std::deque<HeldSend> held_sends_;
  // Events read back from the store this turn (one event fanned out to many endpoints).
  std::unordered_map<EventSeq, std::shared_ptr<const Event>> turn_loaded_;
  uint32_t loads_in_flight_ = 0;  // payload loads outstanding (their slots wait)
  // Deliveries whose latest attempt was UNKNOWN: when that UNKNOWN streak began (R12.8).
  std::unordered_map<DeliveryId, WallTime> unknown_since_;
  // Tracing: the trace of each delivery an attempt ended (and whether it is sampled), until its
  // written batch reports the end (delivery_ended); bounded by kMaxEndedTraces.
  static constexpr size_t kMaxEndedTraces = 1 << 16;
  std::unordered_map<DeliveryId, std::pair<TraceContext, bool>> ended_traces_;
  // Event reads for the span of a delivery that ended without an attempt after its event left
  // the cache; beyond the bound the span is dropped (counted by the tracer).
  static constexpr uint32_t kMaxTraceLoads = 64;
  uint32_t trace_loads_ = 0;
};

}  // namespace ringcast::engine
