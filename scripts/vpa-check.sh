#!/usr/bin/env bash
# `redline advise`'s VerticalPodAutoscaler, validated by an independent reader of the
# VPA CRD's schema: @kubernetes-models/autoscaler from the npm registry (its validators
# are generated from the autoscaler project's CRD). Measures three cold and three warm
# starts of `redline sim --startup`, advises with a spec, and checks the YAML; then
# checks that the validator refuses a broken object, so the check can fail.
set -euo pipefail
cd "$(dirname "$0")/.."
npm_dir=${REDLINE_NPM_VPA_DIR:-target/npm-vpa}
mkdir -p "$npm_dir"
if [ ! -d "$npm_dir/node_modules/@kubernetes-models/autoscaler" ]; then
  npm install --silent --prefix "$npm_dir" @kubernetes-models/autoscaler@5.0.0 js-yaml@4.1.0
fi
cargo build --release --quiet
bin=$PWD/target/release/redline
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
head -c 8M /dev/urandom > "$work/weights.bin"
"$bin" coldstart --ready "http://127.0.0.1:$port/health" --cold 3 --warm 3 --weights "$work/weights.bin" \
  --out "$work/starts" -- "$bin" sim --profile tiny --addr "127.0.0.1:$port" --startup \
  --weights "$work/weights.bin" --weights-size 400MB --warmup-ms 100 > /dev/null 2>&1
cat > "$work/spec.yaml" <<'YAML'
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: chat-7b }
spec:
  services:
    llm: { url: embedded, profile: tiny }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 16, output_tokens: 4 } }
  qpsTarget: 1
  duration: 1s
---
apiVersion: redline.dev/v1alpha1
kind: ModelLoadSpec
metadata: { name: chat-7b }
spec:
  modelRef: sim-tiny
  cachePolicy: warm
  resourceLimits: { memory: 2Gi }
YAML
"$bin" advise "$work/starts" --spec "$work/spec.yaml" > "$work/vpa.yaml"
cat "$work/vpa.yaml"
cat > "$npm_dir/check.mjs" <<'JS'
import { readFileSync } from "node:fs";
import yaml from "js-yaml";
import { VerticalPodAutoscaler } from "@kubernetes-models/autoscaler/autoscaling.k8s.io/v1/VerticalPodAutoscaler";
const object = yaml.load(readFileSync(process.argv[2], "utf8"));
new VerticalPodAutoscaler(object).validate();
object.spec.updatePolicy.updateMode = "Sometimes";
try {
  new VerticalPodAutoscaler(object).validate();
  console.error("the validator accepted updateMode: Sometimes");
  process.exit(1);
} catch (e) {
  console.log(`VPA valid against the CRD schema (and a broken one refused: ${e.message})`);
}
JS
node "$npm_dir/check.mjs" "$work/vpa.yaml"
