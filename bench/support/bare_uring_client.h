// The floor of the transport A/B (bench/net_transport.cc): the smallest HTTP/1.1 client that
// does on the wire what a webhook sender must do (a 1 KB JSON POST signed afresh for every
// request, the headers ringcast sends, keep-alive connections), written straight against
// liburing with nothing around it: no pool, no timers, no URL or DNS, no general HTTP parser.
// What ringcast costs above it is the transport's own; what it costs itself is the kernel's
// and the signature's. Plain HTTP to 127.0.0.1 only (it does no TLS).
#pragma once

#include <cstdint>

#include "bench/support/loopback_peers.h"

namespace ringcast::bench {

// `conns` blocking-connected TCP connections (TCP_NODELAY) to 127.0.0.1:`port`, each with one
// request always in flight, for `seconds`, on one io_uring driven by the calling thread, which
// is pinned to `cpu`. The figures cover the timed window only; syscalls_per_req counts the
// io_uring_enter calls (one per loop turn). Afterwards the requests in flight are drained and
// every socket and the ring are closed. A failure (an error completion, a malformed answer) is
// reported on stderr and ends the run; within the timed window it leaves the result all zeros.
struct BareRun {
  int conns = 64;
  int seconds = 3;
  int cpu = 0;
  uint16_t port = 0;
};
PeerResult run_bare(const BareRun& b);

}  // namespace ringcast::bench
