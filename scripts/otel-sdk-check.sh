#!/usr/bin/env bash
# A real OpenTelemetry SDK that no one here wrote sends spans to `redline collect`:
# installs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http from PyPI (in a
# virtualenv under target/), runs a short redline load test, and has a Python "service"
# continue five of its requests' traces (the traceparent redline sent) with a small
# span tree carrying llm.* attributes, exported over OTLP/HTTP protobuf. Then checks
# that the receiver stored every span, that `redline graph` finds the topology, and
# that it joins the server spans to the run's records. Usage: scripts/otel-sdk-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/venv-otel
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import opentelemetry.exporter.otlp.proto.http' 2>/dev/null \
  || "$venv/bin/pip" install --quiet opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
cargo build --release --quiet
redline=./target/release/redline
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$redline" collect --listen "127.0.0.1:$port" --out "$work/collect" 2>"$work/collect.log" &
collector=$!
trap 'kill $collector 2>/dev/null || true; rm -rf "$work"' EXIT
until curl -sf "http://127.0.0.1:$port/stats" >/dev/null; do sleep 0.1; done

cat > "$work/spec.yaml" <<'SPEC'
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: otel-check }
spec:
  services:
    llm: { url: embedded, profile: tiny }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 16, output_tokens: 4 } }
  load:
    - { concurrency: 1, requests: 5 }
SPEC
"$redline" run "$work/spec.yaml" --out "$work/run" --quiet >/dev/null

"$venv/bin/python" - "$work/run/records.jsonl" "http://127.0.0.1:$port/v1/traces" <<'PY'
import json, sys, time
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

provider = TracerProvider(resource=Resource.create({"service.name": "rag-service"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[2])))
tracer = provider.get_tracer("otel-sdk-check")
edges = json.dumps([{"source": "rag-service/generate", "target": "rag-service/retrieve", "weight": 0.9}])
for line in open(sys.argv[1]):
    record = json.loads(line)
    # What the service would do with the request redline sent it: continue its trace.
    context = TraceContextTextMapPropagator().extract({"traceparent": record["traceparent"]})
    with tracer.start_as_current_span("POST /v1/chat/completions", context=context,
                                      attributes={"llm.operation_type": "generate",
                                                  "llm.reasoning_path_id": "rag",
                                                  "llm.dependency_edges": edges}):
        with tracer.start_as_current_span("vector search", attributes={"llm.operation_type": "retrieve"}):
            time.sleep(0.004)
        time.sleep(0.002)
provider.force_flush()
provider.shutdown()
PY

kill -TERM $collector
wait $collector || true
"$redline" graph "$work/collect" --records "$work/run/records.jsonl" --out "$work/graph.json"
"$redline" graph "$work/collect" --format mermaid > "$work/graph.mmd"
python3 - "$work/collect/collect.json" "$work/graph.json" "$work/graph.mmd" <<'PY'
import json, sys
stats = json.load(open(sys.argv[1]))
report = json.load(open(sys.argv[2]))
graph, join = report["graph"], report["join"]
problems = []
if stats["spans_stored"] != 10 or stats["spans_dropped"] or stats["rejected"]:
    problems.append(f"receiver counts: {stats}")
edge = [e for e in graph["edges"] if e["source"] == "rag-service/generate" and e["target"] == "rag-service/retrieve"]
if not edge or edge[0]["calls"] != 5 or edge[0]["weight"] != 0.9 or not edge[0]["declared_weight"]:
    problems.append(f"edges: {graph['edges']}")
elif not 4.0 <= edge[0]["latency_ms"]["p50"] < 50.0:
    problems.append(f"retrieve spans took {edge[0]['latency_ms']}")
paths = {p["id"]: p["traces"] for p in graph["paths"]}
if paths.get("rag") != 5:
    problems.append(f"paths: {paths}")
if graph["orphans"] != 5:
    problems.append(f"the 5 service roots' parents are redline's requests, not stored spans: {graph['orphans']}")
if join["records"] != 5 or join["joined"] != 5 or join["foreign_traces"] != 0:
    problems.append(f"join: {join}")
step = join["steps"][0]
if not step["server_ms"]["p50"] >= 6.0:
    problems.append(f"server spans: {step}")
if "rag-service<br/>generate" not in open(sys.argv[3]).read():
    problems.append("mermaid lacks the generate node")
if problems:
    sys.exit("OpenTelemetry SDK check FAILED: " + "; ".join(problems))
print(f"OpenTelemetry Python SDK → redline collect: {stats['spans_stored']} spans stored; "
      f"graph: {len(graph['nodes'])} nodes, {len(graph['edges'])} edges, path 'rag' × {paths['rag']}; "
      f"joined {join['joined']}/{join['records']} requests (client p50 {step['client_ms']['p50']:.1f} ms, "
      f"server span p50 {step['server_ms']['p50']:.1f} ms)")
PY

# The same, inside one run: `redline run --collect` receives the service's spans while
# it runs (and for a grace period after), and its report joins them.
run_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$redline" run "$work/spec.yaml" --out "$work/run2" --quiet --collect "127.0.0.1:$run_port" --collect-grace 10s > "$work/run2.txt" 2>&1 &
run=$!
for _ in $(seq 300); do
  [ -f "$work/run2/records.jsonl" ] && [ "$(wc -l < "$work/run2/records.jsonl")" -ge 5 ] && break
  sleep 0.1
done
"$venv/bin/python" - "$work/run2/records.jsonl" "http://127.0.0.1:$run_port/v1/traces" <<'PY'
import json, sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

provider = TracerProvider(resource=Resource.create({"service.name": "rag-service"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[2])))
tracer = provider.get_tracer("otel-sdk-check")
for line in open(sys.argv[1]):
    context = TraceContextTextMapPropagator().extract({"traceparent": json.loads(line)["traceparent"]})
    with tracer.start_as_current_span("generate", context=context, attributes={"llm.operation_type": "generate"}):
        pass
provider.shutdown()
PY
wait $run
python3 - "$work/run2/summary.json" <<'PY'
import json, sys
traces = json.load(open(sys.argv[1])).get("traces")
if not traces or traces["join"]["joined"] != 5:
    sys.exit(f"redline run --collect FAILED: {traces and traces['join']}")
edges = {(e["source"], e["target"]): e["calls"] for e in traces["graph"]["edges"]}
if edges.get(("redline/chat", "rag-service/generate")) != 5:
    sys.exit(f"redline run --collect FAILED: edges {edges}")
print(f"redline run --collect: 5/5 requests joined; edge redline/chat → rag-service/generate × 5")
PY
