"""The memory store conformance suite: what every backend of
:class:`osumem.memory.MemoryStore` must do, written once and run against each backend
of ``store_backends.BACKENDS`` (a backend proves itself by passing it).

The interface itself (positions, batches, held messages, digests, snapshots,
namespaces, transactions, read-only opens, change detection, typed failures, the
integrity check), then the memory over it: several writers and a long-lived reader,
concurrent creation, a writer killed mid-ingest, damage found at open and in rows, a
held write lock, and generated abuse that must never wedge a store."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_store_fuzz import ENC as FUZZ_ENC
from test_store_fuzz import FUZZ, op
from test_store_fuzz import _apply as apply
from test_store_fuzz import _probe as probe
from test_store_fuzz import _tally as tally

from osumem.embed import HashingEncoder
from osumem.errors import (
    IncompatibleStoreError,
    OSUMemError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreReadOnlyError,
)
from osumem.memory import SCHEMA_VERSION, Memory, MemoryStore, open_store
from osumem.memory.rows import SnapshotRow, StepRow
from store_backends import (
    LOG,
    ROW_DAMAGE,
    SCHEMA_DAMAGE,
    backend_fixture,  # noqa: F401 (a fixture: registered by the import)
    location_fixture,  # noqa: F401 (a fixture: registered by the import)
)

DIM = 16
ENC = HashingEncoder(DIM)


def row(k: int, role: str = "user", **changes) -> StepRow:
    values = {
        "role": role,
        "text": f"{role}: step {k} about order {k}",
        "tool_action": "",
        "arguments_json": "{}",
        "tool_signature": "",
        "entities": (f"order-{k}", "shared"),
        "subgoal": f"sg{k // 3}",
        "source": "src",
        "cost": 1 + k % 7,
    }
    return StepRow(**{**values, **changes})


def vectors(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# --- the interface ------------------------------------------------------------------


def test_a_new_store_is_empty_and_of_this_schema(location):
    with open_store(location) as store:
        assert isinstance(store, MemoryStore) and store.backend
        assert store.persistent and store.is_open and store.created and not store.read_only
        assert store.schema_version() == SCHEMA_VERSION
        assert store.meta()["format"] == "osumem-memory"
        assert (store.encoder_id, store.dim) == ("", 0)
        assert store.namespaces() == [] and store.step_ids() == []
        assert store.n_steps("x") == 0 and store.pending("x") == [] and store.snapshot("x") is None
        assert store.integrity_problems() == []
    assert not store.is_open
    with open_store(location) as again:
        assert not again.created


def test_append_assigns_positions_and_ids_and_loads_back_exactly(location):
    emb = vectors(7)
    with open_store(location) as store:
        a = store.append("ns", [row(k) for k in range(4)], emb[:4], encoder_id="enc:d16")
        b = store.append("ns", [row(k, "tool") for k in range(4, 7)], emb[4:], encoder_id="enc:d16")
        other = store.append("other", [row(9)], emb[:1], encoder_id="enc:d16")
        assert (store.encoder_id, store.dim) == ("enc:d16", DIM)
        ids = a + b
        assert len(set(ids + other)) == 8 and ids == sorted(ids)
        assert store.step_ids() == sorted(ids + other)
        assert store.step_ids("ns") == ids and store.step_ids("other") == other
        assert store.step_ids("nothing here") == []
        assert store.n_steps("ns") == 7 and store.count_role("ns", "tool") == 3
        assert store.count_role("ns", "user", start=2) == 2
    with open_store(location, read_only=True) as store:  # after a reopen
        data = store.load("ns")
        assert data.view.embeddings.tobytes() == emb.astype("<f4").tobytes()
        assert data.step_ids.tolist() == ids and data.batch_ends == (4, 7)
        assert list(data.view.texts) == [
            r.text for r in [*map(row, range(4)), *(row(k, "tool") for k in range(4, 7))]
        ]
        assert data.view.entities[0] == frozenset({"order-0", "shared"})
        assert data.view.costs.tolist() == [1 + k % 7 for k in range(7)]
        tail = store.load("ns", start=4)
        assert tail.view.n == 3 and tail.step_ids.tolist() == b and tail.batch_ends == (7,)
        assert store.namespaces() == ["ns", "other"]


def test_another_encoder_or_dimension_is_refused_and_changes_nothing(location):
    with open_store(location) as store:
        store.append("ns", [row(0)], vectors(1), encoder_id="enc:d16")
        h = store.content_hash()
        with pytest.raises(IncompatibleStoreError, match="made with encoder"):
            store.append("ns", [row(1)], vectors(1), encoder_id="other:d16")
        with pytest.raises(IncompatibleStoreError):
            store.append("ns", [row(1)], np.ones((1, 8), np.float32), encoder_id="enc:d16")
        assert store.content_hash() == h


def test_held_messages_digests_and_snapshots(location):
    held = [{"role": "assistant", "content": None, "tool_calls": [{"id": "h"}]}]
    snap = SnapshotRow(2, "key", "fingerprint", "checksum", b"\x00payload\xff")
    with open_store(location) as store:
        store.append("ns", [row(0), row(1)], vectors(2), encoder_id="e", pending=held, digest="d1")
        store.append("only-held", [], np.zeros((0, DIM), np.float32), encoder_id="e", pending=held)
        assert store.pending("ns") == held and store.namespaces() == ["ns", "only-held"]
        assert store.has_digest("ns", "d1") and not store.has_digest("ns", "d2")
        assert not store.has_digest("other", "d1")
        h = store.content_hash()
        assert store.save_snapshot("ns", snap)
        assert store.snapshot("ns") == snap
        assert store.content_hash() == h  # a snapshot is a cache, not content
        store.append("ns", [row(2)], vectors(1), encoder_id="e", pending=[])
        assert store.pending("ns") == []
        assert store.discard_pending("only-held") == held and store.namespaces() == ["ns"]
        assert store.discard_pending("only-held") == []


def test_delete_namespace_removes_everything_of_it_and_nothing_else(location):
    with open_store(location) as store:
        store.append(
            "gone", [row(0), row(1)], vectors(2), encoder_id="e", digest="d", pending=LOG[:2]
        )
        store.save_snapshot("gone", SnapshotRow(2, "k", "f", "c", b"p"))
        store.append("kept", [row(2)], vectors(1), encoder_id="e", digest="d")
        assert store.delete_namespace("gone") == 2 and store.delete_namespace("never") == 0
        assert store.namespaces() == ["kept"] and store.n_steps("gone") == 0
        assert store.pending("gone") == [] and store.snapshot("gone") is None
        assert not store.has_digest("gone", "d") and store.has_digest("kept", "d")
        assert store.load("gone").batch_ends == ()
        store.append("gone", [row(3)], vectors(1), encoder_id="e")  # positions start again
        assert store.load("gone").view.n == 1 and store.integrity_problems() == []


def test_transactions_roll_back_whole_and_nest_as_savepoints(location):
    class Boom(Exception):
        pass

    with open_store(location) as store:
        store.append("ns", [row(0)], vectors(1), encoder_id="e")
        h = store.content_hash()
        with pytest.raises(Boom), store.transaction():
            store.append("ns", [row(1)], vectors(1), encoder_id="e")
            assert store.in_transaction and store.n_steps("ns") == 2
            raise Boom
        assert store.content_hash() == h and not store.in_transaction
        with store.transaction():
            store.append("ns", [row(1)], vectors(1), encoder_id="e")
            with contextlib.suppress(Boom), store.transaction():
                store.append("ns", [row(2)], vectors(1), encoder_id="e")
                raise Boom
        assert store.n_steps("ns") == 2 and store.load("ns").batch_ends == (1, 2)


def test_a_joined_append_belongs_to_the_enclosing_block(location):
    """``append(joined=True)`` inside a transaction opens no savepoint of its own: it is
    rolled back with the block it was called in; outside a transaction it is an
    append like any other (its own transaction)."""

    class Boom(Exception):
        pass

    with open_store(location) as store:
        store.append("ns", [row(0)], vectors(1), encoder_id="e", joined=True)
        assert store.n_steps("ns") == 1 and not store.in_transaction
        h = store.content_hash()
        with pytest.raises(Boom), store.transaction("ns"):
            store.append("ns", [row(1)], vectors(1), encoder_id="e", joined=True)
            raise Boom
        assert store.content_hash() == h
        with store.transaction():
            with contextlib.suppress(Boom), store.transaction("ns"):
                store.append("ns", [row(1)], vectors(1), encoder_id="e", joined=True)
                raise Boom  # the nested block is the savepoint: the joined append goes
            store.append("ns", [row(2)], vectors(1), encoder_id="e", digest="d", joined=True)
        data = store.load("ns")
        assert data.view.n == 2 and data.batch_ends == (1, 2) and store.has_digest("ns", "d")
        assert list(data.view.texts) == [row(0).text, row(2).text]
        assert store.integrity_problems() == []


def test_threads_sharing_a_store_keep_their_own_transactions(location):
    """A store object shared by threads (a server's store thread and its readers): a
    thread is not inside another thread's transaction (``in_transaction`` is its own);
    its write while another thread's transaction is open is not part of it (that
    transaction's rollback keeps it) and leaves no transaction open; a snapshot save
    meanwhile neither raises nor waits for it."""

    class Boom(Exception):
        pass

    snap = SnapshotRow(1, "k", "f", "c", b"p")
    with open_store(location) as store:
        opened, outcome = threading.Event(), {}

        def other() -> None:
            try:
                with store.transaction("a"):
                    store.append("a", [row(0)], vectors(1), encoder_id="e")
                    opened.set()
                    time.sleep(1.0)  # the main thread's writes start meanwhile
                    raise Boom
            except Boom:
                outcome["rolled back"] = True

        thread = threading.Thread(target=other)
        thread.start()
        assert opened.wait(10)
        assert not store.in_transaction  # the other thread's, not this one's
        t0 = time.monotonic()
        saved = store.save_snapshot("b", snap)  # True or skipped (False), never raised
        assert time.monotonic() - t0 < 0.5  # not a wait for the other transaction
        store.append("b", [row(1)], vectors(1), encoder_id="e")
        thread.join(10)
        assert outcome == {"rolled back": True}
        assert not store.in_transaction
        assert store.n_steps("a") == 0 and store.n_steps("b") == 1
        assert (store.snapshot("b") == snap) is saved
        store.append("a", [row(2)], vectors(1), encoder_id="e")  # not wedged
        assert store.n_steps("a") == 1 and store.integrity_problems() == []


def test_read_only_opens_answer_and_refuse_writes(location):
    with open_store(location) as store:
        store.append("ns", [row(0)], vectors(1), encoder_id="e")
    with open_store(location, read_only=True) as ro:
        assert ro.read_only and ro.n_steps("ns") == 1
        for write in (
            lambda: ro.append("ns", [row(1)], vectors(1), encoder_id="e"),
            lambda: ro.delete_namespace("ns"),
            lambda: ro.discard_pending("ns"),
        ):
            with pytest.raises(StoreReadOnlyError):
                write()
        assert not ro.save_snapshot("ns", SnapshotRow(1, "k", "f", "c", b"p"))


def test_change_detection_counts_other_writers_only(location):
    with open_store(location) as a, open_store(location) as b:
        version = a.data_version()
        a.append("ns", [row(0)], vectors(1), encoder_id="e")
        assert a.data_version() == version  # its own write
        b.append("ns", [row(1)], vectors(1), encoder_id="e")
        assert a.data_version() != version  # another writer's
        assert a.n_steps("ns") == 2 and a.load("ns").batch_ends == (1, 2)


def test_a_closed_store_raises_typed(location):
    store = open_store(location)
    store.close()
    store.close()  # idempotent
    for call in (store.namespaces, lambda: store.n_steps("x"), store.content_hash):
        with pytest.raises(StoreError, match="closed"):
            call()


def test_a_failed_new_open_leaves_nothing_behind(backend, tmp_path):
    location = backend.location(tmp_path, "new")
    with pytest.raises(OSUMemError):
        Memory.open(location, encoder="no-such-encoder")
    store = open_store(location)  # created again, from nothing
    assert store.created
    store.close()


# --- the memory over it: integrity, damage, locks ------------------------------------


@pytest.fixture
def filled(backend, location):
    """A store with 60 steps in ``default`` and 4 in ``ns2`` (16-d hashing vectors)."""
    with Memory.open(location, encoder=ENC, method="flat") as m:
        for k in range(30):
            m.add_messages([{"role": "user", "content": f"turn {k} about order {k}"}, *LOG[3:]])
        m.add_messages(LOG, namespace="ns2")
    return location


def _use(location: str) -> None:
    """Open, read every namespace, retrieve, add: the whole API surface."""
    with Memory.open(location, encoder=ENC, method="flat", timeout=0.2) as m:
        for ns in m.namespaces():
            m.view(ns)
            m.retrieve("order", 64, namespace=ns)
        m.add_messages([{"role": "user", "content": "more"}])


def test_integrity_check_finds_a_gap(backend, filled):
    with Memory.open(filled, encoder=ENC) as mem:
        mem.check()
    backend.execute(filled, "DELETE FROM steps WHERE ns = 'ns2' AND pos = 0")
    with open_store(filled, read_only=True) as store, pytest.raises(StoreCorruptError) as info:
        store.check()
    assert "namespace 'ns2': positions 1..2 for 2 steps" in str(info.value)
    assert "last batch ends at 3, 2 steps stored" in str(info.value)


@pytest.mark.parametrize("name", sorted(SCHEMA_DAMAGE))
def test_schema_damage_is_found_at_open(backend, filled, name):
    statement, error, text = SCHEMA_DAMAGE[name]
    backend.execute(filled, statement)
    with pytest.raises(error, match=text):
        _use(filled)


@pytest.mark.parametrize("name", sorted(ROW_DAMAGE))
def test_damaged_rows_are_typed_and_checked(backend, filled, name):
    statement, params, text, needs = ROW_DAMAGE[name]
    if needs is not None and needs not in backend.capabilities:
        # Postgres: a UTF8 database stores only valid text, and pgvector refuses NaN
        # and infinite values, so neither damage can be written, and reading needs no
        # check for it
        pytest.skip(f"{backend.name} cannot hold this damage ({needs})")
    statement, params = backend.damage.get(name, (statement, params))
    backend.execute(filled, statement, params)
    with pytest.raises(StoreCorruptError, match=text):
        _use(filled)
    with (
        open_store(filled, read_only=True) as store,
        pytest.raises(StoreCorruptError, match="corrupt"),
    ):
        store.check()


def test_a_held_write_lock_is_busy_for_writers_only(backend, filled):
    with (
        backend.write_lock(filled),
        Memory.open(filled, encoder=ENC, method="flat", timeout=0.1) as m,
    ):
        assert m.retrieve("order", 64).steps  # readers are not blocked
        h = m.store.content_hash()
        with pytest.raises(StoreBusyError, match="busy"):
            m.add_messages([{"role": "user", "content": "x"}])
        assert m.store.content_hash() == h


CREATOR = (
    "import sys; from osumem.memory import Memory\n"
    "from osumem.embed import HashingEncoder\n"
    "m = Memory.open(sys.argv[1], encoder=HashingEncoder(16), method='flat')\n"
    "m.add_messages([{'role': 'user', 'content': 'hi ' + sys.argv[2]}]); m.close()\n"
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONUNBUFFERED": "1"}


def test_concurrent_creation_of_one_store(backend, tmp_path):
    location = backend.location(tmp_path, "race")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CREATOR, location, str(k)], env=_env(), stderr=subprocess.PIPE
        )
        for k in range(3)
    ]
    errs = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    with Memory.open(location, encoder=ENC, method="flat") as m:
        assert m.n_steps() == 3
        m.check()


# --- several writers, a long-lived reader ---------------------------------------------

WRITER = textwrap.dedent(
    """
    import json, sys
    from osumem.embed import HashingEncoder
    from osumem.errors import InvalidInputError
    from osumem.memory import Memory

    path, w, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    def call(cid):
        return {"role": "assistant", "content": None, "tool_calls": [{"id": cid,
                "function": {"name": "lookup", "arguments": json.dumps({"key": cid})}}]}
    with Memory.open(path, encoder=HashingEncoder(32), method=sys.argv[4]) as mem:
        for j in range(n):
            tag = f"{w}-{j}"
            if j % 3 == 0:  # a held call, answered by a second add
                ids = mem.add_messages([{"role": "user", "content": f"user {tag}"},
                                        call(f"c{tag}")], namespace="shared")
                print(json.dumps({"tag": tag, "ids": ids, "call": f"c{tag}"}), flush=True)
                try:
                    ids = mem.add_messages([{"role": "tool", "tool_call_id": f"c{tag}",
                                             "content": f"result {tag}"}], namespace="shared")
                    print(json.dumps({"tag": tag + "r", "ids": ids}), flush=True)
                except InvalidInputError:  # another writer stepped the call first
                    print(json.dumps({"tag": tag + "r", "rejected": True}), flush=True)
            else:
                ids = mem.add_messages([{"role": "user", "content": f"user {tag}"},
                                        call(f"c{tag}"),
                                        {"role": "tool", "tool_call_id": f"c{tag}",
                                         "content": f"result {tag}"}], namespace="shared")
                print(json.dumps({"tag": tag, "ids": ids, "call": f"c{tag}"}), flush=True)
    """
)


def _answers(mem: Memory) -> list:
    return [
        mem.retrieve(q, 48, namespace="shared").to_dict()
        for q in ("user w0-3", "lookup cw1-7", "result w2-11", "key")
    ]


def test_three_writers_and_a_long_lived_reader(location):
    """Every acknowledged message is stored once, in its writer's order, with the ids
    the writer was given; the reader's answers equal a fresh open's."""
    method = "osumem"
    with Memory.open(location, encoder=HashingEncoder(32), method=method) as m:
        m.add_messages([{"role": "user", "content": "start"}], namespace="shared")
    n = 24
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, location, f"w{k}", str(n), method],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            text=True,
        )
        for k in range(3)
    ]
    reader = Memory.open(location, encoder=HashingEncoder(32), method=method)
    seen = []
    while any(p.poll() is None for p in procs):
        r = reader.retrieve("user result", 64, namespace="shared")
        n_now = reader.n_steps("shared")
        assert all(s.position < n_now for s in r.steps)
        v = reader.view("shared")
        assert v.n >= (seen[-1] if seen else 0)
        for s in r.steps:  # a position always points at the step it names
            assert v.texts[s.position] == s.text
        seen.append(v.n)
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    acks = [json.loads(line) for out, _ in outs for line in out.splitlines()]
    with Memory.open(location, encoder=HashingEncoder(32), method=method) as fresh:
        fresh.check()
        view = fresh.view("shared")
        assert reader.view("shared").n == view.n
        assert _answers(reader) == _answers(fresh)
        ids = fresh.store.step_ids()
        texts = list(view.texts)
        id_of = {int(i): p for p, i in enumerate(fresh.store.load("shared").step_ids)}
        held = json.dumps(fresh.held("shared"))
    assert len(ids) == len(set(ids)) == view.n
    acked_ids = [i for a in acks for i in a.get("ids", [])]
    assert len(acked_ids) == len(set(acked_ids)) == view.n - 1  # + the "start" step
    for a in acks:
        for i in a.get("ids", []):
            assert i in id_of
        tag = a["tag"].rstrip("r")
        if "call" in a:  # an acknowledged call is a step or still held, exactly once
            hits = sum(t.startswith(f'call: lookup({{"key":"{a["call"]}"}})') for t in texts)
            assert hits + held.count(f'"id": "{a["call"]}"') == 1, a
        if a.get("ids") and not a["tag"].endswith("r"):  # its user message is one of its steps
            stepped = [texts[id_of[i]] for i in a["ids"]]
            assert f"user: user {tag}" in stepped, (a, stepped)
            positions = [id_of[i] for i in a["ids"]]
            assert positions == list(range(positions[0], positions[0] + len(positions)))
    for k in range(3):  # each writer's adds are stored in its order
        order = [texts.index(f"user: user w{k}-{j}") for j in range(n)]
        assert order == sorted(order)
    reader.close()


# --- a writer killed mid-ingest --------------------------------------------------------

KILLED = textwrap.dedent(
    """
    import json, sys
    from osumem.embed import HashingEncoder
    from osumem.memory import Memory

    path, start = sys.argv[1], int(sys.argv[2])
    with Memory.open(path, encoder=HashingEncoder(32), method="flat") as mem:
        for k in range(start, start + 100_000):
            msgs = [
                {"role": "user", "content": f"turn {k}: check reservation R{k}"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{k}",
                  "function": {"name": "get_reservation",
                               "arguments": json.dumps({"reservation_id": f"R{k}"})}}]},
                {"role": "tool", "tool_call_id": f"c{k}", "content": f"R{k}: flight HAT{k}"},
            ]
            ids = mem.add_messages(msgs, namespace="crash")
            print(json.dumps({"k": k, "ids": ids}), flush=True)
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_sigkill_mid_ingest_keeps_every_acknowledged_step(location):
    """A writer killed with SIGKILL in the middle of a long ingest leaves a store that
    opens, passes its integrity check and holds every acknowledged step, whole."""
    acked: dict[int, list[int]] = {}
    start = 0
    for kill_after in (40, 7, 25):  # three writers, each killed mid-stream
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED, location, str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        try:
            assert proc.stdout is not None
            for _ in range(kill_after):
                line = proc.stdout.readline()
                assert line, proc.stderr.read() if proc.stderr else "writer ended early"
                ack = json.loads(line)
                acked[ack["k"]] = ack["ids"]
            os.kill(proc.pid, signal.SIGKILL)  # the writer is still adding
        finally:
            proc.kill()
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL

        with Memory.open(location, method="flat") as mem:
            mem.check()  # storage pages, positions, batches, blob sizes
            stored = set(mem.store.step_ids())
            view = mem.view("crash")
        assert all(set(ids) <= stored for ids in acked.values())
        # no half-written add: the steps come in whole user + tool-call pairs
        assert view.n % 2 == 0 and view.n >= 2 * len(acked)
        texts = list(view.texts)
        for k in acked:
            i = texts.index(f"user: turn {k}: check reservation R{k}")
            assert texts[i + 1] == (
                f'call: get_reservation({{"reservation_id":"R{k}"}})\nresult: R{k}: flight HAT{k}'
            )
        start = max(acked) + 1_000  # the next writer appends further on
        # the killed writer may have committed adds it never got to acknowledge
        assert len(stored) == view.n


# --- generated abuse ----------------------------------------------------------------------


@FUZZ
@given(actions=st.lists(op, min_size=1, max_size=6))
def test_generated_abuse_never_wedges_a_store(backend, actions):
    """Generated messages, steps and queries against a store of this backend: every
    input is accepted or raises a typed error, a rejected one changes nothing, and a
    valid add and a retrieve keep working after each (the generators and the probe are
    ``test_store_fuzz``'s)."""
    with tempfile.TemporaryDirectory() as tmp:
        location = backend.location(Path(tmp))
        with Memory.open(location, encoder=FUZZ_ENC, method="osumem", max_text_chars=600) as mem:
            mem.add_messages([{"role": "user", "content": "seed: order 42 shipped"}])
            for action in actions:
                tally(action[0])
                before = mem.store.content_hash()
                try:
                    apply(mem, action)
                except OSUMemError:
                    assert mem.store.content_hash() == before, action
                probe(mem)
            mem.check()


def test_held_messages_keep_their_sources(location):
    held = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "b"}]},
    ]
    none = np.zeros((0, DIM), np.float32)
    with open_store(location) as store:
        assert store.pending_with_sources("ns") == ([], [])
        store.append("ns", [], none, encoder_id="e", pending=held, pending_sources=["x", "y"])
        assert store.pending_with_sources("ns") == (held, ["x", "y"])
        store.append("ns", [], none, encoder_id="e", pending=held[:1])  # sources unknown
        assert store.pending_with_sources("ns") == (held[:1], [None])
        store.append("ns", [], none, encoder_id="e", pending=held, pending_sources=["x", "y"])
        h = store.content_hash()
        store.append("other", [row(0)], vectors(1), encoder_id="e")
        assert store.pending_with_sources("ns") == (held, ["x", "y"])
        assert store.content_hash() != h
        assert store.discard_pending("ns") == held and store.pending_with_sources("ns") == ([], [])
        store.append("ns", [], none, encoder_id="e", pending=held, pending_sources=["x", "y"])
        store.delete_namespace("ns")
        assert store.pending_with_sources("ns") == ([], []) and store.integrity_problems() == []


def test_the_add_context_is_the_three_reads_in_one(location):
    """``add_context`` (one statement) answers what ``has_digest``,
    ``pending_with_sources`` and ``n_steps`` answer, in every state an add meets."""
    held = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "b"}]},
    ]
    none = np.zeros((0, DIM), np.float32)

    def separate(store: MemoryStore, ns: str, digest: str | None) -> tuple:
        logged = digest is not None and store.has_digest(ns, digest)
        return (logged, *store.pending_with_sources(ns), store.n_steps(ns))

    with open_store(location) as store:
        states = []
        states.append(store.add_context("ns", "d1"))  # nothing stored
        store.append("ns", [row(0), row(1)], vectors(2), encoder_id="e", digest="d1")
        store.append("ns", [], none, encoder_id="e", pending=held, pending_sources=["x", "y"])
        for ns in ("ns", "other"):
            for digest in ("d1", "d2", None):
                got = store.add_context(ns, digest)
                assert (got.logged, got.held, got.held_sources, got.n_steps) == separate(
                    store, ns, digest
                )
                assert got.data_version == store.data_version()
                states.append(got)
        store.append("ns", [row(2)], vectors(1), encoder_id="e", pending=held[:1])  # no sources
        got = store.add_context("ns", "d1")
        assert (got.logged, got.held, got.held_sources, got.n_steps) == separate(store, "ns", "d1")
        assert (got.logged, got.held, got.held_sources, got.n_steps) == (True, held[:1], [None], 3)
        with store.transaction("ns"):  # inside a write transaction too
            got = store.add_context("ns", "d2")
            assert (got.logged, got.n_steps) == (False, 3)
        own = store.add_context("ns", None).data_version
        store.append("y", [row(4)], vectors(1), encoder_id="e")
        assert store.add_context("ns", None).data_version == own  # its own write
        with open_store(location) as other:  # another writer's commit moves it
            other.append("x", [row(5)], vectors(1), encoder_id="e")
        moved = store.add_context("ns", None).data_version
        assert moved != own and moved == store.data_version()
    assert (states[0].logged, states[0].held, states[0].n_steps) == (False, [], 0)
    assert (states[1].logged, states[1].held, states[1].held_sources) == (True, held, ["x", "y"])
