"""MCP errors a client can act on: every tool error is one line, ``Type: where: what``
(the library's typed message, or the field the arguments fail on), never a pydantic
dump; a line on stdio that is not JSON-RPC gets a JSON-RPC error reply and the server
keeps serving; the server reports its version."""

from __future__ import annotations

import json
import queue
import subprocess
import threading

import anyio
import pytest

from osumem import __version__
from serve_helpers import OSUMEM, serve_env, turn

mcp = pytest.importorskip("mcp")


def params(store):
    from mcp import StdioServerParameters

    args = [*OSUMEM[1:], "serve", "--store", str(store), "--encoder", "hashing:d64"]
    return StdioServerParameters(command=OSUMEM[0], args=args, env=serve_env())


BAD_CALLS = [
    (
        "memory_add_messages",
        {"namespace": "t", "messages": [turn(1)[0], {"role": "robot", "content": "beep"}]},
        "LogFormatError: messages[1]: unknown role 'robot'",
    ),
    (
        "memory_add_messages",
        {"namespace": "t", "messages": [{"role": "user", "content": 5}]},
        "LogFormatError: messages[0]",
    ),
    ("memory_retrieve", {"query": "x", "namespace": "t", "budget": -1}, "budget"),
    ("memory_retrieve", {"query": "x", "namespace": "t", "budget": "lots"}, "budget"),
    ("memory_retrieve", {"query": "x", "method": "osumem_gf"}, "ConfigError: method 'osumem_gf'"),
    ("memory_retrieve", {"query": "x", "method": "nope"}, "UnknownMethodError: unknown method"),
    ("memory_delete_namespace", {"namespace": "bad\nname"}, "InvalidInputError: namespace"),
    ("memory_list_namespaces", {"extra": 1}, None),  # extra arguments are ignored
]


def test_tool_errors_are_one_typed_line(tmp_path):
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async def main():
        with anyio.fail_after(180):
            async with stdio_client(params(tmp_path / "m.db")) as (read, write):  # noqa: SIM117
                async with ClientSession(read, write) as session:
                    info = await session.initialize()
                    assert info.server_info.version == __version__
                    for tool, arguments, expected in BAD_CALLS:
                        got = await session.call_tool(tool, arguments)
                        text = got.content[0].text if got.content else ""
                        if expected is None:
                            assert not got.is_error, text
                            continue
                        assert got.is_error, (tool, arguments)
                        assert "\n" not in text and "pydantic" not in text, text
                        assert expected in text, text
                        assert not text.startswith("Error executing tool"), text
                    ok = await session.call_tool(
                        "memory_add_messages", {"namespace": "t", "messages": turn(2)}
                    )
                    assert not ok.is_error  # still serving

    anyio.run(main)


def lines_of(stream) -> queue.Queue:
    """The lines of ``stream`` as they come (read on a thread, so a test can wait
    with a time limit)."""
    got: queue.Queue = queue.Queue()

    def read() -> None:
        for line in stream:
            got.put(line)

    threading.Thread(target=read, daemon=True).start()
    return got


def test_junk_lines_on_stdio_get_a_json_rpc_error(tmp_path):
    proc = subprocess.Popen(
        [*OSUMEM, "serve", "--store", str(tmp_path / "m.db"), "--encoder", "hashing:d64"],
        env=serve_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    replies = lines_of(proc.stdout)
    try:
        proc.stdin.write("this is not json\n")
        proc.stdin.write('{"jsonrpc": "2.0", "id": 3}\n')  # JSON, not a JSON-RPC message
        proc.stdin.flush()
        first = json.loads(replies.get(timeout=60))
        second = json.loads(replies.get(timeout=60))
        assert first["jsonrpc"] == "2.0" and first["id"] is None
        assert first["error"]["code"] == -32700  # parse error
        assert second["error"]["code"] == -32600  # invalid request
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        }
        proc.stdin.write(json.dumps(init) + "\n")
        proc.stdin.flush()
        answer = json.loads(replies.get(timeout=60))
        assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "osumem"
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0
