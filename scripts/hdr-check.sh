#!/usr/bin/env bash
# aggregate.json read by an independent HdrHistogram implementation (PyPI's
# hdrhistogram, the Python port of HdrHistogram): a run against the embedded simulator,
# then every histogram of its aggregate decoded from the V2 deflate base64 encoding and
# held to summary.json's counts and percentiles. What `redline merge --without-records`
# relies on is then the standard format, not only our own reading of it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${REDLINE_VENV_DIR:-target/venv-hdr}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check 'hdrhistogram>=0.10,<0.11'
cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/spec.yaml" << 'YAML'
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: hdr-check }
spec:
  seed: 3
  services:
    llm: { url: embedded, profile: tiny }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: { mean: 64, stddev: 16, min: 8, max: 128 }, output_tokens: { min: 4, max: 40 } } }
  load:
    - { arrival: poisson, rate: 100, requests: 300 }
YAML
./target/release/redline run "$work/spec.yaml" --out "$work/out" --quiet > /dev/null
"$venv/bin/python" - "$work/out" << 'PY'
import json, sys
from hdrh.histogram import HdrHistogram

out = sys.argv[1]
aggregate = json.load(open(f"{out}/aggregate.json"))
assert aggregate["format"] == "redline-aggregate" and aggregate["version"] == 1, aggregate["format"]
summary = json.load(open(f"{out}/summary.json"))
dist = aggregate["aggregate"]["dist"]
checked = 0
for name in ("ttft", "itl", "tpot", "e2e"):
    h = HdrHistogram.decode(dist[name])
    want = summary["latency_ms"][name]
    assert h.get_total_count() == want["count"], (name, h.get_total_count(), want["count"])
    for field, percentile in (("p50", 50), ("p90", 90), ("p99", 99)):
        got = h.get_value_at_percentile(percentile) / 1000
        # Both read the same buckets; allow one bucket of the 3 significant figures.
        assert abs(got - want[field]) <= max(want[field] * 1e-3, 1e-3), (name, field, got, want[field])
        checked += 1
    assert abs(h.get_max_value() / 1000 - want["max"]) <= want["max"] * 1e-3, (name, "max")
tokens = HdrHistogram.decode(dist["output_tokens"])
assert tokens.get_total_count() == summary["requests"]["ok"], "one output count per answer"
print(f"hdr-check: {checked} percentiles of 4 histograms and the token counts read by "
      f"Python's HdrHistogram agree with summary.json ({summary['requests']['ok']} requests)")
PY
