#!/usr/bin/env bash
# End-to-end benchmark of ringcast-kafka-bridge (docs/operations.md §6 "Kafka bridge"), in one
# run, on loopback: events fed from a Kafka topic by the bridge against the same events sent to
# the HTTP bulk route directly, by the same daemon, to the same tenant, whose only endpoint is
# paused (SPEC R9.1: no delivery is created, so only intake runs). The Kafka cluster is
# librdkafka's mock cluster in a process of its own (ringcast-kafka-mock: real loopback brokers).
# TRIALS interleaved pairs (kafka, bulk, kafka, bulk, ...) of INTAKE_N 1 KiB events:
#   kafka: the bridge is stopped (SIGSTOP) while INTAKE_N records are produced to the topic; the
#          timed window runs from SIGCONT until the bridge has committed INTAKE_N more records
#          (each acked by ringcast as durable first) → events/s wall, events per daemon
#          CPU-second, and the bridge's and the mock cluster's own CPU per event;
#   bulk:  `ringcast send --batch 1000 -c 4` of INTAKE_N events from a pre-generated NDJSON file,
#          as in phase 1 of bench/e2e_delivery.sh → events/s wall, events per daemon CPU-second.
# Reports each pair's ratio kafka/bulk of events per daemon CPU-second and the medians (the
# bridge's cost to the daemon is its bulk requests: the target is >= 0.8).
# The daemon is pinned to SENDER_CPU (default 0); the bridge, the mock cluster, this script and
# its helpers run on SINK_CPU (default 1), never on the daemon's.
# Bounded in time; cleans up its processes and its temp dir (KEEP=1 keeps the dir).
#
# Usage: bench/e2e_kafka_bridge.sh          full run (5 pairs of 100 k events)
#        QUICK=1 bench/e2e_kafka_bridge.sh  smoke run (2 pairs of 20 k)
# Knobs (environment): INTAKE_N TRIALS SHARDS PAYLOAD_BYTES PAYLOAD_FILL SENDER_CPU SINK_CPU
#   INTAKE_BATCH INTAKE_CONNS BRIDGE_BATCH BRIDGE_WAIT PARTITIONS TRIAL_TIMEOUT PERF=1 PERF_ARGS
#   RINGCAST_BIN BRIDGE_BIN MOCK_BIN RESULTS_FILE KEEP. docs/operations.md §6 quotes a run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_NAME=e2e_kafka_bridge

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
SINK_CPU=${SINK_CPU:-1}               # the bridge's, the mock cluster's and this script's core
INTAKE_BATCH=${INTAKE_BATCH:-1000}    # bulk: ringcast send --batch
INTAKE_CONNS=${INTAKE_CONNS:-4}       # bulk: ringcast send -c
BRIDGE_BATCH=${BRIDGE_BATCH:-1000}    # [ringcast] batch_max_events (the default)
BRIDGE_WAIT=${BRIDGE_WAIT:-100ms}     # [ringcast] batch_max_wait (the default)
# The mock cluster keeps about 5 MB per partition (older records are deleted, as by retention):
# enough partitions that one trial's records stay readable while the bridge is stopped.
PARTITIONS=${PARTITIONS:-$(((INTAKE_N * (PAYLOAD_BYTES + 256) / 3000000) + 4))}
TRIAL_TIMEOUT=${TRIAL_TIMEOUT:-180}   # seconds, per timed window
RINGCAST_BIN=${RINGCAST_BIN:-$ROOT/build/tools/ringcast}
BRIDGE_BIN=${BRIDGE_BIN:-$ROOT/build/bridge/kafka/ringcast-kafka-bridge}
MOCK_BIN=${MOCK_BIN:-$ROOT/build/bridge/kafka/ringcast-kafka-mock}
TOPIC=bench-events
DEAD_TOPIC=bench-dead
TENANT=intake

for tool in taskset awk curl; do
  command -v "$tool" >/dev/null || { echo "$BENCH_NAME: $tool is required (tools/install-deps.sh)" >&2; exit 2; }
done
for bin in "$RINGCAST_BIN" "$BRIDGE_BIN" "$MOCK_BIN"; do
  [ -x "$bin" ] || { echo "$BENCH_NAME: $bin not found (cmake --build build --target ringcast ringcast-kafka-bridge ringcast-kafka-mock)" >&2; exit 2; }
done
if [ "$TRIALS" -lt 1 ] || [ "$INTAKE_N" -lt 1 ]; then
  echo "$BENCH_NAME: TRIALS and INTAKE_N must be >= 1" >&2
  exit 2
fi

WORK=$(mktemp -d /tmp/e2e-kafka-bridge.XXXXXX)
DAEMON_PID=""
BRIDGE_PID=""
MOCK_PID=""
STOPPED_PID=""  # the bridge while it is SIGSTOPped: cleanup continues it before stopping it
# shellcheck source=bench/support/e2e_lib.sh
. "$ROOT/bench/support/e2e_lib.sh"
DIE_FILES=(daemon.out daemon.err bridge.err mock.err)
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$PERF_PID" ] && kill -INT "$PERF_PID" 2>/dev/null
  [ -n "$STOPPED_PID" ] && kill -CONT "$STOPPED_PID" 2>/dev/null
  for p in $BRIDGE_PID $DAEMON_PID $MOCK_PID; do kill -TERM "$p" 2>/dev/null || true; done
  for p in $BRIDGE_PID $DAEMON_PID $MOCK_PID; do
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

# Waits (bounded) until process $1 is stopped (SIGSTOP is asynchronous).
wait_stopped() {
  local i
  for i in $(seq 1 200); do
    proc_state "$1" && [ "$PROC_STATE" = T ] && return 0
    nap 0.01
  done
  die "process $1 did not stop within 2 s after SIGSTOP"
}
# The bridge's /metrics → $WORK/bridge-metrics.txt (and $1 if given).
fetch_bridge_metrics() {
  http GET "$BRIDGE_METRICS" /metrics "" || die "GET the bridge's /metrics failed: $HTTP_BODY"
  printf '%s' "$HTTP_BODY" | tr -d '\r' >"$WORK/bridge-metrics.txt"
  [ -n "${1:-}" ] && cp "$WORK/bridge-metrics.txt" "$1"
  return 0
}
B_COMMITTED='ringcast_kafka_bridge_records_total{result="committed"}'
B_ACKED='ringcast_kafka_bridge_records_total{result="acked"}'
B_DUP='ringcast_kafka_bridge_records_total{result="duplicate"}'
B_DEAD='ringcast_kafka_bridge_records_total{result="dead_lettered"}'
B_REQUESTS=ringcast_kafka_bridge_requests_total
B_RETRIES=ringcast_kafka_bridge_transient_retries_total
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
# The events of gen_events as records for the mock's POST /produce: the payload is the record's
# value (a JSON string of it), tenant, id and type are headers (the bridge's headers mapping), and
# the partitions take turns.
gen_records() {  # TENANT PREFIX FIRST COUNT
  gen_events "$@" | LC_ALL=C awk -v parts="$PARTITIONS" '{
    p = index($0, "\"payload\":"); payload = substr($0, p + 10, length($0) - p - 10)
    split(substr($0, 1, p - 1), f, "\"")  # {"tenant":"T","id":"ID","type":"Y",
    gsub(/\\/, "\\\\", payload); gsub(/"/, "\\\"", payload)
    printf "{\"partition\":%d,\"value\":\"%s\",\"headers\":[[\"tenant\",\"%s\"],[\"id\",\"%s\"],[\"type\",\"%s\"]]}\n",
      (NR - 1) % parts, payload, f[4], f[8], f[12]
  }'
}

# ---- start ------------------------------------------------------------------------------------
mkdir -p "$WORK/bin"
cp "$RINGCAST_BIN" "$BRIDGE_BIN" "$MOCK_BIN" "$WORK/bin/"  # a snapshot: a rebuild cannot bite
BIN=$WORK/bin
NCPU=$(getconf _NPROCESSORS_ONLN)
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
log "ringcast e2e Kafka bridge benchmark: commit $COMMIT, $NCPU cores, QUICK=$QUICK, work dir $WORK"
log "daemon on core $SENDER_CPU; bridge, mock cluster and this script on core $SINK_CPU; shards $SHARDS," \
  "payload $PAYLOAD_BYTES B; $TRIALS x $INTAKE_N events per kind; bridge batch $BRIDGE_BATCH, $PARTITIONS partitions"
LOAD_START=$(loadavg)

taskset -c "$SINK_CPU" "$BIN/ringcast-kafka-mock" --brokers 3 --topic "$TOPIC:$PARTITIONS" \
  --topic "$DEAD_TOPIC:1" >"$WORK/mock.out" 2>"$WORK/mock.err" &
MOCK_PID=$!
for _ in $(seq 1 200); do grep -q "listening on" "$WORK/mock.out" 2>/dev/null && break; nap 0.05; done
grep -q "listening on" "$WORK/mock.out" || die "ringcast-kafka-mock did not start within 10 s"
MOCK=$(awk '/^listening on/ {print $3}' "$WORK/mock.out")
BOOTSTRAP=$(awk '/^bootstrap/ {print $2}' "$WORK/mock.out")

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
TOML
taskset -c "$SENDER_CPU" "$BIN/ringcast" serve --config "$WORK/ringcast.toml" \
  >"$WORK/daemon.out" 2>"$WORK/daemon.err" &
DAEMON_PID=$!
for _ in $(seq 1 600); do grep -q "listening on" "$WORK/daemon.out" 2>/dev/null && break; daemon_alive; nap 0.1; done
grep -q "listening on" "$WORK/daemon.out" || die "the daemon did not start within 60 s"
API=$(grep -o 'listening on [0-9.:]*' "$WORK/daemon.out" | awk '{print $3}')
RC=("$BIN/ringcast" --server "http://$API" --token "$TOKEN")

# The tenant's only endpoint is paused: no delivery is created (SPEC R9.1), nothing is sent to
# its URL (a closed loopback port, so that a delivery made by mistake would go nowhere).
out=$("${RC[@]}" --json endpoints create --tenant "$TENANT" --url "http://127.0.0.1:9/intake") ||
  die "endpoints create failed"
EP_ID=$(printf '%s' "$out" | grep -o '"id":"[0-9]*"' | head -1 | cut -d'"' -f4)
[ -n "$EP_ID" ] || die "no endpoint id in: $out"
"${RC[@]}" endpoints pause --tenant "$TENANT" "$EP_ID" >/dev/null || die "pause failed"

printf '%s\n' "$TOKEN" >"$WORK/token"
chmod 600 "$WORK/token"
cat >"$WORK/bridge.toml" <<TOML
[kafka]
brokers = "$BOOTSTRAP"
topics = ["$TOPIC"]
group_id = "bench"
[kafka.consumer_properties]
"session.timeout.ms" = 60000   # the bridge is SIGSTOPped while a trial's records are produced

[ringcast]
url = "http://$API"
token_file = "$WORK/token"
batch_max_events = $BRIDGE_BATCH
batch_max_wait = "$BRIDGE_WAIT"

[dead_letter]
topic = "$DEAD_TOPIC"

[metrics]
listen = "127.0.0.1:0"
TOML
taskset -c "$SINK_CPU" "$BIN/ringcast-kafka-bridge" --config "$WORK/bridge.toml" \
  >"$WORK/bridge.out" 2>"$WORK/bridge.err" &
BRIDGE_PID=$!
for _ in $(seq 1 300); do grep -q "kafka: assigned" "$WORK/bridge.err" 2>/dev/null && break; nap 0.1; done
grep -q "kafka: assigned" "$WORK/bridge.err" || die "the bridge was not assigned its partitions within 30 s"
BRIDGE_METRICS=$(grep -o 'metrics listening on [0-9.:]*' "$WORK/bridge.err" | awk '{print $4}')
log "mock cluster $BOOTSTRAP (control $MOCK, pid $MOCK_PID), daemon on $API (pid $DAEMON_PID)," \
  "bridge pid $BRIDGE_PID (metrics $BRIDGE_METRICS); tenant $TENANT, endpoint $EP_ID paused"

# ---- one Kafka trial: kafka_trial I ----------------------------------------------------------
kafka_trial() {
  local i=$1
  gen_records "$TENANT" "kafka$i" 1 "$INTAKE_N" >"$WORK/records.ndjson"
  settle
  fetch_metrics "$WORK/m-kafka$i-0.txt"
  fetch_bridge_metrics "$WORK/b-kafka$i-0.txt"
  [ "$i" = 1 ] && perf_start kafka
  local c0 c1 b0 b1 k0 k1 t0 t1 ts
  ts=$EPOCHREALTIME
  kill -STOP "$BRIDGE_PID"
  STOPPED_PID=$BRIDGE_PID
  wait_stopped "$BRIDGE_PID"
  curl -sS --max-time 120 --data-binary "@$WORK/records.ndjson" "http://$MOCK/produce?topic=$TOPIC" \
    >"$WORK/produce-$i.json" 2>&1 || { cat "$WORK/produce-$i.json" >&2; die "kafka $i: producing failed"; }
  grep -q "\"produced\":$INTAKE_N}" "$WORK/produce-$i.json" ||
    { cat "$WORK/produce-$i.json" >&2; die "kafka $i: the mock did not take $INTAKE_N records"; }
  cpu_ticks "$DAEMON_PID"; c0=$CPU_TICKS
  cpu_ticks "$BRIDGE_PID"; b0=$CPU_TICKS
  cpu_ticks "$MOCK_PID"; k0=$CPU_TICKS
  t0=$EPOCHREALTIME
  kill -CONT "$BRIDGE_PID"
  STOPPED_PID=""
  # Timed window: until the bridge has committed INTAKE_N more records.
  local want limit=$((SECONDS + TRIAL_TIMEOUT)) polls=0
  want=$(($(metric "$B_COMMITTED" "$WORK/b-kafka$i-0.txt") + INTAKE_N))
  while :; do
    nap 0.02
    polls=$((polls + 1))
    kill -0 "$DAEMON_PID" 2>/dev/null || die "the daemon exited during kafka trial $i"
    kill -0 "$BRIDGE_PID" 2>/dev/null || die "the bridge exited during kafka trial $i"
    fetch_bridge_metrics
    [ "$(metric "$B_COMMITTED" "$WORK/bridge-metrics.txt")" -ge "$want" ] && break
    [ $SECONDS -ge $limit ] &&
      die "kafka $i: committed $(metric "$B_COMMITTED" "$WORK/bridge-metrics.txt") (want $want) within $TRIAL_TIMEOUT s"
  done
  t1=$EPOCHREALTIME
  cpu_ticks "$DAEMON_PID"; c1=$CPU_TICKS
  cpu_ticks "$BRIDGE_PID"; b1=$CPU_TICKS
  cpu_ticks "$MOCK_PID"; k1=$CPU_TICKS
  [ "$i" = 1 ] && perf_stop kafka
  fetch_metrics "$WORK/m-kafka$i-1.txt"
  local b0f=$WORK/b-kafka$i-0.txt
  local accepted created acked dup dead requests retries
  accepted=$(metric_delta ringcast_events_accepted_total "$WORK/m-kafka$i-0.txt")
  created=$(metric_delta ringcast_deliveries_created_total "$WORK/m-kafka$i-0.txt")
  acked=$(metric_delta "$B_ACKED" "$b0f" "$WORK/bridge-metrics.txt")
  dup=$(metric_delta "$B_DUP" "$b0f" "$WORK/bridge-metrics.txt")
  dead=$(metric_delta "$B_DEAD" "$b0f" "$WORK/bridge-metrics.txt")
  requests=$(metric_delta "$B_REQUESTS" "$b0f" "$WORK/bridge-metrics.txt")
  retries=$(metric_delta "$B_RETRIES" "$b0f" "$WORK/bridge-metrics.txt")
  [ "$accepted" = "$INTAKE_N" ] || die "kafka $i: the daemon accepted $accepted events (bridge acked $acked, duplicate $dup, dead-lettered $dead), want $INTAKE_N"
  [ "$dead" = 0 ] || die "kafka $i: $dead records dead-lettered"
  [ "$created" = 0 ] || die "kafka $i: $created deliveries created (the endpoint is paused)"
  [ "$retries" = 0 ] || log "WARNING kafka $i: $retries transient retry rounds"
  local wall cpu rate per_cpu bridge_us mock_us
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
  cpu=$(div $((c1 - c0)) "$CLK_TCK" %.2f)
  rate=$(div "$INTAKE_N" "$wall")
  per_cpu=$(div "$INTAKE_N" "$cpu")
  bridge_us=$(div $(((b1 - b0) * 1000000 / CLK_TCK)) "$INTAKE_N" %.2f)
  mock_us=$(div $(((k1 - k0) * 1000000 / CLK_TCK)) "$INTAKE_N" %.2f)
  echo "$per_cpu $rate $bridge_us $mock_us" >>"$WORK/kafka.txt"
  KAFKA_PER_CPU=$per_cpu
  result "kafka$i: $INTAKE_N records in $wall s = $rate events/s wall; daemon $cpu CPU-s = $per_cpu events per daemon CPU-s;" \
    "bridge $bridge_us us CPU per event ($requests requests), mock cluster $mock_us us per event;" \
    "produce $(awk -v a="$ts" -v b="$t0" 'BEGIN {printf "%.2f", b - a}') s (bridge stopped); $polls polls"
  rm -f "$WORK/records.ndjson"
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
: >"$WORK/kafka.txt"
: >"$WORK/bulk.txt"
: >"$WORK/ratio.txt"
fetch_metrics "$WORK/m-start.txt"
fetch_bridge_metrics "$WORK/b-start.txt"
for i in $(seq 1 "$TRIALS"); do
  log "== pair $i of $TRIALS: kafka, then bulk"
  kafka_trial "$i"
  bulk_trial "$i"
  ratio=$(div "$KAFKA_PER_CPU" "$BULK_PER_CPU" %.3f)
  echo "$ratio" >>"$WORK/ratio.txt"
  result "pair $i: kafka/bulk per daemon CPU-s $ratio"
done
settle
fetch_metrics "$WORK/m-end.txt"
fetch_bridge_metrics "$WORK/b-end.txt"

kafka_med=$(awk '{print $1}' "$WORK/kafka.txt" | median)
kafka_wall_med=$(awk '{print $2}' "$WORK/kafka.txt" | median)
bridge_med=$(awk '{print $3}' "$WORK/kafka.txt" | median)
mock_med=$(awk '{print $4}' "$WORK/kafka.txt" | median)
bulk_med=$(awk '{print $1}' "$WORK/bulk.txt" | median)
bulk_wall_med=$(awk '{print $2}' "$WORK/bulk.txt" | median)
r_med=$(median <"$WORK/ratio.txt")
result "kafka bridge, median of $TRIALS: $kafka_wall_med events/s wall, $kafka_med events per daemon CPU-s;" \
  "the bridge $bridge_med us CPU per event, the mock cluster $mock_med us per event"
result "bulk route, median of $TRIALS: $bulk_wall_med events/s wall, $bulk_med events per daemon CPU-s"
result "ratio kafka/bulk per daemon CPU-s: median $r_med x of ($(paste -sd' ' "$WORK/ratio.txt"));" \
  "ratio of medians $(div "$kafka_med" "$bulk_med" %.3f) x (target >= 0.8)"
result "(check) whole run: bridge consumed $(metric_delta 'ringcast_kafka_bridge_records_total{result="consumed"}' "$WORK/b-start.txt" "$WORK/b-end.txt")," \
  "acked $(metric_delta "$B_ACKED" "$WORK/b-start.txt" "$WORK/b-end.txt"), duplicate $(metric_delta "$B_DUP" "$WORK/b-start.txt" "$WORK/b-end.txt")," \
  "dead-lettered $(metric_delta "$B_DEAD" "$WORK/b-start.txt" "$WORK/b-end.txt"), committed $(metric_delta "$B_COMMITTED" "$WORK/b-start.txt" "$WORK/b-end.txt");" \
  "deliveries created $(metric_delta ringcast_deliveries_created_total "$WORK/m-start.txt" "$WORK/m-end.txt"); store errors $(metric ringcast_store_errors_total "$WORK/m-end.txt")"

code=0
kill -TERM "$BRIDGE_PID"
wait "$BRIDGE_PID" || code=$?
BRIDGE_PID=""
[ "$code" = 0 ] || die "bridge exit code $code after SIGTERM"
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || code=$?
DAEMON_PID=""
[ "$code" = 0 ] || die "daemon exit code $code after SIGTERM"

{
  echo "== ringcast e2e Kafka bridge benchmark — $(date -u +%Y-%m-%dT%H:%MZ), commit $COMMIT, QUICK=$QUICK"
  echo "   $NCPU cores; load average at start $LOAD_START, at end $(loadavg); daemon on core $SENDER_CPU, bridge and mock cluster on core $SINK_CPU"
  echo "   $TRIALS pairs of $INTAKE_N events ($PAYLOAD_BYTES B payloads, $PAYLOAD_FILL); bridge batch $BRIDGE_BATCH, $PARTITIONS partitions; bulk --batch $INTAKE_BATCH -c $INTAKE_CONNS"
  for r in "${RESULTS[@]}"; do echo "   $r"; done
} | tee -a "$WORK/log.txt"
[ -n "${RESULTS_FILE:-}" ] && cp "$WORK/log.txt" "$RESULTS_FILE"
exit 0
