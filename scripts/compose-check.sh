#!/usr/bin/env bash
# Brings the compose stack up (building the image), runs every snippet of the README and the docs
# against it as a reader pastes them (scripts/readme-check.sh), then checks the transcript's three
# answers and pays, refunds, sweeps and settles x402 on the devnet itself, and tears everything
# down. Image names come from the environment (POSTGRES_IMAGE, RUST_IMAGE, RUNTIME_IMAGE,
# CHAIN_IMAGE), as for `docker compose up`.
set -euo pipefail
cd "$(dirname "$0")/.."

if docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi
project=payments-compose-check
dc() { "${compose[@]}" -p "$project" "$@"; }
# The host's ports, as docker-compose.yml reads them (API_PORT, CHAIN_PORT); checkout links must
# name the moved port too.
api=localhost:${API_PORT:-8080}
export PUBLIC_BASE_URL=${PUBLIC_BASE_URL:-http://$api}
trap 'dc logs --no-color api migrate devnet chain >&2 || true; dc down -v --remove-orphans >/dev/null 2>&1 || true' EXIT

dc down -v --remove-orphans >/dev/null 2>&1 || true
dc up -d --build

echo "waiting for /readyz"
for _ in $(seq 1 120); do
  curl -fsS $api/readyz >/dev/null 2>&1 && break
  sleep 1
done
curl -fsS $api/readyz

# The docs' snippets first, on the fresh stack they describe: what they show (balances, the
# merchant's tokens on chain) counts only their own payments.
COMPOSE_PROJECT_NAME=$project bash scripts/readme-check.sh compose

body='{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"100000000","expires_in_seconds":900}'
key="order-$(date +%s%N)"
post() {
  curl -si -X POST $api/v1/payment_intents \
    -H 'Authorization: Bearer merchant-demo' -H "Idempotency-Key: $key" -d "$1"
}
status() { head -n1 <<<"$1" | awk '{print $2}'; }
header() { grep -i "^$2:" <<<"$1" | head -n1 | cut -d' ' -f2- | tr -d '\r'; }
payload() { awk 'BEGIN{b=0} /^\r?$/{b=1; next} b' <<<"$1"; }

first=$(post "$body"); second=$(post "$body"); third=$(post "${body/100000000/999000000}")
printf '%s\n\n%s\n\n%s\n\n' "$first" "$second" "$third"

fail() { echo "compose-check: $*" >&2; exit 1; }
[[ $(status "$first") == 201 ]] || fail "first answer is not 201"
[[ $(status "$second") == 201 ]] || fail "replay is not 201"
[[ $(header "$second" idempotent-replayed) == true ]] || fail "replay lacks Idempotent-Replayed: true"
[[ $(payload "$first") == "$(payload "$second")" ]] || fail "replay body differs"
[[ $(header "$first" location) == "$(header "$second" location)" ]] || fail "replay Location differs"
[[ $(status "$third") == 422 ]] || fail "different body is not 422"
grep -q '"error":"idempotency_key_reused"' <<<"$third" || fail "422 is not idempotency_key_reused"
echo "compose-check: 201, 201 replayed, 422 — the transcript holds"

# Settlement on the compose devnet, in USDC and in the devnet token: authorization, signed by the
# payer (anvil account 1, a public dev key) with cast inside the chain container, confirm, then
# succeeded within seconds. As the other merchant, so that its balances hold only these payments,
# whatever the docs' snippets paid before.
auth() { curl -fsS "$@" -H 'Authorization: Bearer merchant-other'; }
json() { python3 -c "import json,sys; v=json.load(sys.stdin); print($1)"; }
payee=0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC
token=0x5FbDB2315678afecb367f032d93F642f64180aa3
usdc=0x0C8E79F3534B00D9a3D4a856B665Bf4eBC22f2ba
balance() { dc exec -T chain cast call --rpc-url http://127.0.0.1:8545 "$1" 'balanceOf(address)(uint256)' "$payee" | awk '{print $1}'; }
# A webhook receiver on this machine, as in docs/api.md, recording every event it is sent.
hook_port=${COMPOSE_CHECK_HOOK_PORT:-19000}
hook_log=$(mktemp)
python3 - "$hook_port" "$hook_log" <<'PY' &
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port, log = int(sys.argv[1]), sys.argv[2]
class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        with open(log, "ab") as f:
            f.write(body + b"\n")
        self.send_response(204); self.end_headers()
    def log_message(self, *args):
        pass
HTTPServer(("0.0.0.0", port), Receiver).serve_forever()
PY
hook_pid=$!
trap 'kill $hook_pid 2>/dev/null; dc logs --no-color api migrate devnet chain >&2 || true; dc down -v --remove-orphans >/dev/null 2>&1 || true' EXIT
auth $api/v1/webhook_endpoints -d "{\"url\":\"http://host.docker.internal:$hook_port/\"}" >/dev/null

# Pays one intent in `token` (its body is the transcript's with that token) and checks it
# succeeded on chain and moved the amount to the merchant. Sets `id`.
pay() {
  local token=$1 before after state intent
  local paying=${body/0x5FbDB2315678afecb367f032d93F642f64180aa3/$token}
  before=$(balance "$token")
  id=$(auth $api/v1/payment_intents -d "$paying" | json 'v["id"]')
  typed=$(auth "$api/v1/payment_intents/$id/authorization" | json 'json.dumps(v["typed_data"])')
  signature=$(dc exec -T chain cast wallet sign --data \
    --private-key 0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d "$typed" | tr -d '\r')
  confirmed_at=$SECONDS
  confirmed=$(auth "$api/v1/payment_intents/$id/confirm" -H "Idempotency-Key: pay-$id" \
    -d "{\"signature\":\"$signature\"}")
  echo "$confirmed"
  [[ $(json 'v["state"]' <<<"$confirmed") == processing ]] || fail "confirm did not answer processing ($token)"
  state=""
  for _ in $(seq 1 60); do
    intent=$(auth "$api/v1/payment_intents/$id")
    state=$(json 'v["state"]' <<<"$intent")
    [[ $state == succeeded ]] && break
    sleep 1
  done
  echo "$intent"
  [[ $state == succeeded ]] || fail "the intent in $token did not succeed within a minute (state $state)"
  [[ $(json 'v["settlement"]["transaction_hash"][:2]' <<<"$intent") == 0x ]] || fail "no transaction hash"
  after=$(balance "$token")
  [[ $((after - before)) == 100000000 ]] || fail "the merchant's $token balance grew by $((after - before)), not 100000000"
  echo "compose-check: $token paid on chain $((SECONDS - confirmed_at)) s after confirm, balance +100000000"
}

# Refunds part of intent `id` in `token`: the merchant's address (anvil account 2, a public dev
# key) signs the transfer back with cast, confirm, then succeeded on chain.
refund() {
  local token=$1 refund typed signature state shown
  refund=$(auth "$api/v1/payment_intents/$id/refunds" -H "Idempotency-Key: refund-$id" \
    -d '{"amount":"25000000","reason":"requested_by_customer"}' | json 'v["id"]')
  typed=$(auth "$api/v1/refunds/$refund/authorization" | json 'json.dumps(v["typed_data"])')
  signature=$(dc exec -T chain cast wallet sign --data \
    --private-key 0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a "$typed" | tr -d '\r')
  state=$(auth "$api/v1/refunds/$refund/confirm" -H "Idempotency-Key: confirm-$refund" \
    -d "{\"signature\":\"$signature\"}" | json 'v["state"]')
  [[ $state == processing ]] || fail "the refund's confirm did not answer processing ($token)"
  for _ in $(seq 1 60); do
    shown=$(auth "$api/v1/refunds/$refund")
    state=$(json 'v["state"]' <<<"$shown")
    [[ $state == succeeded ]] && break
    sleep 1
  done
  echo "$shown"
  [[ $state == succeeded ]] || fail "the refund in $token did not succeed within a minute (state $state)"
  [[ $(auth "$api/v1/payment_intents/$id" | json 'v["amount_refunded"]') == 25000000 ]] \
    || fail "the intent's amount_refunded is not 25000000"
  echo "compose-check: $token refund of 25000000 succeeded on chain"
}

# The checkout page of a new intent: its link, the page and, with its client secret, its view.
checkout=$(auth $api/v1/payment_intents -d "$body" | json 'v["checkout_url"]')
[[ $checkout == http://$api/checkout/pi_*#pi_*_secret_* ]] || fail "no checkout_url ($checkout)"
page=$(curl -fsS -D - "${checkout%%#*}")
grep -qi "^content-security-policy: .*frame-ancestors 'none'" <<<"$page" || fail "the checkout page has no strict CSP"
grep -q '<script src="/checkout/assets/checkout.js"' <<<"$page" || fail "the checkout page is not the page"
checkout_id=${checkout##*/checkout/}
checkout_id=${checkout_id%%#*}
[[ $(curl -fsS "$api/v1/checkout/$checkout_id" -H "Authorization: Bearer ${checkout#*#}" | json 'v["state"]') == created ]] \
  || fail "the client secret does not open its checkout"
echo "compose-check: the checkout page is served, opened by its client secret"

# USDC as Circle deploys it (FiatTokenV2_2 behind its proxy), the same steps, and a refund.
pay "$usdc"
refund "$usdc"
pay "$token"
balances=$(auth $api/v1/balances)
echo "$balances"
grep -q "\"token\":\"$token\",\"amount\":\"100000000\"" <<<"$balances" || fail "GET /v1/balances does not show the payment"
grep -q "\"token\":\"$usdc\",\"amount\":\"75000000\"" <<<"$balances" || fail "GET /v1/balances does not show the USDC payment less its refund"
for _ in $(seq 1 30); do
  grep -q "\"type\":\"payment_intent.succeeded\".*\"id\":\"$id\"" "$hook_log" && break
  sleep 1
done
grep -q "\"type\":\"payment_intent.succeeded\".*\"id\":\"$id\"" "$hook_log" \
  || fail "the receiver did not get payment_intent.succeeded for $id (got: $(cut -c1-120 "$hook_log"))"
echo "compose-check: authorization, confirm, succeeded on chain, in the devnet token and in USDC, a USDC refund, balances as booked — settlement holds, and its event reached the receiver"

# A deposit address (docs/walkthrough.md): a plain `cast send` in two parts pays the intent,
# and the relayer sweeps what arrived to the merchant.
deposit=$(auth $api/v1/payment_intents \
  -d "{\"chain\":\"evm:31337\",\"token\":\"$token\",\"merchant\":\"$payee\",\"amount\":\"5000000\",\"payment_method\":\"deposit_address\"}")
deposit_id=$(json 'v["id"]' <<<"$deposit")
address=$(json 'v["deposit_address"]' <<<"$deposit")
before=$(balance "$token")
for part in 2000000 3000000; do
  dc exec -T chain cast send --rpc-url http://127.0.0.1:8545 \
    --private-key 0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d \
    "$token" 'transfer(address,uint256)' "$address" "$part" >/dev/null || fail "cast send to the deposit address failed"
done
# The sweep takes whatever the address holds, so the merchant can have all 5000000 before the
# second transfer has its confirmations and is counted: wait for both.
for _ in $(seq 1 60); do
  shown=$(auth "$api/v1/payment_intents/$deposit_id")
  [[ $(balance "$token") == $((before + 5000000)) && $(json 'v["state"]' <<<"$shown") == succeeded ]] && break
  sleep 1
done
echo "$shown" | python3 -c 'import json,sys; v=json.load(sys.stdin); print({k: v[k] for k in ("state", "deposit_address", "amount_received")})'
[[ $(json 'v["state"]' <<<"$shown") == succeeded ]] || fail "the deposit intent did not succeed"
[[ $(json 'v["amount_received"]' <<<"$shown") == 5000000 ]] || fail "the deposit intent did not receive 5000000"
[[ $(balance "$token") == $((before + 5000000)) ]] || fail "the sweep did not reach the merchant within a minute"
echo "compose-check: a deposit address paid by two plain transfers, succeeded, swept to the merchant"

# Paid APIs with x402 (docs/x402.md): x402's own express server and fetch client, the API
# as their facilitator; one request paid in USDC, its transfer on chain.
if [[ ! -d tests/x402/node_modules/@x402/express ]]; then
  npm ci --prefix tests/x402 --no-audit --no-fund
fi
before=$(balance "$usdc")
paid=$(X402_API=http://$api node tests/x402/compose.mjs) || fail "the x402 paid request failed"
echo "$paid"
after=$(balance "$usdc")
[[ $((after - before)) == 10000 ]] || fail "the x402 payment moved $((after - before)) USDC units, not 10000"
echo "compose-check: a request paid through x402 (@x402/fetch, @x402/express, our facilitator), 10000 USDC units on chain"
