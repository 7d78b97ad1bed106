// A timing loop on the official MCP TypeScript SDK (npm `@modelcontextprotocol/sdk`):
// WORKERS clients, each with its own session (as redline's closed loop of as many
// slots holds as many sessions), call the tools of a mix back to back, CALLS in all,
// each call timed around `callTool` (send to result). Prints the p50 per tool, in ms,
// as JSON: the yardstick redline's per-tool p50 of the same mix is held to.
//
//   node mcp_sdk_timing.mjs URL CALLS WORKERS MIX_JSON
// where MIX_JSON is [[tool, arguments, weight], …], and URL is the server's
// Streamable HTTP endpoint, or `stdio:SCRIPT ARG…` for a Node server each client
// starts as its child process (the SDK's stdio transport).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, calls, workers, mixText] = process.argv.slice(2);
const mix = JSON.parse(mixText);
const total = mix.reduce((sum, [, , weight]) => sum + weight, 0);
// A fixed sequence of draws (an LCG), so every run of the loop makes the same calls.
let state = 12345;
const draw = () => {
  state = (state * 1103515245 + 12345) % 2147483648;
  let at = (state / 2147483648) * total;
  return mix.find(([, , weight]) => (at -= weight) < 0) ?? mix[mix.length - 1];
};
const plan = Array.from({ length: Number(calls) }, draw);
const times = {};
let next = 0;
let failed = 0;

async function worker() {
  const client = new Client({ name: "redline-sdk-timing", version: "1.0.0" });
  const transport = url.startsWith("stdio:")
    ? new StdioClientTransport({ command: process.execPath, args: url.slice(6).split(" ") })
    : new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  while (next < plan.length) {
    const [name, args] = plan[next++];
    const start = performance.now();
    const result = await client.callTool({ name, arguments: args });
    const ms = performance.now() - start;
    if (result.isError) failed += 1;
    (times[name] ??= []).push(ms);
  }
  await client.close();
}

await Promise.all(Array.from({ length: Number(workers) }, worker));
const p50 = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)];
};
const out = Object.fromEntries(
  Object.entries(times).map(([name, ms]) => [name, { calls: ms.length, p50_ms: p50(ms) }]),
);
console.log(JSON.stringify({ failed, tools: out }));
