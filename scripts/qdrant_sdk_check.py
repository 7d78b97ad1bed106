"""Drives `redline sim`'s Qdrant gRPC listener with the official `qdrant-client`
package, over gRPC (`prefer_grpc=True`, as Qdrant's clients are used for speed): the
port named by `GET /redline/endpoints`, nearest-neighbour queries held against the
simulator's REST search of the same vectors (one corpus, one ground truth), paging,
the collections a client lists first (`get_collections`, `get_collection`), the
health check and a refused query; exits non-zero on any mismatch."""
import json
import sys
import urllib.request

import grpc
from qdrant_client import QdrantClient, models

base = sys.argv[1]
checks = 0


def check(condition, what):
    global checks
    if not condition:
        sys.exit(f"FAILED: {what}")
    checks += 1


def get(path):
    return json.load(urllib.request.urlopen(base + path))


def post(path, body):
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    return json.load(urllib.request.urlopen(request))


endpoints = get("/redline/endpoints")
grpc_port, dim = endpoints["qdrant_grpc_port"], endpoints["embedding_dim"]
check(isinstance(grpc_port, int) and grpc_port > 0, f"the endpoints name the gRPC port: {endpoints}")
host, http_port = base.split("//")[1].split(":")
client = QdrantClient(
    host=host, port=int(http_port), grpc_port=grpc_port, prefer_grpc=True, check_compatibility=False
)

# What a new user's first call is: which collections are there, and what is in one.
names = [c.name for c in client.get_collections().collections]
check(names == ["docs"], f"the simulator lists its collection: {names}")
info = client.get_collection("docs")
check(info.points_count == endpoints["search"]["documents"], f"the collection holds the corpus: {info.points_count}")
check(info.config.params.vectors.size == dim, f"its vectors have {dim} numbers: {info.config.params.vectors}")

searches_before = get("/redline/tiers")["searches"]
queries = ["what do kalo and venta say about queues", "tell me of dorpel sutar", "mixing nexfa with gulti"]
for text in queries:
    vector = post("/v1/embeddings", {"model": endpoints["model"], "input": text})["data"][0]["embedding"]
    check(len(vector) == dim, f"an embedding of {dim} numbers")
    answer = client.query_points("docs", query=vector, limit=5, with_payload=True)
    points = answer.points
    check(len(points) == 5, f"five points over gRPC: {points}")
    scores = [p.score for p in points]
    check(scores == sorted(scores, reverse=True), f"best first: {scores}")
    check(all(isinstance(p.payload.get("text"), str) for p in points), "payloads carry the text")
    rest = post("/collections/docs/points/search", {"vector": vector, "limit": 5, "with_payload": True})
    check([p.id for p in points] == [r["id"] for r in rest["result"]], "gRPC and REST find the same points")
    check(all(abs(p.score - r["score"]) < 1e-5 for p, r in zip(points, rest["result"])), "with the same scores")
    paged = client.query_points("docs", query=vector, limit=2, offset=3, with_payload=False)
    check([p.id for p in paged.points] == [r["id"] for r in rest["result"][3:5]], "offset pages the same order")
    check(all(not p.payload for p in paged.points), "no payload unless asked")
searches = get("/redline/tiers")["searches"] - searches_before
check(searches == 3 * len(queries), f"the simulator counted every search: {searches}")

try:
    client.query_points("docs", query=[0.5, 0.5, 0.5], limit=3)
    check(False, "a vector of the wrong size is refused")
except Exception as error:  # qdrant-client passes the gRPC error through
    code = error.code() if isinstance(error, grpc.RpcError) else None
    check(code == grpc.StatusCode.INVALID_ARGUMENT, f"INVALID_ARGUMENT: {error}")
    check("Vector dimension error" in str(error), f"and Qdrant's words for it: {error}")

print(f"qdrant-client (gRPC) against redline sim: {checks} checks passed")
