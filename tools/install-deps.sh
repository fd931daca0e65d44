#!/usr/bin/env bash
# Installs every Debian 12 package that ringcast's build, tests, benchmarks and demo use.
# Idempotent: packages already present are skipped by apt. Run as root.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config git clang-format
  liburing-dev node-llhttp android-libboringssl-dev
  librocksdb-dev libsimdjson-dev libc-ares-dev libcli11-dev libtomlplusplus-dev
  libfmt-dev libxxhash-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  openssl wrk nginx-light python3 procps iproute2 ca-certificates curl time util-linux
  redis-server redis-tools libhiredis-dev
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The redis tests start their own redis-server processes; Debian's package enables (and, where
# services may start, starts) a system one on 6379: stop it and keep it from coming back.
if dpkg-query -W -f='${Status}' redis-server 2>/dev/null | grep -q "install ok installed"; then
  if [ -d /run/systemd/system ]; then
    systemctl disable --now redis-server >/dev/null 2>&1 || true
  else
    service redis-server stop >/dev/null 2>&1 || true
    systemctl disable redis-server >/dev/null 2>&1 || true  # removes the enablement links
    update-rc.d redis-server disable >/dev/null 2>&1 || true
  fi
fi
