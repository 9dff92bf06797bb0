"""The growable namespace buffer: the live view after many small adds equals a
reloaded one, and views handed out earlier never change under later adds."""

from __future__ import annotations

import numpy as np
import pytest
from test_memory_add_path import ANSWER, CALL

from osumem.embed import HashingEncoder
from osumem.memory import Memory, buffer


def _same(a, b) -> None:
    assert a.n == b.n
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    np.testing.assert_array_equal(a.costs, b.costs)
    for name in ("tool_actions", "tool_signatures", "subgoals", "sources", "roles", "texts"):
        assert list(getattr(a, name)) == list(getattr(b, name)), name
    assert a.entities == b.entities


def _same_as_stored(buf, stored) -> None:
    """Every column of a buffer equals the store's rows, and so does its user count."""
    mine = buf.data()
    _same(mine.view, stored.view)
    assert list(mine.step_ids) == list(stored.step_ids)
    assert list(mine.arguments) == list(stored.arguments)
    assert tuple(mine.batch_ends) == tuple(stored.batch_ends)
    assert list(mine.metadata) == list(stored.metadata)
    np.testing.assert_array_equal(mine.times, stored.times)
    np.testing.assert_array_equal(mine.updated, stored.updated)
    assert buf.users == int(np.count_nonzero(stored.view.roles == "user"))


def _loaded(path, turns: int, method: str) -> Memory:
    """A memory of ``turns`` adds of 2..3 steps (metadata on most), loaded and built."""
    mem = Memory.open(path, encoder=HashingEncoder(16), method=method)
    for k in range(turns):
        msgs = [{"role": "user", "content": f"turn {k} about R{k}"}, CALL, ANSWER][: 2 + k % 2]
        mem.add_messages(msgs, namespace="ns", metadata={"k": k} if k % 3 else None)
    mem.retrieve("R3", 50, namespace="ns")
    return mem


def test_live_view_equals_reloaded_after_growth(tmp_path):
    path = tmp_path / "m.db"
    with Memory.open(path, encoder=HashingEncoder(16), method="flat") as mem:
        mem.add_messages([{"role": "user", "content": "start"}])
        early = mem.view()
        early_copy = early.embeddings.copy(), list(early.texts)
        for k in range(150):  # past two capacity doublings (64 -> 128 -> 256)
            mem.add_messages(
                [
                    {"role": "user", "content": f"user {k}"},
                    {"role": "assistant", "content": f"reply {k} about order {k % 7}"},
                ]
            )
            if k % 37 == 0:
                mem.retrieve("order 3", 64)
        live = mem.view()
        assert live.n == 301 and mem._views.buffer("default").users == 151
        np.testing.assert_array_equal(early.embeddings, early_copy[0])
        assert list(early.texts) == early_copy[1] and early.n == 1
        answer = mem.retrieve("order 3", 64).to_dict()
    with Memory.open(path, encoder=HashingEncoder(16), method="flat") as again:
        _same(live, again.view())
        assert again.retrieve("order 3", 64).to_dict() == answer
        # subgoal segments continue from the stored user count after reopening
        again.add_messages([{"role": "user", "content": "next"}])
        assert again.view().subgoals[-1] == "default:sg152"


def test_reopen_fits_a_non_incremental_method_once(tmp_path, monkeypatch):
    """A method whose update is a fresh fit is rebuilt by one fit on reopen (the same
    state by definition), not once per stored add batch."""
    from osumem.retrieve.base import Retriever
    from osumem.retrieve.registry import create

    assert type(create("coverage")).update is Retriever.update  # a fresh fit per update
    path = tmp_path / "m.db"
    with Memory.open(path, encoder=HashingEncoder(16), method="coverage") as mem:
        for k in range(40):
            mem.add_messages([{"role": "user", "content": f"user {k} order {k % 5}"}])
        want = mem.retrieve("order 3", 32).to_dict()
    calls = []
    real = Retriever.fit
    monkeypatch.setattr(Retriever, "fit", lambda self, v: calls.append(v.n) or real(self, v))
    with Memory.open(path, encoder=HashingEncoder(16), method="coverage") as again:
        assert again.retrieve("order 3", 32).to_dict() == want
    assert calls == [40]


def test_snapshots_share_the_lists_and_keep_what_they_held():
    """A snapshot's list columns (entities, arguments, metadata) are prefixes of the
    buffer's lists, not copies; later adds do not show in an earlier snapshot, and a
    metadata update copies the list first, so the earlier snapshot keeps its values."""
    from osumem.types import ListPrefix

    with Memory.open(None, encoder=HashingEncoder(16), method="flat") as mem:
        for k in range(5):
            mem.add(f"note {k} about order {k}", namespace="n", metadata={"k": k})
        buf = mem._views.buffer("n")
        before = buf.data()
        assert isinstance(before.metadata, ListPrefix) and isinstance(before.arguments, ListPrefix)
        held = list(before.metadata), list(before.view.entities), list(before.arguments)
        mem.update("n", 0, metadata={"k": 99})
        mem.add("one more note", namespace="n")
        after = buf.data()
        assert (list(before.metadata), list(before.view.entities), list(before.arguments)) == held
        assert len(before.metadata) == 5 and len(after.metadata) == 6
        assert after.metadata[0] == '{"k": 99}' and before.metadata[0] == '{"k": 0}'
        assert after.metadata[:5][1:] == tuple(held[0][1:])  # slices are tuples
        assert before.metadata == tuple(held[0]) and after.metadata != before.metadata


def test_a_loaded_namespace_takes_its_next_adds_without_copying_its_columns(tmp_path):
    """Loading leaves a quarter of headroom: the first adds after opening a large
    namespace write into spare rows instead of copying every column (75 ms at 50k)."""
    path = tmp_path / "m.db"
    with Memory.open(path, encoder=HashingEncoder(16), method="flat") as mem:
        mem.add_messages([{"role": "user", "content": f"user {k}"} for k in range(400)])
    with Memory.open(path, encoder=HashingEncoder(16), method="flat") as mem:
        mem.view()
        buf = mem._views.buffer("default")
        emb, cap = buf._emb, buf.capacity
        assert cap == 400 + 400 // 4
        for k in range(cap - 400):
            mem.add_messages([{"role": "user", "content": f"later {k}"}])
        assert buf._emb is emb  # no copy while the headroom lasts
        mem.add_messages([{"role": "user", "content": "one more"}])
        assert buf._emb is not emb and buf.capacity >= 2 * cap
        live = mem.view()
    with Memory.open(path, encoder=HashingEncoder(16), method="flat") as again:
        _same(live, again.view())


def test_adds_written_into_the_buffer_equal_the_stored_rows(tmp_path):
    """What each add writes straight into a loaded namespace's buffer (every column:
    ids, arguments, entities, metadata, times, batch ends, the user count) equals what
    the store gives back for the same steps."""
    with Memory.open(tmp_path / "m.db", encoder=HashingEncoder(16)) as mem:
        mem.add("where is reservation R1?", namespace="a")
        mem.retrieve("order", 64, namespace="a")  # loaded: later adds go to the buffer
        for k in range(70):  # past a capacity doubling
            mem.add(f"turn {k}", namespace="a", metadata={"k": k}, time=1_700_000_000 + k)
            if k % 10 == 0:
                mem.add_messages([CALL], namespace="a")
                mem.add_messages([ANSWER], namespace="a")
                mem.add(f"reply {k}", namespace="a", role="assistant")
        mem.update("a", 3, metadata={"edited": True})
        live = mem._views.data("a")
        _same_as_stored(mem._views.buffer("a"), mem.store.load("a"))
        assert '"reservation_id"' in "".join(live.arguments) and '{"k": 69}' in live.metadata


@pytest.mark.parametrize("max_runs", [64, 0], ids=["slices", "mask"])
def test_a_delete_keeps_the_rest_of_the_cached_steps_as_the_store_holds_them(
    tmp_path, monkeypatch, max_runs
):
    """Both ways of copying the kept rows (slice by slice, through a mask)."""
    monkeypatch.setattr(buffer, "_MAX_RUNS", max_runs)
    path = tmp_path / "m.db"
    mem = _loaded(path, 12, "flat")
    before = mem._views.cached("ns")
    held_view = mem.view("ns")
    held_copy = held_view.embeddings.copy(), list(held_view.texts)
    positions = [0, 1, 7, 8, 9, mem.n_steps("ns") - 1]  # whole add batches among them
    loads = []
    real_load = mem.store.load
    monkeypatch.setattr(mem.store, "load", lambda *a, **kw: loads.append(a) or real_load(*a, **kw))
    mem.delete("ns", positions)
    kept = mem._views.cached("ns")
    assert kept is not None and kept is not before and loads == []
    _same_as_stored(kept, real_load("ns"))
    with Memory.open(path, encoder=HashingEncoder(16), method="flat") as other:
        other.add("another writer's commit", namespace="elsewhere")
    assert mem._views.refresh() and mem._views.cached("ns") is kept  # its own edit: kept
    # a view handed out before the delete still holds what it held
    assert (
        np.array_equal(held_view.embeddings, held_copy[0]) and list(held_view.texts) == held_copy[1]
    )
    mem.close()


def test_an_update_keeps_the_cached_steps_as_the_store_holds_them(tmp_path, monkeypatch):
    """A text update and a metadata update change the cached row in place of reading
    the namespace back: every column equals what the store gives back, another
    writer's commit does not make the buffer stale, and a view handed out before the
    text update still holds the old text and vector."""
    path = tmp_path / "m.db"
    mem = _loaded(path, 8, "flat")
    held_view = mem.view("ns")
    held_copy = held_view.embeddings.copy(), list(held_view.texts)
    loads = []
    real_load = mem.store.load
    monkeypatch.setattr(mem.store, "load", lambda *a, **kw: loads.append(a) or real_load(*a, **kw))
    before = mem._views.cached("ns")
    mem.update("ns", 4, text="the order R9 was moved to Friday", metadata={"new": 1})
    after_text = mem._views.cached("ns")
    mem.update("ns", 6, metadata={"edited": True})
    assert loads == [] and after_text is not before
    assert mem._views.cached("ns") is after_text  # a metadata update: in place
    _same_as_stored(after_text, real_load("ns"))
    assert after_text.data().view.texts[4] == "the order R9 was moved to Friday"
    with Memory.open(path, encoder=HashingEncoder(16), method="flat") as other:
        other.add("another writer's commit", namespace="elsewhere")
    assert mem._views.refresh() and mem._views.cached("ns") is after_text  # its own edits
    assert (
        np.array_equal(held_view.embeddings, held_copy[0]) and list(held_view.texts) == held_copy[1]
    )
    got = mem.retrieve("R9 Friday", 50, namespace="ns")
    assert 4 in [s.position for s in got.steps]
    mem.close()


@pytest.mark.parametrize("adds_after", [0, 2])
def test_another_writers_delete_drops_the_steps_from_the_cached_ones(
    tmp_path, monkeypatch, adds_after
):
    """Another writer deletes steps (then maybe adds some): this memory's cached steps
    drop the deleted ones and read only the added ones, equal to what the store holds,
    and its answers equal a fresh memory's once rebuilt."""
    path = tmp_path / "m.db"
    mem = _loaded(path, 12, "osumem")
    before = mem._views.cached("ns")
    with Memory.open(path, encoder=HashingEncoder(16), method="osumem") as other:
        other.delete("ns", [0, 1, 7, 8, 9])
        for k in range(adds_after):
            other.add(f"later turn {k} about R{k}", namespace="ns")
    loads = []
    real_load = mem.store.load
    monkeypatch.setattr(mem.store, "load", lambda *a, **kw: loads.append(kw) or real_load(*a, **kw))
    assert mem.refresh() == {"ns"}
    monkeypatch.undo()
    kept = mem._views.cached("ns")
    assert kept is not before
    assert loads == ([{"start": mem.n_steps("ns") - adds_after}] if adds_after else [])
    _same_as_stored(kept, real_load("ns"))
    mem.wait_ready()
    with Memory.open(path, encoder=HashingEncoder(16), method="osumem") as fresh:
        for q in ("R3", "turn 10", "later turn"):
            got, want = mem.retrieve(q, 64, namespace="ns"), fresh.retrieve(q, 64, namespace="ns")
            assert [s.step_id for s in got.steps] == [s.step_id for s in want.steps]
    mem.close()


def test_another_writers_change_of_times_alone_is_read_as_that_step(tmp_path, monkeypatch):
    """A store-level replace that keeps a step's content but gives it another time and
    metadata: this memory reads only that step, keeps its structure, and holds the
    new time and metadata as the store does."""
    from dataclasses import replace

    from osumem.memory.rows import stored_row

    path = tmp_path / "m.db"
    mem = _loaded(path, 6, "osumem")
    retriever = mem.retriever("ns")
    with Memory.open(path, encoder=HashingEncoder(16), method="osumem") as other:
        data = other.store.load("ns")
        row = replace(stored_row(data, 4), time=123.0, metadata_json='{"x": 1}')
        other.store.replace_steps("ns", [4], [row], data.view.embeddings[4:5])
    loads = []
    real_load = mem.store.load
    monkeypatch.setattr(mem.store, "load", lambda *a, **kw: loads.append(a) or real_load(*a, **kw))
    assert mem.refresh() == {"ns"}
    monkeypatch.undo()
    assert loads == [("ns", 4, 5)] and mem.retriever("ns") is retriever
    _same_as_stored(mem._views.cached("ns"), real_load("ns"))
    assert mem.steps("ns", positions=[4])[0].time == 123.0
    mem.close()
