#!/usr/bin/env bash
# Installs the portal walkthrough's npm dependencies (playwright-core, pinned by
# package-lock.json) into DIR, outside the source tree (tests/support/npm-ci.sh: idempotent).
# playwright-core drives Debian's /usr/bin/chromium; no browser is downloaded.
# Usage: tests/portal/setup.sh DIR        (tools/test.sh: DIR = <build dir>/portal-node)
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DIR" >&2; exit 2; fi
src=$(cd "$(dirname "$0")" && pwd)
# Never fetch a browser: the walkthrough uses /usr/bin/chromium.
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 exec bash "$src/../support/npm-ci.sh" tests/portal/setup.sh \
  "$src" "$1" playwright-core
