"""One retrieve signature and one result type on the three faces of the memory:
``Memory``, ``MemoryService`` and ``MemoryClient`` all take ``retrieve(query, budget,
*, namespace, method=None)`` and return a ``Retrieved``, and spell delete
``delete_namespace``. The spellings of earlier releases keep working for one release,
each with a DeprecationWarning."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from osumem.errors import InvalidInputError, UnknownMethodError
from osumem.memory import Memory, MemoryStore, Retrieved
from osumem.memory.retrieved import OSUHandle
from osumem.serve.service import MemoryService
from serve_helpers import TOKEN, Server, turn, write_tokens

ENCODER = "hashing:d64"
QUERIES = [("reservation R3 voucher", 60), ("flight HAT007", 200), ("passenger P2", 25)]


def without_sizes(r: Retrieved) -> Retrieved:
    """``r`` as it reads back from its dict form (OSU handles carry no size)."""
    steps = tuple(
        dataclasses.replace(s, osus=tuple(dataclasses.replace(h, size=None) for h in s.osus))
        for s in r.steps
    )
    return dataclasses.replace(r, steps=steps)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("signature")
    with Memory.open(tmp / "mem.db", encoder=ENCODER) as mem:
        for k in range(12):
            mem.add_messages(turn(k), namespace="ns")
    srv = Server(tmp / "mem.db", write_tokens(tmp / "tokens.txt"))
    srv.store = tmp / "mem.db"  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def test_the_three_faces_answer_alike(server):
    from osumem.serve.client import MemoryClient

    with MemoryClient(server.url, token=TOKEN) as client:
        remote = [client.retrieve(q, b, namespace="ns") for q, b in QUERIES]
        remote_flat = client.retrieve("flight HAT007", 80, namespace="ns", method="flat")
    with Memory.open(server.store, encoder=ENCODER, read_only=True) as mem:
        local = [mem.retrieve(q, b, namespace="ns") for q, b in QUERIES]
        local_flat = mem.retrieve("flight HAT007", 80, namespace="ns", method="flat")
    assert all(isinstance(r, Retrieved) for r in remote)
    assert [without_sizes(r) for r in local] == remote
    assert without_sizes(local_flat) == remote_flat and remote_flat.method == "flat"
    assert [r.render() for r in local] == [r.render() for r in remote]
    assert any(s.osus for r in local for s in r.steps)  # the handles were compared


def test_service_answers_alike_and_method_override_equals_a_memory_of_that_method(tmp_path):
    with Memory.open(tmp_path / "mem.db", encoder=ENCODER) as mem:
        for k in range(8):
            mem.add_messages(turn(k), namespace="ns")
        own = [mem.retrieve(q, b, namespace="ns") for q, b in QUERIES]
        other = mem.retrieve("passenger P2", 90, namespace="ns", method="flat")
        with pytest.raises(UnknownMethodError):
            mem.retrieve("x", 10, namespace="ns", method="no-such-method")
        with pytest.raises(InvalidInputError, match="method"):
            mem.retrieve("x", 10, namespace="ns", method=["flat"])  # type: ignore[arg-type]
    with Memory.open(tmp_path / "mem.db", encoder=ENCODER, method="flat") as flat:
        assert flat.retrieve("passenger P2", 90, namespace="ns") == other
    with MemoryService(tmp_path / "mem.db", encoder=ENCODER) as svc:
        assert [svc.retrieve(q, b, namespace="ns") for q, b in QUERIES] == own
        assert svc.retrieve("passenger P2", 90, namespace="ns", method="flat") == other
        got = asyncio.run(svc.aretrieve("passenger P2", 90, namespace="ns", method="flat"))
        assert got == other
        assert svc.delete_namespace("ns") == 16 and svc.namespaces() == []
        assert asyncio.run(svc.adelete_namespace("ns")) == 0


def test_retrieved_reads_back_from_its_dict():
    h = OSUHandle("entity", "R1:x@y", 3, 17, 4)
    assert OSUHandle.parse(str(h)) == dataclasses.replace(h, size=None)
    with pytest.raises(InvalidInputError, match="OSU handle"):
        OSUHandle.parse("no span")
    with Memory.open(None, encoder=ENCODER) as mem:
        for k in range(6):
            mem.add_messages(turn(k))
        r = mem.retrieve("reservation R2", 80)
    back = Retrieved.from_dict({**r.to_dict(), "rendered": r.render()})
    assert back == without_sizes(r) and back.render() == r.render() and back.cost == r.cost
    with pytest.raises(InvalidInputError):
        Retrieved.from_dict({"steps": [{"position": 1}]})


def test_old_spellings_warn_and_still_work(tmp_path, server):
    from osumem.serve.client import MemoryClient

    with Memory.open(tmp_path / "mem.db", encoder=ENCODER) as mem:
        for k in range(6):
            mem.add_messages(turn(k), namespace="a")
            mem.add_messages(turn(k), namespace="b")
        want = mem.retrieve("reservation R4", 50, namespace="a")
        want_flat = mem.retrieve("reservation R4", 50, namespace="a", method="flat")
    with MemoryService(tmp_path / "mem.db", encoder=ENCODER) as svc:
        with pytest.deprecated_call():
            assert svc.retrieve("a", "reservation R4", 50) == want
        with pytest.deprecated_call():
            assert svc.retrieve("a", "reservation R4", 50, "flat") == want_flat
        with pytest.deprecated_call():
            assert asyncio.run(svc.aretrieve("a", "reservation R4", 50)) == want
        with pytest.raises(TypeError, match="keyword"):
            svc.retrieve("reservation R4", 50, "a")
        with pytest.deprecated_call():
            assert svc.delete("a") == 12
        with pytest.deprecated_call():
            assert asyncio.run(svc.adelete("b")) == 12
    with MemoryClient(server.url, token=TOKEN) as client:
        answer = client.retrieve("flight HAT003", 60, namespace="ns")
        with pytest.deprecated_call():
            assert answer["rendered"] == answer.render()
        with pytest.deprecated_call():
            assert answer.get("namespace") == "ns" and answer.get("nope", 1) == 1
        client.add_messages(turn(90), namespace="gone")
        with pytest.deprecated_call():
            assert client.delete("gone") == 2
    with pytest.deprecated_call():
        store = MemoryStore(tmp_path / "mem.db", read_only=True)
    assert store.namespaces() == [] and store.backend == "sqlite"
    store.close()
