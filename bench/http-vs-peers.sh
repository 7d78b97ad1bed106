#!/usr/bin/env bash
# Plain HTTP GET against a static local target (nginx, one worker, loopback) at 64
# connections: redline vs oha vs wrk, side by side, alternating, ROUNDS rounds of
# SECONDS each. Prints each tool's median req/s, client CPU and peak RSS, and ratios.
# Installs what is missing: nginx and wrk from Debian, oha from crates.io (into
# target/peers). Usage: bench/http-vs-peers.sh [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
seconds=${1:-10}
rounds=${2:-3}
command -v nginx >/dev/null && command -v wrk >/dev/null || {
  apt-get update -qq && apt-get install -y -qq nginx-light wrk >/dev/null
}
oha=$(command -v oha || echo target/peers/bin/oha)
[ -x "$oha" ] || cargo install oha --locked --quiet --root target/peers
cargo build --release --quiet
work=$(mktemp -d)
port=$(free_port)
origin_nginx_conf "$work" "$port"
nginx -c "$work/nginx.conf" &
nginx_pid=$!
trap 'kill $nginx_pid 2>/dev/null || true; rm -rf "$work"' EXIT
until curl -sf "http://127.0.0.1:$port/" >/dev/null; do sleep 0.1; done
url="http://127.0.0.1:$port/"
cat > "$work/spec.yaml" <<SPEC
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: http-bench }
spec:
  services:
    web: { url: "http://127.0.0.1:$port", api: http }
  payloadTemplate:
    request: { method: GET, path: / }
  load:
    - { concurrency: 64, duration: ${seconds}s }
SPEC
# Each line: tool req/s cpu_seconds peak_rss_kib
measure() {
  local tool=$1 out="$work/$1.out"
  case $tool in
    redline) /usr/bin/time -f "%U %S %M" -o "$work/time" ./target/release/redline run "$work/spec.yaml" --out "$work/redline" --quiet > "$out"
             rps=$(python3 -c "import json; s=json.load(open('$work/redline/summary.json')); print(s['requests']['ok'] / s['elapsed_s'])") ;;
    oha)     /usr/bin/time -f "%U %S %M" -o "$work/time" "$oha" -c 64 -z "${seconds}s" --no-tui "$url" > "$out"
             rps=$(awk '/Requests\/sec/ {print $2}' "$out") ;;
    wrk)     /usr/bin/time -f "%U %S %M" -o "$work/time" wrk -t1 -c64 -d"${seconds}s" "$url" > "$out"
             rps=$(awk '/Requests\/sec/ {print $2}' "$out") ;;
  esac
  read -r user sys rss < "$work/time"
  echo "$tool $rps $(python3 -c "print($user + $sys)") $rss" >> "$work/results"
}
for round in $(seq "$rounds"); do
  for tool in redline oha wrk; do measure $tool; done
done
python3 - "$work/results" "$seconds" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    tool, rps, cpu, rss = line.split()
    rows.setdefault(tool, []).append((float(rps), float(cpu), int(rss)))
seconds = float(sys.argv[2])
median = {t: statistics.median(r[0] for r in v) for t, v in rows.items()}
print(f"plain HTTP GET, 64 connections, {seconds:.0f}s x {len(rows['redline'])} rounds, nginx (1 worker) on loopback")
print(f"{'tool':<9}{'median req/s':>14}{'runs':>30}{'client CPU':>12}{'peak RSS':>10}")
for tool in ("redline", "oha", "wrk"):
    runs = " ".join(f"{r[0]:.0f}" for r in rows[tool])
    cpu = statistics.median(r[1] for r in rows[tool]) / seconds
    rss = max(r[2] for r in rows[tool]) / 1024
    print(f"{tool:<9}{median[tool]:>14,.0f}{runs:>30}{cpu:>11.0%}{rss:>8.0f}MiB")
print(f"ratios: redline/oha = {median['redline'] / median['oha']:.2f}x, redline/wrk = {median['redline'] / median['wrk']:.2f}x")
PY
