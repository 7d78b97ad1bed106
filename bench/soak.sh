#!/usr/bin/env bash
# Memory over a long run: Poisson RATE req/s of short streamed completions for SECONDS
# against a separate `redline sim --profile tiny`, sampling the client's RSS every 10 s.
# Histograms, not samples: RSS should stay flat, bounded by requests in flight.
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
echo "elapsed_s client_rss_mib"
start=$(date +%s)
while kill -0 $client 2>/dev/null; do
  rss=$(ps -o rss= -p $client 2>/dev/null | tr -d ' ' || true)
  [ -n "$rss" ] && echo "$(( $(date +%s) - start )) $(( rss / 1024 ))" | tee -a "$work/rss"
  sleep 10
done
wait $client
python3 - "$work/rss" <<'PY'
import sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
early = [r for t, r in rows if 30 <= t <= 90] or [rows[0][1]]
late = [r for t, r in rows[-6:]]
print(f"client RSS: {min(early)}-{max(early)} MiB in the first minutes, {min(late)}-{max(late)} MiB at the end, peak {max(r for _, r in rows)} MiB")
PY
grep -E "requests:|send lag|measured:" "$work/report.txt"
wc -l < "$work/out/records.jsonl" | sed 's/^/records written: /'
