"""The MCP face with the official SDK's client: a ClientSession over stdio against
`osumem serve` (list tools, add, retrieve, errors as tool errors), and the streamable
HTTP endpoint behind the bearer token."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from osumem.memory import Memory
from serve_helpers import OSUMEM, TOKEN, Server, serve_env, turn, write_tokens

mcp = pytest.importorskip("mcp")

TOOLS = {
    "memory_add_messages",
    "memory_retrieve",
    "memory_list_namespaces",
    "memory_delete_namespace",
    "memory_show_steps",
    "memory_add_text",
    "memory_delete_steps",
    "memory_update_step",
}


EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "mcp_config.json"


def stdio_params(store):
    """The server entry of the README's MCP client config, with this test's store (and
    the light encoder); `osumem` runs this checkout's command."""
    from mcp import StdioServerParameters

    entry = json.loads(EXAMPLE_CONFIG.read_text())["mcpServers"]["osumem"]
    assert entry["command"] == "osumem"
    args = [str(store) if a.endswith("agent-memory.db") else a for a in entry["args"]]
    assert args[:2] == ["serve", "--store"] and str(store) in args
    return StdioServerParameters(
        command=OSUMEM[0], args=[*OSUMEM[1:], *args, "--encoder", "hashing:d64"], env=serve_env()
    )


async def _session_checks(session, store):
    listed = (await session.list_tools()).tools
    by_name = {t.name: t for t in listed}
    assert set(by_name) == TOOLS
    for tool in listed:
        assert tool.description and len(tool.description) > 40
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None
    retrieve_schema = by_name["memory_retrieve"].input_schema
    assert retrieve_schema["required"] == ["query"]
    assert retrieve_schema["properties"]["budget"]["type"] == "integer"
    assert "description" in retrieve_schema["properties"]["namespace"]
    assert by_name["memory_retrieve"].annotations.read_only_hint is True
    assert by_name["memory_delete_namespace"].annotations.destructive_hint is True
    msg_schema = by_name["memory_add_messages"].input_schema
    assert "messages" in msg_schema["required"]

    for k in range(6):
        added = await session.call_tool(
            "memory_add_messages", {"namespace": "task-1", "messages": turn(k)}
        )
        assert not added.is_error, added.content
        assert len(added.structured_content["step_ids"]) == 2
    assert added.structured_content["steps_in_namespace"] == 12

    got = await session.call_tool(
        "memory_retrieve", {"query": "how was R3 paid?", "namespace": "task-1", "budget": 60}
    )
    assert not got.is_error, got.content
    answer = got.structured_content
    with Memory.open(store, encoder="hashing:d64") as mem:
        local = mem.retrieve("how was R3 paid?", 60, namespace="task-1")
    assert answer["rendered"] == local.render()
    assert answer["steps"] == local.to_dict()["steps"]
    assert answer["cost"] <= 60 and answer["steps"]
    assert answer.get("explanation") is None  # only when asked
    why = await session.call_tool(
        "memory_retrieve",
        {"query": "how was R3 paid?", "namespace": "task-1", "budget": 60, "explain": True},
    )
    assert not why.is_error, why.content
    explained = why.structured_content["explanation"]
    assert [s["position"] for s in explained["steps"]] == local.positions
    assert explained["cost"] == local.cost and explained["budget"] == 60

    shown = await session.call_tool(
        "memory_show_steps", {"namespace": "task-1", "start": 2, "limit": 3}
    )
    assert not shown.is_error, shown.content
    page = shown.structured_content
    assert [s["position"] for s in page["steps"]] == [2, 3, 4] and page["next"] == 5
    with Memory.open(store, encoder="hashing:d64") as mem:
        assert page["steps"][0]["text"] == mem.view("task-1").texts[2]
    missing = await session.call_tool("memory_show_steps", {"namespace": "nope"})
    assert missing.is_error and "UnknownNamespaceError" in missing.content[0].text

    # errors come back as tool errors with the typed message; the server keeps running
    bad = await session.call_tool(
        "memory_add_messages",
        {"namespace": "task-1", "messages": [{"role": "tool", "content": "orphan result"}]},
    )
    assert bad.is_error
    assert "LogFormatError" in bad.content[0].text and "messages[0]" in bad.content[0].text
    bad = await session.call_tool(
        "memory_retrieve", {"query": "x", "namespace": "task-1", "method": "nope"}
    )
    assert bad.is_error and "nope" in bad.content[0].text
    bad = await session.call_tool("memory_retrieve", {"query": "x", "budget": 0})
    assert bad.is_error and "budget" in bad.content[0].text
    bad = await session.call_tool(
        "memory_add_messages", {"namespace": "task-1", "messages": [{"role": "robot"}]}
    )
    assert bad.is_error and "role" in bad.content[0].text

    names = await session.call_tool("memory_list_namespaces", {})
    assert names.structured_content == {"namespaces": ["task-1"]}
    gone = await session.call_tool("memory_delete_namespace", {"namespace": "task-1"})
    assert gone.structured_content == {"namespace": "task-1", "deleted_steps": 12}
    names = await session.call_tool("memory_list_namespaces", {})
    assert names.structured_content == {"namespaces": []}


def test_stdio_client_session(tmp_path):
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    store = tmp_path / "mcp.db"

    async def main():
        with anyio.fail_after(180):
            async with stdio_client(stdio_params(store)) as (read, write):  # noqa: SIM117
                async with ClientSession(read, write) as session:
                    info = await session.initialize()
                    assert info.server_info.name == "osumem"
                    await _session_checks(session, store)

    anyio.run(main)


def test_streamable_http_behind_the_token(tmp_path):
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    store = tmp_path / "mcp-http.db"
    srv = Server(store, write_tokens(tmp_path / "tokens.txt"))

    async def main(token):
        headers = {"authorization": f"Bearer {token}"}
        with anyio.fail_after(180):
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:  # noqa: SIM117
                async with streamable_http_client(srv.url + "/mcp", http_client=http) as s:
                    async with ClientSession(s[0], s[1]) as session:
                        await session.initialize()
                        await _session_checks(session, store)

    try:
        anyio.run(main, TOKEN)
    finally:
        srv.stop()


def test_streamable_http_token_limited_to_namespaces(tmp_path):
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from serve_helpers import TEAM_TOKEN

    srv = Server(tmp_path / "team.db", write_tokens(tmp_path / "tokens.txt"))

    async def main():
        headers = {"authorization": f"Bearer {TEAM_TOKEN}"}
        with anyio.fail_after(120):
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:  # noqa: SIM117
                async with streamable_http_client(srv.url + "/mcp", http_client=http) as s:
                    async with ClientSession(s[0], s[1]) as session:
                        await session.initialize()
                        ok = await session.call_tool(
                            "memory_add_messages", {"namespace": "team-a", "messages": turn(1)}
                        )
                        assert not ok.is_error
                        no = await session.call_tool(
                            "memory_retrieve", {"query": "R1", "namespace": "secret"}
                        )
                        assert no.is_error and "forbidden" in no.content[0].text
                        no = await session.call_tool(
                            "memory_delete_namespace", {"namespace": "secret"}
                        )
                        assert no.is_error and "secret" in no.content[0].text

    try:
        anyio.run(main)
    finally:
        srv.stop()
