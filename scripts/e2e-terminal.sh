#!/usr/bin/env bash
# redline as a person runs it: in a pseudo-terminal (script(1)), where the progress bar
# is drawn. The quickstart several times (exit 0, bar drawn, report printed, no panic),
# once under NO_COLOR (no colour codes), a sweep, a flow example, a Ctrl-C (exit 130
# with a partial report) and `| head -2` (no panic, the run's exit code kept).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${REDLINE_TTY_RUNS:-3}
cargo build --release --quiet
bin=$PWD/target/release/redline
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "e2e-terminal: $*" >&2; exit 1; }

# Runs COMMAND in a pseudo-terminal; the log is $work/$1.log, the exit code returned.
in_tty() {
  local name=$1; shift
  local rc=0
  timeout 300 script -qec "$*" "$work/$name.log" > /dev/null 2>&1 || rc=$?
  tr -d '\r' < "$work/$name.log" > "$work/$name.txt"
  if grep -q "panicked at" "$work/$name.txt"; then
    fail "$name panicked: $(grep -m1 'panicked at' "$work/$name.txt")"
  fi
  return "$rc"
}

# The report's lines and the bar's, in the log of a run.
expect_report() {
  grep -q "redline · $2" "$work/$1.txt" || fail "$1: no header"
  grep -q "  requests: " "$work/$1.txt" || fail "$1: no report"
  grep -q "stage 0 \[" "$work/$1.txt" || fail "$1: no progress bar was drawn"
}

for i in $(seq "$runs"); do
  in_tty "quickstart-$i" "$bin run examples/quickstart.yaml --out $work/q$i" || fail "quickstart run $i exited $?"
  expect_report "quickstart-$i" quickstart
done
echo "quickstart in a terminal: $runs of $runs exited 0 with the report and a progress bar"

NO_COLOR=1 in_tty nocolor "$bin run --url embedded --rate 5 --duration 2s --out $work/nc" || fail "NO_COLOR run exited $?"
expect_report nocolor cli
if grep -q $'\e\[3[0-9]m' "$work/nocolor.txt"; then fail "NO_COLOR: colour codes were drawn"; fi
in_tty quiet "$bin run --url embedded --rate 5 --duration 2s --quiet --out $work/qq" || fail "--quiet run exited $?"
if grep -q "stage 0 \[" "$work/quiet.txt"; then fail "--quiet drew a progress bar"; fi
echo "NO_COLOR draws no colour; --quiet draws no bar"

in_tty sweep "$bin run --url embedded --sweep 2 --throughput-concurrency 16 --duration 2s --out $work/sw" || fail "sweep exited $?"
expect_report sweep cli
grep -q "knee" "$work/sweep.txt" || fail "sweep: no knee line"
in_tty flow "$bin run examples/rag-agent.yaml --out $work/flow" || fail "flow exited $?"
expect_report flow rag-agent
echo "a sweep and a flow in a terminal: exit 0, report and bar"

# Ctrl-C five seconds in: drained, partial report, exit 130.
rc=0
in_tty sigint "timeout -s INT --preserve-status 5 $bin run examples/quickstart.yaml --out $work/int" || rc=$?
[ "$rc" = 130 ] || fail "Ctrl-C: exit $rc, not 130"
grep -q "interrupted: partial results" "$work/sigint.txt" || fail "Ctrl-C: no partial report"
[ -s "$work/int/records.jsonl" ] || fail "Ctrl-C: no records"
echo "Ctrl-C in a terminal: exit 130, partial report, records kept"

# A closed pipe: the printing stops, the run goes on and keeps its exit code.
set +o pipefail
"$bin" run --url embedded --rate 5 --duration 2s --out "$work/pipe" 2> "$work/pipe.err" | head -2 > "$work/pipe.out"
rc=${PIPESTATUS[0]}
set -o pipefail
[ "$rc" = 0 ] || fail "| head -2: redline exited $rc: $(cat "$work/pipe.err")"
if grep -q "panicked" "$work/pipe.err"; then fail "| head -2 panicked"; fi
[ "$(wc -l < "$work/pipe.out")" = 2 ] || fail "| head -2 did not get two lines"
[ -s "$work/pipe/summary.json" ] || fail "| head -2: no summary.json"
echo "| head -2: exit 0, no panic, summary written"
