// Heartbeat membership of a ringcast cluster (docs/cluster.md, research/scale-out.md design A):
// every node writes its id into the ZSET {ns}:members with score = its wall clock in ms, every
// heartbeat_interval, and counts as live every member whose last beat is younger than member_ttl;
// members silent for forget_after are pruned. One script per beat does all three (ZADD, ZREM of the
// silent, ZRANGEBYSCORE) and returns the live list. The same script publishes the node's API
// address (advertise_url) in the hash {ns}:addr, prunes the addresses of pruned members, and
// returns the live members' addresses (for forwarding API calls to a partition's owner,
// api/forward.h).
// Invariants:
//   - runs on one net::Loop thread (the caller's); nothing blocks; every command has a deadline;
//   - the live list is sorted, without duplicates, and always contains this node while it runs
//     (its own beats failing does not make it think itself gone);
//   - a failed beat keeps the last answered view (no reply is not news about the others);
//   - membership decides who *should* own a partition, never who may write: a wrong view
//     (clock skew beyond member_ttl, a partition) costs liveness only; safety is the lease and
//     the fence (cluster/lease.h, cluster/fence.h).
// The wall clock read is the loop's (loop.wall_now(), once per turn): clocks of the nodes must
// agree to well within member_ttl (NTP), or live nodes look dead or dead ones live for a while.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/time.h"
#include "net/loop.h"
#include "redis/client.h"
#include "redis/script.h"

namespace ringcast::cluster {

struct MembershipOptions {
  std::string ns = "rc";
  std::string node_id;        // stable per node
  std::string advertise_url;  // published in {ns}:addr with every beat; empty: none (yet)
  Duration heartbeat_interval = seconds(1);
  Duration member_ttl = seconds(3);    // live: last beat younger than this
  Duration forget_after = minutes(1);  // ZREMRANGEBYSCORE below now - forget_after
  Duration command_timeout = seconds(1);
};

struct MembershipStats {
  uint64_t beats = 0;          // answered
  uint64_t beat_failures = 0;  // no reply or an error reply
  uint64_t changes = 0;        // live list changed
};

class Membership {
 public:
  // Called on the loop thread after every answered beat; `changed`: the live list differs
  // from the previous one.
  using OnBeat = std::function<void(const std::vector<std::string>& live, bool changed)>;

  // `loop` and `client` must outlive the membership; nothing is sent before start().
  Membership(net::Loop& loop, redis::Client& client, MembershipOptions options, OnBeat on_beat);
  ~Membership();  // disarms its timer (destroy the client first: its callbacks land here)
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  void start();  // beats now, then every heartbeat_interval
  // Stops beating and removes this node (and its address) from the set (others see it gone at
  // their next beat instead of after member_ttl); `done(ok)` when answered or failed.
  void leave(std::function<void(bool ok)> done);
  void stop();  // stops beating; removes nothing (a crash, or the end after leave())
  // Test hook: while paused no beat is sent (the node looks dead to the others).
  void set_paused(bool paused);
  void beat_now();  // an extra beat at once (after a pause)
  // From the next beat on, publish this address (the API's bound port is known only after the
  // membership started).
  void set_advertise_url(std::string url) { options_.advertise_url = std::move(url); }

  const std::vector<std::string>& live() const { return live_; }
  // The live members' published addresses as of the last answered beat (members without one
  // are absent).
  const std::map<std::string, std::string>& addresses() const { return addresses_; }
  bool synced() const { return stats_.beats > 0; }  // at least one beat answered
  const MembershipStats& stats() const { return stats_; }
  const MembershipOptions& options() const { return options_; }

 private:
  void beat();
  void on_reply(Result<redis::Reply> r);

  net::Loop& loop_;
  redis::Client& client_;
  MembershipOptions options_;
  OnBeat on_beat_;
  redis::Script script_;
  redis::Script leave_script_;
  std::unique_ptr<net::Timer> timer_;
  std::vector<std::string> live_;
  std::map<std::string, std::string> addresses_;
  MembershipStats stats_;
  std::string key_;
  std::string addr_key_;
  bool running_ = false;
  bool paused_ = false;
  bool in_flight_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // callbacks after destruction
};

}  // namespace ringcast::cluster
