#!/usr/bin/env bash
# `redline k8s render`'s manifests, checked two ways without a cluster (none is
# available here): each object validated against the Kubernetes OpenAPI schemas by an
# independent reader (kubernetes-models from the npm registry, generated from the
# Kubernetes API's OpenAPI spec), with a broken Job refused so the check can fail; then
# the rendered commands run as the cluster would run them — each worker's arguments with
# $(JOB_COMPLETION_INDEX) put in, beside the coordinator Job's command, then the merge
# Job's — and the merged run must hold every share.
set -euo pipefail
cd "$(dirname "$0")/.."
npm_dir=${REDLINE_NPM_K8S_DIR:-target/npm-k8s}
mkdir -p "$npm_dir"
if [ ! -d "$npm_dir/node_modules/kubernetes-models" ]; then
  npm install --silent --prefix "$npm_dir" kubernetes-models@5.1.0 js-yaml@4.1.0
fi
cargo build --release --quiet
bin=$PWD/target/release/redline
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/spec.yaml" <<'YAML'
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: k8s-check }
spec:
  seed: 9
  trace_ids: seeded
  services:
    llm: { url: embedded, profile: tiny }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 32, output_tokens: 4 } }
  load:
    - { arrival: poisson, rate: 100, requests: 120 }
YAML
"$bin" k8s render "$work/spec.yaml" --workers 3 --image redline:check --namespace load \
  --results-claim redline-results --coordinator > "$work/workers.yaml"
# Our CustomResourceDefinitions (the spec kinds and TestRun), and the objects rendered
# from the TestRun example, are held to Kubernetes's schemas too.
"$bin" crd > "$work/crds.yaml"
"$bin" k8s render deploy/k8s/testrun.yaml > "$work/testrun-objects.yaml"
"$bin" k8s render "$work/spec.yaml" --workers 3 --image redline:check --namespace load \
  --results-claim redline-results --merge > "$work/merge.yaml"
cat > "$npm_dir/check.mjs" <<'JS'
import { readFileSync, writeFileSync } from "node:fs";
import yaml from "js-yaml";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Service } from "kubernetes-models/v1/Service";
import { Job } from "kubernetes-models/batch/v1/Job";
import { CustomResourceDefinition } from "kubernetes-models/apiextensions.k8s.io/v1/CustomResourceDefinition";
const kinds = { ConfigMap, Job, Service, CustomResourceDefinition };
const [workers, merge, out, ...more] = process.argv.slice(2);
for (const file of more) {
  for (const object of yaml.loadAll(readFileSync(file, "utf8")).filter(Boolean)) {
    new kinds[object.kind](object).validate();
    console.log(`${object.kind} ${object.metadata.name} (${file.split("/").pop()}): valid`);
  }
}
const objects = [...yaml.loadAll(readFileSync(workers, "utf8")), ...yaml.loadAll(readFileSync(merge, "utf8"))]
  .filter(Boolean);
for (const object of objects) {
  new kinds[object.kind](object).validate();
  console.log(`${object.kind} ${object.metadata.name}: valid`);
}
const job = objects.find((o) => o.metadata.name.endsWith("-workers"));
const broken = structuredClone(job);
broken.spec.completionMode = "Sometimes";
try {
  new Job(broken).validate();
  console.error("the validator accepted completionMode: Sometimes");
  process.exit(1);
} catch (e) {
  console.log(`a broken Job is refused: ${e.message}`);
}
// What the cluster would run: the spec as mounted, each worker's args, the merge's.
const spec = objects.find((o) => o.kind === "ConfigMap").data["spec.yaml"];
const mergeJob = objects.find((o) => o.metadata.name.endsWith("-merge"));
const coordinator = objects.find((o) => o.kind === "Job" && o.metadata.name.endsWith("-coordinator"));
const service = objects.find((o) => o.kind === "Service");
const port = coordinator.spec.template.spec.containers[0].ports[0];
if (JSON.stringify(service.spec.selector) !== JSON.stringify(
  Object.fromEntries(Object.entries(coordinator.spec.template.metadata.labels)
    .filter(([k]) => k in service.spec.selector)))
  || service.spec.ports[0].targetPort !== port.name) {
  console.error("the Service does not reach the coordinator's pod");
  process.exit(1);
}
writeFileSync(out, JSON.stringify({
  spec,
  completions: job.spec.completions,
  coordinator: coordinator.spec.template.spec.containers[0].args,
  coordinator_url: `http://${service.metadata.name}.${service.metadata.namespace}.svc:${service.spec.ports[0].port}`,
  worker: job.spec.template.spec.containers[0].args,
  merge: mergeJob.spec.template.spec.containers[0].args,
}));
JS
node "$npm_dir/check.mjs" "$work/workers.yaml" "$work/merge.yaml" "$work/plan.json" \
  "$work/crds.yaml" "$work/testrun-objects.yaml"
# Run the plan locally: /etc/redline and /results are folders in $work.
python3 - "$work" "$bin" <<'PY'
import json, os, subprocess, sys
work, bin = sys.argv[1], sys.argv[2]
plan = json.load(open(f"{work}/plan.json"))
os.makedirs(f"{work}/etc/redline", exist_ok=True)
open(f"{work}/etc/redline/spec.yaml", "w").write(plan["spec"])
import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
def local(arg, index=None):
    arg = arg.replace("/etc/redline", f"{work}/etc/redline").replace("/results", f"{work}/results")
    # The coordinator's Service and its pod's address, as this machine's loopback.
    arg = arg.replace(plan["coordinator_url"], f"http://127.0.0.1:{port}")
    arg = arg.replace("0.0.0.0:9470", f"127.0.0.1:{port}")
    return arg if index is None else arg.replace("$(JOB_COMPLETION_INDEX)", str(index))
coordinator = subprocess.Popen([bin] + [local(a) for a in plan["coordinator"]],
                               stdout=subprocess.PIPE, text=True)
workers = []
for index in range(plan["completions"]):
    env = dict(os.environ, JOB_COMPLETION_INDEX=str(index))
    workers.append(subprocess.Popen([bin] + [local(a, index) for a in plan["worker"]], env=env,
                                    stdout=subprocess.DEVNULL))
assert all(w.wait(timeout=120) == 0 for w in workers), "a worker failed"
said, _ = coordinator.communicate(timeout=30)
assert coordinator.returncode == 0 and said.count(": done after") == plan["completions"], said
subprocess.run([bin] + [local(a) for a in plan["merge"]], check=True, stdout=subprocess.DEVNULL)
summary = json.load(open(f"{work}/results/merged/summary.json"))
records = sum(1 for _ in open(f"{work}/results/merged/records.jsonl"))
assert summary["requests"]["scheduled"] == 120 and records == 120, (summary["requests"], records)
assert "segment" not in summary, summary.get("segment")
shares = [json.load(open(f"{work}/results/{i}/summary.json"))["segment"] for i in range(plan["completions"])]
print(f"the rendered commands, run locally beside their coordinator: shares {shares}, merged 120 of 120 requests, no share missing")
PY
