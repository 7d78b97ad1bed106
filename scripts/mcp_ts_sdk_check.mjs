// The official MCP TypeScript SDK (npm `@modelcontextprotocol/sdk`) against
// `redline sim`'s MCP server over Streamable HTTP: every page of tools/list, every
// tool called (their structured output checked by the SDK against the output
// schemas), a tool's progress heard, resources and prompts, ping, an unknown tool
// refused; then the server's ground truth (`/redline/mcp`) counts what was sent.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const base = process.argv[2];
const check = (ok, what) => {
  if (!ok) throw new Error(`failed: ${what}`);
};
const ARGUMENTS = {
  echo: { message: "hello" },
  add: { a: 2, b: 3.5 },
  get_weather: { city: "Oslo", days: 2 },
  search_docs: { query: "latency cache", limit: 2 },
  long_task: { steps: 3 },
};

async function everyPage(list, key) {
  const items = [];
  let cursor;
  let pages = 0;
  do {
    const page = await list(cursor === undefined ? {} : { cursor });
    items.push(...page[key]);
    cursor = page.nextCursor;
    pages += 1;
  } while (cursor);
  return [items, pages];
}

const truth = async () => (await fetch(`${base}/redline/mcp`)).json();
const before = await truth();
const client = new Client({ name: "redline-ts-check", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`));
await client.connect(transport);
check(transport.sessionId, "a session id after initialize");

const [tools, pages] = await everyPage((p) => client.listTools(p), "tools");
const names = tools.map((t) => t.name).sort();
check(JSON.stringify(names) === JSON.stringify(Object.keys(ARGUMENTS).sort()), `tools ${names}`);
check(pages === 2, `two pages, not ${pages}`);
for (const name of names) {
  const result = await client.callTool({ name, arguments: ARGUMENTS[name] });
  check(!result.isError && result.content[0].text, `${name}: ${JSON.stringify(result)}`);
}
const added = await client.callTool({ name: "add", arguments: { a: 1, b: 2 } });
check(added.structuredContent.sum === 3, `add: ${JSON.stringify(added)}`);

const heard = [];
const long = await client.callTool({ name: "long_task", arguments: { steps: 4 } }, undefined, {
  onprogress: (p) => heard.push([p.progress, p.total]),
});
check(!long.isError, "long_task");
check(JSON.stringify(heard) === "[[1,4],[2,4],[3,4],[4,4]]", `progress ${JSON.stringify(heard)}`);

const [resources] = await everyPage((p) => client.listResources(p), "resources");
check(resources.length === 6, `${resources.length} resources`);
const about = await client.readResource({ uri: "redline://about" });
check(about.contents[0].text.includes("simulated MCP server"), "about");
const [prompts] = await everyPage((p) => client.listPrompts(p), "prompts");
check(prompts.length === 2, `${prompts.length} prompts`);
const prompt = await client.getPrompt({ name: "rag_answer", arguments: { question: "why?" } });
check(prompt.messages[0].content.text.includes("why?"), "rag_answer");
await client.ping();
let refused = false;
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
} catch (error) {
  refused = String(error).includes("Unknown tool");
}
check(refused, "an unknown tool is refused");
await transport.terminateSession();
await client.close();

// What this client added to the server's counts (another client may have come before).
const after = await truth();
const calls = Object.fromEntries(names.map((n) => [n, after.tool_calls[n] - (before.tool_calls[n] ?? 0)]));
const expected = Object.fromEntries(names.map((n) => [n, 1]));
expected.add += 1;
expected.long_task += 1;
check(JSON.stringify(calls) === JSON.stringify(expected), `calls ${JSON.stringify(calls)}`);
check(after.sessions_ended - before.sessions_ended === 1, "the session ended by DELETE");
check(after.progress_sent - before.progress_sent === 4, `progress ${after.progress_sent}`);
console.log(`@modelcontextprotocol/sdk: ${names.length} tools over ${pages} pages, resources, prompts, progress and ping against redline sim`);
