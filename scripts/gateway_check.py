"""redline's `api: responses` and `api: anthropic` through a real gateway (LiteLLM's
proxy in front of llama-cpp-python), beside the official `openai` and `anthropic`
SDKs as independent clients: the same prompt at temperature 0 must give redline and
the SDK the same answer text and the same usage, and every request must be read
whole and in order. Exits non-zero on any mismatch.

usage: gateway_check.py GATEWAY_URL KEY_ENV REDLINE WORK_DIR
"""
import json
import os
import subprocess
import sys

import anthropic
from openai import OpenAI

gateway, key_env, redline, work = sys.argv[1:5]
key = os.environ[key_env]
MODEL, PROMPT, MAX = "gemma", "Name three things a load test measures.", 16
checks = 0


def check(condition, what):
    global checks
    if not condition:
        sys.exit(f"FAILED: {what}")
    checks += 1


# --- the SDKs ------------------------------------------------------------------------
oa = OpenAI(base_url=f"{gateway}/v1", api_key=key)
kinds, text, final = [], "", None
for event in oa.responses.create(model=MODEL, input=PROMPT, max_output_tokens=MAX,
                                 temperature=0, stream=True):
    kinds.append(event.type)
    if event.type == "response.output_text.delta":
        text += event.delta
    elif event.type in ("response.completed", "response.incomplete"):
        final = event.response
check(kinds[0] == "response.created" and final is not None, f"a whole Responses stream: {kinds}")
sdk = {"responses": (text, final.usage.output_tokens)}

claude = anthropic.Anthropic(base_url=gateway, api_key=key)
with claude.messages.stream(model=MODEL, max_tokens=MAX, temperature=0,
                            messages=[{"role": "user", "content": PROMPT}]) as stream:
    text = "".join(stream.text_stream)
    message = stream.get_final_message()
sdk["anthropic"] = (text, message.usage.output_tokens)
for api, (text, tokens) in sdk.items():
    # The gateway's own count: LiteLLM's Responses bridge says 18 for a 16-token cap.
    check(text.strip() and tokens and tokens > 0, f"{api}: the SDK read an answer: {text!r}, {tokens}")

# --- redline, the same prompt ---------------------------------------------------------
prompts = os.path.join(work, "gateway-prompts.jsonl")
with open(prompts, "w") as f:
    f.write(json.dumps({"prompt": PROMPT}) + "\n")
for api, (text, tokens) in sdk.items():
    spec = os.path.join(work, f"gateway-{api}.yaml")
    with open(spec, "w") as f:
        f.write(f"""apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: {{ name: gateway-{api} }}
spec:
  services:
    llm: {{ url: "{gateway}", model: {MODEL}, api: {api}, api_key_env: {key_env} }}
  payloadTemplate:
    body: {{ temperature: 0 }}
    prompts: {{ dataset: {{ file: {prompts}, output_tokens: {MAX} }} }}
  load:
    - {{ concurrency: 1, requests: 3 }}
""")
    out = os.path.join(work, f"gateway-{api}")
    subprocess.run([redline, "run", spec, "--out", out, "--quiet"], check=True, stdout=subprocess.DEVNULL)
    records = [json.loads(line) for line in open(os.path.join(out, "records.jsonl"))]
    check(len(records) == 3, f"{api}: every request recorded")
    for r in records:
        check(r["outcome"] == "ok", f"{api}: {r.get('error')}")
        check(r["output_tokens"] == tokens, f"{api}: {r['output_tokens']} output tokens, the SDK's usage says {tokens}")
        check(r["first_answer_us"] >= r["first_token_us"] > r["sent_us"], f"{api}: timed in order")
    summary = json.load(open(os.path.join(out, "summary.json")))
    answer = summary["samples"][0]["answer"]
    check(text.startswith(answer.rstrip("…")) or answer.startswith(text),
          f"{api}: the same answer at temperature 0: redline {answer!r}, SDK {text!r}")
    print(f"gateway {api}: redline and the SDK read the same {tokens}-token answer; "
          f"TTFT p50 {summary['latency_ms']['ttft']['p50']:.0f} ms")

print(f"gateway check: {checks} checks passed")
