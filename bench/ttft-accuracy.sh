#!/usr/bin/env bash
# How exactly the client times the first token, against the server's own clock, as the
# number of streams grows. `redline sim` and `redline run` are separate processes pinned
# to separate cores (taskset: the simulator on core 1, the client on core 0), a closed
# loop of N streams for SECONDS at each N. Every record carries the simulator's own
# account of its request (arrival, first token made, first token handed to the
# connection, on the engine's clock), so each request's error is
#   (client first token − client sent) − (engine first token − engine arrival),
# all that lies between the engine and the client's figure, in two parts:
#   server delivery = first token handed to the connection − first token made (a step
#                     makes a token for every stream at once; they leave one by one);
#   the rest        = error − server delivery: the request's way in, the kernel, and
#                     the client's send, read and parse.
# Prints the percentiles of each per N, beside the TTFT, and each process's CPU.
# Usage: bench/ttft-accuracy.sh [SECONDS] [STREAMS…]   (defaults: 20; 10 100 300 1000)
#        HTTP2=true bench/ttft-accuracy.sh …   every stream on one HTTP/2 connection
#        PROFILE=bench/sim-accuracy.yaml …      a server's pace (~40 ms steps at 1,000
#                                               streams) instead of sim-5000's ~8 ms
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
seconds=${1:-20}
shift || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(10 100 300 1000)
ulimit -n "$(ulimit -Hn)"
cargo build --release --quiet
bin=$PWD/target/release/redline
work=$(mktemp -d)
port=$(free_port)
taskset -c 1 "$bin" sim --profile "${PROFILE:-bench/sim-5000.yaml}" --addr "127.0.0.1:$port" 2> /dev/null &
sim=$!
trap 'kill $sim 2> /dev/null || true; rm -rf "$work"' EXIT
until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do sleep 0.1; done
# A process's user + system CPU so far, in seconds.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }

printf '%7s %8s %9s | %-26s | %-26s | %-26s\n' streams requests "TTFT p50" "error p50 / p99 / p99.9" \
  "server delivery p50/p99/p99.9" "the rest p50 / p99 / p99.9"
for n in "${counts[@]}"; do
  cat > "$work/spec-$n.yaml" <<SPEC
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: ttft-accuracy-$n }
spec:
  services:
    llm: { url: "http://127.0.0.1:$port", model: sim-bench, api: completions, http2: ${HTTP2:-false} }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 64, output_tokens: 32 } }
  max_in_flight: 20000
  warmup: 5s
  load:
    - { concurrency: $n, duration: ${seconds}s }
SPEC
  sim_before=$(cpu_seconds "$sim") started=$(date +%s.%N)
  # The client's own CPU from its rusage, through a small wrapper.
  python3 -c '
import resource, subprocess, sys, time
start = time.monotonic()
code = subprocess.call(sys.argv[2:], stdout=open(sys.argv[1], "w"), stderr=subprocess.STDOUT)
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{100 * (used.ru_utime + used.ru_stime) / (time.monotonic() - start):.0f} %", file=sys.stderr)
sys.exit(code)' "$work/report-$n.txt" taskset -c 0 "$bin" run "$work/spec-$n.yaml" --out "$work/out-$n" --quiet \
    2> "$work/client-cpu-$n" || {
    cat "$work/report-$n.txt"
    exit 1
  }
  sim_share=$(python3 -c "import sys, time; print(f'{100 * ($(cpu_seconds "$sim") - $sim_before) / (time.time() - $started):.0f} %')")
  python3 - "$work/out-$n/records.jsonl" "$n" <<'PY'
import json, sys
path, n = sys.argv[1], sys.argv[2]
ttft, error, delivery, rest = [], [], [], []
for r in map(json.loads, open(path)):
    s = r.get("server")
    if r["phase"] != "measure" or r["outcome"] != "ok" or not s or r.get("first_token_us") is None:
        continue
    client = r["first_token_us"] - r["sent_us"]
    engine = s["first_token_us"] - s["arrival_us"]
    served = s["first_token_sent_us"] - s["first_token_us"]
    ttft.append(client / 1e3)
    error.append((client - engine) / 1e3)
    delivery.append(served / 1e3)
    rest.append((client - engine - served) / 1e3)
def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]
def three(xs):
    return f"{q(xs, 0.5):>6.2f} / {q(xs, 0.99):>6.2f} / {q(xs, 0.999):>6.2f}"
print(f"{n:>7} {len(error):>8} {q(ttft, 0.5):>9.2f} | {three(error)} | {three(delivery)} | {three(rest)}")
PY
  # Each process's CPU over the run: a saturated one delays what it delivers.
  echo "        (ms; CPU: simulator $sim_share, client $(cat "$work/client-cpu-$n") of one core each)"
done
echo "step lag of the simulator's engine (how late its step clock woke, all runs):"
curl -s "http://127.0.0.1:$port/metrics" | awk '/^redline_sim_step_lag_seconds_(sum|count)/ {print "  " $0}'
