// `ringcast serve`: the daemon — the signals and what it prints, around one node (node/node.h:
// the store, the engine's shards, the notifier, the intake, the HTTP API from one Config).
#pragma once

#include "engine/config.h"
#include "log/log.h"

namespace ringcast {

// The exit code after the store failed for good (a failed fsync of the data dir): EX_TEMPFAIL
// of sysexits.h, "try again later" — a supervisor restarts the daemon, and recovery reads what
// is really on disk.
inline constexpr int kExitStoreFailed = 75;

// The daemon's log from [log] (docs/operations.md §5 "Logs"): async, so that no shard waits for
// stderr; main() configures it before anything is logged.
log::Options log_options(const Config& cfg);

// Runs until SIGTERM/SIGINT (or the store fails); returns the process exit code (0 after a
// graceful stop).
int run_serve(const Config& cfg);

}  // namespace ringcast
