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
import json, math, sys
from hdrh.histogram import HdrHistogram

def at_quantile(h, q):
    """The value at quantile q by the rank rule HdrHistogram's Java and Rust versions
    use (the ceil(q * count)-th sample, at its bucket's highest equivalent value); the
    Python port's own get_value_at_percentile rounds the rank instead, so it can land
    one sample away. Walking the decoded buckets here checks their contents exactly."""
    target = max(1, math.ceil(q * h.get_total_count()))
    seen = 0
    for item in h.get_recorded_iterator():
        seen += item.count_at_value_iterated_to
        if seen >= target:
            return h.get_highest_equivalent_value(item.value_iterated_to)
    raise AssertionError("the quantile is past the last sample")

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
    for field, q in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999)):
        got = at_quantile(h, q) / 1000
        assert abs(got - want[field]) < 1e-9, (name, field, got, want[field])
        checked += 1
    assert h.get_max_value() == h.get_highest_equivalent_value(round(want["max"] * 1000)), (name, "max")
tokens = HdrHistogram.decode(dist["output_tokens"])
assert tokens.get_total_count() == summary["requests"]["ok"], "one output count per answer"
print(f"hdr-check: {checked} percentiles of 4 histograms, their counts and maxima, decoded by "
      f"Python's HdrHistogram, equal summary.json's ({summary['requests']['ok']} requests)")
PY
