"""The official `openai` SDK's Realtime client against `redline sim`'s `/v1/realtime`,
then redline against the same simulator speaking the same clip: the SDK must read
every event the simulator sends (session, input transcript, audio and its
transcript, text, `response.done` with usage), and redline's record must count
exactly what the SDK's final usage says. Exits non-zero on any mismatch.

usage: realtime_sdk_check.py BASE_URL REDLINE_BINARY WORK_DIR
"""
import base64
import json
import math
import os
import struct
import subprocess
import sys
import wave

from openai import OpenAI

base, redline, work = sys.argv[1], sys.argv[2], sys.argv[3]
RATE, SECONDS, TOKENS = 24_000, 1.2, 20
WORDS_PER_SECOND = 2.5  # the simulator profile's speech rate
checks = 0


def check(condition, what):
    global checks
    if not condition:
        sys.exit(f"FAILED: {what}")
    checks += 1


# 1.2 s of a 300 Hz tone, PCM16 mono at 24 kHz: what both clients speak.
samples = [int(6000 * math.sin(2 * math.pi * 300 * i / RATE)) for i in range(int(SECONDS * RATE))]
pcm = struct.pack(f"<{len(samples)}h", *samples)

oa = OpenAI(base_url=f"{base}/v1", api_key="not-needed")
model = oa.models.list().data[0].id

# --- spoken input, spoken answer ---------------------------------------------------
with oa.realtime.connect(model=model) as conn:
    created = conn.recv()
    check(created.type == "session.created", f"the session is created first: {created.type}")
    conn.session.update(session={
        "type": "realtime", "output_modalities": ["audio"],
        "audio": {"input": {"transcription": {"model": "whisper-1"}, "turn_detection": None}},
    })
    step = RATE // 10 * 2  # 100 ms of audio a chunk
    for at in range(0, len(pcm), step):
        conn.input_audio_buffer.append(audio=base64.b64encode(pcm[at:at + step]).decode())
    conn.input_audio_buffer.commit()
    conn.response.create(response={"max_output_tokens": TOKENS})
    heard, transcript, said, spoken, audio, done = "", None, "", None, 0, None
    for event in conn:
        if event.type == "conversation.item.input_audio_transcription.delta":
            heard += event.delta
        elif event.type == "conversation.item.input_audio_transcription.completed":
            transcript = event.transcript
        elif event.type == "response.output_audio_transcript.delta":
            said += event.delta
        elif event.type == "response.output_audio_transcript.done":
            spoken = event.transcript
        elif event.type == "response.output_audio.delta":
            audio += len(base64.b64decode(event.delta))
        elif event.type == "error":
            check(False, f"no error: {event.error}")
        elif event.type == "response.done":
            done = event.response
        if done is not None and transcript is not None:
            break
check(transcript == heard, f"the input transcript's deltas make it: {heard!r} vs {transcript!r}")
words = round(SECONDS * WORDS_PER_SECOND)
check(len(transcript.split()) == words, f"{words} words heard in {SECONDS} s: {transcript!r}")
check(spoken == said and said, f"the answer's transcript deltas make it: {said!r}")
check(done.status == "incomplete", f"cut at max_output_tokens: {done.status}")
check(done.usage.output_tokens == TOKENS, f"{TOKENS} output tokens: {done.usage}")
check(done.usage.output_token_details.audio_tokens == TOKENS, "the answer is audio")
check(audio == TOKENS * RATE * 2 / WORDS_PER_SECOND, f"{TOKENS} tokens of speech: {audio} bytes")
sdk_usage = done.usage

# --- typed input, text answer, and a refused commit ---------------------------------
with oa.realtime.connect(model=model) as conn:
    conn.recv()
    conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
    conn.input_audio_buffer.commit()
    conn.conversation.item.create(item={"type": "message", "role": "user",
                                        "content": [{"type": "input_text", "text": "hello there"}]})
    conn.response.create()
    text, errors, done = "", [], None
    for event in conn:
        if event.type == "error":
            errors.append(event.error.code)
        elif event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "response.done":
            done = event.response
            break
check(errors == ["input_audio_buffer_commit_empty"], f"an empty commit is refused: {errors}")
check(done.status == "completed" and done.output[0].content[0].text == text,
      f"the text answer is the deltas: {done.output}")
check(done.usage.output_token_details.text_tokens == done.usage.output_tokens > 0, "a text answer")

# --- redline against the same simulator, the same clip ------------------------------
clips = os.path.join(work, "clips")
os.makedirs(clips, exist_ok=True)
with wave.open(os.path.join(clips, "tone.wav"), "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(RATE)
    w.writeframes(pcm)
spec = os.path.join(work, "realtime.yaml")
with open(spec, "w") as f:
    f.write(f"""apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: {{ name: sdk-realtime }}
spec:
  services:
    voice: {{ url: "{base}", model: {model}, api: realtime }}
  payloadTemplate:
    audio: {{ dir: {clips} }}
    realtime: {{ output: audio, max_output_tokens: {TOKENS} }}
  load:
    - {{ concurrency: 1, requests: 1 }}
""")
out = os.path.join(work, "out-realtime")
subprocess.run([redline, "run", spec, "--out", out, "--quiet"], check=True, stdout=subprocess.DEVNULL)
with open(os.path.join(out, "records.jsonl")) as f:
    record = json.loads(f.readline())
check(record["outcome"] == "ok", f"redline's Realtime session: {record.get('error')}")
check(record["output_tokens"] == sdk_usage.output_tokens, "output tokens equal")
check(record["input_tokens"] == sdk_usage.input_tokens,
      f"input tokens equal: {record['input_tokens']} vs {sdk_usage.input_tokens}")
media = record["media"]
check(media["words"] == words, f"the same words heard: {media}")
check(media["bytes"] == audio, f"the same audio received: {media['bytes']} vs {audio}")
check(record["finish_reason"] == "length", "max_output_tokens is a cut answer")

print(f"realtime SDK check: {checks} checks passed (openai {__import__('openai').__version__})")
