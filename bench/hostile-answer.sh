#!/usr/bin/env bash
# What one hostile answer costs the client: a server that streams one 5 MiB content
# event without whitespace (a runaway generation, a base64 blob), with usage and
# without. redline's CPU per request beside curl's reading the same bytes, and the
# ratio (the goal: within 2x of reading the bytes when the server sent usage).
# Usage: bench/hostile-answer.sh [REQUESTS] [REDLINE_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
requests=${1:-10}
redline=${2:-}
if [ -z "$redline" ]; then
  cargo build --release --quiet
  redline=target/release/redline
fi
work=$(mktemp -d)
port=$(free_port)
python3 - "$port" > /dev/null 2>&1 <<'PY' &
import http.server, json, sys
blob = "a" * (5 << 20)
def event(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"
bodies = {
    True: event({"choices": [{"index": 0, "delta": {"content": blob}, "finish_reason": None}]})
    + event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
             "usage": {"prompt_tokens": 3, "completion_tokens": 655360}})
    + b"data: [DONE]\n\n",
    False: event({"choices": [{"index": 0, "delta": {"content": blob}, "finish_reason": None}]})
    + event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    + b"data: [DONE]\n\n",
}
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = bodies[not self.path.startswith("/nousage")]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
PY
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/" -X POST -d '{}' && break; sleep 0.1; done

cpu() { awk '{print $1 + $2}' "$1"; }  # user + system seconds
# curl reads the same bytes: the floor of what reading an answer costs.
/usr/bin/time -f '%U %S' -o "$work/curl.time" bash -c \
  "for i in \$(seq $requests); do curl -s -o /dev/null -X POST -d '{}' http://127.0.0.1:$port/v1/chat/completions; done"
curl_cpu=$(cpu "$work/curl.time")
printf '%-34s %10s %12s %8s\n' "client" "wall s" "CPU ms/req" "× curl"
printf '%-34s %10s %12.1f %8s\n' "curl (reads the bytes)" "-" "$(echo "$curl_cpu * 1000 / $requests" | bc -l)" "1.0"
for mode in usage nousage; do
  base="http://127.0.0.1:$port"
  [ "$mode" = nousage ] && base="http://127.0.0.1:$port/nousage"
  start=$(date +%s.%N)
  /usr/bin/time -f '%U %S' -o "$work/$mode.time" "$redline" run --url "$base" --model m \
    --concurrency 1 --requests "$requests" --out "$work/$mode" --quiet > /dev/null 2>&1 || true
  wall=$(echo "$(date +%s.%N) - $start" | bc -l)
  redline_cpu=$(cpu "$work/$mode.time")
  records=$(wc -l < "$work/$mode/records.jsonl")
  printf '%-34s %10.2f %12.1f %8.2f   (%s records, %s)\n' "redline, 5 MiB event, $mode" "$wall" \
    "$(echo "$redline_cpu * 1000 / $requests" | bc -l)" "$(echo "$redline_cpu / $curl_cpu" | bc -l)" \
    "$records" "$(grep -o '"token_source":"[a-z_]*"' "$work/$mode/records.jsonl" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
done
