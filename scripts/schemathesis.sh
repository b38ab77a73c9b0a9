#!/usr/bin/env bash
# Schemathesis (from PyPI) against /openapi.json of a live server with the demo key: no 5xx, every
# response conforms to the documented schema, status codes and headers. Usage:
#   scripts/schemathesis.sh [path/to/payments-api]        (DATABASE_SERVER: postgres://...@host:port)
# `positive_data_acceptance` is left out on purpose: the API validates beyond what a schema can say
# (EIP-55 checksums, amounts below 2^256, a key already used for another body), so some
# schema-valid requests are rightly refused with 400 or 422.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug/payments-api}
server=${DATABASE_SERVER:-postgres://postgres@127.0.0.1:5432}
port=${SCHEMATHESIS_PORT:-18998}
command -v st >/dev/null 2>&1 || pip install -q schemathesis
psql "$server/postgres" -qc "DROP DATABASE IF EXISTS payments_schemathesis WITH (FORCE)"
DATABASE_URL="$server/payments_schemathesis" BIND_ADDR="127.0.0.1:$port" RUST_LOG=warn MERCHANT_RATE_LIMIT=0 \
  BOOTSTRAP_API_KEYS=merchant-demo=merchant_demo "$bin" serve --migrate &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do curl -fsS "localhost:$port/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
st run "http://127.0.0.1:$port/openapi.json" \
  -H "Authorization: Bearer merchant-demo" \
  --checks all --exclude-checks positive_data_acceptance \
  --max-examples "${SCHEMATHESIS_EXAMPLES:-50}" --request-timeout 10 --seed 20261130
