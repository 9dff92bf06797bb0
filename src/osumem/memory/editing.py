"""Changing stored steps of the agent memory: naming steps by position or id,
deleting them, replacing a step's text or metadata, listing steps through a filter.

Positions are a namespace's order, 0..n-1 without gaps: deleting steps moves the later
ones down (:func:`~osumem.memory.backends.base.position_after_delete`), while a step's
id never changes and is never given to another step. A retrieval after a delete or an
update equals one of a memory built from scratch from the remaining steps, as they are
stored, in the same add batches: the namespace's retrievers are rebuilt (from a stored
snapshot that does not cover a changed step, when there is one), because OSU-Mem's
units depend on the order in which the steps arrived. A metadata-only update changes
nothing a retriever reads and rebuilds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.embed import Encoder
from osumem.errors import InvalidInputError, StepNotFoundError, show_value
from osumem.memory.backends import MemoryStore
from osumem.memory.backends.base import moved_time
from osumem.memory.config import MemoryConfig
from osumem.memory.filters import compile_filter
from osumem.memory.namespaces import NamespaceCache
from osumem.memory.planner import MessagePlanner
from osumem.memory.retrieved import StoredStep, stored_steps
from osumem.memory.rows import NamespaceData, StepRow, stored_row
from osumem.memory.validate import check_cost, check_metadata, step_row
from osumem.types import Step


def _integers(values: Any, what: str) -> list[int]:
    """``values`` (one integer or a list of them) as a list of ints."""
    items = [values] if isinstance(values, int | np.integer) else values
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence | np.ndarray):
        raise InvalidInputError(f"{what}: expected an integer or a list of integers")
    out = []
    for i, v in enumerate(items):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise InvalidInputError(f"{what}[{i}]: expected an integer, got {show_value(v)}")
        out.append(int(v))
    return out


def resolve(
    data: NamespaceData,
    namespace: str,
    positions: Any = None,
    ids: Any = None,
    *,
    what: tuple[str, str] = ("positions", "ids"),
) -> list[int]:
    """The positions of the steps named by ``positions`` or by ``ids`` (exactly one of
    them) in a namespace's ``data``, in the order given, each checked.

    Raises:
        StepNotFoundError: a position or id the namespace does not hold (named).
        InvalidInputError: both or neither given, not integers, a step named twice.
    """
    if (positions is None) == (ids is None):
        raise InvalidInputError(f"give {what[0]} or {what[1]} (exactly one of them)")
    n = data.view.n
    single = what != ("positions", "ids")  # update names one step: no index in messages
    out: list[int] = []
    if positions is not None:
        for i, p in enumerate(_integers(positions, what[0])):
            if not 0 <= p < n:
                held = f"positions 0..{n - 1}" if n else "no steps"
                at = what[0] if single else f"{what[0]}[{i}]"
                raise StepNotFoundError(
                    f"{at}: namespace {namespace!r} holds {held}, not position {p}"
                )
            out.append(p)
    else:
        where = {int(s): k for k, s in enumerate(data.step_ids.tolist())}
        for i, s in enumerate(_integers(ids, what[1])):
            if s not in where:
                at = what[1] if single else f"{what[1]}[{i}]"
                raise StepNotFoundError(f"{at}: no step with id {s} in namespace {namespace!r}")
            out.append(where[s])
    if len(set(out)) != len(out):
        raise InvalidInputError(
            f"{what[0] if positions is not None else what[1]}: a step is named twice"
        )
    return out


class StepEditor:
    """Deletes, updates and lists the steps of one memory's store (callers hold the
    store's write transaction for the changes and drop what they cached afterwards)."""

    def __init__(
        self,
        config: MemoryConfig,
        store: MemoryStore,
        views: NamespaceCache,
        planner: MessagePlanner,
        need_encoder: Callable[[str], Encoder],
    ) -> None:
        self.config = config
        self.store = store
        self.views = views
        self.planner = planner
        self._need_encoder = need_encoder

    def delete(self, namespace: str, positions: Any, ids: Any) -> list[int]:
        """Delete the named steps (inside the caller's transaction); their ids."""
        at = resolve(self.views.data(namespace), namespace, positions, ids)
        if not at:
            return []
        deleted = dict(zip(sorted(at), self.store.delete_steps(namespace, at), strict=True))
        return [deleted[p] for p in at]

    def update(
        self,
        namespace: str,
        position: Any,
        step_id: Any,
        *,
        text: str | None,
        metadata: Mapping[str, Any] | None,
        embedding: NDArray[Any] | None,
        cost: int | None,
    ) -> tuple[int, StepRow, NDArray[np.float32] | None]:
        """Apply an update (inside the caller's transaction): ``(position, the step's
        row as stored now, its new embedding)``; the embedding is ``None`` for a
        metadata-only update, which changes nothing a retriever reads."""
        if text is None and metadata is None:
            raise InvalidInputError("update: give text=, metadata= or both")
        if (embedding is not None or cost is not None) and text is None:
            raise InvalidInputError("embedding, cost: give them with the new text")
        data = self.views.data(namespace)
        (p,) = resolve(
            data,
            namespace,
            None if position is None else [position],
            None if step_id is None else [step_id],
            what=("position", "id"),
        )
        limit = self.config.max_text_chars
        old = stored_row(data, p)
        meta = (
            old.metadata_json if metadata is None else check_metadata(metadata, "metadata", limit)
        )
        # the change time the store will write (moved past the stored one), so the
        # row returned, and cached, equals the stored row
        now = moved_time(None, old.updated)
        if text is None:
            self.store.set_metadata(namespace, [p], [meta], now)
            return p, replace(old, metadata_json=meta, updated=now), None
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError(f"text: expected a non-empty text, got {show_value(text)}")
        draft = Step(
            role=old.role,
            text=text,
            tool_action=old.tool_action,
            tool_signature=old.tool_signature,
            entities=frozenset(old.entities),
            subgoal=old.subgoal,
            source=old.source,
        )
        checked = step_row(draft, "text", namespace, limit)  # the limits of an add
        if cost is None:
            cost = int(self._need_encoder("update(text=...)").count_tokens([text])[0])
        check_cost(cost, "cost")
        new = replace(old, text=checked.text, metadata_json=meta, updated=now, cost=int(cost))
        vectors = None if embedding is None else np.asarray(embedding, dtype=np.float32)[None, :]
        emb = self.planner.embed([new], vectors)
        self.store.replace_steps(namespace, [p], [new], emb)
        return p, new, emb

    def steps(
        self, namespace: str, *, filter: Mapping[str, Any] | None, positions: Any, ids: Any
    ) -> list[StoredStep]:
        """The named steps (all, when neither is given), filtered, in position order
        (or in the order named)."""
        data = self.views.data(namespace)
        if positions is None and ids is None:
            at = list(range(data.view.n))
        else:
            at = resolve(data, namespace, positions, ids)
        flt = compile_filter(filter)
        if flt is not None and at:
            mask = flt.mask(data, namespace)
            at = [p for p in at if mask[p]]
        return stored_steps(data, at, namespace)
