"""Inline reads: an async retrieval answered in the event loop's own thread when that
needs no wait gives the reader threads' answer, and never waits for a write."""

from __future__ import annotations

import asyncio
import threading

import pytest

from osumem.errors import BudgetError, InvalidInputError
from osumem.memory import Memory
from osumem.serve.service import MemoryService
from osumem.serve.threads import ReadWriteLock
from serve_helpers import turn

ENC = "hashing:d64"


def _count_submits(svc: MemoryService) -> list[str]:
    """Record each retrieval handed to a reader thread."""
    seen: list[str] = []
    submit = svc._readers.submit

    def counted(fn, *a, **kw):
        seen.append(threading.current_thread().name)
        return submit(fn, *a, **kw)

    svc._readers.submit = counted  # type: ignore[method-assign]
    return seen


def test_inline_reads_are_off_unless_asked_for(tmp_path):
    with MemoryService(tmp_path / "a.db", encoder=ENC) as svc:
        assert svc.inline_reads is False
        svc.add_messages("ns", turn(1))
        handed = _count_submits(svc)
        asyncio.run(svc.aretrieve("reservation R1", 40, namespace="ns"))
        assert len(handed) == 1
    with MemoryService(tmp_path / "a.db", encoder=ENC, inline_reads=True) as svc:
        assert svc.inline_reads is True
    with pytest.raises(InvalidInputError, match="inline_reads"):
        MemoryService(tmp_path / "b.db", encoder=ENC, inline_reads="yes")  # type: ignore[arg-type]


def test_an_inline_read_answers_as_a_reader_thread_and_memory_do(tmp_path):
    store = tmp_path / "same.db"
    queries = ["how was R3 paid?", "passenger P2 flight", "reservation R5 voucher"]
    with MemoryService(store, encoder=ENC, inline_reads=True) as svc:
        for k in range(8):
            svc.add_messages("ns", turn(k))
        handed = _count_submits(svc)

        async def ask() -> list[dict]:
            out = []
            for q in queries:
                for method in (None, "flat"):
                    r = await svc.aretrieve(q, 60, namespace="ns", method=method, explain=True)
                    out.append(r.to_dict(explain=True))
            return out

        asyncio.run(ask())  # the first "flat" read builds that memory on the store thread
        handed.clear()
        inline = asyncio.run(ask())
        assert handed == []  # every one answered in the loop's thread
        threaded = [
            svc.retrieve(q, 60, namespace="ns", method=m, explain=True).to_dict(explain=True)
            for q in queries
            for m in (None, "flat")
        ]
        assert inline == threaded
    with Memory.open(store, encoder=ENC) as mem:
        assert inline[0]["steps"] == mem.retrieve(queries[0], 60, namespace="ns").to_dict()["steps"]


def test_inline_reads_keep_the_services_checks(tmp_path):
    with MemoryService(tmp_path / "c.db", encoder=ENC, inline_reads=True) as svc:
        svc.add_messages("ns", turn(1))
        with pytest.raises(BudgetError):
            asyncio.run(svc.aretrieve("q", 0, namespace="ns"))
        with pytest.raises(InvalidInputError, match="query"):
            asyncio.run(svc.aretrieve("  ", 10, namespace="ns"))


def test_an_inline_read_hands_over_instead_of_waiting_for_a_write(tmp_path):
    with MemoryService(tmp_path / "w.db", encoder=ENC, inline_reads=True) as svc:
        for k in range(4):
            svc.add_messages("ns", turn(k))
        want = svc.retrieve("reservation R2", 40, namespace="ns").to_dict()
        handed = _count_submits(svc)
        svc._lock.acquire_write()  # a write is under way
        released = False

        async def main() -> dict:
            task = asyncio.ensure_future(svc.aretrieve("reservation R2", 40, namespace="ns"))
            ticks = 0
            for _ in range(5):  # the loop keeps running while the read waits
                await asyncio.sleep(0.02)
                ticks += 1
            assert ticks == 5 and not task.done()
            nonlocal released
            svc._lock.release_write()
            released = True
            return (await task).to_dict()

        try:
            got = asyncio.run(main())
        finally:
            if not released:
                svc._lock.release_write()
        assert got == want
        assert len(handed) == 1  # it went to a reader thread


def test_an_inline_read_sees_another_writers_commit(tmp_path):
    store = tmp_path / "other.db"
    with MemoryService(store, encoder=ENC, inline_reads=True) as svc:
        svc.add_messages("ns", turn(1))
        assert asyncio.run(svc.aretrieve("reservation R1", 40, namespace="ns")).steps
        with Memory.open(store, encoder=ENC) as other:
            other.add_messages(turn(77), namespace="ns")
            n = other.n_steps("ns")
        got = asyncio.run(svc.aretrieve("reservation R77", 200, namespace="ns"))
        assert "R77" in got.render()  # the caches caught up first
        assert svc.n_steps("ns") == n


def test_try_acquire_read_never_waits():
    lock = ReadWriteLock()
    assert lock.try_acquire_read()
    lock.release_read()
    lock.acquire_write()
    assert not lock.try_acquire_read()
    lock.release_write()
    assert lock.try_acquire_read()
    lock.release_read()
