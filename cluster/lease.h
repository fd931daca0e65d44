// Partition ownership by fenced leases (docs/cluster.md "Leases", research/scale-out.md design A):
// a LeaseManager runs one node's side of it on its own thread (its own net::Loop and Redis client,
// Redis Cluster or one server). Rendezvous hashing (core/rendezvous.h) over the live members
// (cluster/membership.h) says which partitions this node should own; for each of those it takes the
// lease {ns:p}:own = {node, epoch} with PEXPIRE lease_ttl, renews it every lease_ttl / 3, and hands
// it over when another live member should have it.
// Invariants:
//   - epochs: every take of a lease (by anyone, also by the node that held it before) INCRs
//     the non-expiring {ns:p}:epoch, so an epoch is never handed out twice and a later owner
//     always has a greater one; renewals keep the epoch. Writes are fenced on (node, epoch)
//     (cluster/fence.h);
//   - local deadline: a lease is valid here until (send time of the last acquire/renew that
//     succeeded) + lease_ttl - safety_margin. Redis starts the ttl when the command runs, which
//     is after it was sent, so this node stops acting on a lease before Redis can expire it
//     and before anyone else can take it: the SIGSTOP property. Past the deadline on_lose(lost)
//     fires at once, whatever a late reply says; valid() lets other threads check it per action;
//   - on_acquire(p, e) is followed by exactly one on_lose(p, e, reason) (released, lost,
//     fenced, or lost at shutdown); between them at most one on_release(p, e, done);
//   - graceful hand-over: on_release asks the user to finish its work on p; the lease is kept
//     and renewed until done() is called (from any thread), then on_lose(released) fires and
//     the lease is deleted if it still holds (node, epoch); the next owner takes it at once;
//   - a partition that should be ours but whose lease someone else holds is retried at every
//     heartbeat (the holder releases it, or it expires after lease_ttl);
//   - nothing on the manager's thread blocks; every Redis command has a deadline; Redis
//     failures are counted and retried, never thrown.
// Threading: callbacks run on the manager's thread and must not block: post them onward (a
// shard's mailbox). status(), owned(), valid() and counters() may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "core/time.h"
#include "core/types.h"
#include "redis/tls_options.h"

namespace ringcast::cluster {

enum class LoseReason : uint8_t {
  kReleased,  // handed over (rebalance or stop) after done()
  kLost,      // not renewed before the local deadline (Redis slow or unreachable, a pause)
  kFenced,    // a renewal found the lease gone to another node or epoch
};
const char* lose_reason_name(LoseReason r);

struct LeaseOptions {
  std::vector<std::string> servers{"127.0.0.1:6379"};  // one server, or the cluster's seeds
  bool cluster = false;
  std::string username;
  std::string password;
  redis::TlsOptions tls;  // TLS to Redis (SPEC R14), as the store's
  std::string ns = "rc";  // key namespace (cluster/keys.h)
  std::string node_id;    // required; stable per node, unique in the cluster
  Duration lease_ttl = seconds(3);
  // Local deadline = renewal sent + lease_ttl - safety_margin. Covers clock-rate differences
  // between this host and the Redis primary and the time a user takes between valid() and
  // acting. Must be less than lease_ttl / 3 (so two renewals go out before the deadline).
  Duration safety_margin = milliseconds(300);
  Duration heartbeat_interval = seconds(1);  // also how often ownership is re-checked
  Duration member_ttl = seconds(3);
  Duration forget_after = minutes(1);
  Duration command_timeout = seconds(1);
  // The URL of this node's API, published with the heartbeat ({ns}:addr) so that other nodes
  // can forward calls for the partitions this node owns (api/forward.h); empty: none yet
  // (set_advertise_url() once the listener is bound).
  std::string advertise_url;
};

// Who holds a partition's lease (find_owner()).
struct OwnerInfo {
  std::string node_id;  // empty: nobody holds the lease now
  std::string url;      // the holder's published API address; empty: none
};

struct LeaseCallbacks {
  std::function<void(Partition, uint64_t epoch)> on_acquire;
  // Finish in-flight work on the partition, then call done() (any thread, once).
  std::function<void(Partition, uint64_t epoch, std::function<void()> done)> on_release;
  std::function<void(Partition, uint64_t epoch, LoseReason)> on_lose;
};

struct OwnedPartition {
  Partition partition = 0;
  uint64_t epoch = 0;
  friend bool operator==(const OwnedPartition&, const OwnedPartition&) = default;
};

// For `ringcast cluster status`: this node's view.
struct ClusterStatus {
  std::string node_id;
  std::vector<std::string> members;  // live, sorted (this node included)
  // Rendezvous over `members`: how many partitions each member should own (same order).
  std::vector<uint32_t> assigned;
  std::vector<OwnedPartition> owned;  // held by this node now, ascending
  uint32_t releasing = 0;             // on_release called, done() not yet
  bool synced = false;                // a heartbeat has been answered
};

struct LeaseCounters {
  std::atomic<uint64_t> acquired{0};
  std::atomic<uint64_t> released{0};
  std::atomic<uint64_t> lost{0};
  std::atomic<uint64_t> fenced{0};
  std::atomic<uint64_t> acquire_refused{0};  // held by another node
  std::atomic<uint64_t> renewals{0};         // answered OK
  std::atomic<uint64_t> redis_errors{0};     // no reply or an unexpected reply
};

class LeaseManager {
 public:
  // Checks the options (kInvalidArgument naming the field) and starts the thread, which
  // begins beating and acquiring at once.
  static Result<std::unique_ptr<LeaseManager>> start(LeaseOptions options,
                                                     LeaseCallbacks callbacks);
  // Without a stop() before: a crash as far as Redis sees it (no release, no leave; the
  // leases expire after lease_ttl); on_lose(lost) still fires here for every held lease.
  ~LeaseManager();
  LeaseManager(const LeaseManager&) = delete;
  LeaseManager& operator=(const LeaseManager&) = delete;

  // Graceful stop: leaves the membership, asks on_release for every held partition, releases
  // each once done() comes; after `grace` what is left is abandoned (on_lose(lost)). Blocks
  // the caller (not the manager's thread) until finished.
  void stop(Duration grace);

  ClusterStatus status() const;
  std::vector<OwnedPartition> owned() const;
  // True while this node holds `p` at `epoch` and now < its local deadline: check before each
  // action on the partition (`now`: CLOCK_MONOTONIC, e.g. a shard loop's now()).
  bool valid(Partition p, uint64_t epoch, MonoTime now) const;
  const LeaseCounters& counters() const { return counters_; }
  const LeaseOptions& options() const { return options_; }

  // Publishes `url` as this node's API address from the next heartbeat on (at once: a beat is
  // sent). Any thread.
  void set_advertise_url(std::string url);

  // Who holds p's lease in Redis now (HGET {ns:p}:own node on the manager's client) and the
  // holder's address (from the last heartbeat's view, else HGET {ns}:addr). The lease holder,
  // not the rendezvous assignment: it is the node that serves p now, whatever this node's view
  // of the members. `done` runs exactly once, on the manager's thread (or on the caller's,
  // with an error, when the manager is stopped); it must not block. Any thread.
  void find_owner(Partition p, std::function<void(Result<OwnerInfo>)> done);

  // Test hook, SIGSTOP-like for the network: while paused the manager sends nothing (no
  // heartbeat, renewal, acquire, release) but its timers run, so local deadlines pass.
  void pause_io(bool paused);

  struct Impl;

 private:
  LeaseManager(LeaseOptions options, LeaseCallbacks callbacks);
  friend struct Impl;
  void publish(Partition p, uint64_t epoch, MonoTime valid_until);

  LeaseOptions options_;
  LeaseCallbacks callbacks_;
  LeaseCounters counters_;
  // valid(): per partition, the epoch held (0: none) and the local deadline in ns.
  std::array<std::atomic<uint64_t>, kPartitions> epochs_{};
  std::array<std::atomic<int64_t>, kPartitions> valid_until_ns_{};
  mutable std::mutex status_mu_;
  ClusterStatus status_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

}  // namespace ringcast::cluster
