#!/usr/bin/env bash
# Stream capacity of `redline sim`: N concurrent streams (default 5,000) driven by
# `redline run` in a closed loop, both on this machine. Reports the SSE events/s the
# simulator emitted, how late its step clock woke against the model (p99), and its
# peak RSS. PROTOCOL h1 gives each stream its own HTTP/1.1 connection (a syscall per
# token on each side); h2 multiplexes every stream over one HTTP/2 connection.
# Usage: bench/sim-streams.sh [STREAMS] [SECONDS] [h1|h2]
set -euo pipefail
cd "$(dirname "$0")/.."
streams=${1:-5000}
seconds=${2:-30}
protocol=${3:-h1}
case "$protocol" in h1) http2=false ;; h2) http2=true ;; *) echo "protocol is h1 or h2" >&2; exit 2 ;; esac
ulimit -n "$(ulimit -Hn)"  # one socket per stream in each process
cargo build --release --quiet
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
./target/release/redline sim --profile bench/sim-5000.yaml --addr "127.0.0.1:$port" 2>/dev/null &
sim=$!
trap 'kill $sim 2>/dev/null || true; rm -rf "$work"' EXIT
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.1; done
cat > "$work/spec.yaml" <<SPEC
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: sim-streams }
spec:
  services:
    llm: { url: "http://127.0.0.1:$port", model: sim-bench, api: completions, http2: $http2 }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 16, output_tokens: 400 } }
  max_in_flight: 20000
  warmup: 10s
  load:
    - { concurrency: $streams, duration: ${seconds}s }
SPEC
# awk reads all its input (no early exit), so curl never dies of SIGPIPE under pipefail.
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 ~ "^"m"(\\{|$)" {v = $NF} END {print v}'; }
./target/release/redline run "$work/spec.yaml" --out "$work/out" --quiet > "$work/report.txt" &
client=$!
peak_rss=0; peak_client_rss=0
sleep 10   # warm-up: every stream connected and decoding
tokens0=$(metric 'vllm:generation_tokens_total'); t0=$(date +%s.%N)
steps0=$(metric redline_sim_steps_total)
curl -s "http://127.0.0.1:$port/metrics" | grep '^redline_sim_step_lag_seconds_bucket' > "$work/lag0"
running_max=0
while kill -0 $client 2>/dev/null; do
  rss=$(ps -o rss= -p $sim | tr -d ' '); [ "$rss" -gt "$peak_rss" ] && peak_rss=$rss
  crss=$(ps -o rss= -p $client 2>/dev/null | tr -d ' ' || echo 0); [ "${crss:-0}" -gt "$peak_client_rss" ] && peak_client_rss=$crss
  running=$(metric vllm:num_requests_running); running=${running%.*}; [ "$running" -gt "$running_max" ] && running_max=$running
  tokens1=$(metric 'vllm:generation_tokens_total'); t1=$(date +%s.%N); steps1=$(metric redline_sim_steps_total)
  curl -s "http://127.0.0.1:$port/metrics" | grep '^redline_sim_step_lag_seconds_bucket' > "$work/lag1"
  sleep 1
done
wait $client || true
python3 - "$work" "$tokens0" "$tokens1" "$t0" "$t1" "$steps0" "$steps1" "$peak_rss" "$peak_client_rss" "$running_max" <<'PY'
import re, sys
work, tok0, tok1, t0, t1, s0, s1, rss, crss, running = sys.argv[1:]
def buckets(path):
    out = {}
    for line in open(path):
        le = re.search(r'le="([^"]+)"', line).group(1)
        out[float('inf') if le == '+Inf' else float(le)] = float(line.split()[-1])
    return out
b0, b1 = buckets(f"{work}/lag0"), buckets(f"{work}/lag1")
delta = {le: b1[le] - b0.get(le, 0) for le in b1}
total = delta[float('inf')]
p99 = next(le for le in sorted(delta) if delta[le] >= 0.99 * total)
within2 = delta[0.002] / total if total else 0
events = (float(tok1) - float(tok0)) / (float(t1) - float(t0))
print(f"streams running (max seen): {running}")
print(f"SSE token events/s emitted: {events:,.0f} over {float(t1)-float(t0):.1f}s ({int(float(s1)-float(s0))} engine steps)")
print(f"step-clock lag: p99 <= {p99*1e3:g} ms (bucket bound); {within2*100:.2f}% of steps within 2 ms")
print(f"peak RSS: simulator {int(rss)/1024:.0f} MiB, client {int(crss)/1024:.0f} MiB")
PY
grep -E "requests:|ITL \(pooled\)|TTFT  " "$work/report.txt" | sed 's/^/client: /'
