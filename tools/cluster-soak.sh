#!/usr/bin/env bash
# The cluster soak (docs/durability.md "Soaks (outside CI)"): 3 ringcast nodes on a 3+3 Redis
# Cluster on loopback (tests/e2e/cluster_test.cc, E2eCluster.Soak), NODE_KILLS rounds (default 100)
# of SIGKILL and restart of a random node under load, a SIGKILL of a Redis primary every tenth
# round. Prints events acknowledged / delivered / lost / duplicated and the failover times. Bounded:
# every wait in the test has a deadline; everything runs in temp dirs and is stopped at the end.
#   tools/cluster-soak.sh [BUILD_DIR]      (default build-release; NODE_KILLS=100)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-release}"
if [[ ! -x "$build/tests/ringcast_e2e_tests" ]]; then
  echo "cluster-soak: build first (bash tools/test.sh, or cmake --build $build)" >&2
  exit 1
fi
RINGCAST_SOAK_NODE_KILLS="${NODE_KILLS:-100}" exec timeout 3600 \
  "$build/tests/ringcast_e2e_tests" --gtest_filter='E2eCluster.Soak'
