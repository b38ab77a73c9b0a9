# payments-api: the commands a developer and CI use. `make help` lists them.

DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/payments
BOOTSTRAP_API_KEYS ?= merchant-demo=merchant_demo,merchant-other=merchant_other
# Builds check queries against the committed .sqlx/ metadata, so they need no database (and do
# not fail on a fresh machine where DATABASE_URL's database does not exist yet). Only `prepare`
# and the metadata check in `lint` compile against the live database.
SQLX_OFFLINE ?= true
export DATABASE_URL BOOTSTRAP_API_KEYS SQLX_OFFLINE

.PHONY: help api-run test browser-test x402-test lint migrate prepare openapi compose-check bench chaos ha-chaos schemathesis fuzz chain-tools contracts contracts-check

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

api-run: ## serve on :8080 against the local PostgreSQL (creates and migrates the database)
	cargo run --bin payments-api -- serve --migrate

test: chain-tools ## all tests; PostgreSQL from testcontainers (or TEST_DATABASE_URL), anvil per test; then the browser and x402 suites
	cargo test --all-targets
	bash scripts/browser-test.sh
	bash scripts/x402-test.sh
	bash scripts/clients-test.sh

x402-test: chain-tools ## x402's own client and resource server (@x402/fetch, @x402/express) paying through our facilitator; the reference facilitator beside ours
	bash scripts/x402-test.sh

browser-test: chain-tools ## the checkout page and the dashboard in Debian's Chromium against the debug binary, anvil and PostgreSQL (TEST_DATABASE_URL)
	bash scripts/browser-test.sh

.PHONY: clients clients-test release-check
clients: ## regenerate the client libraries' generated types, models and versions from openapi.json
	bash scripts/clients-test.sh generate

clients-test: chain-tools ## the TypeScript and Python clients (clients/): pinned installs, fresh generated code, both packed, both suites against the debug binary and PostgreSQL
	bash scripts/clients-test.sh

release-check: ## fail when openapi.json changed and the clients' generated code was not regenerated (make clients)
	bash scripts/clients-test.sh check

CHAIN_TOOLS := contracts/node_modules/.bin/anvil
chain-tools: $(CHAIN_TOOLS) ## anvil, cast, solc and OpenZeppelin, pinned, from npm into contracts/
$(CHAIN_TOOLS): contracts/package.json contracts/package-lock.json
	npm ci --prefix contracts --no-audit --no-fund
	touch $@

contracts: chain-tools ## rebuild contracts/build/ (the devnet token; USDC from Circle's vendored source) with the pinned solc
	node contracts/build.js

contracts-check: chain-tools ## fail if a committed contract artifact differs from a fresh build
	node contracts/build.js --check

lint: migrate ## rustfmt, clippy, the committed sqlx metadata (against a migrated DATABASE_URL), feature unification
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	SQLX_OFFLINE=false cargo sqlx prepare --check -- --all-targets
	bash scripts/check-features.sh

migrate: ## apply migrations with sqlx-cli (cargo install sqlx-cli --version '~0.8')
	sqlx database create
	sqlx migrate run

prepare: ## refresh the offline query metadata in .sqlx/ after changing a query
	SQLX_OFFLINE=false cargo sqlx prepare -- --all-targets

openapi: ## regenerate the committed openapi.json from the code
	cargo run --quiet --bin payments-api -- openapi > openapi.json

compose-check: ## docker compose up, the docs' snippets (scripts/readme-check.sh) and the settlement checks against it, then down
	bash scripts/compose-check.sh

BENCH_ARGS ?= --clients 32 --seconds 10
bench: chain-tools ## release build, HTTP load beside the pgbench reference, settlement on anvil; writes target/bench/
	cargo build --release --bin payments-api --example loadgen
	cargo run --release --quiet --example loadgen -- $(BENCH_ARGS)

DURATION ?= 60
# The fault runs build in release; CI passes CHAOS_PROFILE=dev to reuse what `make test` compiled.
CHAOS_PROFILE ?= release
chaos: chain-tools ## fault run: 3 replicas, a chain, PostgreSQL and anvil restarts, kills, reorgs; then the checker
	cargo build --profile $(CHAOS_PROFILE) --bin payments-api --example chaos
	cargo run --profile $(CHAOS_PROFILE) --quiet --example chaos -- --duration $(DURATION)

HA_TOOLS := patroni etcd haproxy
ha-chaos: chain-tools ## failover run on Patroni (3 PostgreSQL, synchronous standby), etcd and HAProxy: via HAProxy, then a multi-host DATABASE_URL
	@for tool in $(HA_TOOLS); do PATH="$$PATH:/usr/sbin" command -v $$tool >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patroni etcd-server haproxy >/dev/null; fi
	cargo build --profile $(CHAOS_PROFILE) --bin payments-api --example chaos
	cargo run --profile $(CHAOS_PROFILE) --quiet --example chaos -- --ha proxy --duration $(DURATION) --fault-every 15 --out target/ha-chaos/proxy
	cargo run --profile $(CHAOS_PROFILE) --quiet --example chaos -- --ha multi-host --duration $(DURATION) --fault-every 15 --out target/ha-chaos/multi-host

schemathesis: ## Schemathesis (PyPI) against /openapi.json of a live debug build
	cargo build --bin payments-api
	bash scripts/schemathesis.sh "$$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/payments-api"

FUZZ_SECONDS ?= 60
fuzz: ## cargo-fuzz over the request path (nightly) from the committed corpus
	bash scripts/fuzz.sh $(FUZZ_SECONDS)
