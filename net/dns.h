// Asynchronous DNS with c-ares driven by the io_uring loop (SPEC R6 `dns_failed`): its sockets are
// watched with loop polls, its timeouts with a loop timer. Answers are cached per host for
// their TTL (capped); a lookup that takes longer than the deadline fails (dns_failed).
// Invariant: on_complete() always runs on the loop thread from a loop turn, never inside
// resolve(), exactly once per resolve(), and no later than `deadline` after it.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/resolver.h"
#include "net/loop.h"

struct ares_addrinfo;

namespace ringcast::net {

struct DnsOptions {
  Duration deadline = seconds(5);    // → dns_failed (SPEC R6)
  Duration ttl_max = minutes(5);     // cache cap, whatever the record says
  Duration ttl_min = seconds(0);     // 0: a TTL-0 answer is not cached
  size_t cache_entries_max = 10000;  // bounded (STYLE 6)
  // c-ares per-try timeout and tries (the deadline above still bounds the whole lookup).
  int try_timeout_ms = 2000;
  int tries = 2;
  // Overrides /etc/resolv.conf, e.g. "127.0.0.1:5353" (tests); empty: the system's.
  std::string servers;
  // c-ares lookup order: "fb" = hosts file, then DNS (the default); "f" = hosts file only.
  std::string lookups;
};

struct DnsStats {
  uint64_t lookups = 0;
  uint64_t cache_hits = 0;
  uint64_t queries = 0;  // sent to c-ares (coalesced lookups share one)
  uint64_t failures = 0;
  uint64_t deadline_expired = 0;
};

class CaresResolver final : public Resolver {
 public:
  static Result<std::unique_ptr<CaresResolver>> create(Loop& loop, const DnsOptions& options = {});
  ~CaresResolver() override;

  void resolve(ResolveOp* op) override;
  bool cancel(ResolveOp* op) override;
  const DnsStats& stats() const { return stats_; }
  void clear_cache() { cache_.clear(); }

 private:
  struct Query;
  struct Watch;
  class AresTimer;
  class DeferredDone;
  struct CacheEntry {
    std::vector<IpAddress> addresses;
    MonoTime expires_at;
    Duration ttl{0};
  };

  CaresResolver(Loop& loop, const DnsOptions& options);
  Result<void> init();
  static void on_sock_state(void* data, int fd, int readable, int writable);
  static void on_addrinfo(void* arg, int status, int timeouts, ::ares_addrinfo* res);
  void watch(int fd, bool readable, bool writable);
  void rearm_poll(Watch* w);
  void on_poll(Watch* w, int res);
  void update_timer();
  void on_ares_timer();
  void finish(Query* q, bool failed);
  void deliver(ResolveOp* op);
  void flush_done();

  Loop& loop_;
  DnsOptions options_;
  void* channel_ = nullptr;  // ares_channel
  std::unordered_map<int, std::unique_ptr<Watch>> watches_;
  std::vector<std::unique_ptr<Watch>> dead_watches_;  // polls being cancelled
  std::unordered_map<std::string, Query*> pending_;   // host → query (coalescing)
  std::unordered_map<std::string, CacheEntry> cache_;
  std::unique_ptr<AresTimer> ares_timer_;
  std::unique_ptr<DeferredDone> done_task_;
  std::vector<ResolveOp*> done_;  // completions waiting for the next turn
  DnsStats stats_;
  bool destroying_ = false;
};

}  // namespace ringcast::net
