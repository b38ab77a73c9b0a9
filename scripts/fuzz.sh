#!/usr/bin/env bash
# cargo-fuzz over the request path (fuzz/fuzz_targets/request.rs) for a fixed time, from the
# committed corpus. Needs a nightly toolchain (or RUSTC_BOOTSTRAP on stable). A toolchain that
# cannot build the target is reported and skipped; a finding fails.
#   usage: scripts/fuzz.sh [SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
export SQLX_OFFLINE=true
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-/var/tmp/payments-api-fuzz-target}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --quiet || {
  echo "WARNING: cargo-fuzz could not be installed: fuzzing skipped" >&2; exit 0; }
if cargo +nightly --version >/dev/null 2>&1; then
  fuzz=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi
if ! "${fuzz[@]}" build request; then
  echo "WARNING: the fuzz target does not build with this toolchain: fuzzing skipped" >&2
  exit 0
fi
# Fuzz on a scratch copy so the committed corpus only changes on purpose (cargo fuzz cmin).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r fuzz/corpus/request/. "$scratch/"
"${fuzz[@]}" run request "$scratch" -- -max_total_time="$seconds" -print_final_stats=1
