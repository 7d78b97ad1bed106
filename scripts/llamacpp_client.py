"""An independent client for the llama.cpp e2e: the standard library's http.client
only. Each prompt of a JSONL file, one at a time, as a streaming completion (TTFT from
the send to the first event with text, the gaps between text events, the event count);
then, with `--usage`, each again without streaming (the server's
`usage.completion_tokens`). The streams go back to back, as a closed loop of one sends
them, so both clients meet the server in the same state. Prints one JSON object with
every TTFT and gap (milliseconds) and the counts."""
import http.client
import json
import sys
import time

host, port, model, prompts_file, max_tokens = sys.argv[1:6]
with_usage = "--usage" in sys.argv[6:]
port, max_tokens = int(port), int(max_tokens)
prompts = [json.loads(line)["prompt"] for line in open(prompts_file) if line.strip()]


def post(body):
    connection = http.client.HTTPConnection(host, port, timeout=120)
    payload = json.dumps(body)
    sent = time.perf_counter()
    connection.request("POST", "/v1/completions", payload, {"content-type": "application/json"})
    return connection, connection.getresponse(), sent


ttfts, gaps, events, usage = [], [], [], []
for prompt in prompts:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    connection, response, sent = post(dict(body, stream=True))
    first, last, count = None, None, 0
    buffer, pending = b"", b""
    while True:
        chunk = response.read1(65536)
        if not chunk:
            break
        at = time.perf_counter()
        # SSE as the spec reads it: lines end in CRLF, LF or CR; a blank line ends an
        # event; a line starting with a colon is a comment (sse-starlette's pings).
        # A CR that ends a chunk waits for the next one: it may be half of a CRLF.
        pending += chunk
        whole = pending[:-1] if pending.endswith(b"\r") else pending
        pending = pending[len(whole):]
        buffer += whole.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            data = "\n".join(
                line[5:].removeprefix(" ")
                for line in event.decode().split("\n")
                if line.startswith("data:")
            )
            if data == "[DONE]" or not data:
                continue
            if json.loads(data)["choices"][0].get("text"):
                count += 1
                if first is None:
                    first = at
                else:
                    gaps.append((at - last) * 1e3)
                last = at
    connection.close()
    ttfts.append((first - sent) * 1e3)
    events.append(count)
for prompt in prompts if with_usage else []:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    connection, response, _ = post(body)
    usage.append(json.loads(response.read())["usage"]["completion_tokens"])
    connection.close()

print(json.dumps({
    "ttft_ms": ttfts,
    "itl_ms": gaps,
    "events": events,
    "completion_tokens": usage,
}))
