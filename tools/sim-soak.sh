#!/usr/bin/env bash
# The simulation soak, outside CI (docs/durability.md "The seeded simulation"): SEEDS seeds
# (default 10,000) of the real shard under simulation (tests/sim/shard_parts_sim_test.cc) and
# of the scheduler alone (tests/sim/shard_sim_test.cc). CI runs 500 and 200. A failing seed is
# printed with the command that reruns it alone (RINGCAST_SIM_SEED=N). Bounded: no sockets, no
# files; a manual clock; at most two hours.
#   tools/sim-soak.sh [BUILD_DIR]      (default build-release; SEEDS=10000)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-release}"
if [[ ! -x "$build/tests/ringcast_sim_tests" ]]; then
  echo "sim-soak: build first (bash tools/test.sh, or cmake --build $build)" >&2
  exit 1
fi
RINGCAST_SIM_SEEDS="${SEEDS:-10000}" exec timeout 7200 "$build/tests/ringcast_sim_tests"
