"""Finding damage in a Postgres store: the checks behind
:meth:`PostgresStore.integrity_problems
<osumem.memory.backends.postgres.store.PostgresStore.integrity_problems>` (Postgres
keeps its own pages sound; these check what the store's rows mean), run on one
snapshot of the database."""

from __future__ import annotations

from typing import Any

import numpy as np

from osumem.errors import StoreCorruptError
from osumem.memory.backends.codec import decode_pending, json_is
from osumem.memory.backends.postgres import schema
from osumem.memory.backends.postgres.connection import Connection


def collect_problems(c: Any, conn: Connection, problems: list[str], library_version: str) -> None:
    """Append every problem found to ``problems``: the schema and meta, positions
    0..n-1 per namespace and batch ends, embedding sizes and finite values, JSON
    columns, held messages."""
    schema.validate(c, conn.name, conn.schema, schema.tables(c, conn.schema), library_version)
    dim_text = schema.meta_rows(c, conn.name).get("dim", "0")
    if not dim_text.isdigit():
        raise StoreCorruptError(f"{conn.name}: corrupt: meta 'dim' is {dim_text!r}")
    dim = int(dim_text)
    for ns, n, lo, hi, last in c.execute(
        "SELECT s.ns, s.n, s.lo, s.hi, (SELECT MAX(end_pos) FROM batches b WHERE b.ns = s.ns) "
        "FROM (SELECT ns, COUNT(*) AS n, MIN(pos) AS lo, MAX(pos) AS hi FROM steps "
        "GROUP BY ns) s ORDER BY s.ns"
    ).fetchall():
        if lo != 0 or hi != n - 1:
            problems.append(f"namespace {ns!r}: positions {lo}..{hi} for {n} steps")
        if last != n:
            problems.append(f"namespace {ns!r}: last batch ends at {last}, {n} steps stored")
    (bad,) = c.execute(
        "SELECT COUNT(*) FROM steps WHERE vector_dims(embedding) != %s", (dim,)
    ).fetchone()
    if bad:
        problems.append(f"{bad} embedding(s) are not {dim} float32 values")
    nonfinite = json_bad = 0
    last_id = -1
    while True:  # chunked: a large store is checked in bounded memory
        chunk = (
            c.cursor(binary=True)
            .execute(
                "SELECT id, embedding, entities, arguments FROM steps "
                "WHERE id > %s AND vector_dims(embedding) = %s ORDER BY id LIMIT 4096",
                (last_id, dim),
            )
            .fetchall()
        )
        if not chunk:
            break
        last_id = chunk[-1][0]
        if dim:
            raw = np.frombuffer(b"".join(r[1] for r in chunk), dtype=">f4")
            emb = raw.reshape(len(chunk), dim + 1)[:, 1:]
            nonfinite += int((~np.isfinite(emb).all(axis=1)).sum())
        for r in chunk:
            if not json_is(r[2], list) or not json_is(r[3], dict):
                json_bad += 1
    if nonfinite:
        problems.append(f"{nonfinite} embedding(s) hold NaN or infinite values")
    if json_bad:
        problems.append(f"{json_bad} step(s) have entities or arguments that are not JSON")
    if "step_metadata" in schema.tables(c, conn.schema):
        bad_meta = sum(
            1
            for (raw,) in c.execute("SELECT metadata FROM step_metadata")
            if not json_is(raw, dict)
        )
        if bad_meta:
            problems.append(f"{bad_meta} step(s) have metadata that is not a JSON object")
    for ns, raw_messages in c.execute("SELECT ns, messages FROM pending ORDER BY ns").fetchall():
        try:
            decode_pending(raw_messages, conn.name, ns)
        except StoreCorruptError:
            problems.append(f"held messages of namespace {ns!r} are not a JSON message list")
