#!/usr/bin/env bash
# The database's own ceiling for what this API does, measured with pgbench: each workload is the
# least SQL any design of an idempotent create or replay has to run (see the *.sql beside this
# file). `make bench` runs it in the same run as the HTTP load and reports API / reference.
#   usage: reference.sh [CLIENTS] [SECONDS]    (server from PGHOST/PGPORT/PGUSER, default local)
# Prints one line per workload:  <name> clients=<c> tps=<n> latency_ms=<average>
#   create  take the key (a commit of its own), then the intent, its event and the key's answer
#           (~900 bytes, a real answer's size) in one transaction
#   replay  read one completed key (with a ~900-byte answer)
#   plain   insert an intent, no idempotency at all: the floor of one durable write
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
clients=${1:-32}
seconds=${2:-10}
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
db=payments_reference_$$
psql -qX -d postgres -c "CREATE DATABASE $db" >/dev/null
trap 'psql -qX -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1' EXIT
psql -qX -d "$db" -v ON_ERROR_STOP=1 -f "$here/schema.sql" >/dev/null
for workload in create replay plain; do
  out=$(pgbench -n -d "$db" -f "$here/$workload.sql" -c "$clients" -j 2 -T "$seconds" 2>&1) || {
    echo "pgbench failed on $workload:" >&2
    tail -n 5 <<<"$out" >&2
    exit 1
  }
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
  latency=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")
  echo "$workload clients=$clients tps=$tps latency_ms=$latency"
done
