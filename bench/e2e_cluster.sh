#!/usr/bin/env bash
# What cluster mode costs per delivery (docs/benchmarks.md), in one run, on loopback:
# interleaved trials of the same ringcast binary, the same sink and the same load in
#   A  cluster mode: storage.backend = "redis" on a Redis Cluster of 3 primaries + 3 replicas
#      (tools/redis-cluster.sh: AOF on, appendfsync REDIS_FSYNC), storage.redis.wait_replicas
#      = WAIT_REPLICAS (1: every acknowledged write is on a replica, as production runs it),
#      [cluster] enabled with the default lease timings: one node owning all 256 partitions;
#   S  (SINGLE=1, the default) the same on one redis-server without replicas, wait_replicas 0:
#      a lower bound of what Redis costs;
#   B  single-node mode: RocksDB, storage.sync = "interval" (the default).
# Each trial submits EVENTS events of PAYLOAD_BYTES (bulk NDJSON with `ringcast send`, the
# tenants' lines interleaved) to TENANTS tenants of FANOUT endpoints each (all on
# ringcast-sink, always 200): deliveries = EVENTS x FANOUT. Timed from the first send until
# the sink has answered every delivery (then checked against /metrics).
# Per trial: deliveries per CPU-second, CPU = the daemon's + every redis-server's of the
# variant (utime + stime of all threads, children included: an AOF rewrite counts), from
# /proc/<pid>/stat; the CPU ratio A/B (and S/B) per pair; Redis commands per delivery: the
# daemon's own counters (/metrics ringcast_redis_commands_total, _round_trips_total = pipelined
# writes) and the servers' INFO commandstats deltas (calls, Lua's inner calls included), on the
# primaries and on the replicas apart; total_reads_processed on the primaries (read events:
# the server's side of a round trip). An idle phase first measures each variant's fixed cost
# (leases, heartbeats, Redis's cron and replication pings) per second.
# Pinning: every daemon on SENDER_CPU (default 0); the sink, every redis-server, the CLI and this
# script on SINK_CPU (default 1). The variants' daemons all run for the whole run (the idle
# ones cost ~nothing and are not counted).
# Bounded in time; stops every process it started and removes its temp dir (KEEP=1 keeps it).
#
# Usage: bench/e2e_cluster.sh          full run (~5 min on an idle 2-core machine)
#        QUICK=1 bench/e2e_cluster.sh  smoke run (~1 min)
# Knobs (environment): EVENTS FANOUT TENANTS TRIALS SINGLE=0|1 REDIS_FSYNC=always|everysec|no
#   REDIS_REPLICA_FSYNC (the cluster's replicas only; default REDIS_FSYNC)
#   WAIT_REPLICAS WAIT_TIMEOUT CONNECTIONS SHARDS PAYLOAD_BYTES PAYLOAD_FILL SEND_BATCH
#   SEND_CONNS IDLE_SECONDS TRIAL_TIMEOUT SENDER_CPU SINK_CPU PERF=1 PERF_ARGS PERF_REDIS=1 RINGCAST_BIN
#   SINK_BIN REDIS_SERVER REDIS_CLI RESULTS_FILE KEEP. See docs/benchmarks.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  : "${EVENTS:=1000}" "${FANOUT:=4}" "${TRIALS:=2}" "${IDLE_SECONDS:=2}"
else
  : "${EVENTS:=5000}" "${FANOUT:=8}" "${TRIALS:=5}" "${IDLE_SECONDS:=5}"
fi
TENANTS=${TENANTS:-8}
SINGLE=${SINGLE:-1}
REDIS_FSYNC=${REDIS_FSYNC:-always}  # tools/redis-cluster.sh's (and the standalone server's)
REDIS_REPLICA_FSYNC=${REDIS_REPLICA_FSYNC:-$REDIS_FSYNC}  # the cluster's replicas' (default: the same)
WAIT_REPLICAS=${WAIT_REPLICAS:-1}
WAIT_TIMEOUT=${WAIT_TIMEOUT:-100ms}  # the default of storage.redis.wait_timeout
CONNECTIONS=${CONNECTIONS:-32}       # transport.pool_size and engine.max_in_flight
SHARDS=${SHARDS:-1}                  # the daemon has one core: one shard
PAYLOAD_BYTES=${PAYLOAD_BYTES:-1024}
PAYLOAD_FILL=${PAYLOAD_FILL:-random}
# Lines per bulk request and concurrent requests of `ringcast send`. 100 x 2: bursts of 4 x 500
# lines (x 8 endpoints) put the cluster store into a replay loop on this machine (WAIT past
# wait_timeout, then replays past command_timeout; docs/benchmarks.md).
SEND_BATCH=${SEND_BATCH:-100}
SEND_CONNS=${SEND_CONNS:-2}
TRIAL_TIMEOUT=${TRIAL_TIMEOUT:-300}  # seconds, per timed window
SENDER_CPU=${SENDER_CPU:-0}
SINK_CPU=${SINK_CPU:-1}
RINGCAST_BIN=${RINGCAST_BIN:-$ROOT/build/tools/ringcast}
SINK_BIN=${SINK_BIN:-$ROOT/build/tools/ringcast-sink}
REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
REDIS_CLI=${REDIS_CLI:-/usr/bin/redis-cli}
BENCH_NAME=e2e_cluster

for tool in taskset awk paste "$REDIS_SERVER" "$REDIS_CLI"; do
  command -v "$tool" >/dev/null || { echo "$BENCH_NAME: $tool is required (tools/install-deps.sh)" >&2; exit 2; }
done
for b in "$RINGCAST_BIN" "$SINK_BIN"; do
  [ -x "$b" ] || { echo "$BENCH_NAME: $b not found (cmake --build build --target ringcast ringcast-sink)" >&2; exit 2; }
done
if [ "$TRIALS" -lt 1 ] || [ "$EVENTS" -lt "$TENANTS" ] || [ "$FANOUT" -lt 1 ] || [ "$TENANTS" -lt 1 ]; then
  echo "$BENCH_NAME: TRIALS, FANOUT, TENANTS must be >= 1 and EVENTS >= TENANTS" >&2
  exit 2
fi
case "$REDIS_FSYNC" in always | everysec | no) ;; *) echo "$BENCH_NAME: REDIS_FSYNC: always, everysec or no" >&2; exit 2 ;; esac
case "$REDIS_REPLICA_FSYNC" in always | everysec | no) ;; *) echo "$BENCH_NAME: REDIS_REPLICA_FSYNC: always, everysec or no" >&2; exit 2 ;; esac
PER_TENANT=$((EVENTS / TENANTS))
EVENTS=$((PER_TENANT * TENANTS))
DELIVERIES=$((EVENTS * FANOUT))

WORK=$(mktemp -d /tmp/e2e-cluster.XXXXXX)
DAEMON_PID=""
ALL_DAEMONS=()
SINK_PID=""
SREDIS_PID=""
PERF_PID=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$PERF_PID" ] && kill -INT "$PERF_PID" 2>/dev/null
  [ -n "${PERF_REDIS_PID:-}" ] && kill -INT "$PERF_REDIS_PID" 2>/dev/null
  local pids=("${ALL_DAEMONS[@]}") p f
  [ -n "$SINK_PID" ] && pids+=("$SINK_PID")
  [ -n "$SREDIS_PID" ] && pids+=("$SREDIS_PID")
  for f in "$WORK"/cluster/node-*/redis.pid; do [ -s "$f" ] && pids+=("$(cat "$f")"); done
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "$BENCH_NAME: kept $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# This shell and everything it starts without an explicit taskset stay off the daemons' core.
taskset -p -c "$SINK_CPU" $$ >/dev/null

# ---- helpers: bench/support/e2e_lib.sh (nap, log, result, die, http, fetch_metrics, metric,
# gen_events, json_field, perf_start/perf_stop, median, div), then this script's own.
# shellcheck source=bench/support/e2e_lib.sh
. "$ROOT/bench/support/e2e_lib.sh"
DIE_FILES=(a/daemon.err s/daemon.err b/daemon.err sink.err redis-s/redis.log)

# utime + stime + cutime + cstime of the processes named (clock ticks) → CPU_TICKS, the system
# part (stime + cstime) → CPU_SYS; builtins only.
cpu_sum() {
  local total=0 sys=0 s p
  local -a f
  for p in "$@"; do
    read -r s <"/proc/$p/stat" || die "process $p is gone"
    s=${s##*) }
    read -r -a f <<<"$s"
    total=$((total + f[11] + f[12] + f[13] + f[14]))
    sys=$((sys + f[12] + f[14]))
  done
  CPU_TICKS=$total
  CPU_SYS=$sys
}
ticks_s() { div "$1" "$CLK_TCK" %.2f; }

sink_stats() { http GET "$SINK" /_stats; }
sink_stat() { [[ $HTTP_BODY =~ \"$1\":([0-9]+) ]] && STAT=${BASH_REMATCH[1]} || STAT=0; }
sink_reset() { http POST "$SINK" /_reset || die "sink /_reset failed"; }

# ringcast send; fails the run unless every line was accepted. send_events LABEL COUNT ARGS...
send_events() {
  local label=$1 n=$2 rc=0 acc
  shift 2
  "${RC[@]}" --json send -q "$@" >"$WORK/send-$label.json" 2>"$WORK/send-$label.err" || rc=$?
  acc=$(json_field accepted <"$WORK/send-$label.json")
  if [ "$rc" != 0 ] || [ "${acc:-0}" != "$n" ]; then
    cat "$WORK/send-$label.json" "$WORK/send-$label.err" >&2
    die "ringcast send ($label): exit $rc, accepted ${acc:-?} of $n events"
  fi
}

# The variant whose daemon the helpers talk to: a (cluster), s (single redis), b (RocksDB).
# Sets API, DAEMON_PID, RC, TOKEN, REDIS_PIDS (all of the variant's redis-servers),
# PRIMARY_PORTS, REPLICA_PORTS.
declare -A V_API V_PID V_REDIS_PIDS V_PRIMARIES V_REPLICAS V_NAME
use() {
  V=$1
  API=${V_API[$V]}
  DAEMON_PID=${V_PID[$V]}
  RC=("$BIN/ringcast" --server "http://$API" --token "$TOKEN")
  read -r -a REDIS_PIDS <<<"${V_REDIS_PIDS[$V]:-}"
  read -r -a PRIMARY_PORTS <<<"${V_PRIMARIES[$V]:-}"
  read -r -a REPLICA_PORTS <<<"${V_REPLICAS[$V]:-}"
}
rcli() { "$REDIS_CLI" -h 127.0.0.1 -p "$@"; }

# INFO commandstats + stats of every server of the variant → $WORK/rs-LABEL-{p,r}-PORT.txt.
redis_snapshot() {
  local label=$1 port
  for port in "${PRIMARY_PORTS[@]}"; do
    rcli "$port" info all | tr -d '\r' >"$WORK/rs-$label-p-$port.txt" || die "INFO on $port failed"
  done
  for port in "${REPLICA_PORTS[@]}"; do
    rcli "$port" info all | tr -d '\r' >"$WORK/rs-$label-r-$port.txt" || die "INFO on $port failed"
  done
}
# Deltas between snapshots $1 and $2 over role $3 (p or r): "calls reads" (calls: INFO
# commandstats summed, without this script's own info/ping/role calls), and the per-command
# calls into $WORK/cmds-$2-$3.txt.
redis_delta() {
  local before=$1 after=$2 role=$3 port calls=0 reads=0
  local ports=()
  [ "$role" = p ] && ports=("${PRIMARY_PORTS[@]}") || ports=("${REPLICA_PORTS[@]}")
  : >"$WORK/cmds-$after-$role.txt"
  for port in "${ports[@]}"; do
    awk -F'[:=,]' -v out="$WORK/cmds-$after-$role.raw" '
      FNR == 1 { f++ }
      /^cmdstat_/ { c = substr($1, 9); if (c == "info" || c == "ping" || c == "role") next
                    v[f, c] = $3; cmds[c] = 1 }
      /^total_reads_processed:/ { r[f] = $2 }
      END {
        s = 0
        for (c in cmds) { d = v[2, c] - v[1, c]; s += d; if (d > 0) printf "%s %d\n", c, d >> out }
        printf "%d %d\n", s, r[2] - r[1]
      }' "$WORK/rs-$before-$role-$port.txt" "$WORK/rs-$after-$role-$port.txt" >"$WORK/rd.tmp"
    read -r c r <"$WORK/rd.tmp"
    calls=$((calls + c))
    reads=$((reads + r))
  done
  if [ -s "$WORK/cmds-$after-$role.raw" ]; then
    awk '{s[$1] += $2} END {for (c in s) print s[c], c}' "$WORK/cmds-$after-$role.raw" | sort -rn >"$WORK/cmds-$after-$role.txt"
    rm -f "$WORK/cmds-$after-$role.raw"
  fi
  echo "$calls $reads"
}
# "name x per delivery, ..." of the top commands in a cmds file.
top_cmds() { awk -v n="$2" 'NR <= 6 {printf "%s%s %.2f", (NR > 1 ? ", " : ""), $2, $1 / n}' "$1"; }

# PERF_REDIS=1: a flat profile of the cluster's redis-servers (all six, perf record -F 2999)
# during trial a1; the top symbols by process role go to the log. It perturbs the CPU figures.
PERF_REDIS_PID=""
perf_redis_start() {
  [ "${PERF_REDIS:-0}" = 1 ] || return 0
  local IFS=,
  perf record -F 2999 -p "$*" -o "$WORK/perf-redis.data" >/dev/null 2>"$WORK/perf-redis.err" &
  PERF_REDIS_PID=$!
  nap 0.5
}
perf_redis_stop() {
  [ -n "$PERF_REDIS_PID" ] || return 0
  kill -INT "$PERF_REDIS_PID" 2>/dev/null || true
  wait "$PERF_REDIS_PID" 2>/dev/null || true
  PERF_REDIS_PID=""
  log "perf profile of the redis-servers during a1, by object: $(perf report -i "$WORK/perf-redis.data" \
    --no-children --stdio --sort dso 2>/dev/null | awk '/^ +[0-9.]+%/ {printf "%s %s, ", $2, $1}' | cut -c1-400)"
  log "perf profile of the redis-servers during a1 (all six; top symbols, % of samples):"
  perf report -i "$WORK/perf-redis.data" --no-children --stdio --sort dso,symbol --percent-limit 0.7 \
    2>/dev/null | grep -E '^ +[0-9.]+%' | sed 's/ *- *- *$//' | cut -c1-160 | head -n 40 |
    tee -a "$WORK/log.txt" >&2 || true
}

# ---- start ------------------------------------------------------------------------------------
mkdir -p "$WORK/bin" "$WORK/a" "$WORK/s" "$WORK/b" "$WORK/events"
cp "$RINGCAST_BIN" "$SINK_BIN" "$WORK/bin/"  # a snapshot: a rebuild during the run cannot bite
BIN=$WORK/bin
NCPU=$(getconf _NPROCESSORS_ONLN)
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
REDIS_VERSION=$("$REDIS_SERVER" --version | grep -o 'v=[0-9.]*' | cut -d= -f2)
log "ringcast e2e cluster-mode benchmark: commit $COMMIT, $NCPU cores, QUICK=$QUICK, work dir $WORK"
log "daemons on core $SENDER_CPU; sink, redis $REDIS_VERSION, CLI on core $SINK_CPU; $TRIALS trials of $EVENTS events x $FANOUT endpoints" \
  "= $DELIVERIES deliveries ($TENANTS tenants); appendfsync $REDIS_FSYNC (replicas $REDIS_REPLICA_FSYNC), wait_replicas $WAIT_REPLICAS, shards $SHARDS"
LOAD_START=$(loadavg)

taskset -c "$SINK_CPU" "$BIN/ringcast-sink" --listen 127.0.0.1:0 --port-file "$WORK/sink.port" \
  --ids-file "" --quiet >"$WORK/sink.out" 2>"$WORK/sink.err" &
SINK_PID=$!
for _ in $(seq 1 100); do [ -s "$WORK/sink.port" ] && break; nap 0.1; done
[ -s "$WORK/sink.port" ] || die "ringcast-sink did not start"
SINK=127.0.0.1:$(cat "$WORK/sink.port")

# The Redis Cluster: tools/redis-cluster.sh (3 + 3, AOF, cluster-node-timeout 1 s) on a free
# port range (the ports and their cluster-bus ports + 10000), pinned to SINK_CPU.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
CLUSTER_SEEDS=""
for attempt in 1 2 3 4 5; do
  base=$((20000 + RANDOM % 25000))
  ok=1
  for k in 0 1 2 3 4 5; do port_free $((base + k)) && port_free $((base + k + 10000)) || ok=0; done
  [ "$ok" = 1 ] || continue
  rm -rf "$WORK/cluster"
  if CLUSTER_SEEDS=$(taskset -c "$SINK_CPU" "$ROOT/tools/redis-cluster.sh" start "$WORK/cluster" "$base" 2>"$WORK/cluster-start.err"); then
    break
  fi
  CLUSTER_SEEDS=""
  for f in "$WORK"/cluster/node-*/redis.pid; do [ -s "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  log "redis cluster on $base did not start (attempt $attempt): $(tail -n 1 "$WORK/cluster-start.err")"
done
[ -n "$CLUSTER_SEEDS" ] || die "the Redis Cluster did not start (5 attempts)"
pids=() prim=() repl=()
for k in 0 1 2 3 4 5; do
  port=$(cat "$WORK/cluster/node-$k/port")
  pids+=("$(cat "$WORK/cluster/node-$k/redis.pid")")
  fsync=$REDIS_FSYNC
  if [ "$(rcli "$port" role | head -1)" = master ]; then prim+=("$port"); else repl+=("$port"); fsync=$REDIS_REPLICA_FSYNC; fi
  [ "$fsync" = always ] || rcli "$port" config set appendfsync "$fsync" >/dev/null
done
{ [ "${#prim[@]}" = 3 ] && [ "${#repl[@]}" = 3 ]; } || die "expected 3 primaries and 3 replicas, got ${#prim[@]} + ${#repl[@]}"
V_REDIS_PIDS[a]="${pids[*]}"
V_PRIMARIES[a]="${prim[*]}"
V_REPLICAS[a]="${repl[*]}"
V_NAME[a]="cluster (3+3, WAIT $WAIT_REPLICAS)"
log "redis cluster: primaries ${prim[*]}, replicas ${repl[*]} (pids ${pids[*]})"

# The standalone server of variant S (no "port 0" in redis-server: take a free port, retry).
if [ "$SINGLE" = 1 ]; then
  mkdir -p "$WORK/redis-s"
  SREDIS_PORT=""
  for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 25000))
    port_free "$port" || continue
    cat >"$WORK/redis-s/redis.conf" <<CONF
bind 127.0.0.1
protected-mode yes
port $port
dir $WORK/redis-s
daemonize no
logfile $WORK/redis-s/redis.log
appendonly yes
appendfsync $REDIS_FSYNC
save ""
maxmemory 1gb
maxmemory-policy noeviction
CONF
    taskset -c "$SINK_CPU" "$REDIS_SERVER" "$WORK/redis-s/redis.conf" >"$WORK/redis-s/stdout" 2>&1 &
    SREDIS_PID=$!
    for _ in $(seq 1 100); do
      kill -0 "$SREDIS_PID" 2>/dev/null || break
      [ "$(rcli "$port" ping 2>/dev/null)" = PONG ] && { SREDIS_PORT=$port; break; }
      nap 0.05
    done
    [ -n "$SREDIS_PORT" ] && break
    kill -KILL "$SREDIS_PID" 2>/dev/null || true
    wait "$SREDIS_PID" 2>/dev/null || true
    SREDIS_PID=""
  done
  [ -n "$SREDIS_PORT" ] || die "redis-server did not start (5 attempts)"
  V_REDIS_PIDS[s]=$SREDIS_PID
  V_PRIMARIES[s]=$SREDIS_PORT
  V_REPLICAS[s]=""
  V_NAME[s]="one redis-server (WAIT 0)"
fi
V_NAME[b]="RocksDB"

# The daemons: the same binary and the same settings but the storage.
TOKEN="bench-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"  # >= 32 characters
CLUSTER_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
common_toml() {
  cat <<TOML
[server]
listen = "127.0.0.1:0"
api_token = "$TOKEN"

[engine]
shards = $SHARDS
max_in_flight = $CONNECTIONS

[transport]
allow_http = true
allow_private = ["127.0.0.0/8"]
pool_size = $CONNECTIONS

TOML
}
{
  common_toml
  cat <<TOML
[storage]
backend = "redis"
data_dir = "$WORK/a/data"
[storage.redis]
$CLUSTER_SEEDS
cluster = true
wait_replicas = $WAIT_REPLICAS
wait_timeout = "$WAIT_TIMEOUT"

[cluster]
enabled = true
secret = "$CLUSTER_SECRET"
node_id = "bench-a"
TOML
} >"$WORK/a/ringcast.toml"
if [ "$SINGLE" = 1 ]; then
  {
    common_toml
    cat <<TOML
[storage]
backend = "redis"
data_dir = "$WORK/s/data"
[storage.redis]
servers = ["127.0.0.1:$SREDIS_PORT"]
wait_replicas = 0

[cluster]
enabled = true
secret = "$CLUSTER_SECRET"
node_id = "bench-s"
TOML
  } >"$WORK/s/ringcast.toml"
fi
{
  common_toml
  cat <<TOML
[storage]
data_dir = "$WORK/b/data"
sync = "interval"          # the default: acknowledgements wait for an fsynced WAL (10 ms group commit)
sync_interval = "10ms"
TOML
} >"$WORK/b/ringcast.toml"

VARIANTS=(a b)
[ "$SINGLE" = 1 ] && VARIANTS=(a s b)
for v in "${VARIANTS[@]}"; do
  taskset -c "$SENDER_CPU" "$BIN/ringcast" serve --config "$WORK/$v/ringcast.toml" \
    >"$WORK/$v/daemon.out" 2>"$WORK/$v/daemon.err" &
  V_PID[$v]=$!
  ALL_DAEMONS+=("${V_PID[$v]}")
done
for v in "${VARIANTS[@]}"; do
  DAEMON_PID=${V_PID[$v]}
  for _ in $(seq 1 600); do grep -q "listening on" "$WORK/$v/daemon.out" 2>/dev/null && break; daemon_alive; nap 0.1; done
  grep -q "listening on" "$WORK/$v/daemon.out" || die "daemon $v did not start within 60 s"
  V_API[$v]=$(grep -o 'listening on [0-9.:]*' "$WORK/$v/daemon.out" | awk '{print $3}')
done
# The Redis-backed nodes own every partition before anything is sent.
for v in a s; do
  [ -n "${V_PID[$v]:-}" ] || continue
  use "$v"
  deadline=$((SECONDS + 60))
  until http GET "$API" /v1/cluster "" "Authorization: Bearer $TOKEN" &&
    [[ $HTTP_BODY =~ \"owned_count\":256 ]]; do
    daemon_alive
    [ $SECONDS -ge $deadline ] && die "daemon $v does not own the 256 partitions after 60 s: $HTTP_BODY"
    nap 0.2
  done
done
log "sink $SINK (pid $SINK_PID); daemons: $(for v in "${VARIANTS[@]}"; do printf '%s %s (pid %s); ' "$v" "${V_API[$v]}" "${V_PID[$v]}"; done)"

# Tenants and endpoints (the same on every variant), created once.
for v in "${VARIANTS[@]}"; do
  use "$v"
  for t in $(seq 1 "$TENANTS"); do
    for e in $(seq 1 "$FANOUT"); do
      http POST "$API" "/v1/tenants/t$t/endpoints" "{\"url\":\"http://$SINK/$v/t$t/e$e\",\"max_in_flight\":$CONNECTIONS}" \
        "Authorization: Bearer $TOKEN"$'\r\nContent-Type: application/json' ||
        die "endpoint create ($v t$t e$e) failed: $HTTP_BODY"
    done
  done
done

# ---- idle: each variant's fixed cost per second ---------------------------------------------------
: >"$WORK/idle.txt"
for v in "${VARIANTS[@]}"; do
  use "$v"
  fetch_metrics "$WORK/m-idle0-$v.txt"
  cpu_sum "$DAEMON_PID"; d0=$CPU_TICKS
  r0=0; [ ${#REDIS_PIDS[@]} -gt 0 ] && { cpu_sum "${REDIS_PIDS[@]}"; r0=$CPU_TICKS; }
  t0=$EPOCHREALTIME
  nap "$IDLE_SECONDS"
  t1=$EPOCHREALTIME
  cpu_sum "$DAEMON_PID"; d1=$CPU_TICKS
  r1=0; [ ${#REDIS_PIDS[@]} -gt 0 ] && { cpu_sum "${REDIS_PIDS[@]}"; r1=$CPU_TICKS; }
  fetch_metrics "$WORK/m-idle1-$v.txt"
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
  cmds=$(metric_delta ringcast_redis_commands_total "$WORK/m-idle0-$v.txt")
  rts=$(metric_delta ringcast_redis_round_trips_total "$WORK/m-idle0-$v.txt")
  dcpu=$(div $((d1 - d0)) "$CLK_TCK" %.4f)
  rcpu=$(div $((r1 - r0)) "$CLK_TCK" %.4f)
  echo "$v $(div "$dcpu" "$secs" %.4f) $(div "$rcpu" "$secs" %.4f) $(div "$cmds" "$secs" %.0f) $(div "$rts" "$secs" %.0f)" >>"$WORK/idle.txt"
  result "idle ${V_NAME[$v]}: daemon $(div "$dcpu" "$secs" %.4f) CPU-s/s, redis $(div "$rcpu" "$secs" %.4f) CPU-s/s;" \
    "$(div "$cmds" "$secs" %.0f) Redis commands/s in $(div "$rts" "$secs" %.0f) round trips/s (leases, heartbeats; over $secs s)"
done

# ---- trials -------------------------------------------------------------------------------------
# The events of a trial: PER_TENANT per tenant, the tenants' lines interleaved.
gen_trial_events() {  # TRIAL → $WORK/events/trial-N.ndjson
  local i=$1 t files=()
  for t in $(seq 1 "$TENANTS"); do
    gen_events "t$t" "r$i-t$t" $(((i - 1) * PER_TENANT + 1)) "$PER_TENANT" >"$WORK/events/r$i-t$t"
    files+=("$WORK/events/r$i-t$t")
  done
  paste -d '\n' "${files[@]}" >"$WORK/events/trial-$i.ndjson"
  rm -f "${files[@]}"
}

# One timed trial of variant $1, trial $2: appends a line to $WORK/trials-V.txt:
#   per_cpu wall total_cpu daemon_cpu redis_primary_cpu redis_replica_cpu client_cmds client_rts
#   primary_calls replica_calls primary_reads daemon_sys primary_sys replica_sys (CPU in seconds)
run_trial() {
  local v=$1 i=$2 label="$1$2"
  use "$v"
  local events=$WORK/events/trial-$i.ndjson
  fetch_metrics "$WORK/m-$label-0.txt"
  local d0 d1 p0=0 p1=0 q0=0 q1=0 t0 t1 ds0 ds1 ps0=0 ps1=0 qs0=0 qs1=0
  local ppids=() rpids=() k port
  # Which redis pids are primaries (by port order in the cluster dir).
  if [ "$v" = a ]; then
    for k in 0 1 2 3 4 5; do
      port=$(cat "$WORK/cluster/node-$k/port")
      if [[ " ${PRIMARY_PORTS[*]} " == *" $port "* ]]; then
        ppids+=("$(cat "$WORK/cluster/node-$k/redis.pid")")
      else
        rpids+=("$(cat "$WORK/cluster/node-$k/redis.pid")")
      fi
    done
  elif [ "$v" = s ]; then
    ppids=("$SREDIS_PID")
  fi
  [ ${#PRIMARY_PORTS[@]} -gt 0 ] && redis_snapshot "$label-0"
  sink_reset
  [ "$i" = 1 ] && [ "$v" = a ] && { perf_start "$label"; perf_redis_start "${ppids[@]}" "${rpids[@]}"; }
  # -- timed window: the first send .. the sink has answered every delivery.
  [ ${#ppids[@]} -gt 0 ] && { cpu_sum "${ppids[@]}"; p0=$CPU_TICKS; ps0=$CPU_SYS; }
  [ ${#rpids[@]} -gt 0 ] && { cpu_sum "${rpids[@]}"; q0=$CPU_TICKS; qs0=$CPU_SYS; }
  cpu_sum "$DAEMON_PID"; d0=$CPU_TICKS; ds0=$CPU_SYS
  t0=$EPOCHREALTIME
  send_events "$label" "$EVENTS" --batch "$SEND_BATCH" -c "$SEND_CONNS" "$events"
  local limit=$((SECONDS + TRIAL_TIMEOUT))
  while :; do
    sink_stats && sink_stat requests || STAT=0
    [ "$STAT" -ge "$DELIVERIES" ] && break
    if [ $SECONDS -ge $limit ]; then
      fetch_metrics
      die "trial $label: the sink got $STAT of $DELIVERIES deliveries within $TRIAL_TIMEOUT s"
    fi
    kill -0 "$DAEMON_PID" 2>/dev/null || die "daemon $v exited during trial $i"
    nap 0.02
  done
  t1=$EPOCHREALTIME
  cpu_sum "$DAEMON_PID"; d1=$CPU_TICKS; ds1=$CPU_SYS
  [ ${#ppids[@]} -gt 0 ] && { cpu_sum "${ppids[@]}"; p1=$CPU_TICKS; ps1=$CPU_SYS; }
  [ ${#rpids[@]} -gt 0 ] && { cpu_sum "${rpids[@]}"; q1=$CPU_TICKS; qs1=$CPU_SYS; }
  [ "$i" = 1 ] && [ "$v" = a ] && { perf_stop "$label"; perf_redis_stop; }
  [ ${#PRIMARY_PORTS[@]} -gt 0 ] && redis_snapshot "$label-1"
  fetch_metrics "$WORK/m-$label-1.txt"
  # Checks: the daemon counts every delivery delivered, the sink saw each id once, all 200.
  local deadline=$((SECONDS + 20)) got
  while :; do
    fetch_metrics "$WORK/m-$label-2.txt"
    got=$(metric_delta ringcast_deliveries_delivered_total "$WORK/m-$label-0.txt")
    [ "$got" -ge "$DELIVERIES" ] && [ "$(metric ringcast_deliveries_ready)" = 0 ] &&
      [ "$(metric ringcast_deliveries_pending)" = 0 ] && break
    [ $SECONDS -ge $deadline ] && die "trial $label: the sink answered $DELIVERIES but the daemon counts $got delivered"
    nap 0.1
  done
  local created sreq suniq s200
  created=$(metric_delta ringcast_deliveries_created_total "$WORK/m-$label-0.txt")
  [ "$created" = "$DELIVERIES" ] || die "trial $label: $created deliveries created, expected $DELIVERIES"
  sink_stats
  sink_stat requests; sreq=$STAT
  sink_stat unique_ids; suniq=$STAT
  sink_stat 200; s200=$STAT
  [ "$s200" = "$sreq" ] || log "WARNING trial $label: sink answered $s200 of $sreq requests with 200"
  # One webhook id per event, the same at each of its FANOUT endpoints.
  [ "$sreq" = "$DELIVERIES" ] || log "WARNING trial $label: the sink got $sreq requests for $DELIVERIES deliveries"
  [ "$suniq" = "$EVENTS" ] || log "WARNING trial $label: $suniq distinct webhook ids for $EVENTS events"
  local wall dcpu pcpu qcpu tcpu per_cpu ccmd crt pc rc pr
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
  dcpu=$(ticks_s $((d1 - d0)))
  pcpu=$(ticks_s $((p1 - p0)))
  qcpu=$(ticks_s $((q1 - q0)))
  tcpu=$(ticks_s $((d1 - d0 + p1 - p0 + q1 - q0)))
  per_cpu=$(div "$DELIVERIES" "$tcpu")
  ccmd=$(metric_delta ringcast_redis_commands_total "$WORK/m-$label-0.txt" "$WORK/m-$label-1.txt")
  crt=$(metric_delta ringcast_redis_round_trips_total "$WORK/m-$label-0.txt" "$WORK/m-$label-1.txt")
  pc=0 rc=0 pr=0
  if [ ${#PRIMARY_PORTS[@]} -gt 0 ]; then
    read -r pc pr < <(redis_delta "$label-0" "$label-1" p)
    [ ${#REPLICA_PORTS[@]} -gt 0 ] && read -r rc _ < <(redis_delta "$label-0" "$label-1" r)
  fi
  echo "$per_cpu $wall $tcpu $dcpu $pcpu $qcpu $ccmd $crt $pc $rc $pr $(ticks_s $((ds1 - ds0))) $(ticks_s $((ps1 - ps0))) $(ticks_s $((qs1 - qs0)))" >>"$WORK/trials-$v.txt"
  local line
  line="$label ${V_NAME[$v]}: $DELIVERIES deliveries in $wall s = $(div "$DELIVERIES" "$wall")/s wall;"
  line+=" CPU $tcpu s (daemon $dcpu"
  [ "$v" != b ] && line+=", redis primaries $pcpu, replicas $qcpu"
  line+="; of which system $(ticks_s $((ds1 - ds0 + ps1 - ps0 + qs1 - qs0)))"
  line+=" = daemon $(ticks_s $((ds1 - ds0)))"
  [ "$v" != b ] && line+=", primaries $(ticks_s $((ps1 - ps0))), replicas $(ticks_s $((qs1 - qs0)))"
  line+=") = $per_cpu deliveries per CPU-s"
  if [ "$v" != b ]; then
    line+="; per delivery: client $(div "$ccmd" "$DELIVERIES" %.3f) commands in $(div "$crt" "$DELIVERIES" %.3f) round trips,"
    line+=" server calls $(div "$pc" "$DELIVERIES" %.2f) on primaries ($(top_cmds "$WORK/cmds-$label-1-p.txt" "$DELIVERIES"))"
    [ ${#REPLICA_PORTS[@]} -gt 0 ] && line+=" + $(div "$rc" "$DELIVERIES" %.2f) on replicas"
    line+=", primary read events $(div "$pr" "$DELIVERIES" %.3f)"
  fi
  result "$line"
}

log "== trials: $TRIALS x (${VARIANTS[*]}), order reversed every other trial"
for v in "${VARIANTS[@]}"; do : >"$WORK/trials-$v.txt"; done
: >"$WORK/ratio-a.txt"
: >"$WORK/ratio-s.txt"
for i in $(seq 1 "$TRIALS"); do
  gen_trial_events "$i"
  order=("${VARIANTS[@]}")
  if [ $((i % 2)) = 0 ]; then
    order=()
    for ((k = ${#VARIANTS[@]} - 1; k >= 0; k--)); do order+=("${VARIANTS[$k]}"); done
  fi
  for v in "${order[@]}"; do run_trial "$v" "$i"; done
  rm -f "$WORK/events/trial-$i.ndjson"
  b_per=$(tail -n 1 "$WORK/trials-b.txt" | awk '{print $1}')
  for v in a s; do
    [ -s "$WORK/trials-$v.txt" ] || continue
    x_per=$(tail -n 1 "$WORK/trials-$v.txt" | awk '{print $1}')
    r=$(div "$b_per" "$x_per" %.3f)  # CPU per delivery of v over B's
    echo "$r" >>"$WORK/ratio-$v.txt"
    result "pair $i: CPU per delivery ${V_NAME[$v]} / RocksDB = $r x"
  done
done

# ---- summary -----------------------------------------------------------------------------------
col() { awk -v c="$1" '{print $c}' "$2"; }
minmax() { sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%s-%s", lo, hi}'; }
for v in "${VARIANTS[@]}"; do
  f=$WORK/trials-$v.txt
  line="${V_NAME[$v]}, median of $TRIALS: $(col 1 "$f" | median) deliveries per CPU-s ($(col 1 "$f" | minmax)),"
  line+=" $(awk '{print 1000000 * $3 / '"$DELIVERIES"'}' "$f" | median) CPU-us per delivery"
  line+=" (daemon $(awk '{print 1000000 * $4 / '"$DELIVERIES"'}' "$f" | median)"
  line+=" [system $(awk '{print 1000000 * $12 / '"$DELIVERIES"'}' "$f" | median)]"
  if [ "$v" != b ]; then
    line+=", redis primaries $(awk '{print 1000000 * $5 / '"$DELIVERIES"'}' "$f" | median)"
    line+=" [system $(awk '{print 1000000 * $13 / '"$DELIVERIES"'}' "$f" | median)]"
    line+=", replicas $(awk '{print 1000000 * $6 / '"$DELIVERIES"'}' "$f" | median)"
    line+=" [system $(awk '{print 1000000 * $14 / '"$DELIVERIES"'}' "$f" | median)]"
  fi
  line+="); wall $(awk '{print '"$DELIVERIES"' / $2}' "$f" | median) deliveries/s"
  if [ "$v" != b ]; then
    line+="; per delivery: client commands $(awk '{print $7 / '"$DELIVERIES"'}' "$f" | median),"
    line+=" round trips $(awk '{print $8 / '"$DELIVERIES"'}' "$f" | median),"
    line+=" primary calls $(awk '{print $9 / '"$DELIVERIES"'}' "$f" | median),"
    line+=" replica calls $(awk '{print $10 / '"$DELIVERIES"'}' "$f" | median),"
    line+=" primary read events $(awk '{print $11 / '"$DELIVERIES"'}' "$f" | median)"
  fi
  result "$line"
done
for v in a s; do
  [ -s "$WORK/ratio-$v.txt" ] || continue
  result "CPU per delivery ${V_NAME[$v]} / RocksDB: median $(median <"$WORK/ratio-$v.txt") x" \
    "(pairs: $(paste -sd' ' "$WORK/ratio-$v.txt"); target <= 2.0 for the cluster)"
done

{
  echo "== ringcast e2e cluster-mode benchmark — $(date -u +%Y-%m-%dT%H:%MZ), commit $COMMIT, QUICK=$QUICK"
  echo "   $NCPU cores; load average at start $LOAD_START, at end $(loadavg); daemons on core $SENDER_CPU, sink + redis $REDIS_VERSION + CLI on core $SINK_CPU"
  echo "   $TRIALS trials x $EVENTS events x $FANOUT endpoints = $DELIVERIES deliveries per trial, $TENANTS tenants, $PAYLOAD_BYTES B payloads;" \
    "appendfsync $REDIS_FSYNC (replicas $REDIS_REPLICA_FSYNC); wait_replicas $WAIT_REPLICAS (wait_timeout $WAIT_TIMEOUT); RocksDB sync interval 10ms; $CONNECTIONS connections, $SHARDS shard(s)"
  for r in "${RESULTS[@]}"; do echo "   $r"; done
} | tee -a "$WORK/log.txt"
[ -n "${RESULTS_FILE:-}" ] && cp "$WORK/log.txt" "$RESULTS_FILE"
exit 0
