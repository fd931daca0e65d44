// Internal to the shard's files (engine/shard.cc and engine/shard_*.cc), not part of
// engine/shard.h's interface: the pooled send operation (Shard::SendSlot), the recovery visitor,
// and the errors several parts answer with (in ringcast::engine::shard_detail).
#pragma once

#include <memory>

#include "core/result.h"
#include "core/store.h"
#include "core/transport.h"
#include "core/types.h"
#include "engine/shard.h"

namespace ringcast::engine {

namespace shard_detail {

inline Error unknown_tenant() {
  return make_error(Errc::kNotFound, "unknown tenant: create an endpoint first", "tenant",
                    "unknown_tenant");
}
inline Error unknown_endpoint() {
  return make_error(Errc::kNotFound, "no such endpoint for this tenant", "endpoint",
                    "unknown_endpoint");
}
inline Error shutting_down() {
  return make_error(Errc::kUnavailable, "the engine is shutting down", nullptr, "shutting_down");
}

}  // namespace shard_detail

using shard_detail::shutting_down;
using shard_detail::unknown_endpoint;
using shard_detail::unknown_tenant;

// A pooled, pinned send operation (STYLE 4): one per attempt on the wire.
class Shard::SendSlot final : public SendOp {
 public:
  explicit SendSlot(Shard* shard) : shard_(shard) {}
  void on_complete() override { shard_->on_send_complete(this); }
  SendCommand cmd{};
  uint64_t epoch = 0;                  // cluster mode: the partition's epoch when it was taken
  std::shared_ptr<const Event> event;  // owns request.body while the request is out
  void release() {                     // the request is done: let go of its event
    request.body = {};
    event.reset();
  }

 private:
  Shard* shard_;
};

class Shard::Recovery final : public RecoveryVisitor {
 public:
  Recovery(Shard& s, WallTime now) : s_(s), now_(now) {}
  void on_endpoint(const Endpoint& e) override {
    s_.known_tenants_[e.tenant] = true;
    if (!s_.scheduler_->restore_endpoint(e).ok()) ++s_.missing_policies_[e.policy];
  }
  void on_tenant(const Tenant& t) override {
    s_.scheduler_->restore_tenant(t);
    s_.known_tenants_[t.name] = true;
  }
  void on_delivery(const Delivery& d) override { s_.scheduler_->restore_delivery(d, now_); }

 private:
  Shard& s_;
  WallTime now_;
};

}  // namespace ringcast::engine
