#!/usr/bin/env bash
# `redline slo rules` read by Prometheus's own tool: promtool (Debian's prometheus
# package, installed here when missing) accepts the rule files for redline's metrics
# and for vLLM's, in both formats' rule groups, and its rule unit tests
# (tests/fixtures/prometheus/burn-rate.test.yaml) fire the page alert of
# examples/redlines.yaml's pass_rate on a 9 % error rate and stay silent on none.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v promtool > /dev/null || { apt-get update -qq && apt-get install -y -qq prometheus > /dev/null; }
cargo build --release --quiet
bin=$PWD/target/release/redline
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "prometheus-rules-check: $*" >&2; exit 1; }
"$bin" slo rules examples/redlines.yaml --format prometheus > "$work/rules.yaml" 2> "$work/left-out.txt"
grep -q "left out tpot.p95" "$work/left-out.txt" || fail "tpot.p95 was not said to be left out"
# Output kept before it is searched: `grep -q` leaving early would break promtool's pipe,
# and pipefail would call that a refusal.
checked=$(promtool check rules "$work/rules.yaml" 2>&1) || { echo "$checked"; fail "promtool did not accept the rules"; }
grep -q "SUCCESS: 45 rules found" <<< "$checked" || { echo "$checked"; fail "promtool did not accept the rules"; }
"$bin" slo rules examples/redlines.yaml --format prometheus --metrics vllm > "$work/vllm.yaml" 2> /dev/null
checked=$(promtool check rules "$work/vllm.yaml" 2>&1) || { echo "$checked"; fail "promtool did not accept the vLLM rules"; }
grep -q "SUCCESS: 18 rules found" <<< "$checked" || { echo "$checked"; fail "promtool did not accept the vLLM rules"; }
# The PrometheusRule resource holds the same groups.
"$bin" slo rules examples/redlines.yaml > "$work/resource.yaml" 2> /dev/null
python3 -c 'import yaml' 2> /dev/null || python3 -m pip install --quiet --disable-pip-version-check pyyaml
python3 - "$work/resource.yaml" "$work/rules.yaml" <<'PY' || fail "the PrometheusRule's groups differ from the rule file's"
import sys, yaml
resource, plain = (yaml.safe_load(open(path)) for path in sys.argv[1:3])
assert resource["kind"] == "PrometheusRule" and resource["spec"]["groups"] == plain["groups"]
PY
cp tests/fixtures/prometheus/burn-rate.test.yaml "$work/"
(cd "$work" && promtool test rules burn-rate.test.yaml) > "$work/test.txt" 2>&1 || { cat "$work/test.txt"; fail "promtool's rule unit tests failed"; }
echo "promtool: 45 redline rules and 18 vLLM rules accepted; the page alert fires on 9 % errors and not on none"
