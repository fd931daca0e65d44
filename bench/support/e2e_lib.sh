# shellcheck shell=bash disable=SC2034  # sets variables its callers read (CPU_TICKS, ...)
# Shell helpers of the end-to-end benchmark scripts (bench/e2e_*.sh), sourced, not run.
# Shared by bench/e2e_delivery.sh and bench/e2e_bus_intake.sh (each defines its own extras); the ones
# used inside timed windows are bash builtins only: they fork nothing.
# Before sourcing, the script sets BENCH_NAME (its name in messages) and WORK (its temp dir);
# die() prints the last lines of the files named in DIE_FILES (relative to WORK) and, if set,
# checks that DAEMON_PID is still alive.

exec {SLEEP_FD}<> <(:)
nap() { read -rt "$1" -u "$SLEEP_FD" || true; }
loadavg() { local a; read -r a < /proc/loadavg; echo "${a% * *}"; }
log() { printf '[%s load %s] %s\n' "$(date +%H:%M:%S)" "$(loadavg)" "$*" | tee -a "$WORK/log.txt" >&2; }
RESULTS=()
result() { RESULTS+=("$*"); log "$*"; }

DIE_FILES=()
die() {
  echo "$BENCH_NAME: FAILED: $*" >&2
  if [ -n "${DAEMON_PID:-}" ] && ! kill -0 "$DAEMON_PID" 2>/dev/null; then
    echo "$BENCH_NAME: the daemon (pid $DAEMON_PID) is gone" >&2
  fi
  local f
  for f in "${DIE_FILES[@]}"; do
    [ -s "$WORK/$f" ] && { echo "--- $f (last lines)" >&2; tail -n 15 "$WORK/$f" >&2; }
  done
  [ -s "$WORK/metrics.txt" ] && {
    echo "--- last /metrics (non-zero samples)" >&2
    awk '!/^#/ && $2 != 0' "$WORK/metrics.txt" | grep -v _bucket >&2 || true
  }
  exit 1
}
daemon_alive() { kill -0 "$DAEMON_PID" 2>/dev/null || die "the daemon exited (see daemon.err)"; }

CLK_TCK=$(getconf CLK_TCK)
# utime + stime of every thread of process $1, in clock ticks → CPU_TICKS.
cpu_ticks() {
  local s
  read -r s <"/proc/$1/stat" || return 1
  s=${s##*) }
  read -r -a f <<<"$s"
  CPU_TICKS=$((f[11] + f[12]))
}
# The process state letter of /proc/$1/stat (R, S, T, ...) → PROC_STATE.
proc_state() {
  local s
  read -r s <"/proc/$1/stat" || return 1
  s=${s##*) }
  PROC_STATE=${s%% *}
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# HTTP over bash's /dev/tcp: method, host:port, path, [body], [extra header line]. → HTTP_BODY.
http() {
  local method=$1 hp=$2 path=$3 body=${4:-} hdr=${5:-} fd resp
  HTTP_BODY=""
  exec {fd}<>"/dev/tcp/${hp%:*}/${hp##*:}" || return 1
  printf '%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%sContent-Length: %d\r\n\r\n%s' \
    "$method" "$path" "$hp" "${hdr:+$hdr$'\r\n'}" "${#body}" "$body" >&"$fd"
  IFS= read -r -d '' -t 10 -u "$fd" resp || true
  exec {fd}>&-
  [[ $resp == "HTTP/1.1 2"* ]] || { HTTP_BODY=$resp; return 1; }
  HTTP_BODY=${resp#*$'\r\n\r\n'}
}

fetch_metrics() {  # the daemon's (API) /metrics → $WORK/metrics.txt (and $1 if given)
  # /metrics is the platform's (docs/security.md): the admin token.
  http GET "$API" /metrics "" "Authorization: Bearer $TOKEN" || die "GET /metrics failed: $HTTP_BODY"
  printf '%s' "$HTTP_BODY" | tr -d '\r' >"$WORK/metrics.txt"
  [ -n "${1:-}" ] && cp "$WORK/metrics.txt" "$1"
  return 0
}
# A sample by its exact name with labels, e.g. 'x_total{source="a",result="b"}'; 0 if absent.
metric() { awk -v m="$1" '$1 == m {printf "%.0f\n", $2; f = 1} END {if (!f) print 0}' "${2:-$WORK/metrics.txt}"; }
# Its growth from snapshot $2 to snapshot $3 (default: the last fetch).
metric_delta() { echo $(($(metric "$1" "${3:-$WORK/metrics.txt}") - $(metric "$1" "$2"))); }

# 1 KiB-ish test events. gen_events TENANT PREFIX FIRST COUNT: NDJSON lines for the bulk route;
# gen_xadd STREAM TENANT PREFIX FIRST COUNT: the same events as RESP XADD commands (fields
# tenant, id, type, payload) for `redis-cli --pipe`. Each payload is exactly PAYLOAD_BYTES of
# JSON, {"n":..,"data":"..."}. PAYLOAD_FILL=random (default): the data field is a window at a
# random offset of a 256 KiB random base64 text, so payloads do not compress away in the store;
# PAYLOAD_FILL=x: "xxx...". The same (FIRST, COUNT) gives the same payloads in both forms.
gen_event_stream() {  # FORMAT STREAM TENANT PREFIX FIRST COUNT
  LC_ALL=C awk -v format="$1" -v stream="$2" -v tenant="$3" -v prefix="$4" -v first="$5" -v n="$6" \
    -v size="${PAYLOAD_BYTES:-1024}" -v fillmode="${PAYLOAD_FILL:-random}" -v seed="$5" '
  function bulk(s) { return "$" length(s) "\r\n" s "\r\n" }
  BEGIN {
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
    head_resp = "*11\r\n" bulk("XADD") bulk(stream) bulk("*") bulk("tenant") bulk(tenant) bulk("id")
    for (i = first; i < first + n; i++) {
      head = "{\"n\":" i ",\"data\":\""
      fill = size - length(head) - 2; if (fill < 0) fill = 0
      off = (fillmode == "random") ? int(rand() * span) + 1 : 1
      payload = head substr(pad, off, fill) "\"}"
      id = prefix "-" i
      if (format == "resp")
        printf "%s%s%s%s%s%s", head_resp, bulk(id), bulk("type"), bulk("bench.event"),
          bulk("payload"), bulk(payload)
      else
        printf "{\"tenant\":\"%s\",\"id\":\"%s\",\"type\":\"bench.event\",\"payload\":%s}\n",
          tenant, id, payload
    }
  }'
}
gen_events() { gen_event_stream ndjson "" "$@"; }
gen_xadd() { gen_event_stream resp "$@"; }
json_field() { grep -o "\"$1\":[0-9.]*" | head -1 | cut -d: -f2; }
json_string_field() { grep -o "\"$1\":\"[^\"]*\"" | head -1 | cut -d'"' -f4; }

# PERF=1: a flat profile of the daemon (perf record -F 2999) between perf_start LABEL and
# perf_stop LABEL; the top objects and symbols go to the log. It perturbs the CPU figures.
PERF_PID=""
perf_start() {
  [ "${PERF:-0}" = 1 ] || return 0
  # shellcheck disable=SC2086  # PERF_ARGS: extra perf record flags, e.g. "--call-graph dwarf"
  perf record -F 2999 ${PERF_ARGS:-} -p "$DAEMON_PID" -o "$WORK/perf-$1.data" >/dev/null 2>"$WORK/perf-$1.err" &
  PERF_PID=$!
  nap 0.5
}
perf_stop() {
  [ -n "$PERF_PID" ] || return 0
  kill -INT "$PERF_PID" 2>/dev/null || true
  wait "$PERF_PID" 2>/dev/null || true
  PERF_PID=""
  log "perf profile of the daemon during $1, by object: $(perf report -i "$WORK/perf-$1.data" \
    --no-children --stdio --sort dso 2>/dev/null | awk '/^ +[0-9.]+%/ {printf "%s %s, ", $2, $1}' |
    cut -c1-400)"
  log "perf profile of the daemon during $1 (top symbols, % of samples):"
  perf report -i "$WORK/perf-$1.data" --no-children --stdio --sort dso,symbol --percent-limit 0.7 \
    2>/dev/null | grep -E '^ +[0-9.]+%' | sed 's/ *- *- *$//' | cut -c1-160 | head -n 30 |
    tee -a "$WORK/log.txt" >&2 || true
}

median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
div() { awk -v a="$1" -v b="$2" -v f="${3:-%.0f}" 'BEGIN {if (b == 0) print "n/a"; else printf f "\n", a / b}'; }
