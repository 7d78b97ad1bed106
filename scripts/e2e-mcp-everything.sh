#!/usr/bin/env bash
# redline against an MCP server no one here wrote: the reference server
# (npm `@modelcontextprotocol/server-everything`), over Streamable HTTP and over stdio,
# under a mixed load, beside a timing loop written on the official TypeScript SDK
# (scripts/mcp_sdk_timing.mjs, with the SDK's transport of the same kind) making the
# same calls at the same concurrency, in the same run. Checks: every scheduled call ends in exactly one record, all succeed; per
# tool, redline's p50 is within 5 % of the SDK loop's for a tool whose call takes long
# enough that a client's own overhead is under that (the 100 ms long-running
# operation), and no more than the SDK's for the 2 ms tools (where the SDK client's
# own parsing and validation is most of the difference). Then a mix of every kind
# of call with session churn: every call ok, one handshake per session opened, and
# over stdio no server process left running once the run is over; a session that
# listens hears, on its GET stream, the log messages the server sends once told to. And
# the MCP conformance suite (npm `@modelcontextprotocol/conformance` 0.1.12, the
# newest that runs on Node 20): redline's client through its `initialize` scenario,
# and `redline sim`'s server through the scenarios that need no fixture tools of
# their own (docs/mcp.md says what the others need).
#
# The server binds every interface, so everything runs in a network namespace of its
# own (`unshare -rn`) whose only interface is loopback. Installs the server and the
# SDK from npm into target/npm-mcp.
set -euo pipefail
cd "$(dirname "$0")/.."
npm_dir=${REDLINE_NPM_MCP_DIR:-target/npm-mcp}
mkdir -p "$npm_dir"
if [ ! -d "$npm_dir/node_modules/@modelcontextprotocol/server-everything" ]; then
  npm install --silent --no-audit --no-fund --prefix "$npm_dir" \
    @modelcontextprotocol/sdk@1.32.2 @modelcontextprotocol/server-everything@2026.8.31
fi
conformance_dir=${REDLINE_NPM_CONFORMANCE_DIR:-target/npm-mcp-conformance}
if [ ! -d "$conformance_dir/node_modules/@modelcontextprotocol/conformance" ]; then
  mkdir -p "$conformance_dir"
  npm install --silent --no-audit --no-fund --prefix "$conformance_dir" @modelcontextprotocol/conformance@0.1.12
fi
cargo build --release --quiet
cp scripts/mcp_sdk_timing.mjs "$npm_dir/"
out=${REDLINE_E2E_DIR:-target/e2e-mcp-everything}
rm -rf "$out"
mkdir -p "$out"
exec unshare -rn bash scripts/e2e-mcp-everything-inside.sh "$npm_dir" "$out" "$conformance_dir"
