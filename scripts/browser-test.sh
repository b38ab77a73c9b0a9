#!/usr/bin/env bash
# The checkout page and the dashboard in Debian's Chromium (docs/checkout.md, docs/dashboard.md):
# builds the debug binary (which `cargo test` has already built), installs the pinned
# playwright-core and axe-core into tests/browser/, runs tests/browser/*.test.mjs.
# Without a Chromium the tests are skipped with a warning, unless BROWSER_TESTS_REQUIRED=1 (CI).
set -euo pipefail
cd "$(dirname "$0")/.."
chromium=${CHROMIUM:-/usr/bin/chromium}
if [[ ! -x $chromium ]]; then
  if [[ ${BROWSER_TESTS_REQUIRED:-0} == 1 ]]; then
    echo "browser tests: $chromium is missing (apt-get install chromium)" >&2
    exit 1
  fi
  echo "WARNING: browser tests skipped: no Chromium at $chromium (apt-get install chromium)" >&2
  exit 0
fi
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
cargo build --bin payments-api
if [[ ! -d tests/browser/node_modules/playwright-core ]] || [[ tests/browser/package-lock.json -nt tests/browser/node_modules ]]; then
  npm ci --prefix tests/browser --no-audit --no-fund
fi
export PAYMENTS_API_BIN=$target/debug/payments-api CHROMIUM=$chromium
# The PostgreSQL server the Rust tests use: TEST_DATABASE_URL, or a container.
source scripts/lib/test-database.sh
cd tests/browser
node --test --test-concurrency=1 --test-reporter=spec checkout.test.mjs dashboard.test.mjs
