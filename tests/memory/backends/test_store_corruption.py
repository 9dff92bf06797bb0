"""Each way a SQLite store file can be damaged, locked or read-only gives its typed
error in the API and a one-line error with exit status 2 on the command line (never a
traceback). The damage any backend can suffer is checked through the API against
every backend in ``test_store_conformance.py``; this file holds the file-level damage
(bytes, truncation, read-only media) and the command line."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3

import numpy as np
import pytest
from click.testing import CliRunner

from osumem.cli import main
from osumem.embed import HashingEncoder
from osumem.errors import (
    ForeignStoreError,
    StoreError,
    StoreReadOnlyError,
)
from osumem.memory import Memory, open_store
from store_backends import LOG, ROW_DAMAGE, SCHEMA_DAMAGE, SQLiteBackend

ENC = HashingEncoder(16)


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


@pytest.mark.parametrize("name", sorted(SCHEMA_DAMAGE))
def test_schema_damage_is_one_line_on_the_command_line(store, name):
    """(The API's typed errors for the same damage: test_store_conformance.py.)"""
    statement, _, text = SCHEMA_DAMAGE[name]
    _sql(store, statement)
    _all_cli(store, text)


def test_a_file_that_is_not_sqlite(store):
    store.write_bytes(b"hello" * 1000)
    with pytest.raises(ForeignStoreError, match="SQLite"):
        _use(store)
    _all_cli(store, "SQLite")


@pytest.mark.parametrize("name", sorted(ROW_DAMAGE))
def test_damaged_rows_fail_check_in_one_line(store, name):
    statement, params, _, _ = ROW_DAMAGE[name]
    SQLiteBackend().execute(str(store), statement, params)
    r = _cli_one_line(["check", "--store", str(store)])
    assert "corrupt" in r.stderr


class _ro:
    def __init__(self, path):
        self.st = open_store(path, read_only=True)

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
        st = open_store(store, read_only=True)
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


def test_lock_held_is_busy_on_the_command_line(store):
    (store.parent / "log.json").write_text(json.dumps(LOG))
    with SQLiteBackend().write_lock(str(store)):
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
        open_store(store.parent / "new.db")


def test_immutable_fallback_reads_a_clean_store(store):
    """The URI path used when even the -shm file cannot be made still answers."""
    st = open_store(store, read_only=True)
    assert st.n_steps("default") == 60
    st.close()
