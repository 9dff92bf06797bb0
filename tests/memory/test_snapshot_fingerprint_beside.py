"""A large namespace's snapshot fingerprint is checked on another thread while the
state loads (``snapshot.FINGERPRINT_BESIDE_BYTES``): a matching snapshot restores as
before, one of other steps is still refused, and what loading another steps' state
raised is not raised."""

from __future__ import annotations

import sqlite3

import pytest
from test_memory_snapshot import PARAMS, _answers, _build, _CountAdds, small_exact_limit

from osumem.memory import Memory
from osumem.memory import snapshot as snap_mod

__all__ = ["small_exact_limit"]  # the module's fixture, used here too


@pytest.fixture
def beside(monkeypatch):
    """Every fingerprint checked beside the load, however small the namespace."""
    monkeypatch.setattr(snap_mod, "FINGERPRINT_BESIDE_BYTES", 0)
    threads: list[str] = []
    orig = snap_mod.BackgroundCall

    def call(fn, name):
        threads.append(name)
        return orig(fn, name)

    monkeypatch.setattr(snap_mod, "BackgroundCall", call)
    return threads


def test_a_snapshot_checked_beside_its_load_restores_as_before(tmp_path, monkeypatch, beside):
    path = tmp_path / "m.db"
    control, _ = _build(path)
    counter = _CountAdds(monkeypatch)
    with Memory.open(path, params=PARAMS) as mem:
        assert _answers(mem) == _answers(control)
    assert counter.calls == 0  # restored, nothing replayed
    assert beside == ["osumem-snapshot-fingerprint"]
    control.close()


def test_a_snapshot_of_other_steps_is_refused_beside_its_load(tmp_path, monkeypatch, beside):
    path = tmp_path / "m.db"
    control, _ = _build(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE snapshots SET fingerprint = 'x'")
    counter = _CountAdds(monkeypatch)
    with Memory.open(path, params=PARAMS) as mem:
        assert _answers(mem) == _answers(control)
    assert counter.calls > 0  # replayed from the steps
    assert beside == ["osumem-snapshot-fingerprint"]
    control.close()


def test_what_loading_other_steps_state_raises_is_not_raised(tmp_path, monkeypatch, beside):
    path = tmp_path / "m.db"
    control, _ = _build(path)
    control.close()
    with Memory.open(path, params=PARAMS) as mem:
        row = mem.store.snapshot("default")
        data = mem._views.data("default")
        view = data.view.prefix(row.steps)
        retriever = mem._retrievers.new("default")

        def boom(self, view, arrays):
            raise RuntimeError("a state that does not fit")

        monkeypatch.setattr(type(retriever), "load_state", boom)
        other = snap_mod.SnapshotRow(**{**row.__dict__, "fingerprint": "x"})
        assert snap_mod.restore(retriever, other, data, view) is False
        with pytest.raises(RuntimeError, match="does not fit"):  # these steps' own state
            snap_mod.restore(mem._retrievers.new("default"), row, data, view)
    assert len(beside) == 2


def test_a_small_namespace_is_checked_before_its_load(tmp_path, monkeypatch):
    """Below the size, no thread: the fingerprint comes first and a mismatch loads
    nothing."""
    path = tmp_path / "m.db"
    control, _ = _build(path)
    control.close()
    loads: list[int] = []
    orig = snap_mod._load

    def load(retriever, row, view):
        loads.append(view.n)
        return orig(retriever, row, view)

    monkeypatch.setattr(snap_mod, "_load", load)
    with Memory.open(path, params=PARAMS) as mem:
        row = mem.store.snapshot("default")
        data = mem._views.data("default")
        view = data.view.prefix(row.steps)
        other = snap_mod.SnapshotRow(**{**row.__dict__, "fingerprint": "x"})
        assert not snap_mod.restore(mem._retrievers.new("default"), other, data, view)
        assert loads == []
        assert snap_mod.restore(mem._retrievers.new("default"), row, data, view)
        assert loads == [row.steps]
