#!/usr/bin/env bash
# payments-api as an x402 facilitator, driven by x402's own packages (docs/x402.md): builds the
# debug binary (which `cargo test` has already built), installs the pinned @x402/* packages,
# express and viem into tests/x402/, runs tests/x402/x402.test.mjs against anvil and PostgreSQL
# (TEST_DATABASE_URL, or a container as for `cargo test`).
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
cargo build --bin payments-api
if [[ ! -d tests/x402/node_modules/@x402/express ]] || [[ tests/x402/package-lock.json -nt tests/x402/node_modules ]]; then
  npm ci --prefix tests/x402 --no-audit --no-fund
fi
export PAYMENTS_API_BIN=$target/debug/payments-api
# The PostgreSQL server the Rust tests use: TEST_DATABASE_URL, or a container.
source scripts/lib/test-database.sh
cd tests/x402
node --test --test-concurrency=1 --test-reporter=spec x402.test.mjs
