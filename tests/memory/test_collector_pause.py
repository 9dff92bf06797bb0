"""The garbage collector held off while a memory reads a namespace in bulk
(``osumem.memory.collector``): reading it runs no collection, and the collector's own
setting comes back as it was, however the pauses overlap."""

from __future__ import annotations

import contextlib
import gc
import threading

import pytest

from osumem.embed import HashingEncoder
from osumem.memory import Memory, collector


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_pause_turns_collection_off_and_back_on(collector_on):
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still holds it
    assert gc.isenabled()


def test_a_collector_already_off_stays_off(collector_on):
    gc.disable()
    with collector.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_pauses_on_two_threads_end_with_the_last(collector_on):
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with collector.paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    with collector.paused():
        t.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread's block has not ended
    leave.set()
    t.join(10)
    assert gc.isenabled()


def test_an_error_inside_still_turns_it_back_on(collector_on):
    with pytest.raises(RuntimeError), collector.paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def _collections_while_reading(path) -> tuple[list[int], list[int]]:
    """The collections that start while a reopened memory reads its namespace, and
    while it reads the namespace's stored structure."""
    started: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(info["generation"])

    with Memory.open(path, encoder=HashingEncoder(16)) as mem:
        gc.collect()
        gc.callbacks.append(count)
        try:
            mem._views.buffer("ns")  # the steps
            steps = list(started)
            started.clear()
            retriever, fitted = mem._retrievers._restore("ns", mem._views.data("ns"))
        finally:
            gc.callbacks.remove(count)
        assert retriever is not None and fitted == 3000  # the structure came from the store
        assert gc.isenabled()
        assert mem.retrieve("R00010", 64, namespace="ns").steps
    return steps, started


def test_reading_a_namespace_runs_no_collection(tmp_path, collector_on, monkeypatch):
    """3,000 steps make far more than the 700 new objects that start a collection:
    without the pause the reads run several; with it, none starts inside them (the
    one right after walks what they made)."""
    path = tmp_path / "m.db"
    with Memory.open(path, encoder=HashingEncoder(16)) as mem:
        mem.add_messages(
            [{"role": "user", "content": f"move R{k:05d} for P{k % 97}"} for k in range(3000)],
            namespace="ns",
        )
        mem.retrieve("R00010", 64, namespace="ns")  # built: the close stores its snapshot
    steps, structure = _collections_while_reading(path)
    assert len(steps) <= 1 and len(structure) <= 1
    monkeypatch.setattr(collector, "paused", contextlib.nullcontext)
    steps, structure = _collections_while_reading(path)
    assert len(steps) >= 3 and len(structure) >= 3  # what the pause keeps from running
