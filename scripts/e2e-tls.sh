#!/usr/bin/env bash
# https with independent peers on both sides. Certificates come from openssl at run
# time (a test CA, a server certificate, an expired one, a client certificate); none
# is committed.
#   - the openai Python SDK and curl against `redline sim --tls-self-signed`;
#   - redline against Debian's nginx with TLS: a static target, a reverse proxy to
#     the simulator (SSE through nginx, proxy_buffering off, HTTP/2 by ALPN), and mTLS;
#   - wrong CA, wrong host name and an expired certificate: typed connect/tls outcomes
#     naming the reason; --insecure passes them, with a warning;
#   - `redline chaos` terminating TLS, `redline collect` over https.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nginx > /dev/null || { apt-get update -qq && apt-get install -y -qq nginx > /dev/null; }
venv=${REDLINE_VENV_DIR:-target/venv-openai}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check 'openai>=1.40,<3'
cargo build --release --quiet
bin=$PWD/target/release/redline
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "e2e-tls: $*" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_tls() { # URL CA
  for _ in $(seq 100); do curl -sf --cacert "$2" "$1" > /dev/null 2>&1 && return 0; sleep 0.1; done
  fail "$1 did not come up"
}

# --- certificates, made by openssl -------------------------------------------------
cd "$work"
mkdir -p ca/newcerts && touch ca/index.txt && echo 1000 > ca/serial
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=e2e CA" 2> /dev/null
openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem -days 2 -subj "/CN=other CA" 2> /dev/null
issue() { # NAME SAN [START END]
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" 2> /dev/null
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\n' "$2" > "$1.ext"
  if [ $# -eq 4 ]; then
    cat > ca.cnf <<CNF
[ca]
default_ca=e2e
[e2e]
dir=$work/ca
database=\$dir/index.txt
new_certs_dir=\$dir/newcerts
serial=\$dir/serial
default_md=sha256
policy=any
[any]
commonName=supplied
CNF
    openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in "$1.csr" -out "$1.pem" \
      -startdate "$3" -enddate "$4" -extfile "$1.ext" -notext 2> /dev/null
  else
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$1.pem" -days 2 -extfile "$1.ext" 2> /dev/null
  fi
}
issue server "IP:127.0.0.1"
issue expired "IP:127.0.0.1" 20200101000000Z 20201231000000Z
issue client "DNS:redline-client"
cd - > /dev/null

# --- the simulator over TLS, with independent clients --------------------------------
sim_port=$(port)
"$bin" sim --profile tiny --addr "127.0.0.1:$sim_port" --tls-self-signed "$work/sim-ca.pem" 2> /dev/null &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/sim-ca.pem" ] && break; sleep 0.1; done
wait_tls "https://127.0.0.1:$sim_port/health" "$work/sim-ca.pem"
SSL_CERT_FILE="$work/sim-ca.pem" "$venv/bin/python" scripts/openai_sdk_check.py "https://127.0.0.1:$sim_port/v1"
version=$(curl -sS --cacert "$work/sim-ca.pem" --http2 -o /dev/null -w '%{http_version}' "https://127.0.0.1:$sim_port/v1/models")
[ "$version" = 2 ] || fail "curl --http2 got HTTP/$version from the simulator"
events=$(curl -sS -N --cacert "$work/sim-ca.pem" "https://127.0.0.1:$sim_port/v1/chat/completions" \
  -H 'content-type: application/json' \
  -d '{"model":"sim-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}' | grep -c '^data: ')
[ "$events" -ge 9 ] || fail "curl streamed $events events from the simulator"
echo "openai SDK and curl (HTTP/2 by ALPN, SSE) against redline sim over TLS: ok"

# --- nginx with TLS: static, reverse proxy to the simulator, mTLS, an expired cert ---
plain_port=$(port)
"$bin" sim --profile tiny --addr "127.0.0.1:$plain_port" 2> /dev/null &
pids+=($!)
static=$(port); proxy=$(port); mtls=$(port); old=$(port)
cat > "$work/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work; proxy_temp_path $work; fastcgi_temp_path $work; uwsgi_temp_path $work; scgi_temp_path $work;
  ssl_certificate $work/server.pem;
  ssl_certificate_key $work/server.key;
  server { listen 127.0.0.1:$static ssl http2; location / { return 200 "ok\n"; } }
  server {
    listen 127.0.0.1:$proxy ssl http2;
    location / { proxy_pass http://127.0.0.1:$plain_port; proxy_http_version 1.1; proxy_buffering off; }
  }
  server {
    listen 127.0.0.1:$mtls ssl;
    ssl_client_certificate $work/ca.pem; ssl_verify_client on;
    location / { return 200 "ok\n"; }
  }
  server {
    listen 127.0.0.1:$old ssl;
    ssl_certificate $work/expired.pem; ssl_certificate_key $work/expired.key;
    location / { return 200 "ok\n"; }
  }
}
CONF
nginx -c "$work/nginx.conf" &
pids+=($!)
wait_tls "https://127.0.0.1:$static/" "$work/ca.pem"

# run NAME EXPECTED_EXIT ARGS...: a redline run whose summary lands in $work/NAME.
run() {
  local name=$1 expected=$2 rc=0; shift 2
  "$bin" run "$@" --out "$work/$name" --quiet > "$work/$name.txt" 2>&1 || rc=$?
  [ "$expected" = any ] || [ "$rc" = "$expected" ] || { cat "$work/$name.txt"; fail "$name: exit $rc, not $expected"; }
}
summary() { python3 -c "import json,sys; s=json.load(open('$work/$1/summary.json')); print(eval(sys.argv[1]))" "$2"; }

cat > "$work/static.yaml" <<YAML
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: nginx-static }
spec:
  services:
    web: { url: "https://127.0.0.1:$static", api: http, http2: true, tls: { ca_cert: $work/ca.pem } }
  payloadTemplate:
    request: { method: GET, path: / }
  load:
    - { concurrency: 8, requests: 400 }
YAML
run static 0 "$work/static.yaml"
[ "$(summary static "s['requests']['ok']")" = 400 ] || fail "nginx static over h2: not 400 ok"
handshakes=$(grep -c '"tls_us"' "$work/static/records.jsonl")
[ "$handshakes" = 1 ] || fail "h2 to nginx: $handshakes TLS handshakes, not one multiplexed connection"
echo "nginx static over HTTP/2 (ALPN): 400 ok on one connection, one handshake timed"

run proxied 0 --url "https://127.0.0.1:$proxy" --model sim-tiny --ca-cert "$work/ca.pem" \
  --concurrency 4 --requests 40 --output-tokens 16
[ "$(summary proxied "s['requests']['ok']")" = 40 ] || fail "SSE through nginx: not 40 ok"
[ "$(summary proxied "s['tokens']['output_total']")" = 640 ] || fail "SSE through nginx: tokens lost"
[ "$(summary proxied "s['latency_ms']['itl']['count']")" = 600 ] || fail "SSE through nginx: not 15 gaps per stream"
echo "SSE through nginx's TLS reverse proxy: 40 streams, 640 tokens, every inter-token gap seen"

# nginx finishes the handshake and answers 400 "No required SSL certificate was sent".
run mtls-none 1 --url "https://127.0.0.1:$mtls" --model m --api completions --ca-cert "$work/ca.pem" --requests 2
grep -q 'No required SSL certificate was sent' "$work/mtls-none/records.jsonl" || fail "mTLS without a client cert: $(head -c 300 "$work/mtls-none/records.jsonl")"
cat > "$work/mtls.yaml" <<YAML
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: nginx-mtls }
spec:
  services:
    web: { url: "https://127.0.0.1:$mtls", api: http, tls: { ca_cert: $work/ca.pem, client_cert: $work/client.pem, client_key: $work/client.key } }
  payloadTemplate:
    request: { method: GET, path: /, expect_status: 200 }
  load:
    - { concurrency: 2, requests: 20 }
YAML
run mtls 0 "$work/mtls.yaml"
[ "$(summary mtls "s['requests']['ok']")" = 20 ] || fail "mTLS with a client cert: not 20 ok"
echo "mTLS against nginx: refused without a client certificate, 20 ok with one"

# The three certificate faults, typed; --insecure passes each with a warning.
fault() { # NAME URL CA REASON
  run "$1" 3 --url "$2" --model m --ca-cert "$3" --requests 3
  python3 - "$work/$1/records.jsonl" "$4" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
assert len(records) == 3, records
for r in records:
    e = r["error"]
    assert (e["stage"], e["kind"]) == ("connect", "tls"), e
    assert sys.argv[2] in e["message"], e["message"]
PY
  # nginx answers `ok`, which is no completion: the requests fail, but past TLS.
  "$bin" run --url "$2" --model m --insecure --requests 3 --out "$work/$1-insecure" > "$work/$1-insecure.txt" 2>&1 || true
  if grep -q '"kind":"tls"' "$work/$1-insecure/records.jsonl"; then fail "$1: --insecure still failed the handshake"; fi
  grep -q '"kind":"invalid_json"' "$work/$1-insecure/records.jsonl" || fail "$1: --insecure: $(head -c 300 "$work/$1-insecure/records.jsonl")"
  grep -q "WARNING: TLS certificates of \`llm\` were not verified" "$work/$1-insecure.txt" || fail "$1: --insecure gave no warning"
}
fault wrong-ca "https://127.0.0.1:$static" "$work/other-ca.pem" "unknown issuer"
fault wrong-host "https://localhost:$static" "$work/ca.pem" "name mismatch"
fault expired "https://127.0.0.1:$old" "$work/ca.pem" "certificate expired"
echo "wrong CA, wrong host name, expired certificate: connect/tls with the reason; --insecure passes them and warns"

# --- redline chaos terminating TLS; redline collect over https ----------------------
chaos=$(port); admin=$(port)
"$bin" chaos --upstream "http://127.0.0.1:$plain_port" --listen "127.0.0.1:$chaos" --admin "127.0.0.1:$admin" \
  --tls-self-signed "$work/chaos-ca.pem" 2> /dev/null &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/chaos-ca.pem" ] && break; sleep 0.1; done
wait_tls "https://127.0.0.1:$chaos/health" "$work/chaos-ca.pem"
run chaos 0 --url "https://127.0.0.1:$chaos" --model sim-tiny --ca-cert "$work/chaos-ca.pem" --requests 10 --output-tokens 4
collect=$(port)
"$bin" collect --listen "127.0.0.1:$collect" --out "$work/collect" --tls-self-signed "$work/collect-ca.pem" 2> /dev/null &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/collect-ca.pem" ] && break; sleep 0.1; done
status=$(curl -sS --cacert "$work/collect-ca.pem" -o /dev/null -w '%{http_code}' "https://127.0.0.1:$collect/v1/traces" \
  -H 'content-type: application/json' -d '{"resourceSpans":[]}')
[ "$status" = 200 ] || fail "collect over https answered $status"
echo "redline chaos terminates TLS; redline collect takes OTLP over https"
