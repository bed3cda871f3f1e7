#!/usr/bin/env bash
# The wire core's differential fuzz target (rust/attest_wire/fuzz, cargo-fuzz: libFuzzer on
# nightly Rust) for FUZZ_SECONDS seconds (20 unless set). `make fuzz-short` runs it as part
# of `make test`; a longer run: `FUZZ_SECONDS=600 bash tools/fuzz.sh`.
#
# cargo-fuzz is installed by this script, pinned, into ~/.cache/attest-otel/cargo-fuzz (kept
# between runs), and the fuzz build goes to ~/.cache/attest-otel/fuzz-target (FUZZ_TARGET_DIR);
# docs/measurements.md says what both cost on a fresh machine. Without nightly Rust, or when
# the install or the build fails, the run is skipped with a warning; under CI=true that is a
# failure. A finding is always a failure: the input is kept in
# ~/.cache/attest-otel/fuzz-artifacts; once fixed it goes into the corpus below.
set -euo pipefail

CARGO_FUZZ_VERSION=0.13.2
root=$(cd "$(dirname "$0")/.." && pwd)
crate=$root/rust/attest_wire/fuzz
corpus=$crate/corpus/wire_differential
seeds=$root/tests/fuzz/corpus/wire
cache=$HOME/.cache/attest-otel
target_dir=${FUZZ_TARGET_DIR:-$cache/fuzz-target}
artifacts=$cache/fuzz-artifacts
seconds=${FUZZ_SECONDS:-20}
cargo_fuzz=$cache/cargo-fuzz/bin/cargo-fuzz

cannot() {
  if [ "${CI:-}" = true ]; then
    echo "fuzz: $1 (CI=true: failing)" >&2
    exit 1
  fi
  echo "fuzz: $1: the fuzz run is skipped" >&2
  exit 0
}

command -v cargo >/dev/null 2>&1 || cannot "no cargo on PATH"
cargo +nightly --version >/dev/null 2>&1 || cannot "no nightly Rust (rustup toolchain install nightly)"

if ! "$cargo_fuzz" --version 2>/dev/null | grep -q " $CARGO_FUZZ_VERSION\$"; then
  echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION into $cache/cargo-fuzz" >&2
  # Its own build directory: not the wire core's CARGO_TARGET_DIR.
  env -u CARGO_TARGET_DIR cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION" \
    --root "$cache/cargo-fuzz" --quiet || cannot "cargo install cargo-fuzz failed"
fi
export PATH=$cache/cargo-fuzz/bin:$PATH

cd "$crate"
unset CARGO_TARGET_DIR
cargo +nightly fuzz build --target-dir "$target_dir" wire_differential \
  || cannot "the fuzz target did not build"

# New inputs go to a scratch corpus; the repository's are read, never written: the fuzz
# corpus (minimised finds, logs requests) and the Python differential's (tests/fuzz).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"
log=$work/fuzz.log
if ! cargo +nightly fuzz run --target-dir "$target_dir" wire_differential "$work" "$corpus" "$seeds" -- \
  -max_total_time="$seconds" -dict="$crate/wire.dict" -artifact_prefix="$artifacts/" \
  -print_final_stats=1 >"$log" 2>&1; then
  grep -E -A12 "panicked at|ERROR: libFuzzer" "$log" | head -40 >&2
  echo "fuzz: a finding: the input is in $artifacts (replay: cargo +nightly fuzz run wire_differential FILE in $crate)" >&2
  exit 1
fi
execs=$(grep -Eo "stat::number_of_executed_units: [0-9]+" "$log" | grep -Eo "[0-9]+$" || echo "?")
edges=$(grep -Eo "cov: [0-9]+" "$log" | tail -n 1 | grep -Eo "[0-9]+" || echo "?")
echo "fuzz: wire_differential: $execs inputs in ${seconds}s, $edges edges covered, no finding"
