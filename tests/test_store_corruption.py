"""Each way a store file can be damaged, locked or read-only gives its typed error in
the API and a one-line error with exit status 2 on the command line (never a
traceback)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from osumem.cli import main
from osumem.embed import HashingEncoder
from osumem.errors import (
    ForeignStoreError,
    NewerSchemaError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreReadOnlyError,
)
from osumem.memory import Memory, MemoryStore

ENC = HashingEncoder(16)
LOG = [
    {"role": "user", "content": "cancel reservation ABC123"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "function": {"name": "cancel", "arguments": '{"rid": "ABC123"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "cancelled"},
    {"role": "assistant", "content": "Done: ABC123 is cancelled."},
]


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "mem.db"
    with Memory.open(path, encoder=ENC, method="flat") as m:
        for k in range(30):
            m.add_messages([{"role": "user", "content": f"turn {k} about order {k}"}, *LOG[3:]])
        m.add_messages(LOG, namespace="ns2")
    return path


def _sql(path, *statements):
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()


def _use(path):
    """Open, read every namespace, retrieve, add: the whole API surface."""
    with Memory.open(path, encoder=ENC, method="flat", timeout=0.2) as m:
        for ns in m.namespaces():
            m.view(ns)
            m.retrieve("order", 64, namespace=ns)
        m.add_messages([{"role": "user", "content": "more"}])


def _cli_one_line(args, code=2):
    r = CliRunner().invoke(main, args)
    assert r.exit_code == code, (r.output, r.exception)
    if code == 2:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("osumem: error:"), r.stderr
        assert "Traceback" not in r.output
    return r


def _all_cli(path, match):
    for args in (
        ["check", "--store", str(path)],
        ["query", "order", "--store", str(path), "--method", "flat"],
        ["ingest", str(path.parent / "log.json"), "--store", str(path), "--busy-timeout", "0.2"],
    ):
        (path.parent / "log.json").write_text(json.dumps(LOG))
        r = _cli_one_line(args)
        assert match in r.stderr, (args, r.stderr)


CASES = {
    "dropped table": (lambda p: _sql(p, "DROP TABLE batches"), StoreCorruptError, "missing"),
    "renamed table": (
        lambda p: _sql(p, "ALTER TABLE steps RENAME TO steps_old"),
        StoreCorruptError,
        "missing",
    ),
    "dropped meta": (lambda p: _sql(p, "DROP TABLE meta"), StoreCorruptError, "meta"),
    "bad meta dim": (
        lambda p: _sql(p, "UPDATE meta SET value='abc' WHERE key='dim'"),
        StoreCorruptError,
        "dim",
    ),
    "missing meta row": (
        lambda p: _sql(p, "DELETE FROM meta WHERE key='model_id'"),
        StoreCorruptError,
        "model_id",
    ),
    "newer schema": (
        lambda p: _sql(p, "UPDATE meta SET value='7' WHERE key='schema_version'"),
        NewerSchemaError,
        "schema version 7",
    ),
    "foreign format": (
        lambda p: _sql(p, "UPDATE meta SET value='other' WHERE key='format'"),
        ForeignStoreError,
        "not an osumem memory store",
    ),
    "not sqlite": (lambda p: p.write_bytes(b"hello" * 1000), ForeignStoreError, "SQLite"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_damage_found_at_open(store, name):
    damage, error, text = CASES[name]
    damage(store)
    with pytest.raises(error, match=text):
        _use(store)
    _all_cli(store, text)


ROW_CASES = {
    "non-JSON pending": (
        "INSERT INTO pending (ns, messages) VALUES ('default', '{not json')",
        "held messages",
    ),
    "short blob": ("UPDATE steps SET embedding = x'00000000' WHERE id = 3", "embedding"),
    "NaN vector": (None, "non-finite"),
    "bad entities": ("UPDATE steps SET entities = 'nope' WHERE id = 2", "entities"),
    "invalid UTF-8 text": ("UPDATE steps SET text = CAST(x'c328ff' AS TEXT) WHERE id = 2", "UTF-8"),
}


@pytest.mark.parametrize("name", sorted(ROW_CASES))
def test_damaged_rows_are_typed_and_checked(store, name):
    statement, text = ROW_CASES[name]
    if statement is None:
        nan = struct.pack("<16f", *([float("nan")] * 16))
        con = sqlite3.connect(store)
        con.execute("UPDATE steps SET embedding = ? WHERE id = 5", (nan,))
        con.commit()
        con.close()
    else:
        _sql(store, statement)
    with pytest.raises(StoreCorruptError, match=text):
        _use(store)
    with _ro(store) as st, pytest.raises(StoreCorruptError, match="corrupt"):
        st.check()
    r = _cli_one_line(["check", "--store", str(store)])
    assert "corrupt" in r.stderr


class _ro:
    def __init__(self, path):
        self.st = MemoryStore(path, read_only=True)

    def __enter__(self):
        return self.st

    def __exit__(self, *a):
        self.st.close()


def test_truncated_file(store):
    size = store.stat().st_size
    with open(store, "r+b") as fh:
        fh.truncate(size // 3)
    with pytest.raises(StoreError):
        _use(store)
    with pytest.raises(StoreError):
        st = MemoryStore(store, read_only=True)
        try:
            st.check()
        finally:
            st.close()
    _cli_one_line(["check", "--store", str(store)])


@pytest.mark.parametrize("seed", range(6))
def test_byte_flips_never_escape_untyped(store, seed):
    """Flip random bytes; the API and `osumem check` either work or raise a StoreError
    (or, for damage the format cannot see, still answer)."""
    rng = np.random.default_rng(seed)
    data = bytearray(store.read_bytes())
    lo = 0 if seed == 0 else 100  # seed 0 also hits the header
    for pos in rng.integers(lo, len(data), size=8):
        data[pos] ^= 0xFF
    store.write_bytes(bytes(data))
    with contextlib.suppress(StoreError):
        _use(store)
    r = CliRunner().invoke(main, ["check", "--store", str(store)])
    assert r.exit_code in (0, 2) and "Traceback" not in r.output
    if r.exit_code == 2:
        assert len(r.stderr.strip().splitlines()) == 1


def test_lock_held_is_busy(store):
    con = sqlite3.connect(store, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    try:
        with Memory.open(store, encoder=ENC, method="flat", timeout=0.1) as m:
            assert m.retrieve("order", 64).steps  # readers are not blocked (WAL)
            h = m.store.content_hash()
            with pytest.raises(StoreBusyError, match="busy"):
                m.add_messages([{"role": "user", "content": "x"}])
            assert m.store.content_hash() == h
        (store.parent / "log.json").write_text(json.dumps(LOG))
        r = _cli_one_line(
            [
                "ingest",
                str(store.parent / "log.json"),
                "--store",
                str(store),
                "--busy-timeout",
                "0.1",
            ]
        )
        assert "busy" in r.stderr
    finally:
        con.execute("ROLLBACK")
        con.close()


def test_read_only_medium(store, monkeypatch):
    """A file whose folder cannot be written (a read-only mount) opens for queries."""
    real = os.access
    folder = str(store.parent)
    monkeypatch.setattr(
        os,
        "access",
        lambda p, mode, *a, **k: (
            False if str(p).startswith(folder) and mode == os.W_OK else real(p, mode, *a, **k)
        ),
    )
    with Memory.open(store, encoder=ENC, method="flat") as m:
        assert m.store.read_only and m.retrieve("order 3", 64).steps
        with pytest.raises(StoreReadOnlyError):
            m.add_messages([{"role": "user", "content": "x"}])
    r = _cli_one_line(["query", "order 3", "--store", str(store), "--method", "flat"], code=0)
    assert "order 3" in r.stdout
    _cli_one_line(["check", "--store", str(store)], code=0)
    (store.parent / "log.json").write_text(json.dumps(LOG))
    r = _cli_one_line(["ingest", str(store.parent / "log.json"), "--store", str(store)])
    assert "read-only" in r.stderr
    with pytest.raises(StoreReadOnlyError, match="read-only folder"):
        MemoryStore(store.parent / "new.db")


def test_immutable_fallback_reads_a_clean_store(store):
    """The URI path used when even the -shm file cannot be made still answers."""
    st = MemoryStore(store, read_only=True)
    assert st.n_steps("default") == 60
    st.close()


def test_concurrent_creation_of_one_store(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; from osumem.memory import Memory\n"
        "from osumem.embed import HashingEncoder\n"
        "m = Memory.open(sys.argv[1], encoder=HashingEncoder(16), method='flat')\n"
        "m.add_messages([{'role': 'user', 'content': 'hi ' + sys.argv[2]}]); m.close()\n"
    )
    path = tmp_path / "race.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(path), str(k)], env=env, stderr=subprocess.PIPE
        )
        for k in range(3)
    ]
    errs = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    with Memory.open(path, encoder=ENC, method="flat") as m:
        assert m.n_steps() == 3
        m.check()
