"""A namespace whose structure an edit dropped (a delete, a text update) and that needs
a long replay to come back is rebuilt on a background thread: the retrieve right after
the edit answers at once, as plain dense search (``method == "flat"``) over the steps
as they are now, without the deleted ones; ``wait_ready`` (or a later call, once the
rebuild is done) takes the rebuilt structure, whose answers equal those of a memory
built from scratch. Off (``rebuild_in_background = False``, the server's setting) and
for short replays, the next call replays first, as before."""

from __future__ import annotations

import threading
import time

import pytest
from test_memory_edit import ENC, NS, answers, filled, scratch

from conftest import returns_soon
from osumem.memory import Memory, retrievers
from osumem.memory.retrievers import RetrieverCache

QUERY = "reservation R1 flight"
GONE = [9, 2, 30, 31]


@pytest.fixture
def short(monkeypatch):
    """The filled memory's 32 steps count as a long replay."""
    monkeypatch.setattr(retrievers, "REBUILD_BACKGROUND_STEPS", 8)


class Held:
    """Holds every background rebuild at its start until :meth:`release`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release_event = threading.Event()
        self.started = 0
        real = RetrieverCache._replay

        def replay(cache, *args, **kwargs):
            if threading.current_thread().name == "osumem-rebuild":
                self.started += 1
                assert self.release_event.wait(30), "never released"
            return real(cache, *args, **kwargs)

        monkeypatch.setattr(RetrieverCache, "_replay", replay)

    def release(self) -> None:
        self.release_event.set()


def _ids(result) -> list[int]:
    return [s.step_id for s in result.steps]


def settled(mem: Memory) -> list:
    """The answers after one retrieve and ``wait_ready`` (which takes a similarity
    refresh computed in the background at once: the same calls on both sides)."""
    mem.retrieve(QUERY, 80, namespace=NS)
    mem.wait_ready()
    return answers(mem)


def test_the_retrieve_after_a_delete_answers_at_once_and_the_rebuild_is_taken(
    tmp_path, short, monkeypatch
):
    held = Held(monkeypatch)
    mem = filled(tmp_path / "a.db", "osumem")
    answers(mem)  # built before the delete
    data = mem.store.load(NS)
    deleted = {int(data.step_ids[p]) for p in GONE}
    mem.delete(NS, GONE)
    first = returns_soon(lambda: mem.retrieve(QUERY, 80, namespace=NS))
    assert first.method == "flat" and held.started == 1
    assert not deleted & set(_ids(first))
    assert _ids(first) == _ids(mem.retrieve(QUERY, 80, namespace=NS, method="flat"))
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "flat"  # still rebuilding
    held.release()
    mem.wait_ready()
    keep = [p for p in range(data.view.n) if p not in GONE]
    assert answers(mem) == settled(scratch(tmp_path / "b.db", "osumem", data, keep))
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "osumem"
    mem.close()


def test_a_text_update_is_rebuilt_in_the_background_too(tmp_path, short, monkeypatch):
    held = Held(monkeypatch)
    mem = filled(tmp_path / "a.db", "osumem")
    answers(mem)
    data = mem.store.load(NS)
    edits = {9: "assistant: the passphrase changed to swordfish"}
    mem.update(NS, 9, text=edits[9])
    assert returns_soon(lambda: mem.retrieve(QUERY, 80, namespace=NS)).method == "flat"
    held.release()
    mem.wait_ready()
    expected = settled(scratch(tmp_path / "b.db", "osumem", data, range(data.view.n), edits))
    assert answers(mem) == expected
    mem.close()


def test_adds_and_another_delete_during_a_rebuild(tmp_path, short, monkeypatch):
    held = Held(monkeypatch)
    mem = filled(tmp_path / "a.db", "osumem")
    answers(mem)
    mem.delete(NS, [2])
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "flat"
    mem.add_messages([{"role": "user", "content": "one more turn about flight HAT9"}], namespace=NS)
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "flat"
    mem.delete(NS, [5])  # the first rebuild is stopped and dropped; another starts
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "flat"
    assert held.started == 2
    held.release()
    mem.wait_ready()
    mine = answers(mem)
    mem.close()
    with Memory.open(tmp_path / "a.db", encoder=ENC, method="osumem") as fresh:
        assert settled(fresh) == mine  # replayed from the store before answering


def test_a_later_call_takes_the_rebuild_once_it_is_done(tmp_path, short):
    mem = filled(tmp_path / "a.db", "osumem")
    answers(mem)
    mem.delete(NS, GONE)
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "flat"
    deadline = time.monotonic() + 20
    while mem.retrieve(QUERY, 80, namespace=NS).method == "flat":
        assert time.monotonic() < deadline, "the rebuild was never taken"
        time.sleep(0.01)
    mine = answers(mem)
    mem.close()
    with Memory.open(tmp_path / "a.db", encoder=ENC, method="osumem") as fresh:
        assert answers(fresh) == mine


def test_off_or_short_the_next_call_rebuilds_first(tmp_path, monkeypatch):
    held = Held(monkeypatch)
    mem = filled(tmp_path / "a.db", "osumem")  # 32 steps: a short replay
    answers(mem)
    mem.delete(NS, [2])
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "osumem"
    monkeypatch.setattr(retrievers, "REBUILD_BACKGROUND_STEPS", 8)
    mem.rebuild_in_background = False
    mem.delete(NS, [3])
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "osumem"
    assert held.started == 0
    mem.close()


def test_closing_stops_a_rebuild(tmp_path, short, monkeypatch):
    held = Held(monkeypatch)
    mem = filled(tmp_path / "a.db", "osumem")
    answers(mem)
    mem.delete(NS, GONE)
    mem.retrieve(QUERY, 80, namespace=NS)
    returns_soon(mem.close, "the close waited for the rebuild")
    held.release()
    for t in threading.enumerate():
        if t.name == "osumem-rebuild":
            t.join(10)
            assert not t.is_alive()


@pytest.mark.parametrize("inline", [False, True])
def test_the_server_answers_from_the_stand_in_and_takes_the_rebuild_on_its_store_thread(
    tmp_path, short, monkeypatch, inline
):
    from osumem.serve.service import MemoryService

    held = Held(monkeypatch)
    filled(tmp_path / "a.db", "osumem").close()
    with MemoryService(tmp_path / "a.db", encoder=ENC, inline_reads=inline) as svc:
        assert svc.memory.rebuild_in_background and not svc.memory.take_background_work
        svc.retrieve(QUERY, 80, namespace=NS)
        svc.delete(NS, [2])
        first = returns_soon(lambda: svc.retrieve(QUERY, 80, namespace=NS))
        assert first.method == "flat" and held.started == 1
        assert svc.retrieve(QUERY, 80, namespace=NS).method == "flat"
        held.release()
        deadline = time.monotonic() + 20
        while svc.retrieve(QUERY, 80, namespace=NS).method == "flat":
            assert time.monotonic() < deadline, "the rebuild was never taken"
            time.sleep(0.01)
        assert not svc.memory.rebuilt(NS)
        mine = [svc.retrieve(q, b, namespace=NS).to_dict() for q, b in ((QUERY, 24), (QUERY, 200))]
    with Memory.open(tmp_path / "a.db", encoder=ENC, method="osumem") as fresh:
        theirs = [
            fresh.retrieve(q, b, namespace=NS).to_dict() for q, b in ((QUERY, 24), (QUERY, 200))
        ]
    for a, b in zip(mine, theirs, strict=True):
        assert [s["step_id"] for s in a["steps"]] == [s["step_id"] for s in b["steps"]]


def test_many_steps_added_during_a_rebuild_are_replayed_in_the_background_too(
    tmp_path, short, monkeypatch
):
    held = Held(monkeypatch)
    mem = filled(tmp_path / "a.db", "osumem")
    answers(mem)
    mem.delete(NS, [2])
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "flat"
    for k in range(3):  # 12 steps: more than the threshold
        mem.add_messages(
            [
                {"role": "user", "content": f"turn {k}: which seat is on flight HAT{k}?"},
                {"role": "assistant", "content": f"seat {k}A on flight HAT{k}"},
                {"role": "user", "content": f"and the bags for R{k}?"},
                {"role": "assistant", "content": f"two bags on R{k}"},
            ],
            namespace=NS,
        )
    held.release()
    for t in threading.enumerate():
        if t.name == "osumem-rebuild":
            t.join(10)
    # the rebuild is taken; the 12 steps added meanwhile go on in the background
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "flat"
    mem.wait_ready()
    assert held.started == 2
    assert mem.retrieve(QUERY, 80, namespace=NS).method == "osumem"
    mine = answers(mem)
    mem.close()
    with Memory.open(tmp_path / "a.db", encoder=ENC, method="osumem") as fresh:
        assert settled(fresh) == mine


def test_an_edit_before_any_retrieve_is_rebuilt_in_the_background_too(tmp_path, short, monkeypatch):
    held = Held(monkeypatch)
    filled(tmp_path / "a.db", "osumem").close()  # a snapshot stored at the close
    mem = Memory.open(tmp_path / "a.db", encoder=ENC, method="osumem", ann_min_steps=8)
    mem.delete(NS, [2])  # the snapshot covered position 2: dropped
    first = returns_soon(lambda: mem.retrieve(QUERY, 80, namespace=NS))
    assert first.method == "flat" and held.started == 1
    stand_in = mem._retrievers._interim[NS][0]
    assert stand_in.step_index.hnsw is None  # it scans: no index built for a stand-in
    held.release()
    mem.wait_ready()
    mine = answers(mem)
    mem.close()
    with Memory.open(tmp_path / "a.db", encoder=ENC, method="osumem", ann_min_steps=8) as fresh:
        assert settled(fresh) == mine
