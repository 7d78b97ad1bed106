#!/usr/bin/env bash
# The official `openai` Python SDK, used as a new user would, against `redline sim`:
# streaming chat with usage, a streamed tool call, completions, embeddings (the SDK
# asks for base64 by default), images, a multipart transcription, speech and errors. Then the simulator's native routes with
# the official `ollama` package, Hugging Face's `text-generation` (TGI's client) and
# NVIDIA's `tritonclient` (KServe v2, over HTTP and over gRPC: a decoupled token
# stream), and the Qdrant gRPC listener with the official `qdrant-client`
# (`prefer_grpc=True`).
# Installs the SDKs from PyPI into a venv.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${REDLINE_VENV_DIR:-target/venv-openai}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check 'openai>=1.40,<3' 'ollama>=0.4,<1' 'text-generation>=0.7,<1' 'tritonclient[http,grpc]>=2.40,<3' 'qdrant-client>=1.10,<2'
cargo build --release --quiet
port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
./target/release/redline sim --profile tiny --addr "127.0.0.1:$port" 2>/dev/null &
sim_pid=$!
trap 'kill "$sim_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  "$venv/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health')" 2>/dev/null && break
  sleep 0.1
done
"$venv/bin/python" scripts/openai_sdk_check.py "http://127.0.0.1:$port/v1"
"$venv/bin/python" scripts/native_sdk_check.py "http://127.0.0.1:$port"
"$venv/bin/python" scripts/qdrant_sdk_check.py "http://127.0.0.1:$port"
"$venv/bin/python" scripts/triton_grpc_check.py "http://127.0.0.1:$port"
