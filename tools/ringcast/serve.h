// `ringcast serve`: the daemon — the composition root that wires the store, the engine's
// shards, the transport and the HTTP API from one Config.
#pragma once

#include "engine/config.h"

namespace ringcast {

// Runs until SIGTERM/SIGINT; returns the process exit code (0 after a graceful stop).
int run_serve(const Config& cfg);

}  // namespace ringcast
