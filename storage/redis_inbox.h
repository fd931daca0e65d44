// RedisInbox: core's Inbox on Redis (cluster mode; docs/cluster.md "Intake on every
// node"). With T = "{<ns>:<p>}:" (the partition's hash tag, the keyspace of RedisStore):
//   T in   stream  the inbox: one entry per queued event, fields t (tenant), i (event id),
//                  y (type), p (payload), h (be64 payload hash); the entry id's milliseconds
//                  are the time it was accepted (Redis's clock)
//   T ik   hash    tenant "\0" event id -> be64(payload hash): the ids queued in T in
//   {<ns>}:ring set  the doorbell: partitions whose inbox got entries since their owner last
//                    took the ring (SADD after a push's script answered; an owner's script
//                    SREMs its own partitions and answers them, before it reads them)
// Push. One script per partition, pipelined: for each event, in order, T key (RedisStore's
// idempotency hash) answers "stored" with its record, else T ik answers "already queued" with
// the queued hash, else T tn without the tenant answers "unknown tenant", else XADD + HSET.
// Then, with wait_replicas > 0, one WAIT per primary on the connection that carried its
// scripts, counted only if no command was redirected meanwhile (RedisStore's rule). Every
// answer but a refusal waits for that, the repeats too (the first push may not be replicated:
// a producer retries exactly when it got no answer). A push that cannot be confirmed answers
// kUnavailable ("store_unavailable") for each of its events; retrying is safe (idempotent).
// Read: XRANGE per partition after a cursor. Ack: one script, XDEL of the entries and HDEL
// of their keys.
// Threads: its own loop thread and Redis client (the lease manager's pattern); callers on any
// thread, answers posted through their Poster. The destructor fails what is outstanding.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/inbox.h"
#include "core/time.h"
#include "redis/tls_options.h"

namespace ringcast::storage {

struct RedisInboxOptions {
  std::vector<std::string> servers;  // as RedisStoreOptions
  bool cluster = false;
  std::string username;  // a Redis ACL user; empty: AUTH with the password alone
  std::string password;
  redis::TlsOptions tls;  // as RedisStoreOptions (SPEC R14)
  std::string ns = "rc";
  Duration command_timeout = seconds(2);
  uint32_t wait_replicas = 0;
  Duration wait_timeout = milliseconds(50);
};

class RedisInbox final : public Inbox {
 public:
  static Result<std::unique_ptr<RedisInbox>> open(RedisInboxOptions options);
  ~RedisInbox() override;
  RedisInbox(const RedisInbox&) = delete;
  RedisInbox& operator=(const RedisInbox&) = delete;

  void push(std::vector<InboxPush> events, Poster& on, PushDone done) override;
  void read(std::vector<std::pair<Partition, std::string>> after, size_t max_each, Poster& on,
            ReadDone done) override;
  void ack(Partition p, std::vector<std::string> ids, std::vector<std::string> key_fields) override;
  void take_rung(std::vector<Partition> mine, Poster& on, RungDone done) override;

  struct Impl;

 private:
  RedisInbox() = default;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

}  // namespace ringcast::storage
