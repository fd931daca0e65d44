#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, -DRINGCAST_FUZZ=ON, clang, ASan+UBSan) in build-fuzz
# and runs each for a bounded time over its seed corpus (tests/fuzz/corpus/<name>/). Fails
# (exit 1) on any crash, leak, per-input timeout (hang), out-of-memory or failed FUZZ_CHECK, and
# prints one summary line per target. CI runs it from tools/test.sh with the defaults.
#
# Usage: tools/fuzz.sh [--seconds N] [--only NAME[,NAME...]] [--keep-corpus] [--no-build]
#   --seconds N      time per target (default 20: the CI budget); longer by hand, e.g. 600
#   --only NAMES     run only these targets (http_request, codec, ...)
#   --keep-corpus    keep what the fuzzer learns in build-fuzz/corpus/<name>/ across runs
#                    (default: a fresh copy of the seeds each run: a CI run starts from them alone)
#   --no-build       use the binaries already in build-fuzz
# JOBS (default 2) is both the build's -j and how many fuzzers run at once.
# Findings land in build-fuzz/artifacts/<name>/; add a minimised copy of each to
# tests/fuzz/corpus/<name>/ with the fix (CONTRIBUTING.md "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=20
ONLY=""
KEEP=0
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_TARGET=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --keep-corpus) KEEP=1; shift ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$SECONDS_PER_TARGET" in ''|*[!0-9]*) echo "fuzz.sh: --seconds wants a number" >&2; exit 2 ;; esac

DIR=build-fuzz
JOBS=${JOBS:-2}
started=$(date +%s)

if [ "$BUILD" = 1 ]; then
  # Debian's clang 14 and its runtime (libFuzzer, ASan, UBSan live in libclang-rt-14-dev).
  missing=()
  for p in clang libclang-rt-14-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "fuzz.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
  launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  CC=clang CXX=clang++ cmake -S . -B "$DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRINGCAST_FUZZ=ON "${launcher[@]}" >/dev/null
  cmake --build "$DIR" -j"$JOBS" --target fuzz_all
fi
built=$(date +%s)

targets=()
for src in tests/fuzz/*.cc; do
  name=$(basename "$src" .cc)
  if [ -n "$ONLY" ] && ! [[ ",$ONLY," == *",$name,"* ]]; then continue; fi
  targets+=("$name")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz.sh: no target matches --only $ONLY" >&2
  exit 2
fi

# Leaks are findings; an input that runs for 10 s is a hang; 2 GiB is an out-of-memory.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

run_one() {  # name: fuzzes it, writes its summary line to $DIR/logs/<name>.summary
  local name=$1
  local bin="$DIR/tests/fuzz/fuzz_$name" seeds="tests/fuzz/corpus/$name" work="$DIR/corpus/$name"
  local artifacts="$DIR/artifacts/$name" log="$DIR/logs/$name.log" rc=0 dict=()
  mkdir -p "$seeds" "$artifacts" "$DIR/logs"
  if [ "$KEEP" = 0 ]; then rm -rf "$work"; fi
  mkdir -p "$work"
  [ -f "tests/fuzz/dict/$name.dict" ] && dict=(-dict="tests/fuzz/dict/$name.dict")
  # New inputs go to the first directory (the work copy); the seeds are only read.
  "$bin" "$work" "$seeds" "${dict[@]}" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -detect_leaks=1 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" >"$log" 2>&1 || rc=$?
  local runs cov corpus line
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  corpus=$(find "$work" -type f | wc -l || true)
  if [ "$rc" = 0 ]; then
    line=$(printf 'fuzz %-14s ok      %9s runs  %4ss  cov %5s  corpus %4s' "$name" "${runs:-?}" \
      "$SECONDS_PER_TARGET" "${cov:-?}" "$corpus")
  else
    local what artifact
    what=$(grep -m1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [a-z-]+|runtime error|FUZZ_CHECK failed|ALARM: working on the last Unit|out-of-memory' "$log" || true)
    artifact=$(ls -t "$artifacts" 2>/dev/null | head -1 || true)
    line=$(printf 'fuzz %-14s FAILED  (%s) exit %s  artifact %s  log %s' "$name" "${what:-see log}" \
      "$rc" "${artifact:+$artifacts/$artifact}" "$log")
  fi
  echo "$line" >"$DIR/logs/$name.summary"
  echo "$line"
  return "$rc"
}

# Each fuzzer is one process on one core: run JOBS of them at a time.
running=0
for name in "${targets[@]}"; do
  rm -f "$DIR/logs/$name.summary"
  run_one "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true
failed=0
summary=()
for name in "${targets[@]}"; do
  line=$(cat "$DIR/logs/$name.summary" 2>/dev/null || echo "fuzz $name FAILED (no result)")
  summary+=("$line")
  if [[ "$line" != *" ok "* ]]; then
    failed=1
    tail -40 "$DIR/logs/$name.log" >&2 || true
  fi
done
ended=$(date +%s)
echo "---"
printf '%s\n' "${summary[@]}"
echo "fuzz: build $((built - started)) s, runs $((ended - built)) s, ${#targets[@]} targets x ${SECONDS_PER_TARGET} s, $JOBS at a time"
exit "$failed"
