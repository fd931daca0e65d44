#!/usr/bin/env bash
# End-to-end benchmark of the NATS JetStream intake (docs/benchmarks.md), in one run, on loopback:
# events taken in from a JetStream stream (`[[intake.nats]]`, a durable pull consumer) against the
# HTTP bulk route, by the same daemon, to the same tenant, whose only endpoint is paused (SPEC
# R9.1: no delivery is created, so only intake runs). TRIALS interleaved pairs (nats, bulk, nats,
# bulk, ...) of INTAKE_N 1 KiB events:
#   nats: the daemon is stopped (SIGSTOP) while INTAKE_N messages are published into the stream
#         with bench_nats_publish (JetStream publishes, every PubAck awaited: all stored); the
#         timed window runs from SIGCONT until the source counted INTAKE_N more messages acked
#         (each durable, then +ACKed) → events/s wall, events per daemon CPU-second, and
#         nats-server's own CPU per event (pull + ack, its preload not counted);
#   bulk: `ringcast send --batch 1000 -c 4` of INTAKE_N events from a pre-generated NDJSON file,
#         as in bench/e2e_bus_intake.sh → events/s wall, events per daemon CPU-second.
# The same generated events (bench/support/e2e_lib.sh gen_events) feed both kinds: NATS messages
# carry tenant, id and type in Ringcast-* headers and the payload's bytes as their body.
# Reports each pair's ratio nats/bulk of events per daemon CPU-second and the medians.
# The daemon is pinned to SENDER_CPU (default 0), nats-server to SINK_CPU (default 1); this script
# and its helpers (the publisher, the CLI, awk) also run on SINK_CPU, never on the daemon's.
# Bounded in time; cleans up its processes and its temp dir (KEEP=1 keeps the dir).
#
# Usage: bench/e2e_nats_intake.sh          full run (5 pairs of 100 k events)
#        QUICK=1 bench/e2e_nats_intake.sh  smoke run (2 pairs of 20 k)
# Knobs (environment): INTAKE_N TRIALS SHARDS PAYLOAD_BYTES PAYLOAD_FILL SENDER_CPU SINK_CPU
#   INTAKE_BATCH INTAKE_CONNS NATS_BATCH NATS_MAX_UNACKED NATS_EXPIRES TRIAL_TIMEOUT PERF=1
#   PERF_ARGS RINGCAST_BIN NATS_SERVER NATS_PUBLISH RESULTS_FILE KEEP: as bench/e2e_bus_intake.sh's
#   (docs/benchmarks.md), with NATS_* for the source and nats-server in place of Redis.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_NAME=e2e_nats_intake

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  : "${INTAKE_N:=20000}" "${TRIALS:=2}"
else
  : "${INTAKE_N:=100000}" "${TRIALS:=5}"
fi
SHARDS=${SHARDS:-1}  # the daemon has one core: one shard
PAYLOAD_BYTES=${PAYLOAD_BYTES:-1024}
PAYLOAD_FILL=${PAYLOAD_FILL:-random}
SENDER_CPU=${SENDER_CPU:-0}
SINK_CPU=${SINK_CPU:-1}          # nats-server's core (and this script's)
INTAKE_BATCH=${INTAKE_BATCH:-1000}  # bulk: ringcast send --batch
INTAKE_CONNS=${INTAKE_CONNS:-4}     # bulk: ringcast send -c
NATS_BATCH=${NATS_BATCH:-256}            # [[intake.nats]] batch (the default)
NATS_MAX_UNACKED=${NATS_MAX_UNACKED:-16384}  # max_unacked (the default)
NATS_EXPIRES=${NATS_EXPIRES:-1s}         # expires (the default)
TRIAL_TIMEOUT=${TRIAL_TIMEOUT:-120}  # seconds, per timed window
RINGCAST_BIN=${RINGCAST_BIN:-$ROOT/build/tools/ringcast}
NATS_SERVER=${NATS_SERVER:-/usr/sbin/nats-server}
NATS_PUBLISH=${NATS_PUBLISH:-$ROOT/build/bench/bench_nats_publish}
STREAM=BENCH
SUBJECT=bench.events
DEAD_STREAM=BENCHDEAD
DEAD_SUBJECT=bench.dead
SOURCE=nats
TENANT=intake

for tool in taskset awk "$NATS_SERVER"; do
  command -v "$tool" >/dev/null || { echo "$BENCH_NAME: $tool is required (tools/install-deps.sh: nats-server)" >&2; exit 2; }
done
[ -x "$RINGCAST_BIN" ] || { echo "$BENCH_NAME: $RINGCAST_BIN not found (cmake --build build --target ringcast)" >&2; exit 2; }
[ -x "$NATS_PUBLISH" ] || { echo "$BENCH_NAME: $NATS_PUBLISH not found (cmake --build build --target bench_nats_publish)" >&2; exit 2; }
if [ "$TRIALS" -lt 1 ] || [ "$INTAKE_N" -lt 1 ]; then
  echo "$BENCH_NAME: TRIALS and INTAKE_N must be >= 1" >&2
  exit 2
fi

WORK=$(mktemp -d /tmp/e2e-nats-intake.XXXXXX)
DAEMON_PID=""
NATS_PID=""
STOPPED_PID=""  # the daemon while it is SIGSTOPped: cleanup continues it before stopping it
# shellcheck source=bench/support/e2e_lib.sh
. "$ROOT/bench/support/e2e_lib.sh"
DIE_FILES=(daemon.out daemon.err nats/nats.log)
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$PERF_PID" ] && kill -INT "$PERF_PID" 2>/dev/null
  [ -n "$STOPPED_PID" ] && kill -CONT "$STOPPED_PID" 2>/dev/null
  for p in $DAEMON_PID $NATS_PID; do kill -TERM "$p" 2>/dev/null || true; done
  for p in $DAEMON_PID $NATS_PID; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "$BENCH_NAME: kept $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# This shell and everything it starts without an explicit taskset stay off the daemon's core.
taskset -p -c "$SINK_CPU" $$ >/dev/null

# bench_nats_publish on this script's core: stream creation, purges, publishes.
npub() { taskset -c "$SINK_CPU" "$BIN/bench_nats_publish" --server "127.0.0.1:$NATS_PORT" "$@"; }
# Waits (bounded) until process $1 is stopped (SIGSTOP is asynchronous).
wait_stopped() {
  local i
  for i in $(seq 1 200); do
    proc_state "$1" && [ "$PROC_STATE" = T ] && return 0
    nap 0.01
  done
  die "process $1 did not stop within 2 s after SIGSTOP"
}
# GET /v1/intake → INTAKE_STATE and INTAKE_ACCEPTED of the (only) source.
intake_status() {
  http GET "$API" /v1/intake "" "Authorization: Bearer $TOKEN" || die "GET /v1/intake failed: $HTTP_BODY"
  [[ $HTTP_BODY =~ \"state\":\"([a-z]+)\" ]] && INTAKE_STATE=${BASH_REMATCH[1]} || INTAKE_STATE=unknown
  [[ $HTTP_BODY =~ \"accepted\":([0-9]+) ]] && INTAKE_ACCEPTED=${BASH_REMATCH[1]} || INTAKE_ACCEPTED=0
}
M_ACKED="ringcast_intake_entries_total{source=\"$SOURCE\",result=\"acked\"}"
M_ACCEPTED="ringcast_intake_entries_total{source=\"$SOURCE\",result=\"accepted\"}"
M_DUP="ringcast_intake_entries_total{source=\"$SOURCE\",result=\"duplicate\"}"
M_DEAD="ringcast_intake_entries_total{source=\"$SOURCE\",result=\"dead_lettered\"}"
M_RETRIED="ringcast_intake_entries_total{source=\"$SOURCE\",result=\"retried\"}"
M_REDELIVERED="ringcast_intake_entries_total{source=\"$SOURCE\",result=\"redelivered\"}"
M_ERRORS="ringcast_intake_nats_errors_total{source=\"$SOURCE\"}"
M_RECONN="ringcast_intake_reconnects_total{source=\"$SOURCE\"}"
# Waits (bounded) until the daemon uses (almost) no CPU: the previous trial's flushes and
# compactions end before the next window (they would be charged to the other kind of trial).
settle() {
  local deadline=$((SECONDS + 15)) a
  while :; do
    cpu_ticks "$DAEMON_PID"; a=$CPU_TICKS
    nap 0.5
    cpu_ticks "$DAEMON_PID"
    [ $((CPU_TICKS - a)) -le $((CLK_TCK / 50)) ] && return 0  # <= 2 % of a core
    [ $SECONDS -ge $deadline ] && { log "WARNING: the daemon still busy after 15 s (settle)"; return 0; }
  done
}

# ---- start ------------------------------------------------------------------------------------
mkdir -p "$WORK/bin" "$WORK/nats"
cp "$RINGCAST_BIN" "$NATS_PUBLISH" "$WORK/bin/"  # a snapshot: a rebuild during the run cannot bite
BIN=$WORK/bin
NCPU=$(getconf _NPROCESSORS_ONLN)
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
log "ringcast e2e NATS intake benchmark: commit $COMMIT, $NCPU cores, QUICK=$QUICK, work dir $WORK"
log "daemon on core $SENDER_CPU, nats-server on core $SINK_CPU; shards $SHARDS, payload $PAYLOAD_BYTES B;" \
  "$TRIALS x $INTAKE_N events per kind; source batch $NATS_BATCH, max_unacked $NATS_MAX_UNACKED"
LOAD_START=$(loadavg)

# nats-server with JetStream on disk: take a port nothing answers on, retry if the bind races.
NATS_PORT=""
for _ in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 30000))
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
  taskset -c "$SINK_CPU" "$NATS_SERVER" -js -a 127.0.0.1 -p "$port" -sd "$WORK/nats/js" \
    >"$WORK/nats/stdout" 2>"$WORK/nats/nats.log" &
  NATS_PID=$!
  for _ in $(seq 1 100); do
    kill -0 "$NATS_PID" 2>/dev/null || break
    grep -q "Server is ready" "$WORK/nats/nats.log" 2>/dev/null && { NATS_PORT=$port; break; }
    nap 0.05
  done
  [ -n "$NATS_PORT" ] && break
  kill -KILL "$NATS_PID" 2>/dev/null || true
  wait "$NATS_PID" 2>/dev/null || true
  NATS_PID=""
done
[ -n "$NATS_PORT" ] || die "nats-server did not start (5 attempts)"
NATS_VERSION=$("$NATS_SERVER" --version | awk '{print $2}')
npub --stream "$STREAM=$SUBJECT" --stream "$DEAD_STREAM=$DEAD_SUBJECT" >/dev/null ||
  die "cannot create the streams"

TOKEN="bench-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"  # >= 32 characters
cat >"$WORK/ringcast.toml" <<TOML
[server]
listen = "127.0.0.1:0"
api_token = "$TOKEN"

[storage]
data_dir = "$WORK/data"
sync = "interval"          # as bench/e2e_delivery.sh: WAL synced every sync_interval
sync_interval = "10ms"

[engine]
shards = $SHARDS

[transport]
allow_http = true
allow_private = ["127.0.0.0/8"]

[intake]
node_id = "bench"

[[intake.nats]]
name = "$SOURCE"
servers = ["127.0.0.1:$NATS_PORT"]
stream = "$STREAM"
filter_subject = "$SUBJECT"
dead_letter_subject = "$DEAD_SUBJECT"
batch = $NATS_BATCH
expires = "$NATS_EXPIRES"
max_unacked = $NATS_MAX_UNACKED
TOML
taskset -c "$SENDER_CPU" "$BIN/ringcast" serve --config "$WORK/ringcast.toml" \
  >"$WORK/daemon.out" 2>"$WORK/daemon.err" &
DAEMON_PID=$!
for _ in $(seq 1 600); do grep -q "listening on" "$WORK/daemon.out" 2>/dev/null && break; daemon_alive; nap 0.1; done
grep -q "listening on" "$WORK/daemon.out" || die "the daemon did not start within 60 s"
API=$(grep -o 'listening on [0-9.:]*' "$WORK/daemon.out" | awk '{print $3}')
RC=("$BIN/ringcast" --server "http://$API" --token "$TOKEN")
log "nats-server $NATS_VERSION on 127.0.0.1:$NATS_PORT (pid $NATS_PID), daemon on $API (pid $DAEMON_PID)"

# The tenant's only endpoint is paused: no delivery is created (SPEC R9.1), nothing is sent to
# its URL (a closed loopback port, so that a delivery made by mistake would go nowhere).
out=$("${RC[@]}" --json endpoints create --tenant "$TENANT" --url "http://127.0.0.1:9/intake") ||
  die "endpoints create failed"
EP_ID=$(printf '%s' "$out" | grep -o '"id":"[0-9]*"' | head -1 | cut -d'"' -f4)
[ -n "$EP_ID" ] || die "no endpoint id in: $out"
"${RC[@]}" endpoints pause --tenant "$TENANT" "$EP_ID" >/dev/null || die "pause failed"

deadline=$((SECONDS + 30))
while intake_status; [ "$INTAKE_STATE" != reading ]; do
  [ $SECONDS -ge $deadline ] && die "the intake source is '$INTAKE_STATE', not 'reading', after 30 s"
  daemon_alive
  nap 0.1
done
log "intake source $SOURCE reading $STREAM; tenant $TENANT, endpoint $EP_ID paused"

# ---- one nats trial: nats_trial I ------------------------------------------------------------
nats_trial() {
  local i=$1 deadline
  gen_events "$TENANT" "nats$i" 1 "$INTAKE_N" >"$WORK/nats.ndjson"
  settle
  # The source waits on its pull requests, nothing unacked.
  deadline=$((SECONDS + 30))
  while intake_status; [ "$INTAKE_STATE" != reading ]; do
    [ $SECONDS -ge $deadline ] && die "nats $i: the source is '$INTAKE_STATE', not 'reading', after 30 s"
    daemon_alive
    nap 0.05
  done
  fetch_metrics "$WORK/m-nats$i-0.txt"
  [ "$i" = 1 ] && perf_start nats
  local p0 p1 p2 c0 c1 ts t0 t1
  cpu_ticks "$NATS_PID"; p0=$CPU_TICKS
  ts=$EPOCHREALTIME
  kill -STOP "$DAEMON_PID"
  STOPPED_PID=$DAEMON_PID
  wait_stopped "$DAEMON_PID"
  npub --subject "$SUBJECT" "$WORK/nats.ndjson" >"$WORK/pub-$i.out" 2>&1 || { cat "$WORK/pub-$i.out" >&2; die "nats $i: the publisher failed"; }
  grep -q "^published $INTAKE_N messages" "$WORK/pub-$i.out" ||
    { cat "$WORK/pub-$i.out" >&2; die "nats $i: the publisher did not store $INTAKE_N messages"; }
  cpu_ticks "$NATS_PID"; p1=$CPU_TICKS
  cpu_ticks "$DAEMON_PID"; c0=$CPU_TICKS
  t0=$EPOCHREALTIME
  kill -CONT "$DAEMON_PID"
  STOPPED_PID=""
  # Timed window: until the source has acked INTAKE_N more messages. /v1/intake (small) while
  # they are being accepted, then /metrics for the acks that follow the last answer.
  local want_acc want_ack limit=$((SECONDS + TRIAL_TIMEOUT)) polls=0
  want_acc=$(($(metric "$M_ACCEPTED" "$WORK/m-nats$i-0.txt") + INTAKE_N))
  want_ack=$(($(metric "$M_ACKED" "$WORK/m-nats$i-0.txt") + INTAKE_N))
  INTAKE_ACCEPTED=0
  while :; do
    nap 0.02
    polls=$((polls + 1))
    kill -0 "$DAEMON_PID" 2>/dev/null || die "the daemon exited during nats trial $i"
    if [ $SECONDS -ge $limit ]; then
      fetch_metrics
      die "nats $i: accepted $(metric "$M_ACCEPTED"), acked $(metric "$M_ACKED") (want $want_acc, $want_ack) within $TRIAL_TIMEOUT s"
    fi
    if [ "$INTAKE_ACCEPTED" -lt "$want_acc" ]; then
      intake_status
      [ "$INTAKE_ACCEPTED" -lt "$want_acc" ] && continue
    fi
    fetch_metrics
    [ "$(metric "$M_ACKED")" -ge "$want_ack" ] && break
  done
  t1=$EPOCHREALTIME
  cpu_ticks "$DAEMON_PID"; c1=$CPU_TICKS
  cpu_ticks "$NATS_PID"; p2=$CPU_TICKS
  [ "$i" = 1 ] && perf_stop nats
  cp "$WORK/metrics.txt" "$WORK/m-nats$i-1.txt"
  local m0=$WORK/m-nats$i-0.txt
  local acc dup dead retried errs reconn redelivered created
  acc=$(metric_delta "$M_ACCEPTED" "$m0")
  dup=$(metric_delta "$M_DUP" "$m0")
  dead=$(metric_delta "$M_DEAD" "$m0")
  retried=$(metric_delta "$M_RETRIED" "$m0")
  errs=$(metric_delta "$M_ERRORS" "$m0")
  reconn=$(metric_delta "$M_RECONN" "$m0")
  redelivered=$(metric_delta "$M_REDELIVERED" "$m0")
  created=$(metric_delta ringcast_deliveries_created_total "$m0")
  [ "$acc" = "$INTAKE_N" ] || die "nats $i: $acc accepted (duplicate $dup, dead-lettered $dead), want $INTAKE_N"
  [ "$dead" = 0 ] || die "nats $i: $dead messages dead-lettered"
  [ "$created" = 0 ] || die "nats $i: $created deliveries created (the endpoint is paused)"
  if [ "$errs" != 0 ] || [ "$reconn" != 0 ] || [ "$retried" != 0 ] || [ "$redelivered" != 0 ]; then
    log "WARNING nats $i: nats errors $errs, reconnects $reconn, retried $retried, redelivered $redelivered"
  fi
  local wall cpu rate per_cpu nats_us preload_us
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
  cpu=$(div $((c1 - c0)) "$CLK_TCK" %.2f)
  rate=$(div "$INTAKE_N" "$wall")
  per_cpu=$(div "$INTAKE_N" "$cpu")
  nats_us=$(div $(((p2 - p1) * 1000000 / CLK_TCK)) "$INTAKE_N" %.2f)
  preload_us=$(div $(((p1 - p0) * 1000000 / CLK_TCK)) "$INTAKE_N" %.2f)
  echo "$per_cpu $rate $nats_us $preload_us" >>"$WORK/nats.txt"
  NATS_PER_CPU=$per_cpu
  result "nats$i: $INTAKE_N messages in $wall s = $rate events/s wall; daemon $cpu CPU-s = $per_cpu events per daemon CPU-s;" \
    "nats-server $(div $((p2 - p1)) "$CLK_TCK" %.2f) CPU-s = $nats_us us per event (publish preload $preload_us us per event, daemon stopped" \
    "$(awk -v a="$ts" -v b="$t0" 'BEGIN {printf "%.2f", b - a}') s); $polls polls"
  # Empty the stream (every message acked) so that nats-server's disk stays flat.
  npub --purge "$STREAM" >/dev/null || die "STREAM.PURGE failed"
  rm -f "$WORK/nats.ndjson"
}

# ---- one bulk trial: bulk_trial I ------------------------------------------------------------
bulk_trial() {
  local i=$1
  gen_events "$TENANT" "bulk$i" 1 "$INTAKE_N" >"$WORK/bulk.ndjson"
  settle
  fetch_metrics "$WORK/m-bulk$i-0.txt"
  [ "$i" = 1 ] && perf_start bulk
  local c0 c1 t0 t1
  cpu_ticks "$DAEMON_PID"; c0=$CPU_TICKS
  t0=$EPOCHREALTIME
  "${RC[@]}" --json send -q --batch "$INTAKE_BATCH" -c "$INTAKE_CONNS" "$WORK/bulk.ndjson" \
    >"$WORK/send-bulk$i.json" 2>"$WORK/send-bulk$i.err" || true
  t1=$EPOCHREALTIME
  cpu_ticks "$DAEMON_PID"; c1=$CPU_TICKS
  [ "$i" = 1 ] && perf_stop bulk
  local acc
  acc=$(json_field accepted <"$WORK/send-bulk$i.json")
  [ "${acc:-0}" = "$INTAKE_N" ] || { cat "$WORK/send-bulk$i.json" "$WORK/send-bulk$i.err" >&2; die "bulk $i: accepted ${acc:-?} of $INTAKE_N"; }
  fetch_metrics "$WORK/m-bulk$i-1.txt"
  local accepted created
  accepted=$(metric_delta ringcast_events_accepted_total "$WORK/m-bulk$i-0.txt")
  created=$(metric_delta ringcast_deliveries_created_total "$WORK/m-bulk$i-0.txt")
  [ "$accepted" = "$INTAKE_N" ] || die "bulk $i: the daemon counted $accepted accepted events, the client $INTAKE_N"
  [ "$created" = 0 ] || die "bulk $i: $created deliveries created (the endpoint is paused)"
  local rate secs cpu per_cpu
  rate=$(printf %.0f "$(json_field events_per_second <"$WORK/send-bulk$i.json")")
  secs=$(json_field seconds <"$WORK/send-bulk$i.json")
  cpu=$(div $((c1 - c0)) "$CLK_TCK" %.2f)
  per_cpu=$(div "$INTAKE_N" "$cpu")
  echo "$per_cpu $rate" >>"$WORK/bulk.txt"
  BULK_PER_CPU=$per_cpu
  result "bulk$i: $INTAKE_N events in $secs s = $rate events/s wall (client; the CLI run $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}') s);" \
    "daemon $cpu CPU-s = $per_cpu events per daemon CPU-s"
  rm -f "$WORK/bulk.ndjson"
}

# ---- trials, interleaved ----------------------------------------------------------------------
: >"$WORK/nats.txt"
: >"$WORK/bulk.txt"
: >"$WORK/ratio.txt"
fetch_metrics "$WORK/m-start.txt"
cpu_ticks "$DAEMON_PID"; run_c0=$CPU_TICKS
for i in $(seq 1 "$TRIALS"); do
  log "== pair $i of $TRIALS: nats, then bulk"
  nats_trial "$i"
  bulk_trial "$i"
  ratio=$(div "$NATS_PER_CPU" "$BULK_PER_CPU" %.3f)
  echo "$ratio" >>"$WORK/ratio.txt"
  result "pair $i: nats/bulk per daemon CPU-s $ratio"
done
cpu_ticks "$DAEMON_PID"; run_c1=$CPU_TICKS
settle
fetch_metrics "$WORK/m-end.txt"

nats_med=$(awk '{print $1}' "$WORK/nats.txt" | median)
nats_wall_med=$(awk '{print $2}' "$WORK/nats.txt" | median)
server_med=$(awk '{print $3}' "$WORK/nats.txt" | median)
preload_med=$(awk '{print $4}' "$WORK/nats.txt" | median)
bulk_med=$(awk '{print $1}' "$WORK/bulk.txt" | median)
bulk_wall_med=$(awk '{print $2}' "$WORK/bulk.txt" | median)
r_med=$(median <"$WORK/ratio.txt")
result "nats intake, median of $TRIALS: $nats_wall_med events/s wall, $nats_med events per daemon CPU-s;" \
  "nats-server $server_med us CPU per event (its publish preload: $preload_med us per event)"
result "bulk route, median of $TRIALS: $bulk_wall_med events/s wall, $bulk_med events per daemon CPU-s"
result "ratio nats/bulk per daemon CPU-s: median $r_med x of ($(paste -sd' ' "$WORK/ratio.txt"));" \
  "ratio of medians $(div "$nats_med" "$bulk_med" %.3f) x (target >= 0.8)"
result "(check) whole run: daemon $(div $((run_c1 - run_c0)) "$CLK_TCK" %.1f) CPU-s for $((2 * TRIALS * INTAKE_N)) events;" \
  "source: read $(metric_delta "ringcast_intake_entries_total{source=\"$SOURCE\",result=\"read\"}" "$WORK/m-start.txt")," \
  "acked $(metric_delta "$M_ACKED" "$WORK/m-start.txt"), duplicate $(metric_delta "$M_DUP" "$WORK/m-start.txt")," \
  "dead-lettered $(metric_delta "$M_DEAD" "$WORK/m-start.txt"), redelivered $(metric_delta "$M_REDELIVERED" "$WORK/m-start.txt"), nats errors $(metric_delta "$M_ERRORS" "$WORK/m-start.txt");" \
  "deliveries created $(metric_delta ringcast_deliveries_created_total "$WORK/m-start.txt");" \
  "store errors $(metric ringcast_store_errors_total); nats-server RSS $(rss_kib "$NATS_PID") KiB"

code=0
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || code=$?
DAEMON_PID=""
[ "$code" = 0 ] || die "daemon exit code $code after SIGTERM"

{
  echo "== ringcast e2e NATS intake benchmark — $(date -u +%Y-%m-%dT%H:%MZ), commit $COMMIT, QUICK=$QUICK"
  echo "   $NCPU cores; load average at start $LOAD_START, at end $(loadavg); daemon on core $SENDER_CPU, nats-server $NATS_VERSION on core $SINK_CPU"
  echo "   $TRIALS pairs of $INTAKE_N events ($PAYLOAD_BYTES B payloads, $PAYLOAD_FILL); source batch $NATS_BATCH, max_unacked $NATS_MAX_UNACKED; bulk --batch $INTAKE_BATCH -c $INTAKE_CONNS"
  for r in "${RESULTS[@]}"; do echo "   $r"; done
} | tee -a "$WORK/log.txt"
[ -n "${RESULTS_FILE:-}" ] && cp "$WORK/log.txt" "$RESULTS_FILE"
exit 0
