#!/usr/bin/env bash
# The official `openai` Python SDK, used as a new user would, against `redline sim`:
# streaming chat with usage, a streamed tool call, completions, embeddings (the SDK
# asks for base64 by default), images, a multipart transcription, speech and errors;
# the Responses API with the same SDK and the Messages API with the official
# `anthropic` SDK (reasoning, thinking, cache control, tool calls, stored history), and
# redline's records of the same prompts against their usage
# (scripts/agent_sdk_check.py); the SDK's Realtime client over WebSocket (spoken input
# with its transcript, spoken and typed answers) and redline's record of the same clip
# (scripts/realtime_sdk_check.py). Then the simulator's native routes with
# the official `ollama` package, Hugging Face's `text-generation` (TGI's client) and
# NVIDIA's `tritonclient` (KServe v2, over HTTP and over gRPC: a decoupled token
# stream), and the Qdrant gRPC listener with the official `qdrant-client`
# (`prefer_grpc=True`). And the simulator's MCP server with the official MCP Python
# SDK (`mcp`) and the official TypeScript SDK (npm `@modelcontextprotocol/sdk`): every
# tool, resource and prompt, progress and ping (scripts/mcp_sdk_check.py,
# scripts/mcp_ts_sdk_check.mjs). Installs the SDKs from PyPI into a venv and from npm
# into target/npm-mcp.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${REDLINE_VENV_DIR:-target/venv-openai}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check 'openai>=1.40,<3' 'ollama>=0.4,<1' 'text-generation>=0.7,<1' 'tritonclient[http,grpc]>=2.40,<3' 'qdrant-client>=1.10,<2' 'mcp>=2,<3' 'anthropic>=0.40,<1' 'websockets>=13,<16'
npm_dir=${REDLINE_NPM_MCP_DIR:-target/npm-mcp}
mkdir -p "$npm_dir"
if [ ! -d "$npm_dir/node_modules/@modelcontextprotocol/sdk" ]; then
  npm install --silent --no-audit --no-fund --prefix "$npm_dir" @modelcontextprotocol/sdk@1.32.2
fi
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
"$venv/bin/python" scripts/agent_sdk_check.py "http://127.0.0.1:$port" ./target/release/redline "$(mktemp -d)"
"$venv/bin/python" scripts/realtime_sdk_check.py "http://127.0.0.1:$port" ./target/release/redline "$(mktemp -d)"
"$venv/bin/python" scripts/native_sdk_check.py "http://127.0.0.1:$port"
"$venv/bin/python" scripts/qdrant_sdk_check.py "http://127.0.0.1:$port"
"$venv/bin/python" scripts/triton_grpc_check.py "http://127.0.0.1:$port"
"$venv/bin/python" scripts/mcp_sdk_check.py "http://127.0.0.1:$port"
# Beside its node_modules, so Node resolves the SDK.
cp scripts/mcp_ts_sdk_check.mjs "$npm_dir/"
node "$npm_dir/mcp_ts_sdk_check.mjs" "http://127.0.0.1:$port"
