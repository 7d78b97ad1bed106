#!/usr/bin/env bash
# What the chaos proxy costs when it injects nothing: oha against nginx (one worker,
# loopback) directly, through `redline chaos` with no rules, through it with three
# matching rules at probability 0 (every request is matched and rolled), and — the
# peer reference for what any HTTP proxy hop costs here — through an nginx
# `proxy_pass` (two workers, keep-alive upstream pool). Alternating, ROUNDS rounds of
# SECONDS each:
#   latency    — oha at a fixed 1,000 req/s (latency-corrected), 64 connections:
#                p50 and p99, and what the proxy adds to each;
#   throughput — oha flat out at 64 connections: req/s, and the share of direct.
# Prints medians over rounds. Installs what is missing: nginx from Debian, oha from
# crates.io (into target/peers). Usage: bench/chaos-overhead.sh [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
seconds=${1:-8}
rounds=${2:-3}
command -v nginx >/dev/null || {
  apt-get update -qq && apt-get install -y -qq nginx-light >/dev/null
}
oha=$(command -v oha || echo target/peers/bin/oha)
[ -x "$oha" ] || cargo install oha --locked --quiet --root target/peers
cargo build --release --quiet
work=$(mktemp -d)
port=$(free_port)
origin_nginx_conf "$work" "$port"
nginx_proxy=$(free_port)
cat > "$work/nginx-proxy.conf" <<CONF
worker_processes 2;
daemon off;
pid $work/nginx-proxy.pid;
error_log $work/error-proxy.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $work; proxy_temp_path $work; fastcgi_temp_path $work; uwsgi_temp_path $work; scgi_temp_path $work;
  upstream origin { server 127.0.0.1:$port; keepalive 128; }
  server {
    listen 127.0.0.1:$nginx_proxy;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
CONF
cat > "$work/rules.yaml" <<RULES
rules:
  - { name: slow, match: { path: / }, delay: { probability: 0, min_ms: 300, max_ms: 800 } }
  - { name: cut, match: { path: /, method: GET }, cut_stream: { probability: 0, after_events: 2 } }
  - { name: fail, match: { path: "/**" }, abort: { probability: 0, status: 503 } }
RULES
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
nginx -c "$work/nginx.conf" &
pids+=($!)
nginx -c "$work/nginx-proxy.conf" &
pids+=($!)
empty=$(free_port); empty_admin=$(free_port)
ruled=$(free_port); ruled_admin=$(free_port)
./target/release/redline chaos --upstream "http://127.0.0.1:$port" --listen "127.0.0.1:$empty" --admin "127.0.0.1:$empty_admin" 2>/dev/null &
pids+=($!)
./target/release/redline chaos --upstream "http://127.0.0.1:$port" --listen "127.0.0.1:$ruled" --admin "127.0.0.1:$ruled_admin" --rules "$work/rules.yaml" 2>/dev/null &
pids+=($!)
for p in "$port" "$empty" "$ruled" "$nginx_proxy"; do
  until curl -sf "http://127.0.0.1:$p/" >/dev/null; do sleep 0.1; done
done
declare -A url=(
  [direct]="http://127.0.0.1:$port/"
  [proxy]="http://127.0.0.1:$empty/"
  [proxy+3rules]="http://127.0.0.1:$ruled/"
  [nginx-proxy]="http://127.0.0.1:$nginx_proxy/"
)
# Each line: target mode p50_s p99_s req_per_s
measure() {
  local target=$1 mode=$2 out="$work/out.json"
  case $mode in
    latency) "$oha" -c 64 -q 1000 --latency-correction -z "${seconds}s" --no-tui --output-format json "${url[$target]}" > "$out" ;;
    throughput) "$oha" -c 64 -z "${seconds}s" --no-tui --output-format json "${url[$target]}" > "$out" ;;
  esac
  python3 - "$out" "$target" "$mode" >> "$work/results" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["latencyPercentiles"]
print(sys.argv[2], sys.argv[3], p["p50"], p["p99"], d["summary"]["requestsPerSec"], d["summary"]["successRate"])
PY
}
for round in $(seq "$rounds"); do
  for mode in latency throughput; do
    for target in direct proxy proxy+3rules nginx-proxy; do measure "$target" "$mode"; done
  done
done
python3 - "$work/results" "$seconds" "$rounds" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    target, mode, p50, p99, rps, ok = line.split()
    rows.setdefault((target, mode), []).append((float(p50), float(p99), float(rps), float(ok)))
med = lambda target, mode, i: statistics.median(r[i] for r in rows[(target, mode)])
print(f"chaos proxy overhead, no faults injected: oha, 64 connections, {sys.argv[2]}s x {sys.argv[3]} rounds, nginx (1 worker) on loopback, 2 shared cores")
print(f"{'target':<14}{'p50 @1k/s':>11}{'p99 @1k/s':>11}{'p50 added':>11}{'p99 added':>11}{'max req/s':>11}{'of direct':>11}{'success':>9}")
for target in ("direct", "proxy", "proxy+3rules", "nginx-proxy"):
    p50, p99 = med(target, "latency", 0) * 1e6, med(target, "latency", 1) * 1e6
    added50 = p50 - med("direct", "latency", 0) * 1e6
    added99 = p99 - med("direct", "latency", 1) * 1e6
    rps = med(target, "throughput", 2)
    share = rps / med("direct", "throughput", 2)
    ok = min(r[3] for mode in ("latency", "throughput") for r in rows[(target, mode)])
    print(f"{target:<14}{p50:>9.0f}µs{p99:>9.0f}µs{added50:>9.0f}µs{added99:>9.0f}µs{rps:>11,.0f}{share:>10.0%}{ok:>9.2%}")
print("goal: <= 100 µs added at p50, >= 80 % of direct throughput; nginx-proxy is what a")
print("proxy hop written in C costs on the same cores (the CPU the clients and origin need too)")
PY
