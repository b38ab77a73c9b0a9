# Sourced by the Node suites' scripts: the PostgreSQL server their databases are made on, the same
# one the Rust tests use. TEST_DATABASE_URL names an existing server; without it, a container of
# TEST_POSTGRES_IMAGE (postgres:16-alpine by default) is started, as testcontainers does for the
# Rust tests, and removed at exit. Every database a suite makes is named `<suite>_run<pid>_…`
# after this shell, and dropped at exit (with those of runs that did not get to clean up).

node_suite_run=run$$
export NODE_SUITE_RUN=$node_suite_run
node_suite_container=

node_suite_psql() {
  command -v psql >/dev/null 2>&1 || return 1
  psql "$TEST_DATABASE_URL" -X -q -t -A -v ON_ERROR_STOP=1 "$@"
}

# Drops this run's databases and those of runs whose shell is gone.
node_suite_drop_databases() {
  local name pid
  # `<suite>_run<pid>_<ms>` (a suite's second server too: `checkout_deposit`, `x402pending`), and
  # `<suite>_<pid>_<ms>` as older runs named them.
  node_suite_psql -c "SELECT datname FROM pg_database WHERE datname ~ '^(checkout|dashboard|x402)[a-z_]*_(run)?[0-9]+_[0-9]+$'" 2>/dev/null |
    while read -r name; do
      [[ -n $name ]] || continue
      pid=$(sed -E 's/^.*_(run)?([0-9]+)_[0-9]+$/\2/' <<<"$name")
      if [[ run$pid == "$node_suite_run" ]] || ! kill -0 "$pid" 2>/dev/null; then
        node_suite_psql -c "DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)" >/dev/null 2>&1 || true
      fi
    done
}

node_suite_clean_up() {
  if [[ -n $node_suite_container ]]; then
    docker rm -f -v "$node_suite_container" >/dev/null 2>&1 || true
  else
    node_suite_drop_databases
  fi
}

if [[ -n ${TEST_DATABASE_URL:-} ]]; then
  command -v psql >/dev/null 2>&1 ||
    echo "WARNING: no psql here: the databases this suite makes on $TEST_DATABASE_URL are not dropped" >&2
  node_suite_drop_databases
elif docker info >/dev/null 2>&1; then
  image=${TEST_POSTGRES_IMAGE:-postgres:16-alpine}
  # Its data in memory, as the Rust tests' server: many databases must not fill a small disk.
  node_suite_container=$(docker run -d -P --tmpfs /var/lib/postgresql/data -e POSTGRES_PASSWORD=postgres "$image" \
    postgres -c max_connections=300 -c fsync=off) || {
    echo "cannot start $image: set TEST_POSTGRES_IMAGE to an image this machine has, or" \
      "TEST_DATABASE_URL=postgres://…/postgres to use a running server" >&2
    exit 1
  }
  port=$(docker port "$node_suite_container" 5432/tcp | head -n1 | sed 's/.*://')
  export TEST_DATABASE_URL=postgres://postgres:postgres@127.0.0.1:$port/postgres
  for _ in $(seq 1 60); do
    docker exec "$node_suite_container" pg_isready -q -h 127.0.0.1 -U postgres && break
    sleep 1
  done
  docker exec "$node_suite_container" pg_isready -h 127.0.0.1 -U postgres >/dev/null || {
    echo "$image did not become ready; its log:" >&2
    docker logs --tail 30 "$node_suite_container" >&2 || true
    docker rm -f -v "$node_suite_container" >/dev/null 2>&1
    exit 1
  }
else
  echo "no PostgreSQL for the suite: set TEST_DATABASE_URL=postgres://…/postgres, or start Docker" \
    "so a container of ${TEST_POSTGRES_IMAGE:-postgres:16-alpine} can be used" >&2
  exit 1
fi
trap node_suite_clean_up EXIT
