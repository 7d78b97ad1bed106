#!/usr/bin/env bash
# Memory and descriptors over a long run: Poisson RATE req/s of short streamed
# completions for SECONDS against a separate `redline sim --profile tiny`, sampling the
# client's RSS and open file descriptors, and the simulator's RSS, every 10 s.
# Histograms, not samples: RSS should stay flat, bounded by requests in flight, and
# descriptors by connections. Prints each series' least-squares slope per minute after
# the first minute (the allocator's and the pool's warm-up): a leak shows as a slope
# that is not ~0.
# Usage: bench/soak.sh [RATE] [SECONDS]   (defaults 1000 req/s, 600 s)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1000}
seconds=${2:-600}
cargo build --release --quiet
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
./target/release/redline sim --profile tiny --addr "127.0.0.1:$port" 2>/dev/null &
sim=$!
trap 'kill $sim 2>/dev/null || true; rm -rf "$work"' EXIT
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.1; done
cat > "$work/spec.yaml" <<SPEC
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: soak }
spec:
  services:
    llm: { url: "http://127.0.0.1:$port", model: sim-tiny, api: completions }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 32, output_tokens: 8 } }
  load:
    - { arrival: poisson, rate: $rate, duration: ${seconds}s }
SPEC
./target/release/redline run "$work/spec.yaml" --out "$work/out" --quiet > "$work/report.txt" &
client=$!
echo "elapsed_s client_rss_kib client_fds sim_rss_kib"
start=$(date +%s)
while kill -0 $client 2>/dev/null; do
  rss=$(ps -o rss= -p $client 2>/dev/null | tr -d ' ' || true)
  fds=$(ls /proc/$client/fd 2>/dev/null | wc -l)
  sim_rss=$(ps -o rss= -p $sim | tr -d ' ')
  [ -n "$rss" ] && echo "$(( $(date +%s) - start )) $rss $fds $sim_rss" | tee -a "$work/samples"
  sleep 10
done
wait $client
python3 - "$work/samples" "$seconds" <<'PY'
import sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
load_s = int(sys.argv[2])
def slope(points):
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 60 * sum((t - mt) * (v - mv) for t, v in points) / var if var else 0.0
# The load's window after its first minute: once the load ends the client reads its
# records back for the report, a peak of its own that is not a leak.
steady = [r for r in rows if 60 <= r[0] < load_s] or rows
after = [r for r in rows if r[0] >= load_s]
for name, col, unit, scale in (("client RSS", 1, "MiB", 1024), ("client FDs", 2, "", 1), ("simulator RSS", 3, "MiB", 1024)):
    values = [r[col] / scale for r in steady]
    per_min = slope([(r[0], r[col] / scale) for r in steady])
    print(f"{name}: {min(values):.1f}-{max(values):.1f} {unit} after the first minute, "
          f"slope {per_min:+.3f} {unit}/min over {steady[-1][0] - steady[0][0]} s")
if after:
    print(f"after the load (summary, report.html and timeline.json from the records): client RSS "
          f"peak {max(r[1] for r in after) / 1024:.1f} MiB")
PY
grep -E "requests:|send lag|measured:" "$work/report.txt"
wc -l < "$work/out/records.jsonl" | sed 's/^/records written: /'
