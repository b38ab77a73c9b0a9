#!/usr/bin/env bash
# Fails if a dev-dependency turns on a feature of a crate the server also uses that the server's own
# build leaves off. Such a feature makes `cargo run` after `cargo test` (or `make api-run` after
# `make test`) compile those crates again; Cargo.toml turns each one on for the server too.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(rustc -vV | sed -n 's/^host: //p')
features() {
  cargo tree --locked --target "$target" --prefix none -f '{p}|{f}' -e "$1" | sed 's/ (\*)//g' | sort -u
}
# One after the other into files: two `cargo tree`s at once wait on Cargo's package-cache lock, and
# one holding it can block on a full pipe that the reader has not started on yet.
server_units=$(mktemp)
test_units=$(mktemp)
trap 'rm -f "$server_units" "$test_units"' EXIT
features normal,build >"$server_units"
features normal,build,dev >"$test_units"
python3 - "$server_units" "$test_units" <<'PY'
import sys
# Each line is one compiled unit: a crate with a set of features (a crate built for proc-macros and
# build scripts may have other features than the same crate in the binary). The server's build
# compiles nothing again after the tests' build when each of its units is also one of theirs.
def units(path):
    return {line.strip() for line in open(path) if '|' in line}
server, tests = units(sys.argv[1]), units(sys.argv[2])
def parse(unit):
    crate, feats = unit.split('|', 1)
    return crate, set(f for f in feats.split(',') if f)
missing = []
for unit in sorted(server - tests):
    crate, feats = parse(unit)
    theirs = [parse(u)[1] for u in tests if parse(u)[0] == crate]
    extra = sorted(set().union(*[t - feats for t in theirs if feats <= t])) if theirs else []
    missing.append(f"{crate} [{', '.join(sorted(feats))}]: the tests build it with {', '.join(extra) or 'other features'} too")
for line in missing:
    print(line)
if missing:
    print("turn those features on in Cargo.toml ([dependencies], or [build-dependencies] for proc-macro and build-script crates)")
sys.exit(1 if missing else 0)
PY
