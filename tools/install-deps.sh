#!/usr/bin/env bash
# Installs the Debian 12 packages ringcast uses, in two sets. Idempotent (packages already
# present are skipped). Run as root.
#   runtime  building and running the daemon and ringcast-sink: what tools/demo.sh needs
#   test     runtime, plus what only the tests and benchmarks use: GoogleTest, Google Benchmark,
#            the peers they measure against or drive (nginx-light, wrk), the tools of
#            bench/e2e_delivery.sh, and what checks the Debian packages and the metrics
#            (tools/package-test.sh, promtool) (tools/test.sh and CI)
# Usage: tools/install-deps.sh [runtime|test]   (default: test, everything)
#
# Installing nginx-light, redis-server, nats-server or prometheus on Debian starts it and enables
# it as a system service. Nothing here uses those services: the tests run nginx, redis-server and
# nats-server as their own child processes with a config in a temp dir (tests/support/nginx.*,
# tests/support/redis_server.*, tests/support/nats_server.*), and of prometheus only its promtool
# runs.
# So while this script installs them, a policy-rc.d forbids service starts
# (one already there, e.g. Docker's, is kept), and afterwards the service is disabled (systemd
# unit links and SysV rc links, with or without a running systemd) and stopped if it runs.
set -euo pipefail
SET=${1:-test}
RUNTIME=(
  build-essential cmake ninja-build pkg-config
  liburing-dev node-llhttp android-libboringssl-dev
  librocksdb-dev libsimdjson-dev libc-ares-dev libcli11-dev libtomlplusplus-dev
  libfmt-dev libxxhash-dev libhiredis-dev
  libspdlog-dev  # log/: the daemon's logger
  help2man  # the man pages, made from the binaries' --help at build time (tools/CMakeLists.txt)
  dpkg-dev  # dpkg-shlibdeps: the Debian packages' Depends (cpack -G DEB, docs/packaging.md)
  python3-yaml  # the build converts docs/openapi.yaml to the JSON the daemon serves (tools/yaml2json.py)
  # bridge/kafka: only ringcast-kafka-bridge (and its test mock) links librdkafka (and with it
  # OpenSSL); the daemon never does. Built by default when present (RINGCAST_BUILD_KAFKA_BRIDGE).
  librdkafka-dev
)
TEST=(
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  nginx-light wrk curl time util-linux procps iproute2 openssl ca-certificates python3
  redis-server redis-tools
  nats-server  # the NATS JetStream intake's tests and bench/e2e_nats_intake.sh (2.9, Debian 12)
  git clang-format
  fuse3 libfuse3-dev  # tests/support/powercut: the power-cut filesystem of the durability tests
  faketime  # libfaketime: tests/e2e/clock_jump_test.cc steps the daemon's wall clock (LD_PRELOAD)
  # the portal's browser tests (tests/portal: playwright-core from npm drives Debian's
  # chromium; pinned at 1.61, the last that runs on Debian 12's Node.js 18) and the owner
  # e-mail's SMTP sink (tests/support/smtp_sink: aiosmtpd)
  chromium nodejs python3-aiosmtpd
  # tools/package-test.sh: systemd-analyze verify (systemd) and its check of the unit's
  # Documentation=man: page (man-db), file for the installed binaries; and promtool (prometheus)
  # for tests/e2e/metrics_format_test.cc
  systemd man-db file prometheus
)
case "$SET" in
  runtime) PKGS=("${RUNTIME[@]}") ;;
  test) PKGS=("${RUNTIME[@]}" "${TEST[@]}") ;;
  *) echo "usage: $0 [runtime|test]" >&2; exit 2 ;;
esac

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# Debian's nodejs comes without npm (package npm); a nodejs from elsewhere (NodeSource's) has
# npm inside and conflicts with Debian's npm package: ask for it only when no npm is there.
if [ "$SET" = test ] && ! command -v npm >/dev/null; then PKGS+=(npm); fi

missing=()
for p in "${PKGS[@]}"; do installed "$p" || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0

installs_service=0  # a package that starts a system service when installed
for p in "${missing[@]}"; do
  case "$p" in nginx-light | redis-server | nats-server | prometheus) installs_service=1 ;; esac
done

POLICY=/usr/sbin/policy-rc.d
own_policy=0
if [ "$installs_service" = 1 ] && [ ! -e "$POLICY" ]; then
  # invoke-rc.d and deb-systemd-invoke ask this before starting a service: 101 = not allowed.
  printf '#!/bin/sh\n# tools/install-deps.sh: no service starts while it installs packages\nexit 101\n' \
    >"$POLICY"
  chmod 0755 "$POLICY"
  own_policy=1
  trap 'rm -f "$POLICY"' EXIT
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"

# Keeps a packaged service from running or starting at boot (systemd unit links and SysV rc
# links, with or without a running systemd): the tests start their own nginx, redis-server and
# nats-server, and use no Prometheus server (promtool only).
disable_service() {  # unit name
  local svc=$1
  if [ -d /run/systemd/system ]; then  # systemd runs: disable the unit and stop it
    systemctl disable --now "$svc.service" >/dev/null 2>&1 || true
  elif command -v systemctl >/dev/null; then  # installed, not running (a container): the links
    systemctl disable "$svc.service" >/dev/null 2>&1 || true
  else  # no systemd at all: the link deb-systemd-helper made for a later boot with it
    rm -f "/etc/systemd/system/multi-user.target.wants/$svc.service"
  fi
  update-rc.d "$svc" disable >/dev/null 2>&1 || true  # SysV rc links: S01 -> K01
  if [ ! -d /run/systemd/system ] && [ -x "/etc/init.d/$svc" ] &&
    "/etc/init.d/$svc" status >/dev/null 2>&1; then
    "/etc/init.d/$svc" stop >/dev/null 2>&1 || true  # started despite the policy (a site's own)
  fi
  echo "install-deps: $svc is for the tests, which start what they need themselves;" \
    "its system service is disabled and not running"
}
for p in "${missing[@]}"; do
  case "$p" in
    nginx-light) disable_service nginx ;;
    redis-server) disable_service redis-server ;;
    prometheus) disable_service prometheus ;;
    nats-server) disable_service nats-server ;;
  esac
done
[ "$own_policy" = 1 ] && rm -f "$POLICY" && trap - EXIT
exit 0
