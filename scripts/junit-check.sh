#!/usr/bin/env bash
# The SLO gate's JUnit XML, read by a real JUnit consumer (junitparser, from PyPI): a
# run against the embedded simulator with one SLO that passes, one that fails and one
# that 200 requests cannot prove. Checks the exit code (1) and every testcase's result.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${REDLINE_VENV_DIR:-target/venv-junit}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check 'junitparser>=3,<5'
cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/gate.yaml" << 'YAML'
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: junit-gate }
spec:
  services:
    llm: { url: embedded, profile: tiny }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 16, output_tokens: 8 } }
  load:
    - { concurrency: 8, requests: 200 }
---
apiVersion: redline.dev/v1alpha1
kind: ScaleSpec
metadata: { name: junit-gate }
spec:
  sloThresholds:
    ttft: { p50: "<= 10s" }
    e2e: { p99: "< 1us" }
    pass_rate: ">= 99.995%"
YAML
set +e
./target/release/redline run "$work/gate.yaml" --out "$work/out" --quiet > "$work/stdout"
code=$?
set -e
if [ "$code" != 1 ]; then
  cat "$work/stdout"
  echo "expected exit code 1 (an SLO failed), got $code" >&2
  exit 1
fi
"$venv/bin/python" - "$work/out/junit.xml" << 'PY'
import sys
from junitparser import JUnitXml, Failure, Skipped

xml = JUnitXml.fromfile(sys.argv[1])
cases = {case.name: case for suite in xml for case in suite}
assert set(cases) == {"ttft.p50 <= 10s", "e2e.p99 < 1us", "pass_rate >= 99.995%"}, cases
assert cases["ttft.p50 <= 10s"].is_passed
failure = cases["e2e.p99 < 1us"].result
assert len(failure) == 1 and isinstance(failure[0], Failure), failure
assert failure[0].message.startswith("fail: observed"), failure[0].message
skipped = cases["pass_rate >= 99.995%"].result
assert len(skipped) == 1 and isinstance(skipped[0], Skipped), skipped
assert "more would decide it" in skipped[0].message, skipped[0].message
print(f"junitparser: {len(cases)} testcases as expected (1 passed, 1 failed, 1 skipped)")
PY
