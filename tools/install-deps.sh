#!/usr/bin/env bash
# Installs the Debian 12 packages ringcast uses, in two sets. Idempotent (packages already
# present are skipped). Run as root.
#   runtime  building and running the daemon and ringcast-sink: what tools/demo.sh needs
#   test     runtime, plus what only the tests and benchmarks use: GoogleTest, Google Benchmark,
#            the peers they measure against or drive (nginx-light, wrk) and the tools of
#            bench/e2e_delivery.sh (tools/test.sh and CI)
# Usage: tools/install-deps.sh [runtime|test]   (default: test, everything)
#
# Installing nginx-light on Debian starts nginx and enables it as a system service. Nothing here
# uses that service: the tests run nginx as their own child process with a config in a temp dir
# (tests/support/nginx.*). So while this script installs it, a policy-rc.d forbids service starts
# (one already there, e.g. Docker's, is kept), and afterwards the service is disabled (systemd
# unit links and SysV rc links, with or without a running systemd) and stopped if it runs.
set -euo pipefail
SET=${1:-test}
RUNTIME=(
  build-essential cmake ninja-build pkg-config
  liburing-dev node-llhttp android-libboringssl-dev
  librocksdb-dev libsimdjson-dev libc-ares-dev libcli11-dev libtomlplusplus-dev
  libfmt-dev libxxhash-dev
)
TEST=(
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  nginx-light wrk curl time util-linux procps iproute2 openssl ca-certificates python3
  git clang-format
)
case "$SET" in
  runtime) PKGS=("${RUNTIME[@]}") ;;
  test) PKGS=("${RUNTIME[@]}" "${TEST[@]}") ;;
  *) echo "usage: $0 [runtime|test]" >&2; exit 2 ;;
esac

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${PKGS[@]}"; do installed "$p" || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0

installs_nginx=0
for p in "${missing[@]}"; do [ "$p" = nginx-light ] && installs_nginx=1; done

POLICY=/usr/sbin/policy-rc.d
own_policy=0
if [ "$installs_nginx" = 1 ] && [ ! -e "$POLICY" ]; then
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

if [ "$installs_nginx" = 1 ]; then
  if [ -d /run/systemd/system ]; then  # systemd runs: disable the unit and stop it
    systemctl disable --now nginx.service >/dev/null 2>&1 || true
  elif command -v systemctl >/dev/null; then  # installed, not running (a container): the links
    systemctl disable nginx.service >/dev/null 2>&1 || true
  else  # no systemd at all: the link deb-systemd-helper made for a later boot with it
    rm -f /etc/systemd/system/multi-user.target.wants/nginx.service
  fi
  update-rc.d nginx disable >/dev/null 2>&1 || true  # SysV rc links: S01nginx -> K01nginx
  if [ ! -d /run/systemd/system ] && [ -x /etc/init.d/nginx ] &&
    /etc/init.d/nginx status >/dev/null 2>&1; then
    /etc/init.d/nginx stop >/dev/null 2>&1 || true  # started despite the policy (a site's own)
  fi
  echo "install-deps: nginx-light is for the tests, which start nginx themselves;" \
    "its system service is disabled and not running"
fi
[ "$own_policy" = 1 ] && rm -f "$POLICY" && trap - EXIT
exit 0
