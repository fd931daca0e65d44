#!/usr/bin/env bash
# The main job, end to end on this machine: installs what building and running needs (not the
# test and benchmark peers), builds, starts a local
# ringcast-sink (with some faults) and the ringcast daemon on its embedded RocksDB store,
# registers endpoints for a few tenants, fans out a batch of events with a live progress
# line, waits for the deliveries to settle and prints what was delivered, retried and failed.
# Usage: tools/demo.sh [EVENTS]   (default 20000). Only loopback traffic.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${1:-20000}
TENANTS=4

bash tools/install-deps.sh runtime  # build + run only; the test peers come with tools/test.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 --target ringcast ringcast-sink

DEMO=$(mktemp -d /tmp/ringcast-demo.XXXXXX)
SINK_PID=""
DAEMON_PID=""
cleanup() {
  [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null || true
  [ -n "$SINK_PID" ] && kill "$SINK_PID" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT

wait_line() {  # file, pattern, seconds
  for _ in $(seq 1 $(($3 * 10))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "demo: timed out waiting for '$2' in $1" >&2
  cat "$1" >&2 || true
  return 1
}

SECRET="whsec_$(head -c 24 /dev/urandom | base64)"
echo "== starting ringcast-sink (faults: /flaky answers 503 20% of the time, /gone answers 410)"
./build/tools/ringcast-sink --listen 127.0.0.1:0 --ids-file "$DEMO/ids.txt" \
  --secret "$SECRET" --verify standard --seed 42 \
  --fault '/flaky=status=503:0.2' --fault '/gone=status=410:1' \
  >"$DEMO/sink.out" 2>"$DEMO/sink.err" &
SINK_PID=$!
wait_line "$DEMO/sink.out" "listening on" 10
SINK=$(grep -o 'listening on [0-9.:]*' "$DEMO/sink.out" | awk '{print $3}')

TOKEN="demo-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"  # >= 32 characters
cat >"$DEMO/ringcast.toml" <<TOML
[server]
listen = "127.0.0.1:0"
api_token = "$TOKEN"

[storage]
data_dir = "$DEMO/ringcast-data"
sync = "interval"
sync_interval = "10ms"

[engine]
shards = 2

[transport]
allow_http = true                  # the demo sink speaks plain HTTP on loopback
allow_private = ["127.0.0.0/8"]    # and loopback is a private range: allow it explicitly

# The smengo shape (SPEC R5: 8 attempts, jitter, auto-disable) with a demo-sized ladder.
[policies.demo]
base = "smengo"
ladder = ["100ms", "200ms", "400ms", "800ms", "1s", "1s", "1s"]
jitter = 0.1
TOML
echo "== starting ringcast serve (data in $DEMO/ringcast-data)"
./build/tools/ringcast serve --config "$DEMO/ringcast.toml" >"$DEMO/daemon.out" 2>"$DEMO/daemon.err" &
DAEMON_PID=$!
wait_line "$DEMO/daemon.out" "listening on" 30
API=$(grep -o 'listening on [0-9.:]*' "$DEMO/daemon.out" | awk '{print $3}')
export RINGCAST_SERVER="http://$API" RINGCAST_TOKEN="$TOKEN"
RC=(./build/tools/ringcast --server "http://$API" --token "$TOKEN")

echo "== registering endpoints: $TENANTS tenants x (/ok, /flaky), plus one /gone"
for t in $(seq 1 $TENANTS); do
  "${RC[@]}" endpoints create --tenant "shop-$t" --url "http://$SINK/ok/shop-$t" \
    --policy demo --secret "$SECRET" >/dev/null
  "${RC[@]}" endpoints create --tenant "shop-$t" --url "http://$SINK/flaky/shop-$t" \
    --policy demo --secret "$SECRET" --event-type 'payment.*' >/dev/null
done
"${RC[@]}" endpoints create --tenant shop-1 --url "http://$SINK/gone/shop-1" \
  --policy demo --secret "$SECRET" >/dev/null
"${RC[@]}" endpoints list --tenant shop-1

echo "== sending $EVENTS events (NDJSON bulk intake)"
awk -v n="$EVENTS" -v t="$TENANTS" 'BEGIN {
  srand(7);
  for (i = 1; i <= n; i++) {
    type = (i % 3 == 0) ? "order.created" : "payment.status_changed";
    printf "{\"tenant\":\"shop-%d\",\"id\":\"evt-%d\",\"type\":\"%s\",\"payload\":{\"n\":%d,\"status\":\"paid\",\"amount\":%d}}\n", (i % t) + 1, i, type, i, int(rand() * 10000)
  }
}' >"$DEMO/events.ndjson"
"${RC[@]}" send "$DEMO/events.ndjson"

echo "== waiting for deliveries to settle"
fetch_metrics() {  # GET /metrics with bash's /dev/tcp (the admin token: the figures are the platform's)
  local host=${API%:*} port=${API##*:}
  exec 3<>"/dev/tcp/$host/$port" || return 1
  printf 'GET /metrics HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n' "$API" "$TOKEN" >&3
  sed '1,/^\r\{0,1\}$/d' <&3 | tr -d '\r' >"$DEMO/metrics.txt"
  exec 3<&-
}
metric() { awk -v m="$1" '$1 == m {print $2}' "$DEMO/metrics.txt" | head -1; }
metric_label() { grep "^$1{$2}" "$DEMO/metrics.txt" | awk '{print $2}' | head -1; }
for _ in $(seq 1 600); do
  fetch_metrics || true
  busy=$(awk '/^ringcast_deliveries_(pending|ready|in_flight) /{s += $2} END {print s + 0}' "$DEMO/metrics.txt")
  [ "$busy" = "0" ] && [ -s "$DEMO/metrics.txt" ] && break
  printf '\r  pending+ready+in-flight: %-10s' "$busy"
  sleep 0.2
done
echo

created=$(metric ringcast_deliveries_created_total)
delivered=$(metric ringcast_deliveries_delivered_total)
failed=$(metric ringcast_deliveries_failed_total)
dead=$(metric ringcast_deliveries_dead_total)
attempts=$(awk '/^ringcast_attempts_total\{/{s += $2} END {print s + 0}' "$DEMO/metrics.txt")
retryable=$(metric_label ringcast_attempts_total 'outcome="retryable"')
disabled=$(metric ringcast_endpoints_disabled_total)
sink_unique=$(sort -u -k1,1 "$DEMO/ids.txt" | wc -l)
bad_sigs=$(grep -c ' 401$' "$DEMO/ids.txt" || true)

echo "== summary"
printf '  events sent              %s\n' "$EVENTS"
printf '  deliveries created       %s\n' "${created:-0}"
printf '  delivered (2xx)          %s\n' "${delivered:-0}"
printf '  attempts in all          %s (retryable failures: %s)\n' "$attempts" "${retryable:-0}"
printf '  failed / dead            %s / %s\n' "${failed:-0}" "${dead:-0}"
printf '  endpoints auto-disabled  %s (the /gone endpoint, SPEC R8)\n' "${disabled:-0}"
printf '  sink: distinct event ids %s, bad signatures %s\n' "$sink_unique" "$bad_sigs"
echo "  recent deliveries of shop-1:"
"${RC[@]}" deliveries recent --tenant shop-1 | head -8
echo "  merchant portal of shop-1 (a link for 10 minutes; DEMO_HOLD=1 keeps the daemon up for it):"
"${RC[@]}" portal link --tenant shop-1 --ttl-seconds 600 | sed -n 1p | sed 's/^/    /'
if [ -n "${DEMO_HOLD:-}" ]; then
  echo "== holding the daemon for the portal: Ctrl-C stops it"
  trap 'kill -TERM "$DAEMON_PID" 2>/dev/null' INT
  wait "$DAEMON_PID" && echo "== daemon stopped cleanly (SIGTERM)"
else
  kill -TERM "$DAEMON_PID"
  wait "$DAEMON_PID" && echo "== daemon stopped cleanly (SIGTERM)"
fi
DAEMON_PID=""
