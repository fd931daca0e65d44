#!/usr/bin/env bash
# Installs the portal walkthrough's npm dependencies (playwright-core, pinned by
# package-lock.json) into DIR, outside the source tree: copies package.json and the lock there
# and runs `npm ci`. Idempotent: skipped when DIR already holds an install made from the same
# lock. playwright-core drives Debian's /usr/bin/chromium; no browser is downloaded.
# Usage: tests/portal/setup.sh DIR        (tools/test.sh: DIR = <build dir>/portal-node)
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DIR" >&2; exit 2; fi
src=$(cd "$(dirname "$0")" && pwd)
dir=$1
mkdir -p "$dir"
stamp="$dir/node_modules/.ringcast-lock.sha256"
want=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
   [ -f "$dir/node_modules/playwright-core/package.json" ]; then
  echo "tests/portal/setup.sh: $dir is up to date"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "tests/portal/setup.sh: npm is missing (bash tools/install-deps.sh test installs it)" >&2
  exit 1
fi
cp "$src/package.json" "$src/package-lock.json" "$dir/"
# Never fetch a browser: the walkthrough uses /usr/bin/chromium.
(cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund)
echo "$want" > "$stamp"
echo "tests/portal/setup.sh: installed playwright-core into $dir/node_modules"
