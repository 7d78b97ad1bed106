#!/usr/bin/env bash
# Streaming SLOs against a real Prometheus and a real VictoriaMetrics (Debian's
# packages, installed here when missing), both scraping `redline run --metrics-addr`
# every second:
#   - `redline slo rules` for tests/fixtures/prometheus/watched.yaml, accepted by
#     `promtool check rules`, loaded into Prometheus;
#   - the faulted run (270 s; from 90 s: 10 % delayed 300–800 ms, 10 % 503s): in its
#     clean first 90 s no alert of the spec is pending or firing in /api/v1/alerts and
#     every request succeeds; then the error-rate SLO's page alert fires while it runs,
#     and the run's own streaming SLO opens a TTFT p95 episode;
#   - `redline watch --prometheus` over the same Prometheus, and over VictoriaMetrics
#     (same query API), finds that episode again, opening within 30 s of the live one;
#     so does `redline watch --prometheus --follow`, run beside the faulted run.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v prometheus > /dev/null || missing+=(prometheus)
command -v victoria-metrics > /dev/null || missing+=(victoria-metrics)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
cargo build --release --quiet
bin=$PWD/target/release/redline
spec=tests/fixtures/prometheus/watched.yaml
work=$(mktemp -d)
pids=()
# The servers flush their storage as they stop: wait for them before removing it.
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "e2e-prometheus: $*" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 150); do curl -sf "$1" > /dev/null 2>&1 && return 0; sleep 0.2; done; fail "$1 did not come up"; }
metrics=127.0.0.1:$(port) prom=127.0.0.1:$(port) vm=127.0.0.1:$(port)

"$bin" slo rules "$spec" --format prometheus > "$work/rules.yaml"
promtool check rules "$work/rules.yaml" > /dev/null || fail "promtool did not accept the rules"
cat > "$work/prometheus.yml" <<YML
global: { scrape_interval: 1s, evaluation_interval: 1s }
rule_files: [rules.yaml]
scrape_configs:
  - job_name: redline
    static_configs: [{ targets: ["$metrics"] }]
YML
# VictoriaMetrics scrapes the same target itself (its parser refuses `rule_files`).
cat > "$work/vm-scrape.yml" <<YML
global: { scrape_interval: 1s }
scrape_configs:
  - job_name: redline
    static_configs: [{ targets: ["$metrics"] }]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prom" \
  --web.listen-address="$prom" > "$work/prometheus.log" 2>&1 &
pids+=($!)
victoria-metrics -storageDataPath="$work/vm" -httpListenAddr="$vm" \
  -promscrape.config="$work/vm-scrape.yml" -search.latencyOffset=0s > "$work/vm.log" 2>&1 &
pids+=($!)
wait_up "http://$prom/-/ready"
wait_up "http://$vm/health" || { tail "$work/vm.log"; exit 1; }

# The alerts of this spec in Prometheus: "page firing", "page pending", … one a line.
alerts() {
  curl -sf "http://$prom/api/v1/alerts" | python3 -c '
import json, sys
for a in json.load(sys.stdin)["data"]["alerts"]:
    if a["labels"].get("scenario") == "watched":
        print(a["labels"]["severity"], a["state"])'
}
# Runs SPEC for the run in the background, polling the alerts every 2 s into FILE.
run_polling() { # SPEC OUT ALERTS
  "$bin" run "$1" --out "$2" --metrics-addr "$metrics" --quiet > "$2.log" 2>&1 &
  local run=$! t0=$SECONDS
  pids+=($run)
  while kill -0 "$run" 2> /dev/null; do
    alerts | sed "s/^/$((SECONDS - t0))s /" >> "$3" || true
    sleep 2
  done
  wait "$run" || true
}

query='ttft.p95=histogram_quantile(0.95, sum by (le) (rate(redline_time_to_first_token_seconds_bucket[30s])))'
start=$(python3 -c 'import time; print(int(time.time()) // 10 * 10)')
touch "$work/faulted-alerts.txt"
# `watch --follow` beside the run: the same episode, found while it happens.
"$bin" watch --spec "$spec" --prometheus "http://$prom" --query "$query" --start "$start" \
  --follow --for 275s --json "$work/following.json" > "$work/following.txt" 2>&1 &
following=$!
pids+=($following)
run_start=$(date +%s.%N)
run_polling "$spec" "$work/faulted" "$work/faulted-alerts.txt"
end=$(python3 -c 'import time; print(int(time.time()))')
code=0; wait "$following" || code=$?
[ "$code" = 1 ] || { cat "$work/following.txt"; fail "watch --follow exited $code, not 1 (an episode)"; }
grep -q "page firing" "$work/faulted-alerts.txt" \
  || { sort "$work/faulted-alerts.txt" | uniq -c; tail -20 "$work/faulted.log"; fail "the page alert never fired during the faulted run"; }
first_firing=$(grep "page firing" "$work/faulted-alerts.txt" | head -1 | cut -d' ' -f1)
# The clean part: no alert before the fault, and every request sent before it ok.
python3 - "$work" <<'PY' || fail "alerts or failures before the fault"
import json, sys
work = sys.argv[1]
early = [l for l in open(f"{work}/faulted-alerts.txt") if int(l.split("s ")[0]) < 90]
assert not early, f"alerts before the fault: {early}"
clean = [r for r in map(json.loads, open(f"{work}/faulted/records.jsonl")) if r["sent_us"] < 88e6]
assert len(clean) > 700 and all(r["outcome"] == "ok" for r in clean), \
    (len(clean), [r for r in clean if r["outcome"] != "ok"][:3])
print(f"before the fault: no alert, {len(clean)} requests all ok")
PY

for source in "prometheus http://$prom" "victoriametrics http://$vm"; do
  set -- $source
  code=0
  "$bin" watch --spec "$spec" --prometheus "$2" --query "$query" --start "$start" --end "$end" \
    --json "$work/$1.json" > "$work/$1.txt" 2>&1 || code=$?
  [ "$code" = 1 ] || { cat "$work/$1.txt"; fail "watch over $1 exited $code, not 1 (an episode)"; }
done
python3 - "$work" "$start" "$run_start" <<'PY' || fail "the episodes do not match"
import json, sys
work, start, run_start = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
summary = json.load(open(f"{work}/faulted/summary.json"))
live = [e for e in summary["drift"]["episodes"] if e["series"] == "ttft.p95"]
assert live, f"the live run opened no ttft.p95 episode: {summary['drift']['episodes']}"
# The live run's t = 0 is its start; the watch's, `start`: compared in Unix time.
opened = {}
for source in ("prometheus", "victoriametrics", "following"):
    found = [e for e in json.load(open(f"{work}/{source}.json"))["episodes"] if e["series"] == "ttft.p95"]
    assert found, f"{source}: no ttft.p95 episode"
    opened[source] = found[0]["opened_s"]
live_opened = run_start + live[0]["opened_s"]
fault = run_start + 90
for source, at in opened.items():
    at += start
    # Within three windows of the live run's opening (a scrape and a rate() window later).
    assert abs(at - live_opened) <= 30, f"{source} opened {at - live_opened:+.0f}s from the live run"
    assert at >= fault, f"{source} opened {fault - at:.0f}s before the fault"
print(f"ttft.p95 episode opened {live_opened - fault:.0f}s after the fault in the live run, "
      + ", ".join(f"{s} {a + start - fault:.0f}s" for s, a in opened.items()))
PY
echo "prometheus: no alert before the fault; page alert firing ${first_firing} into the faulted run (fault from 90 s, for: 2m); watch over Prometheus (after and while following) and VictoriaMetrics found the live episode"
