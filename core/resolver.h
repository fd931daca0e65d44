// Name resolution as the core sees it: a caller-owned operation, completed later on the loop
// thread. net/ implements it with c-ares; tests and the simulation use fakes.
#pragma once

#include <string>
#include <vector>

#include "core/ip_address.h"
#include "core/result.h"
#include "core/time.h"

namespace ringcast {

class ResolveOp {
 public:
  ResolveOp() = default;
  ResolveOp(const ResolveOp&) = delete;
  ResolveOp& operator=(const ResolveOp&) = delete;
  virtual ~ResolveOp() = default;

  std::string host;
  // Filled before on_complete(): the addresses (v4 and v6), or an error (dns_failed).
  std::vector<IpAddress> addresses;
  Duration ttl{0};
  bool failed = false;

  virtual void on_complete() = 0;
};

class Resolver {
 public:
  virtual ~Resolver() = default;
  // Starts a lookup; `op` must stay alive until on_complete() runs on the loop thread.
  virtual void resolve(ResolveOp* op) = 0;
  // Withdraws a lookup that has not completed. True: on_complete() will not run and the op may
  // be freed. False (the default, for resolvers that cannot cancel): it still completes later.
  virtual bool cancel(ResolveOp* op) {
    (void)op;
    return false;
  }
};

}  // namespace ringcast
