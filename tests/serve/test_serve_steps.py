"""Step-level management over the server: plain-text adds, metadata, filtered
retrieval, deleting and updating steps, through the HTTP routes, both clients
(:class:`MemoryClient`, :class:`AsyncMemoryClient`) and the MCP tools, with the same
answers as the in-process memory and errors in the one envelope (404 for a step the
namespace does not hold, 422 for a bad filter naming the clause)."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from osumem.memory import Memory
from serve_helpers import TEAM_TOKEN, TOKEN, Server, httpx, turn, write_tokens

pytest.importorskip("mcp")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-steps")
    srv = Server(tmp / "mem.db", write_tokens(tmp / "tokens.txt"))
    srv.store = tmp / "mem.db"  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def envelope(response, status, kind):
    assert response.status_code == status, response.text
    err = response.json()["error"]
    assert err["type"] == kind
    return err["message"]


def test_metadata_filters_deletes_and_updates_through_the_client(server):
    from osumem.serve.client import MemoryClient

    with MemoryClient(server.url, token=TOKEN) as mc:
        for k in range(6):
            mc.add_messages(turn(k), namespace="crm", metadata={"user": f"u{k % 2}", "k": k})
        added = mc.add("I prefer aisle seats", namespace="crm", metadata={"user": "u0"})
        assert len(added["step_ids"]) == 1
        got = mc.retrieve("reservation", 400, namespace="crm", filter={"user": "u1"})
        assert got.steps and {s.metadata["user"] for s in got.steps} == {"u1"}
        steps = {s.position: s for s in got.steps}
        deleted = mc.delete("crm", [min(steps)])
        assert deleted == [steps[min(steps)].step_id]
        fixed = mc.update("crm", 0, text="user: corrected request", metadata={"user": "u9"})
        assert (fixed.position, fixed.text, fixed.metadata) == (
            0,
            "user: corrected request",
            {"user": "u9"},
        )
        by_id = mc.update("crm", id=fixed.step_id, metadata={"user": "u8"})
        assert by_id.position == 0 and by_id.text == fixed.text
        every = mc.retrieve("aisle seats", 64, namespace="crm", filter={"time": {"$gte": 0}})
        assert every == mc.retrieve("aisle seats", 64, namespace="crm")  # all pass
        answer = mc.retrieve("reservation R3", 120, namespace="crm", filter={"k": {"$gte": 2}})
        with pytest.deprecated_call():
            assert mc.delete("gone-ns") == 0  # the old spelling: the namespace
    with Memory.open(server.store, read_only=True) as mem:  # the same answer in process
        want = mem.retrieve("reservation R3", 120, namespace="crm", filter={"k": {"$gte": 2}})
        assert answer.to_dict() == want.to_dict()
        assert [s.metadata for s in mem.steps("crm", positions=[0])] == [{"user": "u8"}]


def test_the_async_client_is_the_same_calls(server):
    from osumem.serve.client import AsyncMemoryClient, MemoryClient

    async def main():
        async with AsyncMemoryClient(server.url, token=TOKEN) as ac:
            assert (await ac.health())["status"] == "ok"
            await ac.add_messages(turn(1), namespace="async-ns", metadata={"a": 1})
            await ac.add("hello there", namespace="async-ns", metadata={"a": 2})
            answers = await asyncio.gather(
                *(ac.retrieve(f"turn {k}", 60, namespace="async-ns") for k in range(8))
            )
            filtered = await ac.retrieve("hello", 60, namespace="async-ns", filter={"a": 2})
            step = await ac.update("async-ns", 0, metadata={"a": 3})
            ids = await ac.delete("async-ns", ids=[step.step_id])
            return answers, filtered, step, ids, await ac.namespaces()

    answers, filtered, step, ids, names = asyncio.run(main())
    assert [s.text for s in filtered.steps] == ["user: hello there"]
    assert step.metadata == {"a": 3} and ids == [step.step_id] and "async-ns" in names
    with MemoryClient(server.url, token=TOKEN) as mc:  # the sync client, one at a time
        mc.add_messages(turn(1), namespace="async-twin", metadata={"a": 1})
        mc.add("hello there", namespace="async-twin", metadata={"a": 2})
        again = [mc.retrieve(f"turn {k}", 60, namespace="async-twin") for k in range(8)]
    assert [[s.text for s in r.steps] for r in answers] == [
        [s.text for s in r.steps] for r in again
    ]


def test_errors_are_typed_and_in_the_envelope(server):
    headers = {"authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as c:
        c.post("/v1/namespaces/err/messages", json={"messages": turn(1), "metadata": {"n": 1}})
        r = c.post("/v1/namespaces/err/steps/delete", json={"positions": [9]})
        assert "positions[0]" in envelope(r, 404, "StepNotFoundError")
        r = c.post("/v1/namespaces/err/steps/update", json={"id": 10**6, "text": "x"})
        assert "id: no step" in envelope(r, 404, "StepNotFoundError")
        r = c.post(
            "/v1/namespaces/err/retrieve", json={"query": "x", "filter": {"n": {"$near": 1}}}
        )
        assert "filter['n']: unknown operator '$near'" in envelope(r, 422, "InvalidFilterError")
        r = c.post("/v1/namespaces/err/retrieve", json={"query": "x", "filter": {"user": "a"}})
        assert "no step of namespace 'err' has metadata 'user'" in envelope(
            r, 422, "UnknownFilterKeyError"
        )
        r = c.post("/v1/namespaces/err/steps/delete", json={"positions": [0], "ids": [1]})
        assert "exactly one" in envelope(r, 422, "InvalidInputError")
        r = c.post("/v1/namespaces/err/text", json={"text": "hi", "role": "tool"})
        assert "body.role" in envelope(r, 422, "InvalidInputError")
        r = c.post("/v1/namespaces/err/messages", json={"messages": turn(2), "metadata": [1]})
        assert "body.metadata" in envelope(r, 422, "InvalidInputError")
        r = c.post("/v1/namespaces/a/steps/delete/steps/delete", json={"positions": [0]})
        assert "ends in '/steps/delete'" in envelope(r, 422, "InvalidInputError")
    with httpx.Client(
        base_url=server.url, headers={"authorization": f"Bearer {TEAM_TOKEN}"}, timeout=60
    ) as c:
        for path, body in (
            ("text", {"text": "hi"}),
            ("steps/delete", {"positions": [0]}),
            ("steps/update", {"position": 0, "text": "x"}),
        ):
            r = c.post(f"/v1/namespaces/err/{path}", json=body)
            envelope(r, 403, "Forbidden")


def test_the_mcp_tools_for_steps(server):
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main():
        headers = {"authorization": f"Bearer {TOKEN}"}
        with anyio.fail_after(120):
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:  # noqa: SIM117
                async with streamable_http_client(server.url + "/mcp", http_client=http) as s:
                    async with ClientSession(s[0], s[1]) as session:
                        await session.initialize()
                        call = session.call_tool
                        out = {}
                        out["add"] = await call(
                            "memory_add_text",
                            {"namespace": "mcp-steps", "text": "seat 12A", "metadata": {"u": 1}},
                        )
                        await call(
                            "memory_add_messages",
                            {"namespace": "mcp-steps", "messages": turn(4), "metadata": {"u": 2}},
                        )
                        out["filtered"] = await call(
                            "memory_retrieve",
                            {"query": "seat", "namespace": "mcp-steps", "filter": {"u": 2}},
                        )
                        out["update"] = await call(
                            "memory_update_step",
                            {"namespace": "mcp-steps", "position": 0, "text": "user: seat 14C"},
                        )
                        out["delete"] = await call(
                            "memory_delete_steps", {"namespace": "mcp-steps", "positions": [1]}
                        )
                        out["missing"] = await call(
                            "memory_delete_steps", {"namespace": "mcp-steps", "positions": [99]}
                        )
                        out["bad filter"] = await call(
                            "memory_retrieve",
                            {"query": "x", "namespace": "mcp-steps", "filter": {"u": {"$x": 1}}},
                        )
                        return out

    out = anyio.run(main)
    assert not out["add"].is_error
    steps = out["filtered"].structured_content["steps"]
    assert steps and {s["metadata"]["u"] for s in steps} == {2}
    assert out["update"].structured_content["text"] == "user: seat 14C"
    assert out["delete"].structured_content["steps_in_namespace"] == 2
    assert out["missing"].is_error
    assert out["missing"].content[0].text.startswith("StepNotFoundError: positions[0]:")
    assert (
        out["bad filter"]
        .content[0]
        .text.startswith("InvalidFilterError: filter['u']: unknown operator '$x'")
    )
