#!/usr/bin/env bash
# End-to-end benchmark of the ringcast daemon (docs/benchmarks.md), in one run, on loopback:
#   1. intake: N events of 1 KiB sent with `ringcast send` (bulk NDJSON) to a tenant whose only
#      endpoint is paused (R9.1: no delivery is created) → events/s and events per daemon CPU-s;
#   2. delivery: ringcast delivering N pre-ingested 1 KiB events (signed, attempts persisted
#      with storage.sync = "interval") to ringcast-sink, vs `wrk -t1 -c<pool size>` POSTing the
#      same body with the same headers to the same sink: deliveries per daemon CPU-second over
#      wrk requests per wrk CPU-second, median of TRIALS interleaved trials (A B A B ...), wall
#      rates; then p50/p99 delivery latency (creation → 2xx) under a paced live load;
#   3. memory: RSS per pending delivery with PENDING_N deliveries waiting on a retry in the
#      timer wheel (their first attempt was refused; the policy's next step is 1 h away).
# TLS=1 runs the same phases over TLS: the sink serves a self-signed certificate made at run
# time by `bench_net_transport --make-certs` (BENCH_BIN), the daemon trusts it through
# transport.ca_file, the endpoints and wrk use https:// (docs/benchmarks.md "End to end").
# The sink is pinned to SINK_CPU (default 1), the daemon and wrk to SENDER_CPU (default 0); this
# script and its helpers (CLI, curl, awk) also run on SINK_CPU, never on the sender's core.
# Bounded in time; cleans up its processes and its temp dir (KEEP=1 keeps the dir).
#
# Usage: bench/e2e_delivery.sh          full run (a few minutes on an idle 2-core machine)
#        QUICK=1 bench/e2e_delivery.sh  smoke run (~30 s idle)
# Knobs (environment): INTAKE_N DELIV_N TRIALS PENDING_N PENDING_CHUNKS LIVE_RATE LIVE_SECONDS
#   CONNECTIONS SHARDS PAYLOAD_BYTES SENDER_CPU SINK_CPU HOLD_VIA=refused|sink503 HOLD_PORT
#   PAYLOAD_FILL RECOVERY=1 PERF=1 PERF_ARGS RINGCAST_BIN SINK_BIN RESULTS_FILE KEEP TLS=1
#   BENCH_BIN. See docs/benchmarks.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  : "${INTAKE_N:=20000}" "${DELIV_N:=3000}" "${PENDING_N:=40000}" "${LIVE_SECONDS:=3}"
else
  : "${INTAKE_N:=100000}" "${DELIV_N:=20000}" "${PENDING_N:=1000000}" "${LIVE_SECONDS:=10}"
fi
TRIALS=${TRIALS:-5}
PENDING_CHUNKS=${PENDING_CHUNKS:-4}
LIVE_RATE=${LIVE_RATE:-500}  # events/s offered during the latency phase (in steps of 1/10 s)
CONNECTIONS=${CONNECTIONS:-32}  # daemon: pool_size and max_in_flight; wrk: -c
SHARDS=${SHARDS:-1}             # the daemon has one core: one shard
PAYLOAD_BYTES=${PAYLOAD_BYTES:-1024}
PAYLOAD_FILL=${PAYLOAD_FILL:-random}
SENDER_CPU=${SENDER_CPU:-0}
SINK_CPU=${SINK_CPU:-1}
HOLD_VIA=${HOLD_VIA:-refused}  # refused: a closed loopback port; sink503: the sink answers 503
HOLD_PORT=${HOLD_PORT:-9}      # for HOLD_VIA=refused: must be closed
INTAKE_BATCH=${INTAKE_BATCH:-1000}
INTAKE_CONNS=${INTAKE_CONNS:-4}
TRIAL_TIMEOUT=${TRIAL_TIMEOUT:-300}  # seconds, per timed delivery window
RINGCAST_BIN=${RINGCAST_BIN:-$ROOT/build/tools/ringcast}
SINK_BIN=${SINK_BIN:-$ROOT/build/tools/ringcast-sink}
TLS=${TLS:-0}                   # 1: the sink serves TLS, the daemon and wrk send https://
BENCH_BIN=${BENCH_BIN:-$ROOT/build/bench/bench_net_transport}  # TLS=1: makes the certificate
WRK_LUA=$ROOT/bench/wrk_post1k.lua

for tool in taskset wrk curl awk /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "e2e_delivery: $tool is required" >&2; exit 2; }
done
BINS=("$RINGCAST_BIN" "$SINK_BIN")
TARGETS="ringcast ringcast-sink"
case "$TLS" in
  0) ;;
  1) BINS+=("$BENCH_BIN"); TARGETS+=" bench_net_transport" ;;
  *) echo "e2e_delivery: TLS must be 0 or 1 (got '$TLS')" >&2; exit 2 ;;
esac
for b in "${BINS[@]}"; do
  [ -x "$b" ] || { echo "e2e_delivery: $b not found (cmake --build build --target $TARGETS)" >&2; exit 2; }
done
if [ "$TLS" = 1 ]; then
  SCHEME=https
  OVER=" over TLS"  # in the log and result lines of the TLS mode
else
  SCHEME=http
  OVER=""
fi
if [ "$TRIALS" -lt 1 ] || [ "$DELIV_N" -lt 1 ] || [ "$PENDING_CHUNKS" -lt 1 ]; then
  echo "e2e_delivery: TRIALS, DELIV_N and PENDING_CHUNKS must be >= 1" >&2
  exit 2
fi

WORK=$(mktemp -d /tmp/e2e-delivery.XXXXXX)
DAEMON_PID=""
SINK_PID=""
PERF_PID=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$PERF_PID" ] && kill -INT "$PERF_PID" 2>/dev/null
  for p in $DAEMON_PID $SINK_PID; do kill -TERM "$p" 2>/dev/null || true; done
  for p in $DAEMON_PID $SINK_PID; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "e2e_delivery: kept $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# This shell and everything it starts without an explicit taskset stay off the sender's core.
taskset -p -c "$SINK_CPU" $$ >/dev/null

# ---- helpers: bench/support/e2e_lib.sh (nap, log, result, die, daemon_alive, cpu_ticks,
# rss_kib, http, fetch_metrics, metric, perf_start/perf_stop, median, div), then this script's
# own. The ones used inside timed windows are bash builtins only: no fork.
BENCH_NAME=e2e_delivery
# shellcheck source=bench/support/e2e_lib.sh
. "$ROOT/bench/support/e2e_lib.sh"
DIE_FILES=(daemon.out daemon.err sink.err)

# TCP segments the host sent so far (all of loopback, both directions: a window's delta over its
# exchanges is the segments per exchange, ACKs included).
tcp_segs() {
  TCP_SEGS=$(awk '$1 == "Tcp:" && !h {for (i = 2; i <= NF; i++) if ($i == "OutSegs") c = i; h = 1; next}
                  $1 == "Tcp:" && h {print $c; exit}' /proc/net/snmp)
}
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

# The sink's control routes: sink_http METHOD PATH → HTTP_BODY (1 on failure). Plain: bash's
# /dev/tcp (the http helper), no fork. TLS=1: the sink speaks only TLS on its port, so each call
# is a curl process (on the sink's core, like this shell) trusting the sink's certificate, with
# a full TLS handshake of its own that the sink counts in tls_handshakes (SINK_CALLS counts the
# calls, so that tls_counts can take them out).
SINK_CALLS=0
sink_http() {
  SINK_CALLS=$((SINK_CALLS + 1))
  if [ "$TLS" = 1 ]; then
    local post=()
    [ "$1" = POST ] && post=(--data-binary "")
    HTTP_BODY=$(curl -sS --fail --noproxy '*' --max-time 10 --cacert "$WORK/tls/cert.pem" \
      -H 'Connection: close' "${post[@]}" "https://$SINK$2" 2>&1) || return 1
  else
    http "$1" "$SINK" "$2"
  fi
}
# The A window polls /_stats this often: 20 ms with the fork-free plain helper; with TLS=1
# every poll is a curl process on the sink's core (a few ms of CPU taken from the sink), so
# 50 ms, which coarsens the wall time of an A window (not the daemon's CPU time) a little.
if [ "$TLS" = 1 ]; then SINK_POLL=0.05; else SINK_POLL=0.02; fi
# The sink's counters: sink_stat NAME → STAT (from GET /_stats).
sink_stats() { sink_http GET /_stats; }
sink_stat() {
  [[ $HTTP_BODY =~ \"$1\":([0-9]+) ]] && STAT=${BASH_REMATCH[1]} || STAT=0
}
sink_reset() { sink_http POST /_reset || die "sink /_reset failed: $HTTP_BODY"; }
# TLS=1: the handshakes of a window from the last sink_stats. tls_counts CALLS_AT_RESET REQUESTS:
# the sink's full handshakes since its /_reset minus the control calls made since (one full
# handshake each: curl keeps no session between runs), per 10,000 requests the sink counted,
# and its resumed ones → TLS_FULL, TLS_PER_10K, TLS_TEXT.
tls_counts() {
  sink_stat tls_handshakes
  TLS_FULL=$((STAT - (SINK_CALLS - $1)))
  sink_stat tls_resumed
  TLS_PER_10K=$(div $((TLS_FULL * 10000)) "$2" %.2f)
  TLS_TEXT="full TLS handshakes $TLS_FULL ($TLS_PER_10K per 10k requests), resumed $STAT"
}

# Quantile q (0..1) of histogram NAME between two /metrics snapshots, in ms (linear inside a
# bucket, like Prometheus' histogram_quantile); "n/a" without samples, ">15000" past the last bound.
hist_quantile() {
  awk -v name="$1_bucket" -v q="$2" -v before="$3" '
    $1 ~ "^" name "\\{" {
      match($1, /le="[^"]*"/); le = substr($1, RSTART + 4, RLENGTH - 5)
      if (FILENAME == before) b[le] = $2; else { a[le] = $2; order[n++] = le }
    }
    END {
      total = a["+Inf"] - b["+Inf"]
      if (total <= 0) { print "n/a"; exit }
      target = q * total; prev = 0; lo = 0
      for (i = 0; i < n; i++) {
        le = order[i]; c = a[le] - b[le]
        if (c >= target) {
          if (le == "+Inf") { printf ">%d\n", lo * 1000; exit }
          frac = (c > prev) ? (target - prev) / (c - prev) : 1
          printf "%.1f\n", (lo + (le - lo) * frac) * 1000; exit
        }
        prev = c; if (le != "+Inf") lo = le
      }
    }' "$3" "$4"
}
hist_count() { echo $(($(metric "$1_count" "$3") - $(metric "$1_count" "$2"))); }

# NDJSON events: gen_events TENANT PREFIX FIRST COUNT; each payload is exactly PAYLOAD_BYTES.
# PAYLOAD_FILL=random (default): the data field is a window at a random offset of a 256 KiB random
# base64 text, so payloads do not compress away in the store; PAYLOAD_FILL=x: "xxx...".
gen_events() {
  awk -v tenant="$1" -v prefix="$2" -v first="$3" -v n="$4" -v size="$PAYLOAD_BYTES" \
    -v fillmode="$PAYLOAD_FILL" -v seed="$3" 'BEGIN {
    if (fillmode == "random") {
      srand(seed); a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
      for (j = 0; j < 256; j++) {
        c = ""; for (k = 0; k < 1024; k++) c = c substr(a, int(rand() * 64) + 1, 1)
        pad = pad c
      }
    } else {
      pad = "x"; while (length(pad) < size) pad = pad pad
    }
    span = length(pad) - size
    for (i = first; i < first + n; i++) {
      head = "{\"n\":" i ",\"data\":\""
      fill = size - length(head) - 2; if (fill < 0) fill = 0
      off = (fillmode == "random") ? int(rand() * span) + 1 : 1
      printf "{\"tenant\":\"%s\",\"id\":\"%s-%d\",\"type\":\"bench.event\",\"payload\":%s%s\"}}\n",
        tenant, prefix, i, head, substr(pad, off, fill)
    }
  }'
}
json_field() { grep -o "\"$1\":[0-9.]*" | head -1 | cut -d: -f2; }

# ringcast send; fails the run unless every line was accepted. send_events LABEL COUNT ARGS...
send_events() {
  local label=$1 n=$2 rc=0
  shift 2
  "${RC[@]}" --json send -q "$@" >"$WORK/send-$label.json" 2>"$WORK/send-$label.err" || rc=$?
  local acc
  acc=$(json_field accepted <"$WORK/send-$label.json")
  if [ "$rc" != 0 ] || [ "${acc:-0}" != "$n" ]; then
    cat "$WORK/send-$label.json" "$WORK/send-$label.err" >&2
    die "ringcast send ($label): exit $rc, accepted ${acc:-?} of $n events"
  fi
}

create_endpoint() {  # TENANT URL [endpoints create flags...] → EP_ID
  local tenant=$1 url=$2
  shift 2
  local out
  out=$("${RC[@]}" --json endpoints create --tenant "$tenant" --url "$url" \
    --max-in-flight "$CONNECTIONS" "$@") || die "endpoints create $tenant $url failed"
  EP_ID=$(printf '%s' "$out" | grep -o '"id":"[0-9]*"' | head -1 | cut -d'"' -f4)
  [ -n "$EP_ID" ] || die "no endpoint id in: $out"
}

# Waits until the daemon has nothing ready, pending or in flight except `ready_ok` ready ones
# held by a pause and `pending_ok` pending ones; bounded.
wait_quiet() {  # READY_OK PENDING_OK SECONDS
  local deadline=$((SECONDS + $3)) r p f
  while :; do
    daemon_alive
    fetch_metrics
    r=$(metric ringcast_deliveries_ready)
    p=$(metric ringcast_deliveries_pending)
    f=$(metric ringcast_deliveries_in_flight)
    [ "$r" = "$1" ] && [ "$p" = "$2" ] && [ "$f" = 0 ] && return 0
    [ $SECONDS -ge $deadline ] && die "not quiet after $3 s: ready=$r (want $1) pending=$p (want $2) in_flight=$f"
    nap 0.2
  done
}


# ---- start ------------------------------------------------------------------------------------
mkdir -p "$WORK/bin"
cp "$RINGCAST_BIN" "$SINK_BIN" "$WORK/bin/"  # a snapshot: a rebuild during the run cannot bite
[ "$TLS" = 1 ] && cp "$BENCH_BIN" "$WORK/bin/bench_net_transport"
BIN=$WORK/bin
NCPU=$(getconf _NPROCESSORS_ONLN)
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
log "ringcast e2e delivery benchmark: commit $COMMIT, $NCPU cores, QUICK=$QUICK, TLS=$TLS, work dir $WORK"
log "sender (daemon, wrk) on core $SENDER_CPU, sink on core $SINK_CPU; connections $CONNECTIONS, shards $SHARDS, payload $PAYLOAD_BYTES B"
LOAD_START=$(loadavg)

SINK_ARGS=(--listen 127.0.0.1:0 --port-file "$WORK/sink.port" --ids-file "" --quiet)
[ "$HOLD_VIA" = sink503 ] && SINK_ARGS+=(--fault '/hold=status=503')
if [ "$TLS" = 1 ]; then
  # A self-signed ECDSA P-256 certificate for 127.0.0.1 (CA:TRUE): the sink serves it, the
  # daemon (transport.ca_file) and curl (--cacert) trust it as their anchor; wrk verifies nothing.
  mkdir -p "$WORK/tls"
  "$BIN/bench_net_transport" --make-certs="$WORK/tls" >"$WORK/certs.err" 2>&1 ||
    die "bench_net_transport --make-certs failed: $(cat "$WORK/certs.err")"
  SINK_ARGS+=(--tls-cert "$WORK/tls/cert.pem" --tls-key "$WORK/tls/key.pem")
fi
taskset -c "$SINK_CPU" "$BIN/ringcast-sink" "${SINK_ARGS[@]}" >"$WORK/sink.out" 2>"$WORK/sink.err" &
SINK_PID=$!
for _ in $(seq 1 100); do [ -s "$WORK/sink.port" ] && break; nap 0.1; done
[ -s "$WORK/sink.port" ] || die "ringcast-sink did not start"
SINK=127.0.0.1:$(cat "$WORK/sink.port")
if [ "$TLS" = 1 ]; then
  sink_http GET /_health || die "the sink does not answer over TLS with its certificate: $HTTP_BODY"
fi

TOKEN="bench-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"  # >= 32 characters
# TLS=1: transport.ca_file is an extra CA bundle, trusted on top of the system's
# (docs/operations.md, [transport]).
TRANSPORT_TLS=""
[ "$TLS" = 1 ] && TRANSPORT_TLS="ca_file = \"$WORK/tls/cert.pem\"   # the sink's certificate"
cat >"$WORK/ringcast.toml" <<TOML
[server]
listen = "127.0.0.1:0"
api_token = "$TOKEN"

[storage]
data_dir = "$WORK/data"
sync = "interval"          # attempts and deliveries persisted, WAL synced every sync_interval
sync_interval = "10ms"

[engine]
shards = $SHARDS
max_in_flight = $CONNECTIONS

[transport]
allow_http = true
allow_private = ["127.0.0.0/8"]
pool_size = $CONNECTIONS
$TRANSPORT_TLS

# Phase 3: deliveries whose first attempt failed wait 1 h for the next one (no jitter).
[policies.hold]
base = "smengo"
ladder = ["1h", "1h"]
jitter = 0.0
TOML
taskset -c "$SENDER_CPU" "$BIN/ringcast" serve --config "$WORK/ringcast.toml" \
  >"$WORK/daemon.out" 2>"$WORK/daemon.err" &
DAEMON_PID=$!
for _ in $(seq 1 600); do grep -q "listening on" "$WORK/daemon.out" 2>/dev/null && break; daemon_alive; nap 0.1; done
grep -q "listening on" "$WORK/daemon.out" || die "the daemon did not start within 60 s"
API=$(grep -o 'listening on [0-9.:]*' "$WORK/daemon.out" | awk '{print $3}')
RC=("$BIN/ringcast" --server "http://$API" --token "$TOKEN")
RSS_EMPTY=$(rss_kib "$DAEMON_PID")
log "sink on $SINK (pid $SINK_PID), daemon on $API (pid $DAEMON_PID, RSS $RSS_EMPTY KiB)"

# ---- 1. intake on the bulk form ------------------------------------------------------------------
log "== 1. intake: $INTAKE_N events of $PAYLOAD_BYTES B, bulk NDJSON, endpoint paused"
create_endpoint intake "$SCHEME://$SINK/intake"
"${RC[@]}" endpoints pause --tenant intake "$EP_ID" >/dev/null || die "pause failed"
gen_events intake in 1 "$INTAKE_N" >"$WORK/intake.ndjson"
fetch_metrics "$WORK/m-intake0.txt"
perf_start intake
cpu_ticks "$DAEMON_PID"; c0=$CPU_TICKS
/usr/bin/time -f "%U %S %e" -o "$WORK/send-intake.time" \
  "${RC[@]}" --json send -q --batch "$INTAKE_BATCH" -c "$INTAKE_CONNS" "$WORK/intake.ndjson" \
  >"$WORK/send-intake.json" 2>"$WORK/send-intake.err" || true
cpu_ticks "$DAEMON_PID"; c1=$CPU_TICKS
perf_stop intake
acc=$(json_field accepted <"$WORK/send-intake.json")
[ "${acc:-0}" = "$INTAKE_N" ] || { cat "$WORK/send-intake.json" "$WORK/send-intake.err" >&2; die "intake: accepted ${acc:-?} of $INTAKE_N"; }
rm -f "$WORK/intake.ndjson"
fetch_metrics "$WORK/m-intake1.txt"
created=$(($(metric ringcast_deliveries_created_total) - $(metric ringcast_deliveries_created_total "$WORK/m-intake0.txt")))
accepted=$(($(metric ringcast_events_accepted_total) - $(metric ringcast_events_accepted_total "$WORK/m-intake0.txt")))
[ "$accepted" = "$INTAKE_N" ] || die "intake: the daemon counted $accepted accepted events, the client $INTAKE_N"
intake_rate=$(json_field events_per_second <"$WORK/send-intake.json")
intake_secs=$(json_field seconds <"$WORK/send-intake.json")
intake_cpu=$(div $((c1 - c0)) "$CLK_TCK" %.2f)
read -r cu cs _ <"$WORK/send-intake.time"
result "intake: $INTAKE_N events in ${intake_secs} s = $(printf %.0f "$intake_rate") events/s wall (target >= 100000);" \
  "daemon ${intake_cpu} CPU-s = $(div "$INTAKE_N" "$intake_cpu") events per daemon CPU-s;" \
  "client $(awk -v u="$cu" -v s="$cs" 'BEGIN {printf "%.2f", u + s}') CPU-s; deliveries created: $created"

# ---- 2. delivery vs wrk, interleaved ---------------------------------------------------------------
log "== 2. delivery$OVER: $TRIALS x (A: ringcast delivers $DELIV_N pre-ingested events; B: wrk -t1 -c$CONNECTIONS)"
: >"$WORK/a.txt"
: >"$WORK/b.txt"
: >"$WORK/ratio.txt"
: >"$WORK/ingest.txt"
: >"$WORK/tls_a.txt"
: >"$WORK/tls_b.txt"
fetch_metrics "$WORK/m-deliv0.txt"
for i in $(seq 1 "$TRIALS"); do
  tenant=deliv-$i
  # Pre-ingest: the endpoint is rate-limited to 1/s while the events come in (a paused endpoint
  # would get no deliveries at all, SPEC R9.1), then paused, un-limited and left to settle.
  create_endpoint "$tenant" "$SCHEME://$SINK/deliv/$i" --rate 1 --burst 1
  ep=$EP_ID
  fetch_metrics "$WORK/m-pre$i.txt"
  gen_events "$tenant" "$tenant" 1 "$DELIV_N" | send_events "ingest-$i" "$DELIV_N" -
  "${RC[@]}" endpoints pause --tenant "$tenant" "$ep" >/dev/null || die "pause failed"
  http PATCH "$API" "/v1/tenants/$tenant/endpoints/$ep" '{"rate_limit":{"per_second":0,"burst":0}}' \
    "Authorization: Bearer $TOKEN"$'\r\nContent-Type: application/json' || die "PATCH rate_limit failed: $HTTP_BODY"
  nap 1.2  # the last rate-limit timer (<= 1 s) expires
  # Everything not yet delivered is in the paused endpoint's queue (a refused first attempt
  # comes back from the wheel within ~5.5 s: smengo's first step, jitter included).
  pre=$(($(metric ringcast_deliveries_delivered_total) - $(metric ringcast_deliveries_delivered_total "$WORK/m-pre$i.txt")))
  deadline=$((SECONDS + 30))
  while :; do
    daemon_alive
    fetch_metrics
    pre=$(($(metric ringcast_deliveries_delivered_total) - $(metric ringcast_deliveries_delivered_total "$WORK/m-pre$i.txt")))
    held=$(metric ringcast_deliveries_ready)
    [ $((held + pre)) = "$DELIV_N" ] && [ "$(metric ringcast_deliveries_pending)" = 0 ] &&
      [ "$(metric ringcast_deliveries_in_flight)" = 0 ] && break
    [ $SECONDS -ge $deadline ] && die "trial $i: held $held + delivered $pre != $DELIV_N after 30 s"
    nap 0.2
  done
  cp "$WORK/metrics.txt" "$WORK/m-a$i-0.txt"
  sink_reset
  calls0=$SINK_CALLS
  [ "$i" = 1 ] && perf_start delivery
  # -- A: timed window = resume .. the sink has answered every held delivery.
  cpu_ticks "$SINK_PID"; s0=$CPU_TICKS
  tcp_segs; g0=$TCP_SEGS
  cpu_ticks "$DAEMON_PID"; c0=$CPU_TICKS
  t0=$EPOCHREALTIME
  http POST "$API" "/v1/tenants/$tenant/endpoints/$ep/resume" "" "Authorization: Bearer $TOKEN" ||
    die "resume failed: $HTTP_BODY"
  limit=$((SECONDS + TRIAL_TIMEOUT))
  while :; do
    sink_stats && sink_stat requests || STAT=0
    [ "$STAT" -ge "$held" ] && break
    if [ $SECONDS -ge $limit ]; then
      fetch_metrics
      die "trial $i: the sink got $STAT of $held deliveries within $TRIAL_TIMEOUT s"
    fi
    kill -0 "$DAEMON_PID" 2>/dev/null || die "the daemon exited during trial $i"
    nap "$SINK_POLL"
  done
  t1=$EPOCHREALTIME
  cpu_ticks "$DAEMON_PID"; c1=$CPU_TICKS
  tcp_segs; g1=$TCP_SEGS
  cpu_ticks "$SINK_PID"; s1=$CPU_TICKS
  sink_stat connections_open; conns=$((STAT - 1))  # minus this poll's own connection
  [ "$i" = 1 ] && perf_stop delivery
  # Check: the daemon agrees (every held delivery delivered, nothing else outstanding).
  deadline=$((SECONDS + 20))
  while :; do
    fetch_metrics "$WORK/m-a$i-1.txt"
    got=$(($(metric ringcast_deliveries_delivered_total) - $(metric ringcast_deliveries_delivered_total "$WORK/m-a$i-0.txt")))
    [ "$got" -ge "$held" ] && [ "$(metric ringcast_deliveries_ready)" = 0 ] && break
    [ $SECONDS -ge $deadline ] && die "trial $i: the sink answered $held but the daemon counts $got delivered"
    nap 0.1
  done
  sink_stats || die "sink /_stats failed after trial $i: $HTTP_BODY"
  sink_stat requests; sreq=$STAT
  sink_stat unique_ids; suniq=$STAT
  sink_stat 200; s200=$STAT
  [ "$s200" = "$sreq" ] || log "WARNING trial $i: sink answered $s200 of $sreq requests with 200"
  [ "$suniq" = "$sreq" ] || log "WARNING trial $i: $sreq requests for $suniq distinct ids (repeats)"
  a_tls=""
  if [ "$TLS" = 1 ]; then
    tls_counts "$calls0" "$sreq"
    a_tls="; $TLS_TEXT"
    echo "$TLS_PER_10K" >>"$WORK/tls_a.txt"
  fi
  a_wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
  a_cpu=$(div $((c1 - c0)) "$CLK_TCK" %.2f)
  a_rate=$(div "$held" "$a_wall")
  a_per_cpu=$(div "$held" "$a_cpu")
  a_p50=$(hist_quantile ringcast_attempt_duration_seconds 0.5 "$WORK/m-a$i-0.txt" "$WORK/m-a$i-1.txt")
  a_p99=$(hist_quantile ringcast_attempt_duration_seconds 0.99 "$WORK/m-a$i-0.txt" "$WORK/m-a$i-1.txt")
  echo "$a_per_cpu $a_rate $a_wall $a_cpu $a_p50 $a_p99" >>"$WORK/a.txt"
  ingest_rate=$(json_field events_per_second <"$WORK/send-ingest-$i.json")
  echo "$ingest_rate" >>"$WORK/ingest.txt"
  result "A$i ringcast$OVER: $held deliveries in $a_wall s = $a_rate/s wall; daemon $a_cpu CPU-s = $a_per_cpu per CPU-s;" \
    "attempt p50 ${a_p50} ms p99 ${a_p99} ms; daemon connections to the sink $conns; sink $(div $((s1 - s0)) "$CLK_TCK" %.2f) CPU-s; sent before the window $pre;" \
    "TCP segments per delivery $(div $((g1 - g0)) "$held" %.2f)$a_tls"

  # -- B: wrk, same sink, same body and headers, same connection count, comparable duration.
  dur=$(awk -v w="$a_wall" 'BEGIN {d = int(w + 0.999); if (d < 2) d = 2; if (d > 59) d = 59; print d}')
  sink_reset
  calls0=$SINK_CALLS
  cpu_ticks "$SINK_PID"; s0=$CPU_TICKS
  tcp_segs; g0=$TCP_SEGS
  BODY_BYTES=$PAYLOAD_BYTES /usr/bin/time -f "%U %S %e" -o "$WORK/wrk$i.time" \
    taskset -c "$SENDER_CPU" wrk -t1 -c"$CONNECTIONS" -d"${dur}s" --latency -s "$WRK_LUA" "$SCHEME://$SINK/deliv/$i" \
    >"$WORK/wrk$i.out" 2>&1 || { cat "$WORK/wrk$i.out" >&2; die "wrk failed"; }
  tcp_segs; g1=$TCP_SEGS
  cpu_ticks "$SINK_PID"; s1=$CPU_TICKS
  b_tls=""
  if [ "$TLS" = 1 ]; then
    sink_stats || die "sink /_stats failed after wrk$i: $HTTP_BODY"
    sink_stat requests; breq=$STAT
    tls_counts "$calls0" "$breq"
    b_tls="; $TLS_TEXT (of $breq requests the sink counted)"
    echo "$TLS_PER_10K" >>"$WORK/tls_b.txt"
  fi
  read -r wu ws _ <"$WORK/wrk$i.time"
  wreq=$(awk '/requests in/ {print $1}' "$WORK/wrk$i.out")
  wsecs=$(awk '/requests in/ {t = $4; sub(/,$/, "", t); if (t ~ /ms$/) {sub(/ms$/, "", t); t /= 1000} else sub(/s$/, "", t); print t}' "$WORK/wrk$i.out")
  grep -qE 'Non-2xx|Socket errors' "$WORK/wrk$i.out" && log "WARNING wrk$i: $(grep -E 'Non-2xx|Socket errors' "$WORK/wrk$i.out" | tr -s ' ')"
  b_cpu=$(awk -v u="$wu" -v s="$ws" 'BEGIN {printf "%.2f", u + s}')
  b_rate=$(div "${wreq:-0}" "${wsecs:-0}")
  b_per_cpu=$(div "${wreq:-0}" "$b_cpu")
  lat50=$(awk '$1 == "50%" {print $2}' "$WORK/wrk$i.out")
  lat99=$(awk '$1 == "99%" {print $2}' "$WORK/wrk$i.out")
  echo "$b_per_cpu $b_rate $wsecs $b_cpu" >>"$WORK/b.txt"
  ratio=$(div "$a_per_cpu" "$b_per_cpu" %.3f)
  echo "$ratio" >>"$WORK/ratio.txt"
  result "B$i wrk$OVER: ${wreq:-?} requests in ${wsecs:-?} s = $b_rate/s wall; wrk $b_cpu CPU-s = $b_per_cpu per CPU-s; latency p50 ${lat50:-?} p99 ${lat99:-?}; sink $(div $((s1 - s0)) "$CLK_TCK" %.2f) CPU-s; TCP segments per request $(div $((g1 - g0)) "${wreq:-0}" %.2f); ratio A/B per CPU-s $ratio$b_tls"
done
a_med=$(awk '{print $1}' "$WORK/a.txt" | median)
b_med=$(awk '{print $1}' "$WORK/b.txt" | median)
r_med=$(median <"$WORK/ratio.txt")
a_wall_med=$(awk '{print $2}' "$WORK/a.txt" | median)
b_wall_med=$(awk '{print $2}' "$WORK/b.txt" | median)
fetch_metrics "$WORK/m-deliv1.txt"
att_p50=$(hist_quantile ringcast_attempt_duration_seconds 0.5 "$WORK/m-deliv0.txt" "$WORK/m-deliv1.txt")
att_p99=$(hist_quantile ringcast_attempt_duration_seconds 0.99 "$WORK/m-deliv0.txt" "$WORK/m-deliv1.txt")
result "delivery$OVER per CPU-second, median of $TRIALS: ringcast $a_med deliveries/CPU-s, wrk $b_med requests/CPU-s;" \
  "median ratio $r_med x (ratio of medians $(div "$a_med" "$b_med" %.3f) x; target >= 1.0)"
result "(info) pre-ingest with fan-out to one endpoint, median: $(median <"$WORK/ingest.txt") events/s wall"
result "delivery wall rate$OVER, median: ringcast $a_wall_med deliveries/s, wrk $b_wall_med requests/s;" \
  "ringcast attempt duration (one HTTP exchange, $CONNECTIONS in flight) p50 $att_p50 ms p99 $att_p99 ms"
if [ "$TLS" = 1 ]; then
  result "(info) full TLS handshakes per 10k requests (the sink's count less its control calls)," \
    "median: ringcast $(median <"$WORK/tls_a.txt"), wrk $(median <"$WORK/tls_b.txt")"
fi

# ---- 2b. delivery latency under a paced live load ------------------------------------------------
LIVE_N=$((LIVE_RATE * LIVE_SECONDS))
step=$((LIVE_RATE / 10))
[ "$step" -ge 1 ] || step=1
log "== 2b. latency$OVER: $LIVE_N events offered at ~$LIVE_RATE/s ($step every 100 ms) to an enabled endpoint"
create_endpoint live "$SCHEME://$SINK/live"
gen_events live live 1 "$LIVE_N" >"$WORK/live.ndjson"
mkdir -p "$WORK/live"
split -l "$step" -a 5 "$WORK/live.ndjson" "$WORK/live/c."
fetch_metrics "$WORK/m-live0.txt"
lt0=$EPOCHREALTIME
(for f in "$WORK"/live/c.*; do cat "$f"; nap 0.1; done) |
  send_events live "$LIVE_N" --batch "$step" -c 2 -
lt1=$EPOCHREALTIME
deadline=$((SECONDS + 120))
while :; do
  daemon_alive
  fetch_metrics "$WORK/m-live1.txt"
  got=$(($(metric ringcast_deliveries_delivered_total) - $(metric ringcast_deliveries_delivered_total "$WORK/m-live0.txt")))
  [ "$got" -ge "$LIVE_N" ] && break
  [ $SECONDS -ge $deadline ] && die "latency phase: $got of $LIVE_N delivered after 120 s"
  nap 0.2
done
live_rate=$(awk -v n="$LIVE_N" -v a="$lt0" -v b="$lt1" 'BEGIN {printf "%.0f", n / (b - a)}')
lp50=$(hist_quantile ringcast_delivery_latency_seconds 0.5 "$WORK/m-live0.txt" "$WORK/m-live1.txt")
lp99=$(hist_quantile ringcast_delivery_latency_seconds 0.99 "$WORK/m-live0.txt" "$WORK/m-live1.txt")
lcount=$(hist_count ringcast_delivery_latency_seconds "$WORK/m-live0.txt" "$WORK/m-live1.txt")
rm -rf "$WORK/live" "$WORK/live.ndjson"
result "delivery latency$OVER (creation -> 2xx, from ringcast_delivery_latency_seconds, $lcount deliveries at ~$live_rate events/s achieved):" \
  "p50 $lp50 ms, p99 $lp99 ms"

# ---- 3. RSS per pending delivery ---------------------------------------------------------------
# With TLS=1 the URL is https:// too: HOLD_VIA=refused fails at connect, before any TLS, as in
# plain mode; HOLD_VIA=sink503 gets its 503 over TLS.
if [ "$HOLD_VIA" = sink503 ]; then
  HOLD_URL="$SCHEME://$SINK/hold"
else
  if (exec 3<>"/dev/tcp/127.0.0.1/$HOLD_PORT") 2>/dev/null; then
    die "HOLD_PORT $HOLD_PORT is open on 127.0.0.1; pick a closed one or HOLD_VIA=sink503"
  fi
  HOLD_URL="$SCHEME://127.0.0.1:$HOLD_PORT/hold"
fi
log "== 3. memory: $PENDING_N deliveries waiting on a retry ($HOLD_VIA: $HOLD_URL, next attempt in 1 h), in $PENDING_CHUNKS steps"
create_endpoint hold "$HOLD_URL" --policy hold
wait_quiet 0 0 60
rss0=$(rss_kib "$DAEMON_PID")
log "RSS before: $rss0 KiB"
chunk=$((PENDING_N / PENDING_CHUNKS))
cpu_ticks "$DAEMON_PID"; hc0=$CPU_TICKS
ht0=$EPOCHREALTIME
done_n=0
prev_rss=$rss0
: >"$WORK/rss.txt"
for c in $(seq 1 "$PENDING_CHUNKS"); do
  n=$chunk
  [ "$c" = "$PENDING_CHUNKS" ] && n=$((PENDING_N - done_n))
  gen_events hold hold $((done_n + 1)) "$n" | send_events "hold-$c" "$n" --batch "$INTAKE_BATCH" -c "$INTAKE_CONNS" -
  done_n=$((done_n + n))
  # Every one of them has had its first attempt and waits in the timer wheel.
  wait_quiet 0 "$done_n" $((120 + n / 500))
  rss=$(rss_kib "$DAEMON_PID")
  echo "$done_n $rss" >>"$WORK/rss.txt"
  log "pending $done_n: RSS $rss KiB (+$(div $(((rss - prev_rss) * 1024)) "$n" %.0f) B per delivery in this step)"
  prev_rss=$rss
done
cpu_ticks "$DAEMON_PID"; hc1=$CPU_TICKS
ht1=$EPOCHREALTIME
fetch_metrics
conn_fail=$(awk '$1 ~ /^ringcast_transport_failures_total/ && /kind="connect"/ {print $2}' "$WORK/metrics.txt")
per_total=$(div $(((rss - rss0) * 1024)) "$PENDING_N" %.0f)
half_n=$(awk -v h=$((PENDING_N / 2)) '$1 >= h {print $1; exit}' "$WORK/rss.txt")
half_rss=$(awk -v h=$((PENDING_N / 2)) '$1 >= h {print $2; exit}' "$WORK/rss.txt")
if [ "$half_n" != "$PENDING_N" ]; then
  slope=$(div $(((rss - half_rss) * 1024)) $((PENDING_N - half_n)) %.0f)
else
  slope=$per_total
fi
disk=$(du -sk "$WORK/data" | awk '{print $1}')
result "RSS per pending delivery: $PENDING_N pending ($(metric ringcast_deliveries_pending) in the wheel, connect failures $conn_fail):" \
  "RSS $rss0 -> $rss KiB (peak $(hwm_kib "$DAEMON_PID") KiB) = $per_total B per delivery overall," \
  "$slope B per delivery from $half_n to $PENDING_N (target <= 256); data dir $((disk / 1024)) MiB on disk"
hold_cpu=$(div $((hc1 - hc0)) "$CLK_TCK" %.1f)
outcomes=$(awk '$1 ~ /^ringcast_attempts_total\{/ {match($1, /"[a-z]+"/); printf "%s %s, ", substr($1, RSTART + 1, RLENGTH - 2), $2}' "$WORK/metrics.txt")
result "(check) whole run: attempts by outcome: ${outcomes%, };" \
  "refused before send $(awk '/^ringcast_transport_failures_total/ && /refused_before_send/ {print $2}' "$WORK/metrics.txt");" \
  "store errors $(metric ringcast_store_errors_total); failed $(metric ringcast_deliveries_failed_total); dead $(metric ringcast_deliveries_dead_total)"
result "(info) ingest with fan-out and a failed first attempt per delivery ($HOLD_VIA) until all wait in the wheel:" \
  "$PENDING_N in $(awk -v a="$ht0" -v b="$ht1" 'BEGIN {printf "%.1f", b - a}') s;" \
  "daemon $hold_cpu CPU-s = $(div "$PENDING_N" "$hold_cpu") per daemon CPU-s"

# ---- shutdown (and, with RECOVERY=1, a restart that recovers every pending delivery) ----------
stop_daemon() {
  local t_stop=$EPOCHREALTIME code=0
  kill -TERM "$DAEMON_PID"
  wait "$DAEMON_PID" || code=$?
  log "daemon stopped (SIGTERM) with exit code $code in $(awk -v a="$t_stop" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}') s"
  [ "$code" = 0 ] || die "daemon exit code $code after SIGTERM"
  DAEMON_PID=""
}
stop_daemon
if [ "${RECOVERY:-0}" = 1 ]; then
  log "== restart: recovering $PENDING_N pending deliveries"
  rt0=$EPOCHREALTIME
  : >"$WORK/daemon.out"
  taskset -c "$SENDER_CPU" "$BIN/ringcast" serve --config "$WORK/ringcast.toml" \
    >"$WORK/daemon.out" 2>>"$WORK/daemon.err" &
  DAEMON_PID=$!
  limit=$((SECONDS + 900))
  until grep -q "listening on" "$WORK/daemon.out" 2>/dev/null; do
    daemon_alive
    [ $SECONDS -ge $limit ] && die "the daemon did not recover within 900 s"
    nap 0.2
  done
  rt1=$EPOCHREALTIME
  API=$(grep -o 'listening on [0-9.:]*' "$WORK/daemon.out" | awk '{print $3}')
  wait_quiet 0 "$PENDING_N" 120
  rss_rec=$(rss_kib "$DAEMON_PID")
  cpu_ticks "$DAEMON_PID"
  result "after a restart: $PENDING_N pending recovered in $(awk -v a="$rt0" -v b="$rt1" 'BEGIN {printf "%.1f", b - a}') s" \
    "(daemon $(div "$CPU_TICKS" "$CLK_TCK" %.1f) CPU-s); RSS $rss_rec KiB vs $RSS_EMPTY KiB empty =" \
    "$(div $(((rss_rec - RSS_EMPTY) * 1024)) "$PENDING_N" %.0f) B per pending delivery"
  stop_daemon
fi

{
  echo "== ringcast e2e delivery benchmark$OVER — $(date -u +%Y-%m-%dT%H:%MZ), commit $COMMIT, QUICK=$QUICK, TLS=$TLS"
  echo "   $NCPU cores; load average at start $LOAD_START, at end $(loadavg); daemon+wrk on core $SENDER_CPU, sink on core $SINK_CPU"
  echo "   N: intake $INTAKE_N, delivery $DELIV_N x $TRIALS trials, latency $LIVE_N, pending $PENDING_N; $PAYLOAD_BYTES B payloads; $CONNECTIONS connections"
  for r in "${RESULTS[@]}"; do echo "   $r"; done
} | tee -a "$WORK/log.txt"
[ -n "${RESULTS_FILE:-}" ] && cp "$WORK/log.txt" "$RESULTS_FILE"
exit 0
