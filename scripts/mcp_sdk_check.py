"""The official MCP Python SDK (PyPI `mcp`) against `redline sim`'s MCP server, over
Streamable HTTP: initialize, every page of tools/list, every tool called, a tool's
progress heard, resources listed and read, prompts listed and got, ping, an unknown
tool refused. Then the server's own ground truth (`/redline/mcp`) must count what the
SDK sent: one session, each tool once (long_task twice), the progress it heard.
"""

import asyncio
import json
import sys
import urllib.request

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

ARGUMENTS = {
    "echo": {"message": "hello"},
    "add": {"a": 2, "b": 3.5},
    "get_weather": {"city": "Oslo", "days": 2},
    "search_docs": {"query": "latency cache", "limit": 2},
    "long_task": {"steps": 3},
}


def field(obj, snake, camel):
    return getattr(obj, snake, None) if hasattr(obj, snake) else getattr(obj, camel, None)


async def every_page(list_method, key):
    items, cursor, pages = [], None, 0
    while True:
        page = await list_method(params=types.PaginatedRequestParams(cursor=cursor))
        items += getattr(page, key)
        pages += 1
        cursor = field(page, "next_cursor", "nextCursor")
        if not cursor:
            return items, pages


async def check(url):
    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            version = field(init, "protocol_version", "protocolVersion")
            assert version == "2025-11-25", version

            tools, pages = await every_page(session.list_tools, "tools")
            names = [t.name for t in tools]
            assert sorted(names) == sorted(ARGUMENTS), names
            assert pages == 2, f"{len(names)} tools in {pages} pages of 3"
            for name in names:
                result = await session.call_tool(name, ARGUMENTS[name])
                assert not field(result, "is_error", "isError"), (name, result)
                assert result.content and result.content[0].text, (name, result)
            add = await session.call_tool("add", {"a": 1, "b": 2})
            assert field(add, "structured_content", "structuredContent") == {"sum": 3.0}, add
            failed = await session.call_tool("echo", {})
            assert field(failed, "is_error", "isError"), "a bad argument is a tool error"

            heard = []

            async def on_progress(progress, total, message):
                heard.append((progress, total))

            result = await session.call_tool("long_task", {"steps": 4}, progress_callback=on_progress)
            assert not field(result, "is_error", "isError"), result
            assert heard == [(1, 4), (2, 4), (3, 4), (4, 4)], heard

            resources, _ = await every_page(session.list_resources, "resources")
            assert len(resources) == 6, resources
            about = await session.read_resource("redline://about")
            assert "simulated MCP server" in about.contents[0].text, about
            document = await session.read_resource("redline://corpus/3")
            assert document.contents[0].text, document

            prompts, _ = await every_page(session.list_prompts, "prompts")
            assert sorted(p.name for p in prompts) == ["rag_answer", "summarize"], prompts
            prompt = await session.get_prompt("summarize", {"text": "a long text"})
            assert "a long text" in prompt.messages[0].content.text, prompt

            await session.send_ping()
            try:
                await session.call_tool("no_such_tool", {})
                raise AssertionError("an unknown tool must be refused")
            except AssertionError:
                raise
            except Exception as refused:  # the SDK raises the JSON-RPC error
                assert "Unknown tool" in str(refused), refused
            return names


def main():
    base = sys.argv[1]
    truth = lambda: json.load(urllib.request.urlopen(f"{base}/redline/mcp"))  # noqa: E731
    before = truth()
    names = asyncio.run(check(f"{base}/mcp"))
    after = truth()
    # What this client added to the server's counts (another may have come before).
    delta = lambda key: after[key] - before[key]  # noqa: E731
    calls = {n: after["tool_calls"][n] - before["tool_calls"].get(n, 0) for n in names}
    expected = {name: 1 for name in names}
    expected["add"] += 1
    expected["echo"] += 1
    expected["long_task"] += 1
    assert calls == expected, (calls, expected)
    assert delta("sessions_opened") == 1, after
    assert delta("progress_sent") == 4, after  # only the call that asked for progress
    initialized = "notifications/initialized"
    assert after["notifications"][initialized] - before["notifications"].get(initialized, 0) == 1, after
    print(f"mcp SDK: {len(names)} tools over 2 pages, resources, prompts, progress and ping against redline sim")


main()
