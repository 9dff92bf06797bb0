"""The records a memory store reads and writes, whatever its backend: a step row, a
namespace's columns, a snapshot row; and the one function that turns step columns
into the :class:`~osumem.types.MemoryView` the retrievers read."""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from osumem.types import MemoryView

#: The text columns of a stored step, as a store names them.
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


#: A step's metadata when none was given (the JSON text of an empty object).
NO_METADATA = "{}"


@dataclass(frozen=True)
class StepRow:
    """One step as written to the store (all columns already validated).

    ``metadata_json`` is the caller's metadata (the JSON text of an object, keys
    sorted), ``time`` when the step was added and ``updated`` when it was last changed
    (seconds since the Unix epoch; ``None``: unknown, or never changed)."""

    role: str
    text: str
    tool_action: str
    arguments_json: str
    tool_signature: str
    entities: tuple[str, ...]
    subgoal: str
    source: str
    cost: int
    metadata_json: str = NO_METADATA
    time: float | None = None
    updated: float | None = None

    def stamped(self, metadata_json: str, time: float | None) -> StepRow:
        """This row with its metadata and time: ``dataclasses.replace(row,
        metadata_json=..., time=...)`` without its per-field lookups (an add stamps
        every row it writes)."""
        return StepRow(
            self.role,
            self.text,
            self.tool_action,
            self.arguments_json,
            self.tool_signature,
            self.entities,
            self.subgoal,
            self.source,
            self.cost,
            metadata_json,
            time,
            self.updated,
        )


@dataclass(frozen=True)
class AddContext:
    """What an add reads of its namespace before it writes (:meth:`MemoryStore.add_context
    <osumem.memory.backends.base.MemoryStore.add_context>`): the store's
    ``data_version``, whether the add's log digest is recorded, the held messages with
    the source of each, and the step count."""

    data_version: int
    logged: bool
    held: list[dict[str, Any]]
    held_sources: list[str | None]
    n_steps: int


@dataclass(frozen=True)
class AddBatch:
    """One add as a backend writes it (:meth:`MemoryStore.append
    <osumem.memory.backends.base.MemoryStore.append>` checked it): the namespace,
    the rows, their embeddings (little-endian float32, C-contiguous, one row per
    step), the encoder id, the held messages to keep (``None``: leave them) with the
    source of each (``None`` for the list or an entry: not recorded), the log digest
    to record (``None``: none) and ``joined``: inside an open transaction, the
    caller's block is the add's unit of rollback and the backend opens no savepoint
    of its own (outside one it changes nothing)."""

    namespace: str
    rows: Sequence[StepRow]
    embeddings: NDArray[np.float32]
    encoder_id: str
    pending: Sequence[Mapping[str, Any]] | None
    pending_sources: Sequence[str | None] | None
    digest: str | None
    joined: bool = False


@dataclass(frozen=True)
class NamespaceData:
    """Everything stored for one namespace: its columnar view, step ids, arguments, the
    add-batch boundaries (end positions, increasing) and, per step, its metadata (JSON
    text of an object), the time it was added and the time it was last changed (float64
    seconds since the Unix epoch, NaN where unknown)."""

    view: MemoryView
    step_ids: NDArray[np.int64]
    arguments: tuple[str, ...]
    batch_ends: tuple[int, ...]
    metadata: tuple[str, ...] = ()
    times: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    updated: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        n = self.view.n
        if len(self.metadata) != n:  # a backend that stores none: every step has none
            object.__setattr__(self, "metadata", (NO_METADATA,) * n)
        for name in ("times", "updated"):
            if getattr(self, name).shape != (n,):
                object.__setattr__(self, name, np.full(n, np.nan))


@dataclass(frozen=True)
class SnapshotRow:
    """A stored snapshot of a namespace's retriever: the steps it covers, the key of the
    retriever settings, the fingerprint of the steps, the payload's SHA-256 and the
    payload itself (see :mod:`osumem.memory.snapshot`)."""

    steps: int
    config: str
    fingerprint: str
    checksum: str
    payload: bytes


#: A loaded namespace's buffers hold 1/this more rows than its steps.
HEADROOM_DIVISOR = 4

#: The matrices :func:`matrix_with_room` made, by ``id``, each until a namespace
#: buffer takes it over (:func:`take_room`) or it is freed.
_with_room: dict[int, weakref.ReferenceType[NDArray[np.float32]]] = {}


def matrix_with_room(n: int, dim: int) -> NDArray[np.float32]:
    """An unwritten float32 matrix for the vectors of ``n`` steps with
    1/:data:`HEADROOM_DIVISOR` more rows to spare (unwritten rows cost address space,
    not memory). A store reading a namespace writes its vectors into the first rows
    and hands those rows out; the namespace buffer built from them takes the matrix
    over (:func:`take_room`) instead of copying the vectors into buffers of its own."""
    room = np.empty((max(64, n + n // HEADROOM_DIVISOR), dim), dtype=np.float32)
    key = id(room)
    _with_room[key] = weakref.ref(room, lambda _ref: _with_room.pop(key, None))
    return room


def take_room(rows: NDArray[Any]) -> NDArray[np.float32] | None:
    """The whole matrix whose first rows ``rows`` are, when :func:`matrix_with_room`
    made it and nothing has taken it yet (then nothing else will); else ``None``. The
    taker may write the spare rows: nothing else sees them (the rows handed out are
    never written)."""
    base = rows.base
    if not isinstance(base, np.ndarray) or rows.shape[0] == 0:
        return None
    starts_there = rows.ctypes.data == base.ctypes.data
    ref = _with_room.get(id(base))
    if ref is None or ref() is not base or not starts_there:
        return None
    del _with_room[id(base)]
    return cast(NDArray[np.float32], base)


def _objects(values: Sequence[Any], n: int) -> NDArray[Any]:
    arr = np.empty(n, dtype=object)
    arr[:] = list(values)
    return arr


def namespace_data(
    *,
    embeddings: NDArray[np.float32],
    costs: Sequence[int] | NDArray[Any],
    roles: Sequence[str],
    texts: Sequence[str],
    tool_actions: Sequence[str],
    tool_signatures: Sequence[str],
    entities: Sequence[frozenset[str]],
    subgoals: Sequence[str],
    sources: Sequence[str],
    step_ids: Sequence[int] | NDArray[Any],
    arguments: Sequence[str],
    batch_ends: Sequence[int],
    metadata: Sequence[str] | None = None,
    times: Sequence[float | None] | None = None,
    updated: Sequence[float | None] | None = None,
) -> NamespaceData:
    """Steps given column by column (as a store decoded them, or as an add wrote them)
    as a :class:`NamespaceData`: the embeddings as given (float32), costs and ids as
    int64, the text columns as object arrays, times as float64 (``None`` → NaN);
    ``metadata`` and the times may be left out (no metadata, unknown times)."""
    n = len(roles)
    return NamespaceData(
        view=MemoryView(
            embeddings=embeddings.astype(np.float32, copy=False),
            costs=np.asarray(costs, dtype=np.int64).reshape(n),
            tool_actions=_objects(tool_actions, n),
            tool_signatures=_objects(tool_signatures, n),
            entities=tuple(entities),
            subgoals=_objects(subgoals, n),
            sources=_objects(sources, n),
            roles=_objects(roles, n),
            texts=_objects(texts, n),
        ),
        step_ids=np.asarray(step_ids, dtype=np.int64).reshape(n),
        arguments=tuple(arguments),
        batch_ends=tuple(batch_ends),
        metadata=(NO_METADATA,) * n if metadata is None else tuple(metadata),
        times=_times(times, n),
        updated=_times(updated, n),
    )


def _times(values: Sequence[float | None] | None, n: int) -> NDArray[np.float64]:
    if values is None:
        return np.full(n, np.nan)
    return np.array(values, dtype=np.float64).reshape(n)  # None → NaN


def kept_ends(ends: Sequence[int], keep: NDArray[np.int64]) -> tuple[int, ...]:
    """Add-batch ends over the steps at positions ``keep`` (sorted) alone: each end
    counts the kept steps before it; a batch left without steps is dropped."""
    out: list[int] = []
    for e in ends:
        new = int(np.searchsorted(keep, e))
        if new and (not out or new > out[-1]):
            out.append(new)
    return tuple(out)


def subset(data: NamespaceData, keep: NDArray[np.int64]) -> NamespaceData:
    """The steps of ``data`` at positions ``keep`` (sorted, distinct) as a namespace of
    their own, in the same add batches (:func:`kept_ends`): what a memory holding only
    those steps, added as they were, stores."""
    idx = np.asarray(keep, dtype=np.int64)
    return NamespaceData(
        view=data.view.take(idx),
        step_ids=data.step_ids[idx],
        arguments=tuple(data.arguments[int(i)] for i in idx),
        batch_ends=kept_ends(data.batch_ends, idx),
        metadata=tuple(data.metadata[int(i)] for i in idx),
        times=data.times[idx],
        updated=data.updated[idx],
    )


def stored_row(data: NamespaceData, p: int) -> StepRow:
    """The store row of the step at position ``p`` of ``data``."""
    v = data.view
    return StepRow(
        role=str(v.roles[p]),
        text=str(v.texts[p]),
        tool_action=str(v.tool_actions[p]),
        arguments_json=data.arguments[p],
        tool_signature=str(v.tool_signatures[p]),
        entities=tuple(sorted(v.entities[p])),
        subgoal=str(v.subgoals[p]),
        source=str(v.sources[p]),
        cost=int(v.costs[p]),
        metadata_json=data.metadata[p],
        time=None if np.isnan(data.times[p]) else float(data.times[p]),
        updated=None if np.isnan(data.updated[p]) else float(data.updated[p]),
    )
