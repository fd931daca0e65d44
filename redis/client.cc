#include "redis/client.h"

#include <cstring>

#include "net/loop.h"

namespace ringcast::redis {

bool may_have_executed(const Error& e) {
  const char* r = e.reason;
  if (r == nullptr) return true;  // unknown: assume the worst
  for (const char* unsent :
       {kQueueFull, kClosed, kTimeoutUnsent, kNoRoute, kBadCommand, kTooManyRedirects}) {
    if (std::strcmp(r, unsent) == 0) return false;
  }
  return true;
}

MonoTime Client::deadline_for(const CommandOptions& options) {
  if (options.deadline != MonoTime()) return options.deadline;
  net::Loop& l = loop();
  if (!l.in_turn()) l.refresh_now();  // called from set-up code: do not start from a stale turn
  const Duration t = options.timeout > Duration::zero() ? options.timeout : default_timeout();
  return l.now() + t;
}

}  // namespace ringcast::redis
