#include "cluster/status_json.h"

#include <atomic>
#include <cstdint>

#include "net/json_writer.h"

namespace ringcast::cluster {

std::string render_cluster_status_json(const ClusterStatus& s, const LeaseCounters& c,
                                       const std::vector<std::string>& redis_nodes) {
  net::JsonWriter w;
  w.begin_object();
  w.field("node_id", s.node_id);
  w.field("synced", s.synced);
  w.key("members").begin_array();
  for (size_t i = 0; i < s.members.size(); ++i) {
    const uint64_t assigned = i < s.assigned.size() ? s.assigned[i] : 0;
    w.begin_object().field("node_id", s.members[i]).field("assigned", assigned).end_object();
  }
  w.end_array();
  w.key("owned").begin_array();
  for (const OwnedPartition& o : s.owned) {
    w.begin_object()
        .field("partition", static_cast<uint64_t>(o.partition))
        .field("epoch", o.epoch)
        .end_object();
  }
  w.end_array();
  w.field("owned_count", static_cast<uint64_t>(s.owned.size()));
  w.field("releasing", static_cast<uint64_t>(s.releasing));
  w.key("redis_nodes").begin_array();
  for (const std::string& n : redis_nodes) w.value(n);
  w.end_array();
  auto load = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  w.key("counters").begin_object();
  w.field("acquired", load(c.acquired));
  w.field("released", load(c.released));
  w.field("lost", load(c.lost));
  w.field("fenced", load(c.fenced));
  w.field("acquire_refused", load(c.acquire_refused));
  w.field("renewals", load(c.renewals));
  w.field("redis_errors", load(c.redis_errors));
  w.end_object();
  w.end_object();
  return w.take();
}

}  // namespace ringcast::cluster
