"""Drives `redline sim` with the official openai SDK; exits non-zero on any mismatch."""
import json
import sys

import openai
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="not-needed")
checks = 0


def check(condition, what):
    global checks
    if not condition:
        sys.exit(f"FAILED: {what}")
    checks += 1


model = client.models.list().data[0].id
check(model == "sim-tiny", f"served model is sim-tiny, got {model}")

# Streaming chat with usage in the last chunk.
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Say something about load testing."}],
    max_tokens=24,
    stream=True,
    stream_options={"include_usage": True},
)
text, finish, usage = "", None, None
for chunk in stream:
    if chunk.choices:
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    if chunk.usage:
        usage = chunk.usage
check(len(text.split()) >= 12, f"streamed text has words: {text!r}")
check(finish == "length", f"finish_reason length, got {finish}")
check(usage is not None and usage.completion_tokens == 24, f"usage reports 24 tokens: {usage}")

# Same prompt at temperature 0: same answer.
again = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Say something about load testing."}],
    max_tokens=24,
    temperature=0,
)
once_more = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Say something about load testing."}],
    max_tokens=24,
    temperature=0,
)
check(again.choices[0].message.content == once_more.choices[0].message.content, "temperature 0 is deterministic")

# A streamed tool call, assembled from deltas.
tools = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]
name, arguments, finish = "", "", None
for chunk in client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Use get_weather for Paris"}],
    tools=tools,
    stream=True,
):
    choice = chunk.choices[0]
    for call in choice.delta.tool_calls or []:
        name += call.function.name or ""
        arguments += call.function.arguments or ""
    finish = choice.finish_reason or finish
check(name == "get_weather" and finish == "tool_calls", f"tool call streamed: {name} {finish}")
check(isinstance(json.loads(arguments)["city"], str), f"tool arguments are JSON: {arguments}")

# Text completions and embeddings.
completion = client.completions.create(model=model, prompt="Once upon a time", max_tokens=5)
check(completion.usage.completion_tokens == 5, "completion has 5 tokens")
embedding = client.embeddings.create(model=model, input=["a cat sat", "a cat sat down"])
vectors = [d.embedding for d in embedding.data]
check(len(vectors) == 2 and len(vectors[0]) == 384, "two 384-d embeddings")
dot = sum(a * b for a, b in zip(*vectors))
check(dot > 0.7, f"similar texts have similar embeddings: {dot:.3f}")

# Images, transcription and speech, as the SDK sends them (the transcription as
# multipart): real PNG and WAV files come back, of the asked size and length.
import base64
import io
import struct
import wave

image = client.images.generate(model=model, prompt="a red bicycle", size="256x128", n=2, response_format="b64_json")
pngs = [base64.b64decode(d.b64_json) for d in image.data]
sizes = [struct.unpack(">II", png[16:24]) for png in pngs if png[:8] == b"\x89PNG\r\n\x1a\n"]
check(sizes == [(256, 128), (256, 128)], f"two 256x128 PNGs: {sizes}")
urls = client.images.generate(model=model, prompt="a red bicycle", size="64x64")
check(urls.data[0].url.endswith(".png"), f"an image URL by default: {urls.data[0].url}")

clip = io.BytesIO()
with wave.open(clip, "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(16000)
    w.writeframes(b"\x00\x10" * 16000 * 4)  # 4 s
clip.seek(0)
clip.name = "four-seconds.wav"
transcript = client.audio.transcriptions.create(model=model, file=clip, language="en")
check(len(transcript.text.split()) == 10, f"4 s at 2.5 words/s is 10 words: {transcript.text!r}")
clip.seek(0)
verbose = client.audio.transcriptions.create(model=model, file=clip, response_format="verbose_json")
check(abs(verbose.duration - 4.0) < 1e-6, f"verbose_json states the duration: {verbose.duration}")
clip.seek(0)
events = list(client.audio.transcriptions.create(model=model, file=clip, stream=True))
deltas = "".join(e.delta for e in events if e.type == "transcript.text.delta")
check(events[-1].type == "transcript.text.done" and events[-1].text == deltas, f"streamed transcript: {len(events)} events")
check(len(deltas.split()) == 10, f"the streamed transcript has 10 words: {deltas!r}")
try:
    client.audio.transcriptions.create(model=model, file=("notes.wav", b"this is text, not audio"))
    check(False, "a file that is not audio is refused")
except openai.BadRequestError as error:
    check("Invalid file format" in str(error), f"400 for text posing as audio: {error}")

speech = client.audio.speech.create(model=model, voice="alloy", input="five words to read aloud", response_format="wav")
with wave.open(io.BytesIO(speech.content)) as w:
    seconds = w.getnframes() / w.getframerate()
check(abs(seconds - 2.0) < 1e-3, f"5 words at 2.5 words/s is a 2 s WAV: {seconds}")

# Errors arrive as the SDK's typed exceptions.
try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    check(False, "unknown model is refused")
except openai.NotFoundError as error:
    check("does not exist" in str(error), f"404 message: {error}")

print(f"openai SDK {openai.__version__}: {checks} passed, 0 failed")
