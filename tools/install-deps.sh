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
