"""Finding damage in a SQLite store: the row-by-row checks behind
:meth:`SQLiteStore.integrity_problems
<osumem.memory.backends.sqlite.store.SQLiteStore.integrity_problems>`, reading
through the connection and the schema module only."""

from __future__ import annotations

import sqlite3

import numpy as np

from osumem.errors import StoreCorruptError
from osumem.memory.backends.codec import json_is
from osumem.memory.backends.sqlite import schema, sql
from osumem.memory.backends.sqlite.connection import Connection
from osumem.memory.backends.sqlite.rows import decode_pending
from osumem.memory.rows import STEP_TEXT_COLUMNS

_TEXT_COLUMNS = ("ns", *STEP_TEXT_COLUMNS)


def collect_problems(conn: Connection, problems: list[str], library_version: str) -> None:
    """Append every problem found to ``problems``: SQLite's ``integrity_check``, the
    schema and meta, positions 0..n-1 per namespace and batch ends, blob sizes and
    finite vectors, JSON columns, held messages. Raises on a page SQLite cannot read
    (the caller reports that)."""
    problems.extend(
        str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall() if r[0] != "ok"
    )
    schema.validate(conn, schema.tables(conn), library_version)
    dim_text = schema.meta_rows(conn).get("dim", "0")
    if not dim_text.isdigit():
        raise StoreCorruptError(f"{conn.name}: corrupt: meta 'dim' is {dim_text!r}")
    dim = int(dim_text)
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
            if not json_is(cols["entities"], list) or not json_is(cols["arguments"], dict):
                json_bad += 1
    if nonfinite:
        problems.append(f"{nonfinite} embedding(s) hold NaN or infinite values")
    if json_bad:
        problems.append(f"{json_bad} step(s) have entities or arguments that are not JSON")
    if text_bad:
        problems.append(f"{text_bad} step(s) hold text that is not valid UTF-8")
    if "step_metadata" in schema.tables(conn):
        bad_meta = sum(
            1
            for (raw,) in conn.execute("SELECT CAST(metadata AS BLOB) FROM step_metadata")
            if not json_is(bytes(raw or b"").decode("utf-8", "replace"), dict)
        )
        if bad_meta:
            problems.append(f"{bad_meta} step(s) have metadata that is not a JSON object")
        (orphans,) = conn.execute(
            "SELECT COUNT(*) FROM step_metadata WHERE id NOT IN (SELECT id FROM steps)"
        ).fetchone()
        if orphans:
            problems.append(f"{orphans} metadata row(s) belong to no step")
    for (ns,) in conn.execute("SELECT ns FROM pending").fetchall():
        try:
            (raw,) = conn.execute(sql.SELECT_PENDING, (ns,)).fetchone()
            decode_pending(raw, conn.name, ns)
        except sqlite3.Error as exc:
            if not isinstance(conn.translate(exc), StoreCorruptError):
                raise
            problems.append(f"held messages of namespace {ns!r} are not a JSON message list")
        except (StoreCorruptError, UnicodeDecodeError):
            problems.append(f"held messages of namespace {ns!r} are not a JSON message list")
