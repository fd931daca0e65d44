#!/usr/bin/env bash
# Installs the OpenAPI checks' npm dependencies (tests/openapi: @apidevtools/swagger-parser, ajv,
# ajv-formats, js-yaml, openapi-typescript, typescript, pinned by package-lock.json) into DIR,
# outside the source tree (tests/support/npm-ci.sh: idempotent). Node.js 18 or newer.
# Usage: tests/openapi/setup.sh DIR        (tools/test.sh: DIR = <build dir>/openapi-node)
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DIR" >&2; exit 2; fi
src=$(cd "$(dirname "$0")" && pwd)
exec bash "$src/../support/npm-ci.sh" tests/openapi/setup.sh "$src" "$1" \
  @apidevtools/swagger-parser openapi-typescript typescript
