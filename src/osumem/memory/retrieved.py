"""What the agent memory returns: the selected steps, their OSU handles, and a
rendering of them as a context block for a prompt."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import InvalidInputError
from osumem.memory.explain import Explanation, explainer, remap_positions
from osumem.memory.filters import metadata_at, parsed_metadata
from osumem.memory.rows import NamespaceData
from osumem.retrieve.base import Retriever


@dataclass(frozen=True)
class OSUHandle:
    """One OSU a retrieved step belongs to: its view, key and member span.

    The handle names the unit the way the paper does (view + key); ``first``/``last``
    are its first and last member positions and ``size`` its member count (``None``
    for a handle read back from its text form, e.g. over HTTP), so two OSUs with the
    same key (split by the temporal gap or the S_max cap) stay distinct.
    """

    view: str
    key: str
    first: int
    last: int
    size: int | None

    def __str__(self) -> str:
        return f"{self.view}:{self.key}@{self.first}-{self.last}"

    @classmethod
    def parse(cls, text: str) -> OSUHandle:
        """The handle written as ``view:key@first-last`` (its :func:`str`); the text
        form has no member count, so ``size`` is ``None``."""
        view, sep, rest = str(text).partition(":")
        key, at, span = rest.rpartition("@")
        first, dash, last = span.partition("-")
        if not (sep and at and dash and first.isdigit() and last.isdigit()):
            raise InvalidInputError(f"OSU handle: expected view:key@first-last, got {text!r}")
        return cls(view=view, key=key, first=int(first), last=int(last), size=None)


#: The fields every step record (retrieved or listed) writes first.
_COMMON = ("position", "step_id", "namespace", "source", "role", "tool_action", "cost")


def _common(step: Any) -> dict[str, Any]:
    return {name: getattr(step, name) for name in _COMMON}


@dataclass(frozen=True, slots=True)
class RetrievedStep:
    """One selected step (slotted: one object per step for the garbage collector,
    where a ``__dict__`` would make two).

    Attributes:
        position: position inside its namespace (0 = first step added).
        step_id: the store's global step id.
        namespace: the memory namespace.
        source: the step's source episode name.
        role: ``user``, ``assistant`` or ``tool`` (or any role given to ``add_steps``).
        text: the step text (what was embedded and token-counted).
        tool_action: the tool name, "" for none.
        cost: token cost.
        osus: OSUs of the step in the retriever's structure (empty for methods without
            OSUs, or when the step belongs to none).
        rank: 0 for the first step selected, 1 for the next, …
        metadata: the step's metadata (what the add or an update gave; ``{}``: none).
        time: when the step was added (seconds since the Unix epoch; ``None``: not
            known, a step stored before times were kept).
    """

    position: int
    step_id: int
    namespace: str
    source: str
    role: str
    text: str
    tool_action: str
    cost: int
    osus: tuple[OSUHandle, ...]
    rank: int
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=True)
    time: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetrievedStep:
        """The step :meth:`to_dict` wrote (OSU handles parsed back, without sizes)."""
        try:
            return cls(
                position=int(data["position"]),
                step_id=int(data["step_id"]),
                namespace=str(data["namespace"]),
                source=str(data["source"]),
                role=str(data["role"]),
                text=str(data["text"]),
                tool_action=str(data["tool_action"]),
                cost=int(data["cost"]),
                osus=tuple(OSUHandle.parse(h) for h in data["osus"]),
                rank=int(data["rank"]),
                metadata=dict(data.get("metadata") or {}),
                time=None if data.get("time") is None else float(data["time"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidInputError):
                raise
            raise InvalidInputError(f"retrieved step: not a step dict ({exc!r})") from None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (OSU handles as strings)."""
        return {
            **_common(self),
            "rank": self.rank,
            "osus": [str(h) for h in self.osus],
            "metadata": dict(self.metadata),
            "time": self.time,
            "text": self.text,
        }


@dataclass(frozen=True)
class StoredStep:
    """One stored step, as :meth:`Memory.steps <osumem.memory.Memory.steps>` lists it.

    Attributes:
        position, step_id, namespace, source, role, text, tool_action, cost, metadata,
            time: as in :class:`RetrievedStep`.
        updated: when the step was last changed by an update (``None``: never).
    """

    position: int
    step_id: int
    namespace: str
    source: str
    role: str
    text: str
    tool_action: str
    cost: int
    metadata: Mapping[str, Any]
    time: float | None
    updated: float | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {
            **_common(self),
            "metadata": dict(self.metadata),
            "time": self.time,
            "updated": self.updated,
            "text": self.text,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StoredStep:
        """The step :meth:`to_dict` wrote."""
        try:
            return cls(
                **{k: data[k] for k in ("namespace", "source", "role", "text", "tool_action")},
                position=int(data["position"]),
                step_id=int(data["step_id"]),
                cost=int(data["cost"]),
                metadata=dict(data.get("metadata") or {}),
                time=_time(data.get("time")),
                updated=_time(data.get("updated")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"stored step: not a step dict ({exc!r})") from None


def _time(value: Any) -> float | None:
    return None if value is None else float(value)


def _finite(value: float) -> float | None:
    return None if value != value else float(value)  # NaN: unknown


def stored_steps(data: NamespaceData, positions: Sequence[int], namespace: str) -> list[StoredStep]:
    """The :class:`StoredStep` records of ``positions`` of a namespace's ``data``."""
    v = data.view
    meta = parsed_metadata(data)
    return [
        StoredStep(
            position=int(p),
            step_id=int(data.step_ids[p]),
            namespace=namespace,
            source=str(v.sources[p]),
            role=str(v.roles[p]),
            text=str(v.texts[p]),
            tool_action=str(v.tool_actions[p]),
            cost=int(v.costs[p]),
            metadata=meta[p],
            time=_finite(data.times[p]),
            updated=_finite(data.updated[p]),
        )
        for p in positions
    ]


@dataclass(frozen=True)
class Retrieved:
    """The result of :meth:`osumem.memory.Memory.retrieve`.

    ``steps`` are in selection order (``rank``); :meth:`render` lists them in time
    order, which reads naturally in a prompt.
    """

    namespace: str
    method: str
    budget: int
    steps: tuple[RetrievedStep, ...]
    query: str | None = None
    #: The explanation, once computed (or as a server sent it).
    explanation: Explanation | None = field(default=None, compare=False, repr=False)
    _explainer: Callable[[], Explanation] | None = field(default=None, compare=False, repr=False)

    def explain(self) -> Explanation:
        """Why these steps: per step its score parts (cosine, flat rank, lexical score,
        the unit and view that brought it in, its units' coarse-stage ranks) and what
        the budget left out (see :mod:`osumem.memory.explain`). Computed on first call.

        Raises:
            StaleResultError: the namespace was written after this retrieval (retrieve
                again to explain the current answer).
            InvalidInputError: a result that carries no way to explain it (built by
                hand, or from a server answer without ``explanation``).
        """
        if self.explanation is None:
            if self._explainer is None:
                raise InvalidInputError(
                    "this result carries no explanation; retrieve it from a Memory, or ask "
                    "the server with explain=true"
                )
            object.__setattr__(self, "explanation", self._explainer())
        assert self.explanation is not None
        return self.explanation

    @property
    def cost(self) -> int:
        """Total token cost of the selected steps (never above ``budget``)."""
        return sum(s.cost for s in self.steps)

    @property
    def positions(self) -> list[int]:
        """Selected positions in selection order."""
        return [s.position for s in self.steps]

    def __len__(self) -> int:
        return len(self.steps)

    def render(self, *, order: str = "time", header: bool = True) -> str:
        """The selected steps as a plain-text context block for a prompt.

        Args:
            order: ``"time"`` (by position, default) or ``"rank"`` (selection order).
            header: start with one line saying what the block is.
        """
        if order not in ("time", "rank"):
            raise InvalidInputError(f"render: order must be 'time' or 'rank', got {order!r}")
        steps = sorted(self.steps, key=lambda s: s.position) if order == "time" else self.steps
        lines = []
        if header:
            lines.append(
                f"# Retrieved memory ({len(self.steps)} steps, {self.cost}/{self.budget} "
                f"tokens, namespace {self.namespace!r})"
            )
        for s in steps:
            lines.append(f"[step {s.position}] {s.text}")
        return "\n".join(lines)

    def to_dict(self, *, explain: bool = False) -> dict[str, Any]:
        """A JSON-serialisable dict of the whole result; with ``explain``, also its
        ``explanation`` (:meth:`explain`)."""
        out: dict[str, Any] = {
            "namespace": self.namespace,
            "method": self.method,
            "budget": self.budget,
            "cost": self.cost,
            "query": self.query,
            "steps": [s.to_dict() for s in self.steps],
        }
        if explain:
            out["explanation"] = self.explain().to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Retrieved:
        """The result :meth:`to_dict` wrote, or the HTTP retrieve answer (whose
        ``rendered`` block is :meth:`render` again, and whose ``explanation``, when
        asked for, is :meth:`explain`): how the client turns a server's answer back
        into a :class:`Retrieved`."""
        if not isinstance(data, Mapping) or not isinstance(data.get("steps"), list):
            raise InvalidInputError("retrieved: expected a dict with a list of steps")
        query = data.get("query")
        why = data.get("explanation")
        try:
            return cls(
                namespace=str(data["namespace"]),
                method=str(data["method"]),
                budget=int(data["budget"]),
                steps=tuple(RetrievedStep.from_dict(s) for s in data["steps"]),
                query=None if query is None else str(query),
                explanation=None if why is None else Explanation.from_dict(why),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidInputError):
                raise
            raise InvalidInputError(f"retrieved: not a retrieve result ({exc!r})") from None

    def _old_answer(self, spelling: str) -> dict[str, Any]:
        warnings.warn(
            f"{spelling} (the HTTP client's dict answer of earlier releases) is deprecated; "
            "use the attributes (.steps, .cost, .namespace) and .render()",
            DeprecationWarning,
            stacklevel=3,
        )
        return {**self.to_dict(explain=self.explanation is not None), "rendered": self.render()}

    def __getitem__(self, key: str) -> Any:
        """Deprecated: ``result["rendered"]``, ``result["steps"]`` ... (the client's dict
        answer of earlier releases)."""
        return self._old_answer("Retrieved[...]")[key]

    def get(self, key: str, default: Any = None) -> Any:
        """Deprecated: ``dict.get`` on the client's dict answer of earlier releases."""
        return self._old_answer("Retrieved.get(...)").get(key, default)


#: A retrieval as it crosses a process boundary (:func:`to_wire`): plain tuples.
Wire = tuple[Any, ...]


def to_wire(result: Retrieved) -> Wire:
    """``result`` as tuples of plain values, for :func:`from_wire` in another process:
    each distinct OSU once, each step a row naming its OSUs by index. It pickles to
    about two thirds of the bytes of the objects themselves, and unpickles into
    short-lived tuples the garbage collector frees at once. The lazy explainer stays
    behind (an ``explanation`` already computed goes along)."""
    units: dict[OSUHandle, int] = {}
    rows = tuple(
        (
            s.position,
            s.step_id,
            s.namespace,
            s.source,
            s.role,
            s.text,
            s.tool_action,
            s.cost,
            tuple([units.setdefault(h, len(units)) for h in s.osus]),
            s.rank,
            s.metadata,
            s.time,
        )
        for s in result.steps
    )
    handles = tuple((h.view, h.key, h.first, h.last, h.size) for h in units)
    return (
        result.namespace,
        result.method,
        result.budget,
        result.query,
        result.explanation,
        handles,
        rows,
    )


#: How many OSU handles a :func:`from_wire` cache keeps before it starts afresh.
WIRE_CACHE_LIMIT = 4096


def from_wire(wire: Wire, cache: dict[Any, Any] | None = None) -> Retrieved:
    """The :class:`Retrieved` :func:`to_wire` wrote (equal to the original, without its
    lazy explainer).

    ``cache``: a dict the caller keeps between calls (emptied past
    :data:`WIRE_CACHE_LIMIT` entries), through which results share their
    :class:`OSUHandle` objects and ``osus`` tuples: successive retrievals of one
    namespace name the same units, so a result then adds one object per step to the
    receiving process's heap (what its garbage collector walks) instead of four."""
    namespace, method, budget, query, explanation, handles, rows = wire
    if cache is None:
        cache = {}
    elif len(cache) > WIRE_CACHE_LIMIT:
        cache.clear()
    made = []
    for unit in handles:
        handle = cache.get(unit)
        if handle is None:
            handle = cache[unit] = OSUHandle(*unit)
        made.append(handle)
    steps = []
    for position, step_id, ns, source, role, text, tool, cost, at, rank, meta, when in rows:
        key = tuple([handles[i] for i in at])  # plain tuples: hashed in C
        osus = cache.get(key)
        if osus is None:
            osus = cache[key] = tuple([made[i] for i in at])
        steps.append(
            RetrievedStep(
                position, step_id, ns, source, role, text, tool, cost, osus, rank, meta, when
            )
        )
    return Retrieved(namespace, method, budget, tuple(steps), query, explanation)


def retrieved_from(
    retriever: Retriever,
    query: NDArray[np.float32],
    positions: NDArray[np.int64],
    data: NamespaceData,
    *,
    namespace: str,
    method: str,
    budget: int,
    text: str | None,
    mapping: NDArray[np.int64] | None = None,
) -> Retrieved:
    """The :class:`Retrieved` of ``positions`` (``retriever``'s selection for
    ``query``, in rank order) of the steps ``data`` the retriever was built on, with
    the OSU handles of the retriever's pool and the means to explain it later.
    ``mapping`` (a filtered retrieval: ``data`` is a subset of the namespace) gives
    each position of ``data`` its position in the namespace, for the steps, their
    units and the explanation."""
    handles = osu_handles(retriever, positions, mapping)
    v = data.view
    meta = metadata_at(data, positions.tolist())
    place = (lambda p: p) if mapping is None else (lambda p: int(mapping[p]))
    steps = tuple(
        RetrievedStep(
            place(int(p)),
            int(data.step_ids[p]),
            namespace,
            str(v.sources[p]),
            str(v.roles[p]),
            str(v.texts[p]),
            str(v.tool_actions[p]),
            int(v.costs[p]),
            handles[rank],
            rank,
            meta[p],
            _finite(data.times[p]),
        )
        for rank, p in enumerate(positions.tolist())
    )
    why = explainer(retriever, query, text, budget, positions, method)
    if mapping is not None:
        why = _remapped(why, mapping)
    return Retrieved(namespace, method, budget, steps, text, _explainer=why)


def _remapped(
    why: Callable[[], Explanation], mapping: NDArray[np.int64]
) -> Callable[[], Explanation]:
    """``why`` with every position it names mapped through ``mapping``."""
    return lambda: remap_positions(why(), lambda p: int(mapping[p]))


def osu_handles(
    retriever: Retriever | None,
    positions: NDArray[np.int64],
    mapping: NDArray[np.int64] | None = None,
) -> list[tuple[OSUHandle, ...]]:
    """OSU handles of ``positions`` in ``retriever``'s OSU pool
    (:meth:`~osumem.retrieve.Retriever.osu_pool`); a method without OSUs (or no
    retriever) gets none. ``mapping``: as in :func:`retrieved_from`."""
    pool = None if retriever is None else retriever.osu_pool()
    if pool is None:
        return [() for _ in positions]
    place = (lambda p: p) if mapping is None else (lambda p: int(mapping[p]))
    made: dict[tuple[str, str, int, int, int], OSUHandle] = {}  # steps share units
    out = []
    for units in pool.units_at(np.asarray(positions, dtype=np.int64).tolist()):
        handles = []
        for unit in units:
            handle = made.get(unit)
            if handle is None:
                view, key, lo, hi, size = unit
                handle = OSUHandle(
                    view=view, key=str(key), first=place(lo), last=place(hi), size=size
                )
                made[unit] = handle
            handles.append(handle)
        out.append(tuple(handles))
    return out
