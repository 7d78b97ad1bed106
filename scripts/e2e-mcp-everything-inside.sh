#!/usr/bin/env bash
# The part of scripts/e2e-mcp-everything.sh that runs inside its network namespace.
set -euo pipefail
npm_dir=$1 out=$2 conformance_dir=$3
ip link set lo up
PORT=3001 node "$npm_dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js" streamableHttp \
  > "$out/server.log" 2>&1 &
server=$!
./target/release/redline sim --profile tiny --addr 127.0.0.1:3002 > "$out/sim.log" 2>&1 &
sim=$!
trap 'kill "$server" "$sim" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  (echo > /dev/tcp/127.0.0.1/3001) 2>/dev/null && break
  sleep 0.1
done
url=http://127.0.0.1:3001/mcp
calls=600 workers=4
mix='[["echo", {"message": "hi"}, 3], ["get-sum", {"a": 2, "b": 3}, 2], ["trigger-long-running-operation", {"duration": 0.1, "steps": 2}, 1]]'
cat > "$out/tools.yaml" <<SPEC
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: everything-tools }
spec:
  seed: 1
  services:
    everything: { url: "$url", api: mcp }
  payloadTemplate:
    mcp:
      ops:
        - { tool: echo, args: { message: hi }, weight: 3 }
        - { tool: get-sum, args: { a: 2, b: 3 }, weight: 2 }
        - { tool: trigger-long-running-operation, args: { duration: 0.1, steps: 2 }, weight: 1 }
  load:
    - { concurrency: $workers, requests: $calls }
SPEC
# Twice, in turn: the second pair is compared, the first warms the server's JIT.
for round in 1 2; do
  node "$npm_dir/mcp_sdk_timing.mjs" "$url" "$calls" "$workers" "$mix" > "$out/sdk.json"
  ./target/release/redline run "$out/tools.yaml" --out "$out/tools" --quiet > /dev/null
done
cat > "$out/mixed.yaml" <<SPEC
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: everything-mixed }
spec:
  seed: 2
  services:
    everything: { url: "$url", api: mcp }
  payloadTemplate:
    mcp:
      ops:
        - { tool: echo, args: { message: "call {{ seq }}" }, weight: 4 }
        - { tool: get-structured-content, args: { location: "New York" } }
        - { read: "demo://resource/dynamic/text/{{ n % 10 + 1 }}" }
        - { prompt: args-prompt, args: { city: Paris } }
        - { list: tools }
        - { list: resources }
        - { ping: true }
      churn: 0.1
  load:
    - { rate: 150, duration: 4s }
SPEC
./target/release/redline run "$out/mixed.yaml" --out "$out/mixed" --quiet > /dev/null
# A session that listens: its GET stream hears the log messages the server sends
# once `toggle-simulated-logging` has turned them on (one at once, then every 5 s).
cat > "$out/listen.yaml" <<SPEC
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: everything-listen }
spec:
  seed: 3
  services:
    everything: { url: "$url", api: mcp }
  payloadTemplate:
    mcp:
      ops:
        - { tool: toggle-simulated-logging, weight: 1 }
        - { tool: echo, args: { message: "call {{ seq }}" }, weight: 300 }
      listen: true
  load:
    - { concurrency: 1, requests: 1500 }
SPEC
./target/release/redline run "$out/listen.yaml" --out "$out/listen" --quiet > /dev/null
# The same over stdio: redline and the SDK each start the server as a child process
# per session (the SDK's stdio transport beside redline's `url: stdio`).
everything=$(cd "$npm_dir" && pwd)/node_modules/@modelcontextprotocol/server-everything/dist/index.js
sed -e "s|everything: { url: \"$url\", api: mcp }|everything: { url: stdio, api: mcp, command: [node, \"$everything\", stdio] }|" \
  -e 's/name: everything-tools/name: everything-tools-stdio/' "$out/tools.yaml" > "$out/tools-stdio.yaml"
for round in 1 2; do
  node "$npm_dir/mcp_sdk_timing.mjs" "stdio:$everything stdio" "$calls" "$workers" "$mix" > "$out/sdk-stdio.json" 2> "$out/sdk-stdio.log"
  ./target/release/redline run "$out/tools-stdio.yaml" --out "$out/tools-stdio" --quiet > /dev/null
done
sed -e "s|everything: { url: \"$url\", api: mcp }|everything: { url: stdio, api: mcp, command: [node, \"$everything\", stdio] }|" \
  -e 's/name: everything-mixed/name: everything-mixed-stdio/' -e 's/churn: 0.1/churn: 0.05/' \
  -e 's/{ rate: 150, duration: 4s }/{ concurrency: 4, requests: 300 }/' "$out/mixed.yaml" > "$out/mixed-stdio.yaml"
./target/release/redline run "$out/mixed-stdio.yaml" --out "$out/mixed-stdio" --quiet > /dev/null
if pgrep -f "$everything stdio" > "$out/left.txt"; then
  echo "stdio: server processes left running after the run:" >&2
  cat "$out/left.txt" >&2
  exit 1
fi
python3 - "$out" "$calls" <<'PY'
import json, sys
out, calls = sys.argv[1], int(sys.argv[2])

def compare(sdk_file, run, transport):
    """Per tool, redline's p50 beside the SDK loop's; every call one ok record."""
    sdk = json.load(open(f"{out}/{sdk_file}"))
    summary = json.load(open(f"{out}/{run}/summary.json"))
    records = [json.loads(line) for line in open(f"{out}/{run}/records.jsonl")]
    assert len(records) == calls, f"{len(records)} records for {calls} scheduled calls"
    assert len({r["seq"] for r in records}) == calls, "one record per call"
    failed = [r for r in records if r["outcome"] != "ok"]
    assert not failed and sdk["failed"] == 0, failed[:3]
    ours = {op["op"].removeprefix("tools/call "): op for op in summary["mcp"]["ops"]}
    print(f"  {transport + ': tool':<38}{'redline p50':>12}{'SDK p50':>10}{'ratio':>8}")
    for tool, theirs in sorted(sdk["tools"].items()):
        mine = ours[tool]
        ratio = mine["latency_ms"]["p50"] / theirs["p50_ms"]
        print(f"  {tool:<38}{mine['latency_ms']['p50']:>12.2f}{theirs['p50_ms']:>10.2f}{ratio:>8.3f}")
        if theirs["p50_ms"] >= 50:
            assert abs(ratio - 1) <= 0.05, f"{tool}: redline p50 / SDK p50 = {ratio:.3f}"
        else:
            assert ratio <= 1.05, f"{tool}: redline measured more than the SDK client ({ratio:.3f})"

def mixed(run, transport):
    """Every call of the mix ok, one handshake per session opened."""
    summary = json.load(open(f"{out}/{run}/summary.json"))
    records = [json.loads(line) for line in open(f"{out}/{run}/records.jsonl")]
    scheduled = summary["requests"]["scheduled"]
    assert len(records) == scheduled, (len(records), scheduled)
    bad = [r for r in records if r["outcome"] != "ok"]
    assert not bad, bad[:3]
    mcp = summary["mcp"]
    opened = sum(1 for r in records if r["mcp"].get("handshake_us") is not None)
    ended = sum(1 for r in records if r["mcp"].get("ended_session"))
    assert mcp["handshakes"] == opened and mcp["sessions_ended"] == ended, mcp
    assert ended > 0 and opened > ended / 2, (opened, ended)
    kinds = sorted(op["op"] for op in mcp["ops"])
    print(f"  {transport} mixed: {scheduled} calls ok, {opened} sessions opened, {ended} ended by churn: {', '.join(kinds)}")

compare("sdk.json", "tools", "http")
compare("sdk-stdio.json", "tools-stdio", "stdio")
mixed("mixed", "http")
mixed("mixed-stdio", "stdio")
records = [json.loads(line) for line in open(f"{out}/listen/records.jsonl")]
toggles = sum(1 for r in records if r["mcp"].get("name") == "toggle-simulated-logging")
heard = sum(r["mcp"].get("heard", 0) for r in records)
assert all(r["outcome"] == "ok" for r in records)
assert toggles > 0 and heard >= (toggles + 1) // 2, (toggles, heard)
print(f"  listen: {toggles} toggles of the server's logging, {heard} messages heard on the GET stream")
PY
# The conformance suite, in its own folder (it writes results/ where it runs).
conformance=$(cd "$conformance_dir" && pwd)/node_modules/@modelcontextprotocol/conformance/dist/index.js
mkdir -p "$out/conformance"
# The client the suite runs, with its server's URL: a ping on one session.
cat > "$out/conformance/client.sh" <<CLIENT
#!/usr/bin/env bash
cat > $PWD/$out/conformance/ping.yaml <<SPEC
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: conformance }
spec:
  services: { server: { url: "\$1", api: mcp } }
  payloadTemplate: { mcp: { ops: [ { ping: true } ] } }
  load: [ { concurrency: 1, requests: 1 } ]
SPEC
exec $PWD/target/release/redline run $PWD/$out/conformance/ping.yaml --quiet --out $PWD/$out/conformance/run
CLIENT
chmod +x "$out/conformance/client.sh"
(
  cd "$out/conformance"
  node "$conformance" client --command "$PWD/client.sh" --scenario initialize > client-initialize.log 2>&1 \
    || { cat client-initialize.log; echo "conformance: redline's client failed 'initialize'" >&2; exit 1; }
  for scenario in server-initialize tools-list resources-list prompts-list; do
    node "$conformance" server --url http://127.0.0.1:3002/mcp --scenario "$scenario" > "server-$scenario.log" 2>&1 \
      || { cat "server-$scenario.log"; echo "conformance: redline sim failed '$scenario'" >&2; exit 1; }
  done
)
echo "  conformance: redline's client passes 'initialize'; redline sim passes server-initialize, tools-list, resources-list, prompts-list"
