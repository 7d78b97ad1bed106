"""The official `openai` (Responses API) and `anthropic` (Messages API) SDKs against
`redline sim`, then redline against the same simulator with the same prompts: the
SDKs must read every event the simulator sends (reasoning, text, tool calls, cache
counts), and redline's records must count exactly what the SDKs' final usage says.
Exits non-zero on any mismatch.

usage: agent_sdk_check.py BASE_URL REDLINE_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys

import anthropic
from openai import OpenAI

base, redline, work = sys.argv[1], sys.argv[2], sys.argv[3]
REASONING = 6
PROMPT = "Explain, as a load tester would, why the first answer token matters."
SYSTEM = "You answer questions about serving language models under load, briefly and exactly."
checks = 0


def check(condition, what):
    global checks
    if not condition:
        sys.exit(f"FAILED: {what}")
    checks += 1


oa = OpenAI(base_url=f"{base}/v1", api_key="not-needed")
model = oa.models.list().data[0].id

# --- Responses: a stream, read event by event -------------------------------------
kinds, reasoning, text, final = [], "", "", None
stream = oa.responses.create(
    model=model, input=PROMPT, max_output_tokens=24, stream=True,
    extra_body={"reasoning_tokens": REASONING},
)
for event in stream:
    kinds.append(event.type)
    if event.type == "response.reasoning_text.delta":
        check(text == "", "reasoning comes before the answer")
        reasoning += event.delta
    elif event.type == "response.output_text.delta":
        text += event.delta
    elif event.type in ("response.completed", "response.incomplete"):
        final = event.response
check(kinds[0] == "response.created", f"the stream starts with response.created: {kinds[:2]}")
check(kinds[-1] == "response.incomplete", f"cut at max_output_tokens: {kinds[-1]}")
check(final.incomplete_details.reason == "max_output_tokens", "the reason is said")
check(len(reasoning.split()) == REASONING, f"{REASONING} reasoning words: {reasoning!r}")
check(final.usage.output_tokens == 24, f"24 output tokens: {final.usage}")
check(final.usage.output_tokens_details.reasoning_tokens == REASONING, "reasoning counted apart")
check(final.output[1].content[0].text == text, "the final output is the streamed text")
stream_usage = final.usage

# --- Responses: server-side history through previous_response_id ------------------
first = oa.responses.create(model=model, input=PROMPT, max_output_tokens=16)
check(first.status == "incomplete" and first.output_text, "a whole answer reads as text")
second = oa.responses.create(
    model=model, input="And the last one?", max_output_tokens=16,
    previous_response_id=first.id,
)
check(second.usage.input_tokens > first.usage.input_tokens + 16, "the history is in the prompt")
check(second.usage.input_tokens_details.cached_tokens > 0, "and found in the prefix cache")
try:
    oa.responses.create(model=model, input="x", previous_response_id="resp_unknown")
    check(False, "an unknown previous_response_id is refused")
except Exception as error:  # the SDK's NotFoundError
    check("not found" in str(error), f"an unknown id is named: {error}")

# --- Responses: a tool call as an output item --------------------------------------
tools = [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
called = oa.responses.create(model=model, input="use get_weather for Paris", tools=tools)
calls = [item for item in called.output if item.type == "function_call"]
check(len(calls) == 1 and calls[0].name == "get_weather", f"one call: {called.output}")
check("city" in json.loads(calls[0].arguments), f"its arguments parse: {calls[0].arguments}")

# --- Messages: thinking, cache control, streamed with the SDK's helper -------------
claude = anthropic.Anthropic(base_url=base, api_key="not-needed")
system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
def ask():
    with claude.messages.stream(
        model=model, max_tokens=1030, system=system,
        messages=[{"role": "user", "content": PROMPT}],
        thinking={"type": "enabled", "budget_tokens": 1024},
        extra_body={"reasoning_tokens": REASONING},
    ) as stream:
        thinking = "".join(e.thinking for e in stream if e.type == "thinking")
        return thinking, stream.get_final_message()
thinking, message = ask()
check([b.type for b in message.content] == ["thinking", "text"], f"blocks: {message.content}")
check(message.content[0].signature, "the thinking block is signed")
check(len(thinking.split()) == REASONING, f"{REASONING} thinking words: {thinking!r}")
check(message.stop_reason == "max_tokens", f"cut at max_tokens: {message.stop_reason}")
check(message.usage.output_tokens == 1030, f"1030 output tokens: {message.usage}")
written = message.usage.cache_creation_input_tokens
check(written > 0, f"the system prompt is written to the cache: {message.usage}")
_, again = ask()
check(again.usage.cache_read_input_tokens > 0, f"and read from it next time: {again.usage}")
check(again.usage.cache_read_input_tokens + again.usage.cache_creation_input_tokens == written,
      "the breakpoint's prefix is read or written, the rest is input")
messages_usage = message.usage
try:
    claude.messages.create(model=model, max_tokens=10, messages=[{"role": "user", "content": "x"}],
                           thinking={"type": "enabled", "budget_tokens": 100})
    check(False, "a budget under 1,024 is refused")
except anthropic.BadRequestError as error:
    check("budget_tokens" in str(error), f"the field is named: {error}")

# --- redline against the same simulator, the same prompts --------------------------
prompts = os.path.join(work, "prompts.jsonl")
with open(prompts, "w") as f:
    f.write(json.dumps({"messages": [{"role": "system", "content": SYSTEM},
                                     {"role": "user", "content": PROMPT}]}) + "\n")
def run(api, body, max_tokens):
    spec = os.path.join(work, f"{api}.yaml")
    with open(spec, "w") as f:
        f.write(f"""apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: {{ name: sdk-{api} }}
spec:
  services:
    llm: {{ url: "{base}", model: {model}, api: {api}, tokenizer: sim }}
  payloadTemplate:
    body: {json.dumps(body)}
    prompts: {{ dataset: {{ file: {prompts}, output_tokens: {max_tokens} }} }}
  load:
    - {{ concurrency: 1, requests: 1 }}
""")
    out = os.path.join(work, f"out-{api}")
    subprocess.run([redline, "run", spec, "--out", out, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "records.jsonl")) as f:
        return json.loads(f.readline())

# Responses: the prompt as redline sends it is the system and user messages; the SDK
# sent only the user's, so compare against a fresh SDK call with both.
sdk = oa.responses.create(model=model, max_output_tokens=24, extra_body={"reasoning_tokens": REASONING},
                          input=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}])
record = run("responses", {"reasoning_tokens": REASONING}, 24)
check(record["outcome"] == "ok", f"redline's Responses request: {record.get('error')}")
check(record["output_tokens"] == sdk.usage.output_tokens == stream_usage.output_tokens, "output tokens equal")
check(record["input_tokens"] == sdk.usage.input_tokens, f"input tokens equal: {record['input_tokens']} vs {sdk.usage.input_tokens}")
check(record["reasoning_tokens"] == sdk.usage.output_tokens_details.reasoning_tokens, "reasoning tokens equal")
check(record["finish_reason"] == "length", "a cut answer")

record = run("anthropic", {"reasoning_tokens": REASONING, "thinking": {"type": "enabled", "budget_tokens": 1024}}, 1030)
check(record["outcome"] == "ok", f"redline's Messages request: {record.get('error')}")
check(record["output_tokens"] == messages_usage.output_tokens, "output tokens equal")
sdk_input = messages_usage.input_tokens + messages_usage.cache_read_input_tokens + messages_usage.cache_creation_input_tokens
check(record["input_tokens"] == sdk_input, f"input tokens equal: {record['input_tokens']} vs {sdk_input}")
check(record["reasoning_tokens"] == REASONING, "thinking counted with the server's tokenizer")
check(record["finish_reason"] == "length", "max_tokens is a cut answer")

print(f"agent SDK check: {checks} checks passed (openai {__import__('openai').__version__}, anthropic {anthropic.__version__})")
