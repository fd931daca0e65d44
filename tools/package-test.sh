#!/usr/bin/env bash
# The Debian packages end to end (docs/packaging.md): `cpack -G DEB` in a build dir, then on this
# machine: dpkg -i (the service is not started where systemd does not run), systemd-analyze
# verify of the unit, the system user, the data dir, the generated admin token and the conffile;
# then the daemon started as the unit says (its ExecStart, User, Group, EnvironmentFile, UMask
# and LimitNOFILE, through setpriv, on a loopback port of its own), an endpoint on a local
# ringcast-sink, an event delivered, SIGTERM answered by exit 0 within TimeoutStopSec; where
# systemd runs, also the unit itself under systemctl (its sandbox); finally dpkg -r (config and
# data stay) and dpkg -P (they go, the system user stays). Every wait is bounded, everything
# listens on loopback, and an EXIT trap stops what it started and purges the packages.
# Run as root (tools/test.sh runs it after the Release stage's tests when it is root).
# Usage: tools/package-test.sh BUILD_DIR      (a configured and built build dir)
#        tools/package-test.sh --debs DIR     (test the ringcast*.deb already in DIR)
set -euo pipefail

usage() {
  echo "usage: $0 BUILD_DIR | --debs DIR" >&2
  exit 2
}
[ $# -ge 1 ] || usage
BUILD=""
DEBS_IN=""
case "$1" in
  --debs)
    [ $# -eq 2 ] || usage
    DEBS_IN=$(cd "$2" && pwd)
    ;;
  -*) usage ;;
  *)
    [ $# -eq 1 ] || usage
    BUILD=$(cd "$1" && pwd)
    ;;
esac
if [ "$(id -u)" != 0 ]; then
  echo "package-test: needs root (dpkg -i, a system user)" >&2
  exit 2
fi

UNIT=/lib/systemd/system/ringcast.service
CONF=/etc/ringcast/ringcast.toml
TOKEN_FILE=/etc/ringcast/api-token.env
DATA=/var/lib/ringcast
PKGS=(ringcast ringcast-sink)

failures=0
pass() { echo "PASS: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
die() {  # a failure after which the rest cannot run
  echo "FAIL: $*"
  exit 1
}
note() { echo "package-test: $*"; }

for tool in dpkg dpkg-deb dpkg-query systemd-analyze setpriv curl python3 od file; do
  command -v "$tool" >/dev/null || die "$tool is not installed (tools/install-deps.sh test)"
done
[ -z "$BUILD" ] || command -v cpack >/dev/null || die "cpack is not installed"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
known_to_dpkg() { dpkg-query -W -f='${Status}' "$1" >/dev/null 2>&1 &&
  ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "not-installed"; }

# A ringcast package already here is someone's: not ours to replace, except on CI's throwaway
# machine, where it can only be an earlier run's that was killed before its trap.
for p in "${PKGS[@]}"; do
  if known_to_dpkg "$p"; then
    if [ "${CI:-}" = true ]; then
      note "purging $p left by an earlier run"
      dpkg -P "$p" >/dev/null
    else
      die "the package $p is installed already: remove it first (dpkg -P ${PKGS[*]})"
    fi
  fi
done

WORK=$(mktemp -d /tmp/ringcast-package-test.XXXXXX)
chmod 0755 "$WORK"  # the sink's and the daemon's output files are written here
DAEMON_PID=""
SINK_PID=""
OWN_POLICY=0
DROPIN_DIR=/run/systemd/system/ringcast.service.d
cleanup() {
  local rc=$?
  set +e
  for pid in $DAEMON_PID $SINK_PID; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
    fi
  done
  if [ -d /run/systemd/system ] && [ -d "$DROPIN_DIR" ]; then
    systemctl stop ringcast.service >/dev/null 2>&1
    rm -rf "$DROPIN_DIR"
    systemctl daemon-reload >/dev/null 2>&1
  fi
  for p in "${PKGS[@]}"; do
    if known_to_dpkg "$p"; then dpkg -P "$p" >/dev/null 2>&1; fi
  done
  [ "$OWN_POLICY" = 1 ] && rm -f /usr/sbin/policy-rc.d
  if [ "$rc" != 0 ] || [ "$failures" != 0 ]; then
    for f in cpack.log dpkg-install.log daemon.out daemon.err sink.out; do
      [ -s "$WORK/$f" ] && { echo "--- $f (last 40 lines)"; tail -n 40 "$WORK/$f"; }
    done
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

# Polls a command until it succeeds, at most $1 seconds (tenths of a second apart); gives up at
# once when it returns 2 (what it waits for cannot come any more).
wait_for() {
  local secs=$1 rc
  shift
  local deadline=$((SECONDS + secs))
  while true; do
    rc=0
    "$@" || rc=$?
    [ "$rc" != 0 ] || return 0
    [ "$rc" != 2 ] || return 2
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.1
  done
}

# --- the packages ------------------------------------------------------------------------------
DEBS="$WORK/debs"
mkdir -p "$DEBS"
if [ -n "$BUILD" ]; then
  note "cpack -G DEB in $BUILD"
  if (cd "$BUILD" && timeout 600 cpack -G DEB -B "$DEBS") >"$WORK/cpack.log" 2>&1; then
    pass "cpack -G DEB made the packages"
  else
    die "cpack -G DEB failed"
  fi
else
  cp "$DEBS_IN"/ringcast_*.deb "$DEBS_IN"/ringcast-sink_*.deb "$DEBS/" 2>/dev/null ||
    die "no ringcast_*.deb and ringcast-sink_*.deb in $DEBS_IN"
  cp "$DEBS_IN"/ringcast-kafka-bridge_*.deb "$DEBS/" 2>/dev/null || true
fi
shopt -s nullglob
main_debs=("$DEBS"/ringcast_*.deb)
sink_debs=("$DEBS"/ringcast-sink_*.deb)
bridge_debs=("$DEBS"/ringcast-kafka-bridge_*.deb)  # built where librdkafka is (bridge/kafka)
shopt -u nullglob
DEB_BRIDGE=""
if [ ${#bridge_debs[@]} = 1 ]; then
  DEB_BRIDGE=${bridge_debs[0]}
  PKGS+=(ringcast-kafka-bridge)
fi
if [ ${#main_debs[@]} != 1 ] || [ ${#sink_debs[@]} != 1 ]; then
  die "expected one ringcast_*.deb and one ringcast-sink_*.deb, found: ${main_debs[*]} ${sink_debs[*]}"
fi
DEB_MAIN=${main_debs[0]}
DEB_SINK=${sink_debs[0]}

# dpkg-shlibdeps' work: the libraries the binaries link, BoringSSL's among them.
deps=$(dpkg-deb -f "$DEB_MAIN" Depends)
if [[ "$deps" == *libc6* && "$deps" == *android-libboringssl* && "$deps" == *adduser* ]]; then
  pass "ringcast's Depends come from dpkg-shlibdeps ($deps)"
else
  fail "ringcast's Depends lack libc6, android-libboringssl or adduser: '$deps'"
fi
if [[ "$(dpkg-deb -f "$DEB_SINK" Depends)" == *libc6* ]]; then
  pass "ringcast-sink's Depends come from dpkg-shlibdeps"
else
  fail "ringcast-sink's Depends lack libc6: '$(dpkg-deb -f "$DEB_SINK" Depends)'"
fi
contents=$(dpkg-deb -c "$DEB_MAIN")
for path in ./usr/bin/ringcast ./lib/systemd/system/ringcast.service ./etc/ringcast/ringcast.toml \
  ./usr/share/man/man1/ringcast.1.gz; do
  if grep -q " $path\$" <<<"$contents"; then
    pass "ringcast ships $path"
  else
    fail "ringcast does not ship $path"
  fi
done
if dpkg-deb -c "$DEB_SINK" | grep -q ' ./usr/share/man/man1/ringcast-sink.1.gz$'; then
  pass "ringcast-sink ships its man page"
else
  fail "ringcast-sink ships no man page"
fi

# --- install -----------------------------------------------------------------------------------
# Where systemd runs, the postinst would start the service: a policy-rc.d forbids that while the
# packages go in (deb-systemd-invoke asks it), so that this test's own daemon has the data dir.
if [ -d /run/systemd/system ] && [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# tools/package-test.sh: no service starts while it installs\nexit 101\n' \
    >/usr/sbin/policy-rc.d
  chmod 0755 /usr/sbin/policy-rc.d
  OWN_POLICY=1
fi
if ! dpkg -i "$DEB_MAIN" "$DEB_SINK" ${DEB_BRIDGE:+"$DEB_BRIDGE"} >"$WORK/dpkg-install.log" 2>&1; then
  note "dpkg -i left dependencies to resolve: apt-get install -f"
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -f -y -qq >>"$WORK/dpkg-install.log" 2>&1 ||
    true
fi
if [ "$OWN_POLICY" = 1 ]; then
  rm -f /usr/sbin/policy-rc.d
  OWN_POLICY=0
fi
for p in "${PKGS[@]}"; do
  installed "$p" || die "$p did not install (dpkg-install.log)"
done
pass "dpkg -i installed ${PKGS[*]}"
if [ ! -d /run/systemd/system ]; then
  if pgrep -u ringcast >/dev/null 2>&1; then
    fail "a process of the ringcast user runs after the install, without systemd"
  else
    pass "without a running systemd the install started nothing"
  fi
fi

# --- the unit ----------------------------------------------------------------------------------
verify_out=$(cd / && systemd-analyze verify "$UNIT" 2>&1) && verify_rc=0 || verify_rc=$?
if [ "$verify_rc" = 0 ] && ! grep -qi ringcast <<<"$verify_out"; then
  pass "systemd-analyze verify $UNIT: no warning"
else
  fail "systemd-analyze verify $UNIT (exit $verify_rc):"$'\n'"$verify_out"
fi
# The unit's value of a [Service] key (the last assignment wins, as in systemd).
unit_value() { sed -n "s/^$1=//p" "$UNIT" | tail -n 1; }
EXEC_START=$(unit_value ExecStart)
RUN_USER=$(unit_value User)
RUN_GROUP=$(unit_value Group)
ENV_FILE=$(unit_value EnvironmentFile)
UMASK=$(unit_value UMask)
NOFILE=$(unit_value LimitNOFILE)
STOP_TIMEOUT=$(unit_value TimeoutStopSec)
STOP_TIMEOUT=${STOP_TIMEOUT%s}
[[ "$STOP_TIMEOUT" =~ ^[0-9]+$ ]] || die "TimeoutStopSec '$STOP_TIMEOUT' is not a number of seconds"
if [ -z "$EXEC_START" ] || [ -z "$RUN_USER" ] || [ -z "$RUN_GROUP" ]; then
  die "the unit lacks ExecStart, User or Group"
fi
[ "$ENV_FILE" = "$TOKEN_FILE" ] || fail "the unit's EnvironmentFile is '$ENV_FILE', not $TOKEN_FILE"

# --- what the postinst made --------------------------------------------------------------------
if entry=$(getent passwd "$RUN_USER"); then
  IFS=: read -r _ _ uid gid _ home shell <<<"$entry"
  if [ "$uid" -lt 1000 ] && [ "$home" = "$DATA" ] && [[ "$shell" == */nologin ]] &&
    [ "$(getent group "$gid" | cut -d: -f1)" = "$RUN_GROUP" ]; then
    pass "system user $RUN_USER (uid $uid, group $RUN_GROUP, home $home, shell $shell)"
  else
    fail "user $RUN_USER is not a system user of group $RUN_GROUP with home $DATA: $entry"
  fi
else
  die "no user $RUN_USER"
fi
data_mode=$(stat -c '%U:%G %a' "$DATA" 2>/dev/null || echo missing)
if [ "$data_mode" = "$RUN_USER:$RUN_GROUP 700" ]; then
  pass "$DATA is $data_mode"
else
  fail "$DATA is '$data_mode', not $RUN_USER:$RUN_GROUP 700"
fi
token_mode=$(stat -c '%U:%G %a' "$TOKEN_FILE" 2>/dev/null || echo missing)
TOKEN=$(sed -n 's/^RINGCAST_API_TOKEN=//p' "$TOKEN_FILE" 2>/dev/null | tail -n 1)
if [ "$token_mode" = "root:root 600" ] && [[ "$TOKEN" =~ ^[0-9a-f]{64}$ ]]; then
  pass "$TOKEN_FILE is root:root 600 with a 64-hex-digit RINGCAST_API_TOKEN"
else
  fail "$TOKEN_FILE is '$token_mode' with a token of ${#TOKEN} characters"
fi
if [ "$(stat -c '%A' "$TOKEN_FILE")" = "-rw-------" ]; then
  pass "the admin token is not readable by other users"
else
  fail "the admin token file is $(stat -c '%A' "$TOKEN_FILE")"
fi
if dpkg-query -W -f='${Conffiles}\n' ringcast | grep -q "^ $CONF "; then
  pass "$CONF is a conffile"
else
  fail "$CONF is not among ringcast's conffiles: $(dpkg-query -W -f='${Conffiles}' ringcast)"
fi
if check_out=$(RINGCAST_API_TOKEN=$TOKEN /usr/bin/ringcast --config "$CONF" config check 2>&1); then
  pass "ringcast config check accepts the installed config and token ($check_out)"
else
  fail "ringcast config check: $check_out"
fi
for bin in /usr/bin/ringcast /usr/bin/ringcast-sink; do
  what=$(file -b "$bin")
  if [[ "$what" == ELF* && "$what" == *", stripped"* ]] && ! ldd "$bin" | grep -q 'not found'; then
    pass "$bin is a stripped ELF whose libraries all resolve"
  else
    fail "$bin: $what; $(ldd "$bin" | grep 'not found' || true)"
  fi
done
if command -v man >/dev/null; then
  if man -w ringcast >/dev/null 2>&1 && man -w ringcast-sink >/dev/null 2>&1; then
    pass "man finds ringcast(1) and ringcast-sink(1)"
  else
    fail "man does not find ringcast(1) or ringcast-sink(1)"
  fi
fi

# --- the daemon as the unit runs it ------------------------------------------------------------
# ExecStart as User/Group with EnvironmentFile, UMask, LimitNOFILE, no capabilities and no new
# privileges, on the installed config; only the port (any free loopback one) and what lets it
# deliver to a plain-HTTP sink on loopback come from the environment.
read -r -a exec_argv <<<"$EXEC_START"
(
  set -a
  # shellcheck disable=SC1090
  . "$ENV_FILE"
  set +a
  [ -z "$UMASK" ] || umask "$UMASK"
  [ -z "$NOFILE" ] || ulimit -n "$NOFILE" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  cd /
  exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    RINGCAST_API_TOKEN="$RINGCAST_API_TOKEN" RINGCAST_SERVER_LISTEN=127.0.0.1:0 \
    RINGCAST_TRANSPORT_ALLOW_HTTP=true RINGCAST_TRANSPORT_ALLOW_PRIVATE=127.0.0.0/8 \
    setpriv --reuid="$RUN_USER" --regid="$RUN_GROUP" --init-groups --no-new-privs \
    --inh-caps=-all --bounding-set=-all -- "${exec_argv[@]}"
) >"$WORK/daemon.out" 2>"$WORK/daemon.err" &
DAEMON_PID=$!
daemon_listening() {
  kill -0 "$DAEMON_PID" 2>/dev/null || return 2
  grep -q 'listening on 127.0.0.1:' "$WORK/daemon.out"
}
wait_for 30 daemon_listening || die "the daemon did not start: no 'listening on' within 30 s"
API=$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$WORK/daemon.out" | head -n 1)
pass "the daemon runs as the unit says ($EXEC_START as $RUN_USER) on $API"
if grep -qi 'warning' "$WORK/daemon.err"; then
  fail "the daemon warned at start: $(grep -i warning "$WORK/daemon.err")"
else
  pass "the daemon started without a warning"
fi
if [ "$(ps -o user= -p "$DAEMON_PID" | tr -d ' ')" = "$RUN_USER" ]; then
  pass "the daemon's process belongs to $RUN_USER"
else
  fail "the daemon's process belongs to $(ps -o user= -p "$DAEMON_PID")"
fi

/usr/bin/ringcast-sink --listen 127.0.0.1:0 --ids-file "$WORK/ids.txt" --quiet \
  >"$WORK/sink.out" 2>&1 &
SINK_PID=$!
sink_listening() {
  kill -0 "$SINK_PID" 2>/dev/null || return 2
  grep -q 'listening on 127.0.0.1:' "$WORK/sink.out"
}
wait_for 10 sink_listening || die "ringcast-sink did not start within 10 s"
SINK=$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$WORK/sink.out" | head -n 1)

api() {  # method path [body]: prints "<status> <body>"
  local out
  out=$(curl -sS --max-time 10 -X "$1" -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' ${3:+--data "$3"} -w '\n%{http_code}' "http://$API$2") ||
    return 1
  printf '%s %s\n' "${out##*$'\n'}" "${out%$'\n'*}"
}
json_field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read())'"$1"')'; }

reply=$(api POST /v1/tenants/pkgtest/endpoints "{\"url\":\"http://$SINK/hook\"}") || reply="0 "
if [ "${reply%% *}" = 201 ]; then
  pass "an endpoint was created with the generated admin token"
else
  die "POST /v1/tenants/pkgtest/endpoints answered: $reply"
fi
reply=$(api POST /v1/tenants/pkgtest/events '{"id":"pkg-1","type":"package.test","payload":{"n":1}}') ||
  reply="0 "
if [ "${reply%% *}" = 202 ]; then
  pass "an event was accepted (202)"
else
  die "POST /v1/tenants/pkgtest/events answered: $reply"
fi
message_id=$(json_field '["message_id"]' <<<"${reply#* }" 2>/dev/null || true)
delivered() {
  local r
  r=$(api GET '/v1/tenants/pkgtest/deliveries?limit=10') || return 1
  [ "${r%% *}" = 200 ] || return 1
  [ "$(json_field '["deliveries"][0]["status"]' <<<"${r#* }" 2>/dev/null)" = delivered ]
}
if wait_for 20 delivered && grep -q ' 200$' "$WORK/ids.txt" 2>/dev/null; then
  pass "the sink got the event and the delivery log says delivered${message_id:+ ($message_id)}"
else
  fail "no delivered delivery within 20 s: $(api GET '/v1/tenants/pkgtest/deliveries?limit=10')"
fi
metrics=$(curl -sS --max-time 10 -H "Authorization: Bearer $TOKEN" "http://$API/metrics" || true)
if grep -q '^ringcast_deliveries_delivered_total 1$' <<<"$metrics"; then
  pass "/metrics (admin token) counts the delivery"
else
  fail "/metrics has no ringcast_deliveries_delivered_total 1"
fi
if [ -z "$(find "$DATA" ! -user "$RUN_USER" -print -quit)" ]; then
  pass "everything in $DATA belongs to $RUN_USER"
else
  fail "files in $DATA not owned by $RUN_USER: $(find "$DATA" ! -user "$RUN_USER" | head -n 5)"
fi

kill -TERM "$DAEMON_PID"
stopped() { ! kill -0 "$DAEMON_PID" 2>/dev/null; }
if wait_for "$STOP_TIMEOUT" stopped; then
  daemon_rc=0
  wait "$DAEMON_PID" || daemon_rc=$?
  if [ "$daemon_rc" = 0 ] && grep -q 'ringcast: stopped' "$WORK/daemon.err"; then
    pass "SIGTERM: the daemon drained and exited 0 within TimeoutStopSec=${STOP_TIMEOUT}s"
  else
    fail "SIGTERM: the daemon exited $daemon_rc"
  fi
else
  fail "SIGTERM: the daemon still runs after TimeoutStopSec=${STOP_TIMEOUT}s"
fi
DAEMON_PID=""
kill -TERM "$SINK_PID" 2>/dev/null || true
wait "$SINK_PID" 2>/dev/null || true
SINK_PID=""

# --- the unit under systemd, where it runs (its sandbox: ProtectSystem, the syscall filter, ...)
if [ -d /run/systemd/system ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$DROPIN_DIR"
  printf '[Service]\nEnvironment=RINGCAST_SERVER_LISTEN=127.0.0.1:%s\n' "$port" \
    >"$DROPIN_DIR/package-test.conf"
  systemctl daemon-reload
  ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/readyz")" = 200 ]; }
  if timeout 60 systemctl start ringcast.service && wait_for 30 ready; then
    pass "systemctl start ringcast: /readyz answers 200 inside the unit's sandbox"
  else
    fail "systemctl start ringcast: not ready; $(systemctl status ringcast.service --no-pager 2>&1 | tail -n 15)"
  fi
  timeout $((STOP_TIMEOUT + 10)) systemctl stop ringcast.service || true
  result=$(systemctl show -p Result --value ringcast.service)
  if [ "$result" = success ]; then
    pass "systemctl stop ringcast: Result=success"
  else
    fail "systemctl stop ringcast: Result=$result"
  fi
  rm -rf "$DROPIN_DIR"
  systemctl daemon-reload
else
  echo "SKIP: systemd does not run here: the unit's sandbox is not exercised (systemctl start)"
fi

# --- the Kafka bridge's package (where it was built) ----------------------------------------------
if [ -n "$DEB_BRIDGE" ]; then
  BRIDGE_UNIT=/lib/systemd/system/ringcast-kafka-bridge.service
  if [ -x /usr/bin/ringcast-kafka-bridge ] && [ -f "$BRIDGE_UNIT" ] &&
    /usr/bin/ringcast-kafka-bridge --help >/dev/null 2>&1; then
    pass "ringcast-kafka-bridge installed its binary (--help runs) and $BRIDGE_UNIT"
  else
    fail "ringcast-kafka-bridge's binary or unit is missing, or --help fails"
  fi
  if [[ "$(dpkg-deb -f "$DEB_BRIDGE" Depends)" == *librdkafka* ]] &&
    ! ldd /usr/bin/ringcast-kafka-bridge | grep -q 'boringssl\|not found'; then
    pass "ringcast-kafka-bridge depends on librdkafka and loads no BoringSSL"
  else
    fail "ringcast-kafka-bridge's Depends or libraries: $(dpkg-deb -f "$DEB_BRIDGE" Depends)"
  fi
  if verify_out=$(cd / && systemd-analyze verify "$BRIDGE_UNIT" 2>&1) &&
    ! grep -q "ringcast-kafka-bridge.service" <<<"$verify_out"; then
    pass "systemd-analyze verify $BRIDGE_UNIT: no warning"
  else
    fail "systemd-analyze verify $BRIDGE_UNIT: $verify_out"
  fi
fi

# --- remove, then purge ------------------------------------------------------------------------
dpkg -r "${PKGS[@]}" >/dev/null
gone=1
for path in /usr/bin/ringcast /usr/bin/ringcast-sink "$UNIT" /usr/share/man/man1/ringcast.1.gz; do
  if [ -e "$path" ]; then
    fail "dpkg -r left $path"
    gone=0
  fi
done
[ "$gone" = 1 ] && pass "dpkg -r removed the binaries, the unit and the man pages"
if [ -f "$CONF" ] && [ -f "$TOKEN_FILE" ] && [ -d "$DATA" ]; then
  pass "dpkg -r kept the conffile, the admin token and the data dir"
else
  fail "dpkg -r removed the conffile, the token or the data dir"
fi
for p in "${PKGS[@]}"; do
  if known_to_dpkg "$p"; then dpkg -P "$p" >/dev/null; fi  # ringcast-sink: gone with -r already
done
left=""
for path in "$CONF" "$TOKEN_FILE" /etc/ringcast "$DATA" \
  /etc/systemd/system/multi-user.target.wants/ringcast.service \
  /etc/systemd/system/ringcast.service; do
  if [ -e "$path" ] || [ -L "$path" ]; then left="$left $path"; fi
done
if [ -z "$left" ]; then
  pass "dpkg -P removed the conffile, the admin token, the data dir and the unit's links"
else
  fail "dpkg -P left:$left"
fi
for p in "${PKGS[@]}"; do
  if known_to_dpkg "$p"; then fail "dpkg still knows $p after the purge"; fi
done
if getent passwd "$RUN_USER" >/dev/null; then
  pass "the system user $RUN_USER stays after the purge (Debian practice: its UID is not reused)"
else
  fail "the purge removed the user $RUN_USER"
fi

if [ "$failures" = 0 ]; then
  echo "package-test: PASS"
else
  echo "package-test: FAIL ($failures checks failed)"
  exit 1
fi
