#!/usr/bin/env bash
# Installs the OpenAPI checks' npm dependencies (tests/openapi: @apidevtools/swagger-parser, ajv,
# ajv-formats, js-yaml, openapi-typescript, typescript, pinned by package-lock.json) into DIR,
# outside the source tree: copies package.json and the lock there and runs `npm ci`. Idempotent:
# skipped when DIR already holds an install made from the same lock. Node.js 18 or newer.
# Usage: tests/openapi/setup.sh DIR        (tools/test.sh: DIR = <build dir>/openapi-node)
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DIR" >&2; exit 2; fi
src=$(cd "$(dirname "$0")" && pwd)
dir=$1
mkdir -p "$dir"
stamp="$dir/node_modules/.ringcast-lock.sha256"
want=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
   [ -f "$dir/node_modules/@apidevtools/swagger-parser/package.json" ] &&
   [ -f "$dir/node_modules/openapi-typescript/package.json" ] &&
   [ -f "$dir/node_modules/typescript/package.json" ]; then
  echo "tests/openapi/setup.sh: $dir is up to date"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "tests/openapi/setup.sh: npm is missing (bash tools/install-deps.sh test installs it)" >&2
  exit 1
fi
cp "$src/package.json" "$src/package-lock.json" "$dir/"
(cd "$dir" && npm ci --no-audit --no-fund)
echo "$want" > "$stamp"
echo "tests/openapi/setup.sh: installed the OpenAPI checks' packages into $dir/node_modules"
