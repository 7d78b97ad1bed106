#!/usr/bin/env bash
# report.html as a reader opens it: the quickstart, a sweep, the rag-agent example,
# the explain example (a flow run that fails and says why) and the multimodal example
# (media and the feedback controller) run, then each report opened in Debian's Chromium (headless, offline, driven by
# playwright-core from npm) by scripts/report_check.mjs. Screenshots go to a temporary
# folder (kept with REDLINE_REPORT_SHOTS=DIR); none is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v chromium > /dev/null || { apt-get update -qq && apt-get install -y -qq chromium > /dev/null; }
node_dir=target/node-report
[ -d "$node_dir/node_modules/playwright-core" ] || {
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --silent --no-audit --no-fund playwright-core@1 > /dev/null
}
cp scripts/report_check.mjs "$node_dir/"
cargo build --release --quiet
bin=$PWD/target/release/redline
work=$(mktemp -d)
shots=${REDLINE_REPORT_SHOTS:-$work/shots}
mkdir -p "$shots"
trap 'rm -rf "$work"' EXIT
fail() { echo "e2e-report: $*" >&2; exit 1; }

run() { # NAME SPEC
  local rc=0
  timeout 300 "$bin" run "$2" --out "$work/$1" --quiet > "$work/$1.log" 2>&1 || rc=$?
  [ "$rc" -le 1 ] || fail "$1 exited $rc: $(tail -3 "$work/$1.log")"
  [ -s "$work/$1/report.html" ] || fail "$1 wrote no report.html"
  [ -s "$work/$1/timeline.json" ] || fail "$1 wrote no timeline.json"
}
run quickstart examples/quickstart.yaml
# The sweep example at 4 s a point and four rates, not 15 s and six: the page is the
# same, and CI's minutes are not.
sed 's/rates: 6, throughput_concurrency: 256 }, arrival: poisson, duration: 15s/rates: 4, throughput_concurrency: 64 }, arrival: poisson, duration: 4s/' \
  examples/sweep.yaml > "$work/sweep.yaml"
grep -q "duration: 4s" "$work/sweep.yaml" || fail "examples/sweep.yaml changed: shorten its sweep here again"
run sweep "$work/sweep.yaml"
run rag-agent examples/rag-agent.yaml
run explain examples/explain.yaml
# The multimodal example at 8 s rather than 20: the controller still reads 8 times.
sed 's/duration: 20s/duration: 8s/' examples/multimodal.yaml > "$work/multimodal.yaml"
grep -q "duration: 8s" "$work/multimodal.yaml" || fail "examples/multimodal.yaml changed: shorten it here again"
run multimodal "$work/multimodal.yaml"

# `redline report` builds the same page again from the folder.
cp "$work/quickstart/report.html" "$work/first.html"
"$bin" report "$work/quickstart" -o "$work/again.html" > /dev/null
cmp -s "$work/first.html" "$work/again.html" || fail "redline report built a different page"

common=verdicts,overview,distributions,over-time,timeline,samples,about
node "$node_dir/report_check.mjs" "$shots" \
  "$work/quickstart/report.html:$common,server" \
  "$work/sweep/report.html:$common,sweep" \
  "$work/rag-agent/report.html:$common,flow,server" \
  "$work/explain/report.html:$common,flow,explain,errors" \
  "$work/multimodal/report.html:$common,media"
echo "e2e-report: ok"
