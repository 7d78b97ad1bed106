#!/usr/bin/env bash
# The parsers under coverage-guided fuzzing (cargo-fuzz, libFuzzer):
# the SSE decoder and the proxy's framer (and gRPC message framing and the proxy's
# protobuf field drop), the spec and chaos-rules parsers, the OTLP
# decoders of `redline collect`, the records reader, the dataset/trace readers and
# `aggregate.json` (a worker's delta, as the coordinator reads it).
# Each target runs SECONDS (default 60) from its committed corpus in fuzz/corpus/; new
# inputs go to a scratch folder, so the committed corpus changes only by hand
# (`cargo fuzz cmin`). A crash stops the script, its input in fuzz/artifacts/TARGET/:
# it becomes a regression test beside the code it broke.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET…]
#        scripts/fuzz.sh build   (only builds the targets: .ci/run starts it early)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(sse spec chaos_rules otlp records datasets aggregate media)
command -v cargo-fuzz > /dev/null || cargo install cargo-fuzz --locked --version 0.13.2 --quiet
# libFuzzer's instrumentation needs nightly flags: the nightly toolchain when the
# machine has one, else the stable compiler allowed them (RUSTC_BOOTSTRAP).
if rustup toolchain list 2> /dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
fi
# Release code at opt-level 1 (fuzz/Cargo.toml) with overflow checks and debug
# assertions on. No AddressSanitizer: redline forbids unsafe code, and what a parser
# of ours can do wrong (panic, hang, allocate without bound) libFuzzer catches alone
# (-timeout, -rss_limit_mb); without it the build from a clean clone is minutes shorter.
flags=(-O -s none -a)
"${fuzz[@]}" build "${flags[@]}"
[ "$seconds" != build ] || exit 0
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target"
  "${fuzz[@]}" run "${flags[@]}" "$target" "$scratch/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    > "$scratch/$target.log" 2>&1 || {
    tail -40 "$scratch/$target.log"
    echo "fuzz: $target failed; its input is in fuzz/artifacts/$target/" >&2
    exit 1
  }
  runs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$target.log" | grep -o '[0-9]*$')
  cover=$(grep -o 'cov: [0-9]*' "$scratch/$target.log" | tail -1)
  echo "fuzz $target: $runs inputs in ${seconds}s, $cover, no crash"
done
