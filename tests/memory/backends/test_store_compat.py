"""A store written by an earlier release opens and answers exactly as it did then.

``data/old_store.db.gz`` was written by osumem 0.1.0 at commit 559dc48, before the
store interface was split into backends (``data/make_old_store.py``, run from that
commit, wrote it and ``data/old_store_answers.json``): four namespaces added in
several batches, held messages, log digests and retriever snapshots. Here the same
sequence of opens and retrievals runs on a copy and must give the recorded answers,
with the stored snapshots used (not replayed around)."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from osumem.memory import Memory
from osumem.memory import snapshot as snapshot_mod

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture
def old_store(tmp_path):
    path = tmp_path / "old.db"
    with gzip.open(DATA / "old_store.db.gz", "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def test_old_store_answers_as_recorded(old_store, monkeypatch):
    recorded = json.loads((DATA / "old_store_answers.json").read_text())
    restored: list[tuple[str, bool]] = []
    real = snapshot_mod.restore

    def spy(retriever, row, data, view):
        ok = real(retriever, row, data, view)
        restored.append((retriever.name, ok))
        return ok

    monkeypatch.setattr(snapshot_mod, "restore", spy)
    by_method: dict[str, list[dict]] = {}
    for entry in recorded["retrieve"]:
        by_method.setdefault(entry["method"], []).append(entry)
    for k, (method, entries) in enumerate(by_method.items()):
        with Memory.open(old_store, method=method) as mem:
            for e in entries:
                r = mem.retrieve(
                    e["query"], e["budget"], namespace=e["namespace"], before=e["before"]
                )
                d = r.to_dict()
                # fields added to each step after the recording: an old step has none
                for step in d["steps"]:
                    assert (step.pop("metadata"), step.pop("time")) == ({}, None)
                assert r.positions == e["positions"], e
                assert [s["osus"] for s in d["steps"]] == e["osus"], e
                digest = hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()
                assert digest == e["sha256"], e
            if k == 0:
                held = {
                    ns: {"steps": mem.n_steps(ns), "held": mem.held(ns)} for ns in mem.namespaces()
                }
                assert held == recorded["namespaces"]
                mem.check()
    # the first open (the method that wrote them) loaded the stored snapshots
    first = next(iter(by_method))
    assert (first, True) in restored and (first, False) not in restored


def test_digests_without_rowid_in_new_stores_and_the_rowid_table_of_older_ones(tmp_path):
    """A new store keys its log digests in a WITHOUT ROWID table (one page per add); a
    store made before, whose digests table has a rowid and a key index, skips and
    records logs the same way."""
    import sqlite3

    def layout(path: Path) -> str:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT sql FROM sqlite_master WHERE name = 'digests'").fetchone()[
                0
            ]

    outcomes = []
    for old in (False, True):
        path = tmp_path / f"{old}.db"
        Memory.open(path, encoder="hashing").close()
        if old:  # the layout of earlier releases, rows kept
            with sqlite3.connect(path) as conn:
                conn.executescript(
                    "ALTER TABLE digests RENAME TO d0;"
                    "CREATE TABLE digests (ns TEXT NOT NULL, digest TEXT NOT NULL, "
                    "end_pos INTEGER NOT NULL, PRIMARY KEY (ns, digest));"
                    "INSERT INTO digests SELECT * FROM d0; DROP TABLE d0;"
                )
        assert ("WITHOUT ROWID" in layout(path)) is not old
        with Memory.open(path, encoder="hashing") as mem:
            got = [mem.add("aisle seat", namespace="a"), mem.add("aisle seat", namespace="a")]
            got.append(mem.add_messages([{"role": "user", "content": "x"}], namespace="a"))
            got.append(mem.add_messages([{"role": "user", "content": "x"}], namespace="a"))
            got.append(mem.store.digests("a"))
            assert mem.store.integrity_problems() == []
        outcomes.append(got)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] == [] and outcomes[0][3] == [] and len(outcomes[0][4]) == 2
