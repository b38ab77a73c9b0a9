#!/usr/bin/env bash
# cargo-fuzz over the request path (fuzz/fuzz_targets/request.rs) for a fixed time, from the
# committed corpus. Needs a nightly toolchain (or RUSTC_BOOTSTRAP on stable). A target that does
# not build fails, as does a finding.
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
# An unoptimised build without a sanitizer: on a cold machine it builds in about half the time
# of the default (optimised, AddressSanitizer), and the target is safe Rust, whose panics and
# failed assertions are what the fuzzing looks for (docs/security.md).
flags=(--dev --sanitizer none)
# Without a sanitizer the build needs nothing of nightly but libFuzzer's flags, which every
# toolchain that runs cargo-fuzz has: a build error is the target lagging the library, and fails.
if ! "${fuzz[@]}" build "${flags[@]}" request; then
  echo "error: the fuzz target does not build (fuzz/fuzz_targets/request.rs against the library)" >&2
  exit 1
fi
# Fuzz on a scratch copy so the committed corpus only changes on purpose (cargo fuzz cmin).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r fuzz/corpus/request/. "$scratch/"
"${fuzz[@]}" run "${flags[@]}" request "$scratch" -- -max_total_time="$seconds" -print_final_stats=1
