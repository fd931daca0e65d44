#!/usr/bin/env bash
# Installs a test folder's npm dependencies (its package.json, pinned by its package-lock.json)
# into DIR, outside the source tree: copies the two files there and runs `npm ci`. Idempotent:
# skipped when DIR already holds an install made from the same lock and every MODULE named is in
# it. Shared by tests/portal/setup.sh and tests/openapi/setup.sh.
# Usage: tests/support/npm-ci.sh WHO SRC DIR MODULE...   (WHO: the caller's name, for messages)
set -euo pipefail
if [ $# -lt 4 ]; then echo "usage: $0 WHO SRC DIR MODULE..." >&2; exit 2; fi
who=$1
src=$2
dir=$3
shift 3
mkdir -p "$dir"
stamp="$dir/node_modules/.ringcast-lock.sha256"
want=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
fresh=0
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  fresh=1
  for m in "$@"; do [ -f "$dir/node_modules/$m/package.json" ] || fresh=0; done
fi
if [ "$fresh" = 1 ]; then
  echo "$who: $dir is up to date"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "$who: npm is missing (bash tools/install-deps.sh test installs it)" >&2
  exit 1
fi
cp "$src/package.json" "$src/package-lock.json" "$dir/"
(cd "$dir" && npm ci --no-audit --no-fund)
echo "$want" > "$stamp"
echo "$who: installed $* into $dir/node_modules"
