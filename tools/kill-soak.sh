#!/usr/bin/env bash
# The kill soak, outside CI (docs/durability.md): one `ringcast serve` under the mixed load of
# tests/e2e/powercut_test.cc (single and bulk intake, fan-out, retries, an open breaker, endpoint
# changes, secret rotations, resends), KILLS rounds (default 1000) of SIGKILL and restart on the
# same data dir. Prints acknowledged / delivered / lost / duplicated; the test fails unless lost
# is 0. CI runs the same test with 5 rounds. Bounded: every wait in the test has a deadline,
# everything runs in temp dirs on loopback and is stopped at the end.
#   tools/kill-soak.sh [BUILD_DIR]      (default build-release; KILLS=1000)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-release}"
if [[ ! -x "$build/tests/ringcast_e2e_tests" ]]; then
  echo "kill-soak: build first (bash tools/test.sh, or cmake --build $build)" >&2
  exit 1
fi
RINGCAST_KILLS="${KILLS:-1000}" exec timeout 7200 \
  "$build/tests/ringcast_e2e_tests" --gtest_filter='E2eKillSoak.*'
