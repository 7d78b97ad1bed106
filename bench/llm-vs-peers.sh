#!/usr/bin/env bash
# Streaming completions against `redline sim`: redline, GuideLLM and AIPerf side by side
# in one run, each held against the simulator's ground truth (GET /redline/truth).
#
#   bench/llm-vs-peers.sh [RATE] [REQUESTS] [MAX_RATES]
#
# Part 1, the same load: constant RATE req/s (default 10), REQUESTS requests (default
# 300), 256-token prompts, 64-token answers, against the 7b profile. For each tool:
# the rate the server saw requests arrive at, client CPU and peak RSS (GNU time), and
# how far its median TTFT and mean ITL lie from the engine's own.
# Part 2, the highest rate each holds: the tiny profile (so the server is not the
# limit), 64-token prompts, 16-token answers, 10 s at each of MAX_RATES (default
# "100 200 400 800 1600 3200"); a rate is held when the server saw ≥ 95 % of it arrive
# and ≥ 99 % of what arrived succeeded.
#
# Installs GuideLLM 0.8.1 and AIPerf 0.13.0 from PyPI into venvs under target/ (GuideLLM
# brings torch: ~6 GB, a few minutes, once). Both read the simulator's tokenizer from
# `redline sim --write-tokenizer`, offline. Two cores are shared by the simulator and
# the client: read ratios and medians, not absolute figures.
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-10}
requests=${2:-300}
max_rates=${3:-"100 200 400 800 1600 3200"}
work=target/bench-llm-peers
rm -rf "$work"
mkdir -p "$work"

venv() { # venv NAME PACKAGE
  [ -x "target/venv-$1/bin/python" ] || python3 -m venv "target/venv-$1"
  "target/venv-$1/bin/pip" install --quiet --disable-pip-version-check "$2"
}
venv guidellm 'guidellm==0.8.1'
venv aiperf 'aiperf==0.13.0'
cargo build --release --quiet
redline=target/release/redline
"$redline" sim --write-tokenizer "$work/tokenizer" > /dev/null
tokenizer=$(realpath "$work/tokenizer")

sim_pid=
stop_sim() { [ -z "$sim_pid" ] || kill "$sim_pid" 2> /dev/null || true; sim_pid=; }
trap stop_sim EXIT
start_sim() { # start_sim PROFILE
  stop_sim
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$redline" sim --profile "$1" --addr "127.0.0.1:$port" 2> /dev/null &
  sim_pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && return
    sleep 0.1
  done
  echo "the simulator did not start" >&2
  exit 1
}

# run TOOL RATE BOUND ISL OSL MODEL LABEL: one tool, one load, one line of results.
# BOUND is a request count (`300`) or a duration in seconds (`10s`).
run() {
  local tool=$1 r=$2 bound=$3 isl=$4 osl=$5 model=$6 label=$7
  local n=${bound%s} redline_bound guidellm_bound aiperf_bound
  if [[ $bound == *s ]]; then
    redline_bound="duration: ${n}s" guidellm_bound="kind=max_duration,seconds=$n"
    aiperf_bound=(--benchmark-duration "$n")
  else
    redline_bound="requests: $n" guidellm_bound="kind=max_requests,count=$n"
    aiperf_bound=(--request-count "$n")
  fi
  local out="$work/$label-$tool"
  mkdir -p "$out"
  curl -sf -X DELETE "http://127.0.0.1:$port/redline/truth" > /dev/null
  local url="http://127.0.0.1:$port"
  local cmd
  case $tool in
    redline)
      cat > "$out/spec.yaml" << EOF
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: $label }
spec:
  services:
    llm: { url: "$url", model: $model, api: completions, tokenizer: "$tokenizer" }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: $isl, output_tokens: $osl } }
  load:
    - { arrival: constant, rate: $r, $redline_bound }
EOF
      cmd=("$redline" run "$out/spec.yaml" --out "$out" --quiet)
      ;;
    guidellm)
      cmd=(env HF_HUB_OFFLINE=1 target/venv-guidellm/bin/guidellm run
        --backend "kind=openai_http,target=$url,validate_backend=false,request_format=/v1/completions"
        --profile "kind=constant,rate=$r" --constraint "$guidellm_bound"
        --data "kind=synthetic_text,prompt_tokens=$isl,output_tokens=$osl"
        --tokenizer "kind=huggingface_auto,model=$tokenizer"
        --output "kind=json,path=$out/guidellm.json" --disable-console-interactive)
      ;;
    aiperf)
      # A closed port for the hub: offline, yet a local tokenizer path is accepted.
      cmd=(env HF_ENDPOINT=http://127.0.0.1:9 target/venv-aiperf/bin/aiperf profile
        --model "$model" --url "$url" --endpoint-type completions --streaming
        --tokenizer "$tokenizer" --isl "$isl" --osl "$osl" --use-legacy-max-tokens
        --request-rate "$r" --request-rate-mode constant "${aiperf_bound[@]}"
        --ui none --artifact-dir "$out")
      ;;
  esac
  if ! /usr/bin/time -f '%e %U %S %M' -o "$out/time" timeout 600 "${cmd[@]}" > "$out/log" 2>&1; then
    echo "  $tool at $r req/s failed; see $out/log" >&2
  fi
  curl -sf "http://127.0.0.1:$port/redline/truth" > "$out/truth.json"
  python3 bench/peer_results.py line "$tool" "$r" "$out" "${label%%[0-9]*}" >> "$work/results.jsonl"
}

echo "== part 1: the same load — $rate req/s constant, $requests requests, 256 → 64 tokens, 7b profile"
start_sim 7b
for tool in redline guidellm aiperf; do run "$tool" "$rate" "$requests" 256 64 sim-7b same; done
echo "== part 2: the highest rate held — tiny profile, 64 → 16 tokens, 10 s per rate"
start_sim tiny
for tool in redline guidellm aiperf; do
  for r in $max_rates; do
    run "$tool" "$r" 10s 64 16 sim-tiny "max$r"
  done
done
stop_sim
python3 bench/peer_results.py table "$work/results.jsonl"
