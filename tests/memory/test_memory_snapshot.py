"""Snapshots of the retriever's pool: a reopened memory answers exactly as one that was
never closed, replaying only the batches after the snapshot; anything that does not
match (old store, damaged blob, other settings, deleted namespace) falls back to a
full replay."""

from __future__ import annotations

import io
import sqlite3

import numpy as np
import pytest

from conftest import returns_soon
from osumem.bench.synthetic import SyntheticConfig, generate_episode
from osumem.memory import Memory
from osumem.memory import snapshot as snap_mod
from osumem.osu import OSUConfig, OSUPool
from osumem.osu import construct as construct_mod
from osumem.types import Step

DIM = 16
PARAMS = {"similarity_refresh": 12, "similarity_refresh_ratio": 0.1, "similarity_scope": "all"}
SLOT_ARRAYS = (
    "view_code",
    "rank",
    "first",
    "coh_raw",
    "k_size",
    "k_cost",
    "k_coh",
    "k_span",
    "row_ptr",
    "row_slots",
    "sim_slot",
    "kept",
    "live_row",
    "live_slot",
    "live_cent",
)


@pytest.fixture(autouse=True)
def small_exact_limit(monkeypatch):
    """Take the HNSW + warm-started Leiden path of the similarity view from 40 steps
    on, so small tests cross it."""
    monkeypatch.setattr(construct_mod, "EXACT_KNN_MAX", 40)


def assert_same_state(a: OSUPool, b: OSUPool) -> None:
    for name in SLOT_ARRAYS:
        np.testing.assert_array_equal(
            getattr(a.slots, name).v, getattr(b.slots, name).v, err_msg=name
        )
    assert a.slots.keys == b.slots.keys and a.slots.members == b.slots.members
    assert a.slots.last == b.slots.last
    assert a.similarity.upto == b.similarity.upto
    np.testing.assert_array_equal(
        np.asarray(a.similarity.partition if a.similarity.partition is not None else []),
        np.asarray(b.similarity.partition if b.similarity.partition is not None else []),
    )
    assert (a.members != b.members).nnz == 0
    for name in ("keys", "centroids", "costs", "spans", "sizes", "coherence"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize(
    "chunks", [[60, 1, 3, 17, 25, 2, 1, 40], [1] * 45 + [30, 30], [100, 40, 39]]
)
def test_pool_state_round_trip_then_continues_identically(chunks):
    view = generate_episode(SyntheticConfig(n_episodes=1), 1000, 0).view
    cfg = OSUConfig(
        similarity_refresh=20,
        similarity_refresh_ratio=0.0,
        max_memberships=2,
        similarity_scope="all",
    )
    live = OSUPool(cfg, seed=0)
    t = 0
    for c in chunks[:-2]:
        t = min(view.n, t + c)
        live.add(view.prefix(t))
    restored = OSUPool.from_state(view.prefix(t), cfg, 0, live.state())
    assert_same_state(live, restored)
    # further adds cross similarity refreshes (the HNSW index is rebuilt lazily)
    for c in [*chunks[-2:], 1, 9, 20, 3]:
        t = min(view.n, t + c)
        live.add(view.prefix(t))
        restored.add(view.prefix(t))
        assert_same_state(live, restored)
    assert live.similarity.knn is not None and restored.similarity.knn is not None


def test_pool_state_rejects_inconsistent_arrays():
    view = generate_episode(SyntheticConfig(n_episodes=1), 1001, 0).view
    cfg = OSUConfig()
    pool = OSUPool.build(view, cfg, seed=0)
    state = pool.state()
    with pytest.raises(ValueError):
        OSUPool.from_state(view.prefix(view.n - 1), cfg, 0, state)
    bad = dict(state, kept=state["kept"] + 10**6)
    with pytest.raises(ValueError):
        OSUPool.from_state(view, cfg, 0, bad)
    bad = dict(state, g_sizes=state["g_sizes"][:-1])
    with pytest.raises(ValueError):
        OSUPool.from_state(view, cfg, 0, bad)


def _steps(rng: np.random.Generator, k: int, start: int) -> list[Step]:
    out = []
    for i in range(k):
        ent = frozenset({f"e{rng.integers(0, 25)}"}) if rng.random() < 0.5 else frozenset()
        tool = f"t{rng.integers(0, 4)}" if rng.random() < 0.3 else ""
        out.append(
            Step(
                role="assistant",
                text=f"step {start + i}",
                cost=int(rng.integers(5, 40)),
                entities=ent,
                tool_signature=tool,
            )
        )
    return out


def _add(mems: list[Memory], rng: np.random.Generator, chunks: list[int], n: int) -> int:
    for c in chunks:
        steps = _steps(rng, c, n)
        emb = rng.standard_normal((c, DIM)).astype(np.float32)
        for m in mems:
            m.add_steps(steps, embeddings=emb)
        n += c
        if n % 3 == 0:  # the agent retrieves now and then
            q = rng.standard_normal(DIM)
            assert [_positions(m, q, 128) for m in mems] == [_positions(mems[0], q, 128)] * len(
                mems
            )
    return n


def _positions(mem: Memory, q, budget: int) -> list[int]:
    return [s.position for s in mem.retrieve(q, budget).steps]


def _answers(mem: Memory, seed: int = 7) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    qs = [rng.standard_normal(DIM) for _ in range(4)]
    return [_positions(mem, q, b) for q in qs for b in (24, 96, 256, 1024)]


class _CountAdds:
    def __init__(self, monkeypatch):
        self.calls = 0
        orig = OSUPool.add

        def add(pool, view):
            self.calls += 1
            return orig(pool, view)

        monkeypatch.setattr(OSUPool, "add", add)


PATTERNS = {
    "single steps": [1] * 120,
    "chunks across refreshes": [7, 3, 50, 1, 1, 20] * 5,
    "one big batch then singles": [150] + [1] * 30,
}


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_reopen_answers_like_the_never_closed_memory(tmp_path, monkeypatch, pattern):
    path = tmp_path / "m.db"
    rng = np.random.default_rng(len(pattern))
    control = Memory.open(None, params=PARAMS)  # never closed
    mem = Memory.open(path, params=PARAMS)
    chunks = PATTERNS[pattern]
    half = len(chunks) // 2
    n = _add([mem, control], rng, chunks[:half], 0)
    assert _answers(mem) == _answers(control)  # the retriever now covers every step
    mem.close()
    counter = _CountAdds(monkeypatch)
    with Memory.open(path, params=PARAMS) as again:
        assert again.store.snapshot("default").steps == n
        assert _answers(again) == _answers(control)
        assert counter.calls == 0  # nothing replayed
        n = _add([again, control], rng, chunks[half:], n)
        assert _answers(again) == _answers(control)
        assert counter.calls > 0
    # the second close stored the longer snapshot; a third open starts from it
    with Memory.open(path, params=PARAMS, read_only=True) as third:
        assert third.store.snapshot("default").steps == n
        calls = counter.calls
        assert _answers(third) == _answers(control)
        assert counter.calls == calls
    control.close()


def test_replays_only_the_batches_after_the_snapshot(tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    rng = np.random.default_rng(3)
    control = Memory.open(None, params=PARAMS)
    with Memory.open(path, params=PARAMS) as mem:
        n = _add([mem, control], rng, [30, 5, 1, 40], 0)
        mem.retrieve(np.ones(DIM), 64)
    with Memory.open(path, params=PARAMS) as writer:  # adds, never retrieves
        rng_tail = np.random.default_rng(4)
        for c in (3, 1, 25):
            steps = _steps(rng_tail, c, n)
            emb = rng_tail.standard_normal((c, DIM)).astype(np.float32)
            writer.add_steps(steps, embeddings=emb)
            control.add_steps(steps, embeddings=emb)
            n += c
    counter = _CountAdds(monkeypatch)
    with Memory.open(path, params=PARAMS) as mem:
        got = _answers(mem)
        assert counter.calls == 3  # one update per later batch
        assert got == _answers(control)
    control.close()


def _snapshot_rows(path):
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT ns, steps, checksum FROM snapshots").fetchall()


def _build(path, rng_seed=5) -> tuple[Memory, int]:
    rng = np.random.default_rng(rng_seed)
    control = Memory.open(None, params=PARAMS)
    with Memory.open(path, params=PARAMS) as mem:
        n = _add([mem, control], rng, [20, 1, 1, 60, 2, 30], 0)
        mem.retrieve(np.ones(DIM), 64)
    assert _snapshot_rows(path)
    return control, n


def test_old_store_without_snapshot_table_still_opens(tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    control, _ = _build(path)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE snapshots")
    counter = _CountAdds(monkeypatch)
    with Memory.open(path, params=PARAMS, read_only=True) as ro:  # cannot add the table
        assert ro.store.snapshot("default") is None
        assert _answers(ro) == _answers(control)
    assert counter.calls > 0
    with Memory.open(path, params=PARAMS) as rw:  # gets the table, and a snapshot at close
        assert _answers(rw) == _answers(control)
    assert _snapshot_rows(path)
    control.close()


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "garbage with its checksum"])
def test_damaged_snapshot_falls_back_to_replay(tmp_path, monkeypatch, damage):
    import hashlib

    path = tmp_path / "m.db"
    control, _ = _build(path)
    with sqlite3.connect(path) as conn:
        (payload,) = conn.execute("SELECT payload FROM snapshots").fetchone()
        if damage == "flip a byte":
            b = bytearray(payload)
            b[len(b) // 2] ^= 0xFF
            conn.execute("UPDATE snapshots SET payload = ?", (bytes(b),))
        elif damage == "truncate":
            conn.execute("UPDATE snapshots SET payload = ?", (payload[: len(payload) // 2],))
        else:
            junk = payload[:100] + b"\x00" * 50 + payload[150:]
            conn.execute(
                "UPDATE snapshots SET payload = ?, checksum = ?",
                (junk, hashlib.sha256(junk).hexdigest()),
            )
    counter = _CountAdds(monkeypatch)
    with Memory.open(path, params=PARAMS) as mem:
        assert _answers(mem) == _answers(control)
        assert counter.calls > 0  # replayed
    control.close()


def test_snapshot_of_other_settings_or_steps_is_ignored(tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    control, n = _build(path)
    counter = _CountAdds(monkeypatch)
    other = dict(PARAMS, knn_k=5)
    with Memory.open(path, params=other) as mem:  # another configuration: replay
        mem.retrieve(np.ones(DIM), 64)
    assert counter.calls > 0
    # the namespace deleted and written again with the same number of steps
    with Memory.open(path, params=PARAMS) as mem:
        mem.retrieve(np.ones(DIM), 64)
        mem.delete_namespace("default")
        assert mem.store.snapshot("default") is None
    rng = np.random.default_rng(11)
    fresh = Memory.open(None, params=PARAMS)
    with Memory.open(path, params=PARAMS) as mem:
        _add([mem, fresh], rng, [n // 2, n - n // 2], 0)
        mem.retrieve(np.ones(DIM), 64)
    calls = counter.calls
    with Memory.open(path, params=PARAMS) as mem:
        assert _answers(mem) == _answers(fresh)
    assert counter.calls == calls  # its own new snapshot
    # a snapshot row whose fingerprint belongs to other steps is not used
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE snapshots SET fingerprint = 'x'")
    with Memory.open(path, params=PARAMS) as mem:
        assert _answers(mem) == _answers(fresh)
    assert counter.calls > calls
    control.close()
    fresh.close()


def test_snapshots_are_written_as_the_memory_grows(tmp_path, monkeypatch):
    monkeypatch.setattr(snap_mod, "SNAPSHOT_MIN_STEPS", 50)
    path = tmp_path / "m.db"
    rng = np.random.default_rng(9)
    mem = Memory.open(path, params=PARAMS)
    seen = set()
    n = 0
    for _ in range(12):
        n = _add([mem], rng, [20], n)
        mem.retrieve(np.ones(DIM), 64)
        mem.wait_ready()  # a due snapshot is encoded in the background: stored by now
        seen.update(s for _, s, _ in _snapshot_rows(path))
    # written while open (geometrically: every 50 steps and a quarter of the last)
    assert len(seen) >= 3
    mem.close()
    assert _snapshot_rows(path)[0][1] == n


def test_payload_is_an_npz_that_numpy_reads_back_exactly():
    rng = np.random.default_rng(0)
    arrays = {
        "ints": rng.integers(-5, 5, (40, 3)),
        "floats": rng.standard_normal(17).astype(np.float32),
        "bytes": np.frombuffer(b"abc\x00def", dtype=np.uint8),
        "empty": np.zeros((0, 4), dtype=np.float64),
    }
    with np.load(io.BytesIO(snap_mod.npz_bytes(arrays)), allow_pickle=False) as npz:
        assert sorted(npz.files) == sorted(arrays)
        for name, arr in arrays.items():
            assert npz[name].dtype == arr.dtype and npz[name].shape == arr.shape
            np.testing.assert_array_equal(npz[name], arr)


def test_a_snapshot_numpy_compressed_at_its_default_level_still_restores(tmp_path, monkeypatch):
    """Snapshots written before the payload's level changed (``savez_compressed``)
    load as they did: the reopened memory replays only the batches after them."""

    def savez(arrays):
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        return buf.getvalue()

    monkeypatch.setattr(snap_mod, "npz_bytes", savez)
    path = tmp_path / "m.db"
    control, _n = _build(path)
    monkeypatch.undo()
    monkeypatch.setattr(construct_mod, "EXACT_KNN_MAX", 40)
    counter = _CountAdds(monkeypatch)
    with Memory.open(path, params=PARAMS) as mem:
        assert _answers(mem) == _answers(control)
        assert counter.calls == 0  # the snapshot covered every step: nothing replayed
    control.close()


def _held_encoding(monkeypatch):
    """Snapshot payloads wait for the returned event before they are compressed."""
    import threading

    gate = threading.Event()
    real = snap_mod.npz_bytes

    def held(arrays):
        assert gate.wait(30), "the encoding was never let go"
        return real(arrays)

    monkeypatch.setattr(snap_mod, "npz_bytes", held)
    return gate


def _returns_soon(call):
    return returns_soon(call, "the call waited for the snapshot's encoding")


def test_a_due_snapshot_is_encoded_off_the_call_that_made_it_due(tmp_path, monkeypatch):
    """The retrieve that makes a snapshot due reads the state and returns; the payload
    is compressed and hashed on a background thread and stored by a later call
    (here ``wait_ready``), and the reopened memory restores from it."""
    monkeypatch.setattr(snap_mod, "SNAPSHOT_MIN_STEPS", 50)
    gate = _held_encoding(monkeypatch)
    path = tmp_path / "m.db"
    rng = np.random.default_rng(11)
    control = Memory.open(None, params=PARAMS)
    mem = Memory.open(path, params=PARAMS)
    n = _add([mem, control], rng, [40, 30], 0)
    _returns_soon(lambda: mem.retrieve(np.ones(DIM), 64))  # 70 steps: one is due
    assert _snapshot_rows(path) == []
    n = _add([mem, control], rng, [5], n)
    _returns_soon(lambda: mem.retrieve(np.ones(DIM), 64))  # still encoding: not stored
    assert _snapshot_rows(path) == []
    gate.set()
    mem.wait_ready()
    assert [s for _, s, _ in _snapshot_rows(path)] == [70]
    counter = _CountAdds(monkeypatch)
    mem.store.close()  # no snapshot at close: the reopen must use the one stored above
    with Memory.open(path, params=PARAMS) as again:
        assert _answers(again) == _answers(control)
        assert counter.calls == 1  # the batch of 5 after the snapshot's 70 steps
    control.close()


def test_a_snapshot_encoding_whose_steps_changed_meanwhile_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(snap_mod, "SNAPSHOT_MIN_STEPS", 50)
    gate = _held_encoding(monkeypatch)
    path = tmp_path / "m.db"
    rng = np.random.default_rng(12)
    mem = Memory.open(path, params=PARAMS)
    _add([mem], rng, [40, 30], 0)
    _returns_soon(lambda: mem.retrieve(np.ones(DIM), 64))
    mem.delete("default", [3])  # the encoding read 70 steps that no longer exist
    gate.set()
    mem.wait_ready()
    assert all(s != 70 for _, s, _ in _snapshot_rows(path))
    mem.close()
