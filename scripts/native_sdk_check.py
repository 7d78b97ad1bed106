"""Drives `redline sim`'s native routes with the official `ollama` Python package,
Hugging Face's `text-generation` client (TGI's) and NVIDIA's `tritonclient` (KServe v2
health and metadata; the generate extension, which tritonclient does not wrap, over
plain HTTP as Triton documents it); exits non-zero on any mismatch."""
import json
import sys
import urllib.error
import urllib.request

import ollama
import text_generation
import tritonclient.http as triton

base = sys.argv[1]
checks = 0


def check(condition, what):
    global checks
    if not condition:
        sys.exit(f"FAILED: {what}")
    checks += 1


# Ollama: the model list, a streamed chat, a whole generate, a missing model.
client = ollama.Client(host=base)
models = [m.model for m in client.list().models]
check(models == ["sim-tiny"], f"ollama list names the served model: {models}")
model = models[0]

parts, last = [], None
for part in client.chat(
    model=model,
    messages=[{"role": "user", "content": "Say something about load testing."}],
    stream=True,
    options={"num_predict": 12},
):
    parts.append(part.message.content)
    last = part
check(last.done and last.done_reason == "length", f"the stream ends done by length: {last}")
check(last.eval_count == 12, f"eval_count 12, got {last.eval_count}")
check(sum(1 for p in parts if p) == 12, f"one line per token: {parts}")
check(
    0 < last.prompt_eval_duration + last.eval_duration <= last.total_duration,
    "the durations add up within the total",
)

first = client.generate(model=model, prompt="Name a colour.", options={"num_predict": 6, "temperature": 0})
again = client.generate(model=model, prompt="Name a colour.", options={"num_predict": 6, "temperature": 0})
check(first.done and first.eval_count == 6, f"a whole generate: {first}")
check(first.response == again.response and first.response, "temperature 0 is deterministic")

weather = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}}
called = client.chat(model=model, tools=[weather], messages=[{"role": "user", "content": "Use get_weather for Paris."}])
calls = called.message.tool_calls or []
check(len(calls) == 1 and calls[0].function.name == "get_weather", f"a tool call: {called.message}")
check(isinstance(calls[0].function.arguments, dict) and "city" in calls[0].function.arguments, "arguments are an object")
streamed = [part for part in client.chat(model=model, tools=[weather], stream=True,
                                         messages=[{"role": "user", "content": "Use get_weather for Paris."}])
            if part.message.tool_calls]
check(len(streamed) == 1, f"a streamed tool call comes whole, once: {streamed}")
answered = client.chat(model=model, tools=[weather], messages=[
    {"role": "user", "content": "Use get_weather for Paris."},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "sunny"},
])
check(not answered.message.tool_calls and answered.message.content, "after the tool's answer, text")

try:
    client.chat(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    check(False, "a missing model is an error")
except ollama.ResponseError as error:
    check(error.status_code == 404, f"a missing model is 404, got {error.status_code}")

# TGI: a whole answer with details, a stream, a validation error.
tgi = text_generation.Client(base)
whole = tgi.generate("Tell me about queues.", max_new_tokens=10)
check(whole.details.generated_tokens == 10, f"TGI generated 10 tokens: {whole.details}")
check(whole.details.finish_reason.value == "length", f"finish reason length: {whole.details}")
check(len(whole.generated_text.split()) >= 5, f"TGI text has words: {whole.generated_text!r}")

tokens, final = [], None
for response in tgi.generate_stream("Tell me about queues.", max_new_tokens=10):
    if not response.token.special:
        tokens.append(response.token.text)
    final = response
check(len(tokens) == 10, f"ten streamed text tokens: {tokens}")
check(final.details is not None and final.details.generated_tokens == 10, f"details on the last event: {final}")
check(final.generated_text == "".join(tokens), "the last event repeats the whole text")
check(final.generated_text == whole.generated_text, "greedy by default: stream and whole agree")

try:
    tgi.generate("hi", max_new_tokens=4, temperature=0.0)
    check(False, "temperature 0 is TGI's validation error")
except text_generation.errors.ValidationError:
    checks += 1
except Exception as error:  # the client maps 422 to ValidationError
    sys.exit(f"FAILED: temperature 0 raised {type(error).__name__}: {error}")

# KServe v2 / Triton: health and metadata through tritonclient, generate over HTTP.
server = triton.InferenceServerClient(url=base.removeprefix("http://"))
check(server.is_server_live() and server.is_server_ready(), "Triton health: live and ready")
check(server.is_model_ready(model), "the served model is ready")
check(not server.is_model_ready("no-such-model"), "another model is not")
check(server.get_model_metadata(model)["name"] == model, "model metadata names it")


def post(path, body):
    request = urllib.request.Request(f"{base}{path}", data=json.dumps(body).encode(), method="POST")
    return urllib.request.urlopen(request)


whole = json.load(post(f"/v2/models/{model}/generate", {
    "text_input": "Tell me about queues.", "max_tokens": 8, "exclude_input_in_output": True,
    "parameters": {"return_finish_reason": True, "return_num_output_tokens": True, "temperature": 0},
}))
check(whole["model_name"] == model and whole["finish_reason"] == "length", f"a whole generate: {whole}")
check(whole["num_output_tokens"] == 8, f"eight tokens: {whole}")
with_prompt = json.load(post(f"/v2/models/{model}/generate", {"text_input": "Tell me about queues.", "max_tokens": 8}))
check(with_prompt["text_output"].startswith("Tell me about queues."), "without exclude_input_in_output the prompt leads")

deltas, events = [], 0
with post(f"/v2/models/{model}/generate_stream", {"text_input": "Tell me about queues.", "max_tokens": 8, "stream": True, "temperature": 0}) as response:
    check(response.headers["content-type"].startswith("text/event-stream"), "generate_stream is SSE")
    for line in response:
        line = line.decode().strip()
        if line.startswith("data:"):
            events += 1
            deltas.append(json.loads(line[5:])["text_output"])
check(sum(1 for d in deltas if d) == 8, f"eight text deltas: {deltas}")
check("".join(deltas) == whole["text_output"], "the stream's deltas join to the whole answer")

try:
    post("/v2/models/no-such-model/generate", {"text_input": "hi"})
    check(False, "an unknown model is refused")
except urllib.error.HTTPError as error:
    check(error.code == 404 and "error" in json.load(error), f"an unknown model: {error.code}")

print(f"ollama, text-generation and tritonclient against redline sim: {checks} checks passed")
