#!/usr/bin/env bash
# The remediation agent with a real Ansible (Debian's ansible-core, installed here when
# missing): a simulator whose tool tier fails half its calls fails a run's gate; the
# agent, driven by the simulator's scripted model, first picks a playbook that hangs
# (stopped at its timeout, its process group killed, its rollback playbook run), then
# the playbook that sets the tool failure rate to 0 through the simulator's admin API;
# the verify load passes and the loop ends `recovered`. Checked from outside: the
# target's own state, the audit log, no playbook left running.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v ansible-playbook > /dev/null || {
  apt-get update -qq && apt-get install -y -qq --no-install-recommends ansible-core > /dev/null
}
cargo build --release --quiet
bin=$PWD/target/release/redline
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "e2e-heal: $*" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 100); do curl -sf "$1" > /dev/null 2>&1 && return 0; sleep 0.1; done; fail "$1 did not come up"; }
target=127.0.0.1:$(port) model=127.0.0.1:$(port)

cat > "$work/script.yaml" <<'YAML'
- tool_call: { name: drain_tools, arguments: {}, content: "Tool calls fail: drain the tool service first." }
- tool_call: { name: set_tool_failure_rate, arguments: { tool_failure_rate: 0 }, content: "Still failing: reset its failure rate." }
YAML
"$bin" sim --addr "$target" --tool-failure-rate 0.5 > "$work/target.log" 2>&1 & pids+=($!)
"$bin" sim --addr "$model" --script "$work/script.yaml" > "$work/model.log" 2>&1 & pids+=($!)
wait_up "http://$target/health"
wait_up "http://$model/health"

cat > "$work/verify.yaml" <<YAML
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: tools }
spec:
  services:
    tools: { url: "http://$target", api: http }
  payloadTemplate:
    request: { method: POST, path: /tools/lookup, body: '{"q": 1}', expect_status: 200 }
  load:
    - { concurrency: 4, requests: 200 }
---
apiVersion: redline.dev/v1alpha1
kind: ScaleSpec
metadata: { name: tools }
spec:
  sloThresholds:
    error_rate: "<= 5%"
YAML
cat > "$work/fix.yml" <<YAML
- hosts: localhost
  gather_facts: false
  tasks:
    - name: set the tool tier's failure rate through the simulator's admin API
      ansible.builtin.uri:
        url: "http://$target/redline/tiers"
        method: PUT
        body_format: json
        body: "{{ {'tool_failure_rate': tool_failure_rate | float} | to_json }}"
YAML
cat > "$work/drain.yml" <<'YAML'
- hosts: localhost
  gather_facts: false
  tasks:
    - name: a drain that never ends
      ansible.builtin.command: sleep 600
YAML
cat > "$work/undrain.yml" <<'YAML'
- hosts: localhost
  gather_facts: false
  tasks:
    - name: note the rollback
      ansible.builtin.copy: { dest: "{{ playbook_dir }}/undrained", content: "rolled back\n" }
YAML
cat > "$work/runbook.yaml" <<'YAML'
max_steps: 3
timeout: 90s
env: [LANG, LC_ALL]
verify: { spec: verify.yaml }
actions:
  drain_tools:
    description: Drains the tool service's queue.
    schema: { type: object, properties: {}, additionalProperties: false }
    run: { ansible: { playbook: drain.yml, connection: local } }
    timeout: 8s
    rollback: { ansible: { playbook: undrain.yml, connection: local } }
  set_tool_failure_rate:
    description: Sets the share of tool calls the tool service fails.
    schema:
      type: object
      properties: { tool_failure_rate: { type: number, minimum: 0, maximum: 1 } }
      required: [tool_failure_rate]
      additionalProperties: false
    run: { ansible: { playbook: fix.yml, connection: local } }
YAML

rc=0; "$bin" run "$work/verify.yaml" --out "$work/run" --quiet > "$work/run.txt" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$work/run.txt"; fail "the faulted run exited $rc, not 1"; }

rc=0
LANG=C.UTF-8 LC_ALL=C.UTF-8 "$bin" heal "$work/run" --runbook "$work/runbook.yaml" \
  --model-url "http://$model" --model scripted --execute > "$work/heal.txt" 2>&1 || rc=$?
cat "$work/heal.txt"
[ "$rc" = 0 ] || fail "heal exited $rc, not 0"
[ -f "$work/undrained" ] || fail "the drain's rollback playbook did not run"
pgrep -f "$work/drain.yml" > /dev/null && fail "the hung playbook is still running"
rate=$(curl -sf "http://$target/redline/tiers" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tool_failure_rate"])')
[ "$rate" = "0.0" ] || fail "the target's tool failure rate is $rate, not 0"
python3 - "$work/run/heal.jsonl" <<'PY' || fail "the audit log does not hold the loop"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
events = [l["event"] for l in lines]
actions = [l for l in lines if l["event"] == "action"]
hung, fixed = actions
assert "did not finish within 8s" in hung["outcome"]["error"], hung
assert hung["outcome"]["elapsed_ms"] < 20_000, hung
assert hung["outcome"]["ran"][0] == "ansible-playbook", hung
rollback = next(l for l in lines if l["event"] == "rollback")
assert rollback["outcome"]["ok"], rollback
assert fixed["outcome"]["exit_code"] == 0 and fixed["outcome"]["ran"][-1] == '{"tool_failure_rate":0}', fixed
verifies = [l["passed"] for l in lines if l["event"] == "verify"]
assert verifies == [True], verifies
assert lines[-1]["ending"] == {"reason": "recovered", "action": "set_tool_failure_rate"}, lines[-1]
print(f"e2e-heal: {len(lines)} audit lines; the hung playbook stopped after {hung['outcome']['elapsed_ms'] / 1e3:.1f} s, the fix took {fixed['outcome']['elapsed_ms'] / 1e3:.1f} s")
PY
echo "e2e-heal: ok"
