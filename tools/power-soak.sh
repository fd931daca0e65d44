#!/usr/bin/env bash
# The power-cut soak, outside CI (docs/durability.md): one `ringcast serve` whose data dir is on
# the power-cut filesystem (docs/powercut-fs.md), under the mixed load of
# tests/e2e/powercut_test.cc, CUTS rounds per sync mode (default 250: 200 power cuts, and every
# fifth round a kill alone). A cut is SIGKILL, everything not fsynced dropped (sometimes a random
# prefix of it kept, or the last write torn), and a restart. Prints acknowledged / delivered /
# lost / duplicated per mode; the test fails unless lost is 0 (for sync = "none": unless every
# loss is within its documented bound). CI runs the same tests with 6 rounds (5 cuts) per mode.
# Needs root and /dev/fuse. Bounded like the tests.
#   tools/power-soak.sh [BUILD_DIR] [MODE...]   (default build-release, all modes; CUTS=250)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-release}"
shift || true
modes=("$@")
[[ ${#modes[@]} -gt 0 ]] || modes=(always interval none)
if [[ ! -x "$build/tests/ringcast_e2e_tests" ]]; then
  echo "power-soak: build first (bash tools/test.sh, or cmake --build $build)" >&2
  exit 1
fi
status=0
for mode in "${modes[@]}"; do
  RINGCAST_POWERCUTS="${CUTS:-250}" timeout 7200 \
    "$build/tests/ringcast_e2e_tests" --gtest_filter="Sync/E2ePowerCut.*/$mode" || status=1
done
exit $status
