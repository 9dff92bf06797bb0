"""Telling store failures apart and finding damage: the typed error for every
``sqlite3`` error, and the row-by-row checks behind ``MemoryStore.check``."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

import numpy as np

from osumem.errors import (
    ForeignStoreError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
    StoreReadOnlyError,
)

if TYPE_CHECKING:
    from osumem.memory.store import MemoryStore

#: The text columns of a stored step (the store's schema lists its columns from these).
STEP_TEXT_COLUMNS = (
    "role",
    "text",
    "tool_action",
    "arguments",
    "tool_signature",
    "entities",
    "subgoal",
    "source",
)
_TEXT_COLUMNS = ("ns", *STEP_TEXT_COLUMNS)


def translate_error(exc: sqlite3.Error, name: str, timeout: float) -> StoreError:
    """The typed store error for an ``sqlite3`` error (``name`` names the store)."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    low = text.lower()
    if primary in (5, 6) or "database is locked" in low or "is busy" in low:
        return StoreBusyError(
            f"{name}: busy: another process held its lock for more than "
            f"{timeout:g} s ({text}); retry later"
        )
    if primary == 8 or "readonly" in low or "read-only" in low:
        return StoreReadOnlyError(f"{name}: read-only, cannot write ({text})")
    if primary in (10, 13, 14, 15, 22) or "disk i/o" in low:
        return StoreIOError(f"{name}: I/O error ({text})")
    if primary == 26 or "not a database" in low:
        return ForeignStoreError(f"{name}: not a readable SQLite database ({text})")
    if primary == 11 or "malformed" in low:
        return StoreCorruptError(f"{name}: corrupt: {text}")
    if "could not decode" in low:
        return StoreCorruptError(f"{name}: corrupt: a text value is not UTF-8 ({text})")
    if "no such table" in low or "no such column" in low:
        return StoreCorruptError(f"{name}: corrupt: schema damaged ({text})")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreCorruptError(f"{name}: corrupt: {text}")
    if isinstance(exc, sqlite3.ProgrammingError):
        return StoreError(f"{name}: {text}")
    return StoreIOError(f"{name}: SQLite error ({text})")


def collect_problems(store: MemoryStore, problems: list[str]) -> None:
    """Append every problem :meth:`MemoryStore.integrity_problems` reports to
    ``problems`` (raises on a page SQLite cannot read; the caller reports that)."""
    assert store._conn is not None
    conn = store._conn
    problems.extend(
        str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall() if r[0] != "ok"
    )
    store._validate_schema(store._tables())
    dim = store.dim
    for ns, n, lo, hi in conn.execute(
        "SELECT ns, COUNT(*), MIN(pos), MAX(pos) FROM steps GROUP BY ns"
    ).fetchall():
        if lo != 0 or hi != n - 1:
            problems.append(f"namespace {ns!r}: positions {lo}..{hi} for {n} steps")
        (last,) = conn.execute("SELECT MAX(end_pos) FROM batches WHERE ns = ?", (ns,)).fetchone()
        if last != n:
            problems.append(f"namespace {ns!r}: last batch ends at {last}, {n} steps stored")
    (bad,) = conn.execute(
        "SELECT COUNT(*) FROM steps WHERE typeof(embedding) != 'blob' OR length(embedding) != ?",
        (4 * dim,),
    ).fetchone()
    if bad:
        problems.append(f"{bad} embedding blob(s) are not {dim} float32 values")
    nonfinite = json_bad = text_bad = 0
    last_id = -1
    texts = ", ".join(f"CAST({c} AS BLOB)" for c in _TEXT_COLUMNS)
    while True:  # chunked: a large store is checked in bounded memory
        chunk = conn.execute(
            f"SELECT id, embedding, {texts} FROM steps WHERE id > ? "
            "AND typeof(embedding) = 'blob' AND length(embedding) = ? ORDER BY id LIMIT 4096",
            (last_id, 4 * dim),
        ).fetchall()
        if not chunk:
            break
        last_id = chunk[-1][0]
        if dim:
            emb = np.frombuffer(b"".join(r[1] for r in chunk), dtype="<f4").reshape(-1, dim)
            nonfinite += int((~np.isfinite(emb).all(axis=1)).sum())
        for r in chunk:
            try:
                cols = dict(
                    zip(_TEXT_COLUMNS, (bytes(b or b"").decode() for b in r[2:]), strict=True)
                )
            except UnicodeDecodeError:
                text_bad += 1
                continue
            if not _json_is(cols["entities"], list) or not _json_is(cols["arguments"], dict):
                json_bad += 1
    if nonfinite:
        problems.append(f"{nonfinite} embedding(s) hold NaN or infinite values")
    if json_bad:
        problems.append(f"{json_bad} step(s) have entities or arguments that are not JSON")
    if text_bad:
        problems.append(f"{text_bad} step(s) hold text that is not valid UTF-8")
    for (ns,) in conn.execute("SELECT ns FROM pending").fetchall():
        try:
            store.pending(ns)
        except StoreCorruptError:
            problems.append(f"held messages of namespace {ns!r} are not a JSON message list")


def _json_is(text: Any, kind: type) -> bool:
    try:
        return isinstance(json.loads(text), kind)
    except (TypeError, ValueError, RecursionError):
        return False
