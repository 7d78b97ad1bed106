#!/usr/bin/env bash
# What mirroring costs the primary: redline's own client at a fixed rate (open loop),
# streaming chat from the simulator (`tiny`), measured directly, through `redline
# record` without a mirror (the proxy's own overhead), and through it mirroring every
# request to a shadow that answers after 2 s, and to one that takes the connection and
# never answers. Alternating, ROUNDS rounds of SECONDS each; prints the medians over
# rounds of TTFT p50 and E2E p50, and each mirror's against no mirror.
# Usage: bench/mirror-cost.sh [SECONDS] [ROUNDS] [RATE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
seconds=${1:-8}
rounds=${2:-3}
rate=${3:-100}
cargo build --release --quiet
redline=./target/release/redline
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
sim=$(free_port)
$redline sim --profile tiny --addr "127.0.0.1:$sim" 2>/dev/null &
pids+=($!)
slow=$(free_port); dead=$(free_port)
# A shadow answering after 2 s (threaded, so it never queues), and one that never accepts.
python3 - "$slow" <<'PY' &
import http.server, socketserver, sys, time
class Slow(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        time.sleep(2)
        self.send_response(200); self.send_header("content-length", "2"); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[1])), Slow).serve_forever()
PY
pids+=($!)
python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4096); time.sleep(10**6)' "$dead" &
pids+=($!)
declare -A url=([direct]="http://127.0.0.1:$sim")
for target in record mirror-2s mirror-dead; do
  port=$(free_port)
  case $target in
    record) extra=() ;;
    mirror-2s) extra=(--mirror "http://127.0.0.1:$slow") ;;
    mirror-dead) extra=(--mirror "http://127.0.0.1:$dead") ;;
  esac
  $redline record --upstream "http://127.0.0.1:$sim" --listen "127.0.0.1:$port" --out "$work/rec-$target" "${extra[@]}" 2>/dev/null &
  pids+=($!)
  url[$target]="http://127.0.0.1:$port"
done
for p in "$sim" $(for t in record mirror-2s mirror-dead; do echo "${url[$t]##*:}"; done); do
  until curl -sf "http://127.0.0.1:$p/v1/models" >/dev/null; do sleep 0.1; done
done
for round in $(seq "$rounds"); do
  for target in direct record mirror-2s mirror-dead; do
    $redline run --url "${url[$target]}" --model sim-tiny --rate "$rate" --duration "${seconds}s" \
      --quiet --out "$work/run" >/dev/null 2>&1 || true
    python3 - "$work/run/summary.json" "$target" >> "$work/results" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
l = d["latency_ms"]
print(sys.argv[2], l["ttft"]["p50"], l["e2e"]["p50"], d["requests"]["ok"], d["requests"]["scheduled"])
PY
  done
done
python3 - "$work/results" "$seconds" "$rounds" "$rate" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    target, ttft, e2e, ok, total = line.split()
    rows.setdefault(target, []).append((float(ttft), float(e2e), int(ok), int(total)))
med = lambda t, i: statistics.median(r[i] for r in rows[t])
print(f"mirror cost to the primary: redline run at {sys.argv[4]} req/s open loop, streaming chat (sim tiny), {sys.argv[2]}s x {sys.argv[3]} rounds, 2 shared cores")
print(f"{'target':<13}{'TTFT p50':>10}{'E2E p50':>10}{'TTFT vs record':>16}{'E2E vs record':>15}{'ok':>11}")
for t in ("direct", "record", "mirror-2s", "mirror-dead"):
    ok = sum(r[2] for r in rows[t]); total = sum(r[3] for r in rows[t])
    print(f"{t:<13}{med(t, 0):>8.2f}ms{med(t, 1):>8.2f}ms{med(t, 0) / med('record', 0):>15.3f}x{med(t, 1) / med('record', 1):>14.3f}x{ok:>6}/{total}")
print("record − direct is the recording proxy's own overhead; a mirror should add nothing beyond it")
PY
