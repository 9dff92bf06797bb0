"""Step rows to and from SQLite: the parameters of one ``INSERT INTO steps`` and the
checked decoding of selected rows into a namespace's columns."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import StoreCorruptError
from osumem.memory.rows import NamespaceData, StepRow, namespace_data


def content_params(row: StepRow, embedding: NDArray[Any]) -> tuple[Any, ...]:
    """A step's content columns, role to embedding (``embedding``: little-endian
    float32), as :data:`~osumem.memory.backends.sqlite.sql.INSERT_STEP` and
    :data:`~osumem.memory.backends.sqlite.sql.UPDATE_STEP` take them."""
    return (
        row.role,
        row.text,
        row.tool_action,
        row.arguments_json,
        row.tool_signature,
        json.dumps(sorted(row.entities), ensure_ascii=False),
        row.subgoal,
        row.source,
        int(row.cost),
        embedding.tobytes(),
    )


def step_params(
    step_id: int,
    namespace: str,
    position: int,
    batch: int,
    row: StepRow,
    embedding: NDArray[Any],
) -> tuple[Any, ...]:
    """The parameters of :data:`~osumem.memory.backends.sqlite.sql.INSERT_STEP`."""
    return (step_id, namespace, position, batch, *content_params(row, embedding))


def metadata_params(step_id: int, row: StepRow) -> tuple[Any, ...]:
    """The parameters of the step's ``step_metadata`` row."""
    return (step_id, row.metadata_json, row.time, row.updated)


def decode_steps(
    rows: Sequence[tuple[Any, ...]],
    batch_ends: Sequence[int],
    *,
    start: int,
    dim: int,
    where: str,
) -> NamespaceData:
    """Rows of :data:`~osumem.memory.backends.sqlite.sql.SELECT_STEPS` (positions from
    ``start``) as a :class:`NamespaceData`, every row checked: no position missing,
    embeddings of ``dim`` finite float32 values, text columns text, costs positive,
    entities a JSON list of strings. ``where`` starts every message."""
    n = len(rows)
    for k, r in enumerate(rows):
        if r[1] != start + k:
            raise StoreCorruptError(f"{where}: position {start + k} is missing")
        blob = r[11]
        if not isinstance(blob, bytes) or len(blob) != 4 * dim:
            size = len(blob) if isinstance(blob, bytes | str) else type(blob).__name__
            raise StoreCorruptError(
                f"{where}: step id {r[0]} has a {size}-byte embedding, expected {4 * dim}"
            )
        for c, name in ((2, "role"), (3, "text"), (4, "tool_action"), (6, "tool_signature")):
            if not isinstance(r[c], str):
                raise StoreCorruptError(f"{where}: step id {r[0]}: {name} is not text")
        if not isinstance(r[10], int) or r[10] <= 0:
            raise StoreCorruptError(f"{where}: step id {r[0]}: cost {r[10]!r}")
    emb = (
        np.frombuffer(b"".join(r[11] for r in rows), dtype="<f4").reshape(n, dim).astype(np.float32)
        if n
        else np.zeros((0, dim), dtype=np.float32)
    )
    if n and not np.isfinite(emb).all():
        bad = int(np.flatnonzero(~np.isfinite(emb).all(axis=1))[0])
        raise StoreCorruptError(f"{where}: step id {rows[bad][0]} has a non-finite embedding")
    metadata = []
    seen: set[str] = set()  # most steps share "{}"
    for r in rows:
        raw = "{}" if r[12] is None else r[12]
        if raw not in seen:
            try:
                ok = isinstance(raw, str) and isinstance(json.loads(raw), dict)
            except ValueError:
                ok = False
            if not ok:
                raise StoreCorruptError(f"{where}: step id {r[0]}: metadata is not a JSON object")
            seen.add(raw)
        metadata.append(raw)
        for c, name in ((13, "time"), (14, "updated")):
            if r[c] is not None and not isinstance(r[c], int | float):
                raise StoreCorruptError(f"{where}: step id {r[0]}: {name} is not a number")
    entities = []
    decoded: dict[Any, frozenset[str]] = {}  # agent steps repeat few entity lists
    for r in rows:
        raw = r[7]
        got = decoded.get(raw) if isinstance(raw, str) else None
        if got is None:
            try:
                ents = json.loads(raw)
            except (TypeError, ValueError):
                ents = None
            if not isinstance(ents, list) or not all(isinstance(e, str) for e in ents):
                raise StoreCorruptError(f"{where}: step id {r[0]}: entities are not a JSON list")
            got = decoded[raw] = frozenset(ents)
        entities.append(got)
    cols = list(zip(*rows, strict=True)) if rows else [()] * 15
    return namespace_data(
        embeddings=emb,
        costs=cols[10],
        roles=cols[2],
        texts=cols[3],
        tool_actions=cols[4],
        tool_signatures=cols[6],
        entities=entities,
        subgoals=cols[8],
        sources=cols[9],
        step_ids=cols[0],
        arguments=cols[5],
        batch_ends=batch_ends,
        metadata=metadata,
        times=cols[13],
        updated=cols[14],
    )


def decode_pending(raw: Any, where: str, namespace: str) -> list[dict[str, Any]]:
    """A ``pending`` row's messages (a JSON list of message objects)."""
    try:
        held = json.loads(raw)
    except (TypeError, ValueError):
        held = None
    if not isinstance(held, list) or not all(isinstance(m, dict) for m in held):
        raise StoreCorruptError(
            f"{where}: corrupt: held messages of namespace {namespace!r} are not "
            "a JSON list of messages (discard them with Memory.discard_held)"
        )
    return held


def encode_pending(messages: Sequence[Any]) -> str:
    """Held messages as the ``pending`` row stores them."""
    return json.dumps(list(messages), ensure_ascii=False, sort_keys=True)
