"""What every store backend encodes and checks the same way: the step columns a row
carries, the checked decoding of selected step rows into a namespace's columns, held
messages and their sources, snapshot rows, the meta checks and the named migrations
(each backend applies them in its own SQL dialect)."""

from __future__ import annotations

import json
import json.scanner
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from osumem.errors import ForeignStoreError, NewerSchemaError, StoreCorruptError
from osumem.memory.backends.base import SCHEMA_VERSION, STORE_FORMAT
from osumem.memory.rows import (
    NamespaceData,
    SnapshotRow,
    StepRow,
    matrix_with_room,
    namespace_data,
)


def step_columns(row: StepRow) -> tuple[Any, ...]:
    """A step's content columns before its embedding, role to cost, in table order
    (entities as a sorted JSON list)."""
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
    )


def decode_steps(
    rows: Sequence[tuple[Any, ...]],
    batch_ends: Sequence[int],
    *,
    start: int,
    dim: int,
    where: str,
    embeddings: NDArray[np.float32] | None = None,
) -> NamespaceData:
    """Rows of :data:`~osumem.memory.backends.sqlite.sql.SELECT_STEPS` (positions from
    ``start``; id, pos, the content columns, embedding, metadata, time, updated) as a
    :class:`NamespaceData`, every row checked: no position missing, embeddings of
    ``dim`` finite float32 values, text columns text, costs positive, entities a JSON
    list of strings, metadata a JSON object, times numbers. ``where`` starts every
    message. A backend that decoded the embedding column itself passes the matrix as
    ``embeddings`` (checked for finite values here; the rows' embedding column is then
    not read).

    The checks run column by column (the types, sizes and distinct values of a column
    at once); a column that fails sends the rows through :func:`_first_bad_row`, which
    names the first bad row as a row-by-row check does."""
    n = len(rows)
    cols: list[tuple[Any, ...]] = list(zip(*rows, strict=True)) if rows else [()] * 15
    if not _rows_sound(cols, n, start, dim, embeddings is None):
        _first_bad_row(rows, start, dim, where, embeddings is None)
    if embeddings is not None:
        emb = embeddings.astype(np.float32, copy=False).reshape(n, dim)
    elif n:
        # one copy: a bytearray's join is writable memory numpy takes as it is
        emb = np.frombuffer(bytearray().join(cols[11]), dtype="<f4").reshape(n, dim)
        emb = emb.astype(np.float32, copy=False)
    else:
        emb = np.zeros((0, dim), dtype=np.float32)
    if n and not _all_finite(emb):
        bad = int(np.flatnonzero(~np.isfinite(emb).all(axis=1))[0])
        raise StoreCorruptError(f"{where}: step id {rows[bad][0]} has a non-finite embedding")
    metadata = cols[12]
    if None in metadata:  # a step stored before the metadata table has none
        metadata = tuple("{}" if m is None else m for m in metadata)
    bad_metadata = not all(_is_json_object(m) for m in set(metadata))
    if bad_metadata or not all(set(map(type, cols[c])) <= _TIME_TYPES for c in (13, 14)):
        _first_bad_metadata(rows, metadata, where)
    # agent steps repeat few entity lists: each distinct one decoded once
    decoded = {raw: _entities(raw) for raw in set(cols[7])}
    if None in decoded.values():
        bad = next(k for k, raw in enumerate(cols[7]) if decoded[raw] is None)
        raise StoreCorruptError(f"{where}: step id {rows[bad][0]}: entities are not a JSON list")
    entities = cast(list[frozenset[str]], list(map(decoded.__getitem__, cols[7])))
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


#: Rows a bulk read (:func:`read_step_rows`) takes from its cursor at a time.
READ_CHUNK = 4096


def read_step_rows(
    chunks: Iterator[Sequence[tuple[Any, ...]]], expected: int, dim: int
) -> tuple[list[tuple[Any, ...]], NDArray[np.float32]] | None:
    """The rows of :data:`~osumem.memory.backends.sqlite.sql.SELECT_STEPS`, read
    chunk by chunk from ``chunks``, with each row's embedding blob (column 11) written
    into a matrix with spare rows (:func:`~osumem.memory.rows.matrix_with_room`, made
    for ``expected`` rows and grown if more come) and replaced by ``None``: the
    blobs are dropped a chunk at a time, so a namespace's vectors are never held
    twice (at 200,000 steps of 256 dimensions, 205 MB less at the peak of a load).
    Returns the rows and the first rows of the matrix, for :func:`decode_steps`'
    ``embeddings``; ``None`` when a blob is not ``4 * dim`` bytes (or the machine is
    big-endian, or ``dim`` is not known yet): the caller reads the rows again and
    decodes them whole, which names the first bad row as it always did."""
    if sys.byteorder != "little" or dim < 1:
        return None
    width = 4 * dim
    room = matrix_with_room(expected, dim)
    flat = memoryview(room).cast("B")  # type: ignore[arg-type]
    rows: list[tuple[Any, ...]] = []
    for chunk in chunks:
        k = len(rows)
        if k + len(chunk) > room.shape[0]:  # more than counted: another writer's add
            grown = matrix_with_room(2 * (k + len(chunk)), dim)
            grown[:k] = room[:k]
            room, flat = grown, memoryview(grown).cast("B")  # type: ignore[arg-type]
        at = k * width
        for r in chunk:
            blob = r[11]
            if type(blob) is not bytes or len(blob) != width:
                return None
            flat[at : at + width] = blob
            at += width
        rows += [(*r[:11], None, *r[12:]) for r in chunk]
    return rows, room[: len(rows)]


def _all_finite(emb: NDArray[np.float32]) -> bool:
    """Whether every value of ``emb`` is finite: its least and greatest are (a NaN
    makes both NaN); two passes and no mask the size of the matrix."""
    return bool(np.isfinite(np.minimum.reduce(emb, axis=None))) and bool(
        np.isfinite(np.maximum.reduce(emb, axis=None))
    )


#: The types a step's time columns hold (``None``: unknown).
_TIME_TYPES = frozenset({type(None), int, float})


def _rows_sound(cols: list[tuple[Any, ...]], n: int, start: int, dim: int, blobs: bool) -> bool:
    """Whether the columns of :func:`decode_steps` pass its per-row checks (positions
    ``start``…, ``4·dim``-byte blobs where ``blobs``, text columns of ``str``, costs
    positive ``int``), each column checked at C speed."""
    if cols[1] != tuple(range(start, start + n)):
        return False
    if blobs and (
        not set(map(type, cols[11])) <= {bytes} or not set(map(len, cols[11])) <= {4 * dim}
    ):
        return False
    if any(not set(map(type, cols[c])) <= {str} for c in (2, 3, 4, 6)):
        return False
    return set(map(type, cols[10])) <= {int} and (n == 0 or min(cols[10]) > 0)


def _first_bad_row(
    rows: Sequence[tuple[Any, ...]], start: int, dim: int, where: str, blobs: bool
) -> None:
    """Raise for the first row that fails :func:`decode_steps`'s per-row checks, in
    the order a row is checked (position, embedding size, text columns, cost)."""
    for k, r in enumerate(rows):
        if r[1] != start + k:
            raise StoreCorruptError(f"{where}: position {start + k} is missing")
        blob = r[11]
        if blobs and (not isinstance(blob, bytes) or len(blob) != 4 * dim):
            size = len(blob) if isinstance(blob, bytes | str) else type(blob).__name__
            raise StoreCorruptError(
                f"{where}: step id {r[0]} has a {size}-byte embedding, expected {4 * dim}"
            )
        for c, name in ((2, "role"), (3, "text"), (4, "tool_action"), (6, "tool_signature")):
            if not isinstance(r[c], str):
                raise StoreCorruptError(f"{where}: step id {r[0]}: {name} is not text")
        if not isinstance(r[10], int) or r[10] <= 0:
            raise StoreCorruptError(f"{where}: step id {r[0]}: cost {r[10]!r}")


def _first_bad_metadata(
    rows: Sequence[tuple[Any, ...]], metadata: Sequence[Any], where: str
) -> None:
    """Raise for the first row whose metadata is not a JSON object or whose times are
    not numbers, in row order (metadata, then time, then updated)."""
    for r, raw in zip(rows, metadata, strict=True):
        if not _is_json_object(raw):
            raise StoreCorruptError(f"{where}: step id {r[0]}: metadata is not a JSON object")
        for c, name in ((13, "time"), (14, "updated")):
            if r[c] is not None and not isinstance(r[c], int | float):
                raise StoreCorruptError(f"{where}: step id {r[0]}: {name} is not a number")


def _is_json_object(raw: Any) -> bool:
    try:
        return isinstance(raw, str) and isinstance(json.loads(raw), dict)
    except ValueError:
        return False


#: The C scanner under :func:`json.loads`, called on a text straight (a loaded
#: namespace decodes one entity list per distinct list of its steps: 66,000 at 200,000
#: steps, where ``json.loads``'s own steps around the scan took half the time).
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_STR = frozenset({str})


def _entities(raw: Any) -> frozenset[str] | None:
    """A step's entity column (a JSON list of strings) as a set; ``None`` when it is
    not one. A text that is one JSON value and nothing else (no surrounding spaces) is
    scanned directly; anything else goes through :func:`json.loads`, which accepts
    and refuses exactly what it always did."""
    if type(raw) is str:
        try:
            ents, end = _scan_json(raw, 0)
        except (StopIteration, ValueError):
            ents, end = None, -1
        if end == len(raw) and type(ents) is list:
            return frozenset(ents) if set(map(type, ents)) <= _STR else None
    try:
        ents = json.loads(raw)
    except (TypeError, ValueError):
        return None
    if not isinstance(ents, list) or not all(isinstance(e, str) for e in ents):
        return None
    return frozenset(ents)


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


def batch_end_moves(
    batches: Sequence[tuple[int, int]], gone: Sequence[int]
) -> tuple[list[tuple[int]], list[tuple[int, int]], int]:
    """What deleting the positions ``gone`` (sorted) does to a namespace's add batches
    ``(id, end)`` (by end): the batches to drop (left without steps, or ending where a
    kept one ends), the ``(new end, id)`` of the others, and an offset past every end
    (moves go through ``offset + new end`` first, so no two batches share an end while
    they move)."""
    from osumem.memory.backends.base import position_after_delete

    top = (batches[-1][1] if batches else 0) + 1
    kept: set[int] = set()
    moves: list[tuple[int, int]] = []
    drops: list[tuple[int]] = []
    for batch_id, end in batches:
        new = position_after_delete(end, gone)
        if new == 0 or new in kept:
            drops.append((batch_id,))
        else:
            kept.add(new)
            moves.append((new, batch_id))
    return drops, moves, top


def decode_held(
    messages: Any, sources: Any, where: str, namespace: str
) -> tuple[list[dict[str, Any]], list[str | None]]:
    """A namespace's held messages and the source of each from their stored columns
    (``messages`` ``None``: no row, nothing held)."""
    if messages is None:
        return [], []
    held = decode_pending(messages, where, namespace)
    return held, held_sources(held, sources)


def held_sources(held: Sequence[Any], raw: Any) -> list[str | None]:
    """The sources of the held messages ``held`` from their stored JSON list ``raw``;
    unknown (``None`` each) when missing, unreadable or of another length."""
    try:
        sources = json.loads(raw) if raw is not None else None
    except (TypeError, ValueError):
        sources = None
    if (
        not isinstance(sources, list)
        or len(sources) != len(held)
        or not all(isinstance(x, str) for x in sources)
    ):
        return [None] * len(held)  # unknown: as a store without sources
    return list(sources)


def discarded(raw: Any) -> list[dict[str, Any]]:
    """Deleted held messages as returned (a damaged entry as ``{"unreadable": ...}``)."""
    try:
        held = json.loads(raw)
    except (TypeError, ValueError):
        return [{"unreadable": str(raw)}]
    return held if isinstance(held, list) else [{"unreadable": str(raw)}]


def snapshot_row(row: Sequence[Any] | None) -> SnapshotRow | None:
    """A stored snapshot row, or ``None`` when missing or of the wrong types."""
    if row is None:
        return None
    steps, config, fingerprint, checksum, payload = row
    if not (
        isinstance(steps, int)
        and all(isinstance(x, str) for x in (config, fingerprint, checksum))
        and isinstance(payload, bytes | bytearray | memoryview)
    ):
        return None
    return SnapshotRow(steps, config, fingerprint, checksum, bytes(payload))


def hash_tables(present: set[str]) -> list[tuple[str, str]]:
    """The tables of a content hash and their order (snapshots, a cache, are not)."""
    tables = [("meta", "key"), ("steps", "id"), ("batches", "id"), ("pending", "ns")]
    if "digests" in present:
        tables.append(("digests", "ns, digest"))
    if "held_sources" in present:
        tables.append(("held_sources", "ns"))
    if "step_metadata" in present:
        tables.append(("step_metadata", "id"))
    return tables


def json_is(text: Any, kind: type) -> bool:
    """Whether ``text`` is JSON of type ``kind``."""
    try:
        return isinstance(json.loads(text), kind)
    except (TypeError, ValueError, RecursionError):
        return False


# --- meta and migrations ----------------------------------------------------------------


def check_meta(name: str, meta: Mapping[str, str]) -> None:
    """The encoder rows of ``meta`` are present and agree (``model_id`` set iff ``dim``)."""
    for key in ("model_id", "dim"):
        if key not in meta:
            raise StoreCorruptError(f"{name}: corrupt: meta row {key!r} is missing")
    dim = meta["dim"]
    if not (isinstance(dim, str) and dim.isdigit() and int(dim) < 1_000_000):
        raise StoreCorruptError(f"{name}: corrupt: meta 'dim' is {dim!r}")
    if not isinstance(meta["model_id"], str) or (int(dim) == 0) != (meta["model_id"] == ""):
        raise StoreCorruptError(
            f"{name}: corrupt: meta model_id {meta['model_id']!r} with dim {dim}"
        )


def check_format(name: str, meta: Mapping[str, str], library_version: str) -> None:
    """``meta`` is an osumem store's of this schema version (then :func:`check_meta`)."""
    if meta.get("format") != STORE_FORMAT:
        raise ForeignStoreError(
            f"{name}: format {meta.get('format')!r}, expected {STORE_FORMAT!r}; "
            "not an osumem memory store"
        )
    version = meta.get("schema_version")
    if version != str(SCHEMA_VERSION):
        if version is None or not version.isdigit():
            raise StoreCorruptError(f"{name}: corrupt: meta 'schema_version' is {version!r}")
        raise NewerSchemaError(
            f"{name}: schema version {version} (written by osumem "
            f"{meta.get('library_version', '?')}); this osumem "
            f"({library_version}) reads version {SCHEMA_VERSION} only"
        )
    check_meta(name, meta)


def meta_defaults(library_version: str) -> list[tuple[str, str]]:
    """The ``meta`` rows of a new store."""
    return [
        ("format", STORE_FORMAT),
        ("schema_version", str(SCHEMA_VERSION)),
        ("library_version", library_version),
        ("model_id", ""),
        ("dim", "0"),
    ]


@dataclass(frozen=True)
class Migration:
    """One named step of the schema: the tables it creates (present: applied). Every
    backend applies the same list (:data:`MIGRATIONS`) in its own SQL."""

    name: str
    creates: tuple[str, ...]

    def applied(self, tables: set[str]) -> bool:
        return all(t in tables for t in self.creates)


#: The tables of the first release, whatever the backend.
FIRST_TABLES = ("meta", "steps", "batches", "pending")

#: The schema's migrations, oldest first: the same names and order on every backend
#: (a backend may create backend-only tables with a step, e.g. Postgres's
#: ``versions`` with ``0001``).
MIGRATIONS: tuple[Migration, ...] = (
    Migration("0001 steps, add batches and held messages", FIRST_TABLES),
    Migration("0002 digests of added logs", ("digests",)),
    Migration("0003 retriever snapshots", ("snapshots",)),
    Migration("0004 sources of held messages", ("held_sources",)),
    Migration("0005 step metadata and times, edit counts", ("step_metadata", "namespace_edits")),
)
