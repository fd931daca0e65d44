#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test: once in a normal build, once under
# AddressSanitizer + UndefinedBehaviorSanitizer. Usage: tools/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
JOBS=${JOBS:-2}

build_and_test() {  # dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j"$JOBS"
  (cd "$dir" && ctest --output-on-failure -j"$JOBS" --timeout 600)
}

build_and_test build -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${1:-}" != "--no-asan" ]; then
  # Benchmarks are not built under sanitizers: they measure, the plain build runs them.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    build_and_test build-asan -DCMAKE_BUILD_TYPE=Debug -DRINGCAST_SANITIZE=ON -DRINGCAST_BUILD_BENCH=OFF
fi
