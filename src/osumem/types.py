"""The data model: steps, the columnar memory view, queries and episodes.

Every retrieval method reads the same :class:`MemoryView`: one float32 embedding matrix
(rows L2-normalised, so cosine is a dot product), one token-cost array and the annotation
columns. Per-step Python objects exist only at the boundary (:class:`Step`), never in a
hot path.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import numpy as np
from numpy.typing import NDArray

from osumem.errors import DimensionError, InvalidInputError, NonFiniteError

FloatMatrix = NDArray[np.float32]
IntArray = NDArray[np.int64]

#: Tools that get no tool OSU (configurable everywhere a reader takes ``boilerplate``;
#: also importable from :mod:`osumem.annotate`, where the readers use it). Here, in the
#: data model, so that a memory's config does not import the annotators.
DEFAULT_BOILERPLATE: frozenset[str] = frozenset(
    {"think", "finish", "calculate", "transfer_to_human_agents"}
)

#: Cell labels: T+ when the evidence pairwise shares a tool signature,
#: E+ when it pairwise shares an entity.
CELLS: tuple[str, ...] = ("T+E+", "T+E-", "T-E+", "T-E-")


@dataclass(frozen=True, kw_only=True)
class Step:
    """One trajectory step as it crosses the boundary (ingestion, the agent API).

    ``tool_signature`` is empty for steps without a tool call and for boilerplate tools;
    ``subgoal`` is empty when unknown. ``source`` names where the step came from (the
    log, episode or task; empty when unknown) and is not the memory's namespace.
    ``cost`` is the step's token cost.

    ``Step(namespace=...)`` and ``step.namespace`` still work as deprecated spellings of
    ``source`` (a :class:`DeprecationWarning`); they go in the next release.
    """

    role: str
    text: str = ""
    tool_action: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    tool_signature: str = ""
    entities: frozenset[str] = frozenset()
    subgoal: str = ""
    source: str = ""
    cost: int = 1

    @property
    def namespace(self) -> str:
        """Deprecated: the step's :attr:`source`."""
        warnings.warn(_STEP_NAMESPACE, DeprecationWarning, stacklevel=2)
        return self.source


_STEP_NAMESPACE = "Step.namespace is deprecated; the step's origin is Step.source"
_step_init = Step.__init__


def _step_init_compat(self: Step, *args: Any, **kwargs: Any) -> None:
    """``Step(namespace=...)``: the deprecated spelling of ``Step(source=...)``."""
    if "namespace" in kwargs:
        warnings.warn(_STEP_NAMESPACE, DeprecationWarning, stacklevel=2)
        value = kwargs.pop("namespace")
        if "source" in kwargs:
            raise InvalidInputError("Step: give source or the deprecated namespace, not both")
        kwargs["source"] = value
    _step_init(self, *args, **kwargs)


_step_init_compat.__doc__ = _step_init.__doc__
_step_init_compat.__signature__ = inspect.signature(_step_init)  # type: ignore[attr-defined]
Step.__init__ = _step_init_compat  # type: ignore[method-assign]


def segment_bounds(sizes: NDArray[Any]) -> IntArray:
    """``[0, cumsum(sizes)]`` as int64: the bounds of consecutive segments of the given
    sizes (segment ``i`` is ``[bounds[i], bounds[i + 1])``; a CSR ``indptr``)."""
    out = np.zeros(np.shape(sizes)[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def distinct(values: NDArray[Any]) -> NDArray[Any]:
    """The sorted distinct values of an integer array, flattened: what ``np.unique``
    returns, without the import of ``numpy.ma`` that ``np.unique`` makes at its first
    call in a process (about 8 ms, paid by the first retrieve of every new process, a
    cold ``osumem query`` among them)."""
    a = np.sort(np.asarray(values).reshape(-1))
    if a.shape[0] < 2:
        return a
    keep = np.empty(a.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def l2_normalise(matrix: NDArray[Any], *, what: str = "embeddings") -> FloatMatrix:
    """Return float32 rows scaled to unit length; zero rows stay zero.

    Raises :class:`NonFiniteError` naming the first offending row.
    """
    arr = np.asarray(matrix, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise DimensionError(f"{what}: expected a 2-d matrix, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise NonFiniteError(f"{what}: row {bad} holds NaN or infinite values")
    norms = row_norms(arr)
    return (arr / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


def row_norms(arr: NDArray[np.floating]) -> NDArray[np.floating]:
    """``np.linalg.norm(arr, axis=1, keepdims=True)`` of a real matrix, computed as that
    function computes it (the same bits) without its argument handling."""
    return np.sqrt(np.add.reduce(arr * arr, axis=1, keepdims=True))


def _column(values: Sequence[Any] | NDArray[Any] | None, n: int, name: str) -> NDArray[Any]:
    if values is None:
        return np.full(n, "", dtype=object)
    arr = np.empty(len(values), dtype=object)
    arr[:] = list(values)
    if len(arr) != n:
        raise DimensionError(f"{name}: expected {n} entries (one per step), got {len(arr)}")
    return arr


T = TypeVar("T")

_VIEW_NAMESPACES = "MemoryView.namespaces is deprecated; the steps' origins are MemoryView.sources"


class ListPrefix(Sequence[T]):
    """The first ``n`` entries of a shared, growing list, without copying them: a
    column for a view (or a namespace snapshot) that extends the last one by a few
    steps (a tuple per view would cost O(n) each, O(n²) over n adds). The owner of the
    list only appends to it (an entry is replaced by copying the list first), so a
    prefix never changes. Equal to any sequence of the same entries; not hashable."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: Sequence[T], n: int) -> None:
        self._items = items
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[T, ...]: ...

    def __getitem__(self, i: int | slice) -> T | tuple[T, ...]:
        if isinstance(i, slice):
            return tuple(map(self._items.__getitem__, range(*i.indices(self._n))))
        k = i + self._n if i < 0 else i
        if not 0 <= k < self._n:
            raise IndexError(i)
        return self._items[k]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._items, self._n)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]


def _head(column: Any, t: int) -> Any:
    """The first ``t`` entries of a view's column: a slice, or for a
    :class:`ListPrefix` a shorter prefix of the same list (O(1), where slicing it
    copies)."""
    if isinstance(column, ListPrefix):
        return type(column)(column._items, t)
    return column[:t]


class EntityPrefix(ListPrefix[frozenset[str]]):
    """An entity column as a :class:`ListPrefix` of the memory's entity list. The
    memory replays a reopened namespace's add batches through such views;
    ``osumem_hybrid`` hands its pool its entity column (text entities filled in) this
    way."""

    __slots__ = ()


@dataclass(frozen=True, eq=False)
class MemoryView:
    """Columnar view of ``n`` steps that every method reads.

    Attributes:
        embeddings: ``(n, d)`` float32, rows L2-normalised.
        costs: ``(n,)`` int64 token costs, all positive.
        tool_actions: ``(n,)`` action names ("" for none).
        tool_signatures: ``(n,)`` tool signatures ("" for none or boilerplate).
        entities: ``n`` frozensets of entity strings.
        subgoals: ``(n,)`` subgoal labels ("" for unknown).
        sources: ``(n,)`` where each step came from (:attr:`Step.source`).
        roles: ``(n,)`` step roles.
        texts: ``(n,)`` step texts ("" when the benchmark has none).
    """

    embeddings: FloatMatrix
    costs: IntArray
    tool_actions: NDArray[Any]
    tool_signatures: NDArray[Any]
    entities: tuple[frozenset[str], ...]
    subgoals: NDArray[Any]
    sources: NDArray[Any]
    roles: NDArray[Any]
    texts: NDArray[Any]

    @classmethod
    def build(
        cls,
        embeddings: NDArray[Any],
        costs: Sequence[int] | NDArray[Any],
        *,
        tool_actions: Sequence[str] | None = None,
        tool_signatures: Sequence[str] | None = None,
        entities: Sequence[frozenset[str] | set[str] | Sequence[str]] | None = None,
        subgoals: Sequence[str] | None = None,
        sources: Sequence[str] | None = None,
        roles: Sequence[str] | None = None,
        texts: Sequence[str] | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> MemoryView:
        """Validate and assemble a view; embeddings are L2-normalised here.

        ``namespaces`` is the deprecated name of ``sources`` (a
        :class:`DeprecationWarning`; it goes in the next release)."""
        if namespaces is not None:
            warnings.warn(_VIEW_NAMESPACES, DeprecationWarning, stacklevel=2)
            if sources is not None:
                raise InvalidInputError(
                    "MemoryView.build: give sources or the deprecated namespaces, not both"
                )
            sources = namespaces
        emb = np.asarray(embeddings)
        if emb.ndim != 2:
            raise DimensionError(f"embeddings: expected shape (n, d), got {emb.shape}")
        n = emb.shape[0]
        emb = l2_normalise(emb)
        cost_arr = np.asarray(costs)
        if cost_arr.shape != (n,):
            raise DimensionError(f"costs: expected shape ({n},), got {cost_arr.shape}")
        if not np.isfinite(cost_arr.astype(float)).all():
            raise NonFiniteError("costs: NaN or infinite token cost")
        if n and (cost_arr <= 0).any():
            bad = int(np.flatnonzero(cost_arr <= 0)[0])
            raise InvalidInputError(f"costs: step {bad} has non-positive cost {cost_arr[bad]}")
        ents = (
            tuple(frozenset(e) for e in entities) if entities is not None else ((frozenset(),) * n)
        )
        if len(ents) != n:
            raise DimensionError(f"entities: expected {n} entries (one per step), got {len(ents)}")
        return cls(
            embeddings=emb,
            costs=cost_arr.astype(np.int64),
            tool_actions=_column(tool_actions, n, "tool_actions"),
            tool_signatures=_column(tool_signatures, n, "tool_signatures"),
            entities=ents,
            subgoals=_column(subgoals, n, "subgoals"),
            sources=_column(sources, n, "sources"),
            roles=_column(roles, n, "roles"),
            texts=_column(texts, n, "texts"),
        )

    @classmethod
    def from_steps(cls, steps: Sequence[Step], embeddings: NDArray[Any]) -> MemoryView:
        """Assemble a view from boundary :class:`Step` records and their embeddings."""
        return cls.build(
            embeddings,
            [s.cost for s in steps],
            tool_actions=[s.tool_action for s in steps],
            tool_signatures=[s.tool_signature for s in steps],
            entities=[s.entities for s in steps],
            subgoals=[s.subgoal for s in steps],
            sources=[s.source for s in steps],
            roles=[s.role for s in steps],
            texts=[s.text for s in steps],
        )

    @property
    def namespaces(self) -> NDArray[Any]:
        """Deprecated: the :attr:`sources` column."""
        warnings.warn(_VIEW_NAMESPACES, DeprecationWarning, stacklevel=2)
        return self.sources

    @property
    def n(self) -> int:
        """Number of steps."""
        return int(self.embeddings.shape[0])

    @property
    def dim(self) -> int:
        """Embedding dimension ``d``."""
        return int(self.embeddings.shape[1])

    def __len__(self) -> int:
        return self.n

    def column_names(self) -> tuple[str, ...]:
        """The view's columns (one entry per step each), in declaration order. Every
        operation below goes over these, so a new column is one field and one
        :meth:`build` argument."""
        return tuple(f.name for f in dataclasses.fields(self))

    def prefix(self, t: int) -> MemoryView:
        """The causal view a query at time ``t`` may see: steps ``0 .. t-1`` (no copies)."""
        t = max(0, min(int(t), self.n))
        if t == self.n:
            return self
        return MemoryView(**{c: _head(getattr(self, c), t) for c in self.column_names()})

    def take(self, rows: Sequence[int] | NDArray[Any]) -> MemoryView:
        """The steps at positions ``rows``, in that order (repeats allowed)."""
        idx = np.asarray(rows, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < -self.n or idx.max() >= self.n):
            raise InvalidInputError(f"take: positions must lie in [0, {self.n}), got {rows}")
        out: dict[str, Any] = {}
        for c in self.column_names():
            col = getattr(self, c)
            out[c] = col[idx] if isinstance(col, np.ndarray) else tuple(col[int(i)] for i in idx)
        return MemoryView(**out)

    @classmethod
    def concat(cls, views: Sequence[MemoryView]) -> MemoryView:
        """One view holding ``views`` one after another (all of one dimension)."""
        if not views:
            raise InvalidInputError("concat: no views")
        dims = {v.dim for v in views if v.n}
        if len(dims) > 1:
            raise DimensionError(f"concat: views of different dimensions {sorted(dims)}")
        if len(views) == 1:
            return views[0]
        out: dict[str, Any] = {}
        for c in views[0].column_names():
            cols = [getattr(v, c) for v in views]
            if isinstance(cols[0], tuple):
                out[c] = tuple(x for col in cols for x in col)
            elif c == "embeddings" and dims:
                out[c] = np.concatenate([col for col, v in zip(cols, views, strict=True) if v.n])
            else:
                out[c] = np.concatenate(cols)
        return cls(**out)

    def extend(self, other: MemoryView) -> MemoryView:
        """This view followed by the steps of ``other``."""
        return MemoryView.concat([self, other])

    def with_embeddings(self, embeddings: NDArray[Any], *, normalise: bool = True) -> MemoryView:
        """The same steps with other embeddings, L2-normalised here unless the caller
        already did (``normalise=False``: float32 rows of unit norm are kept as given)."""
        emb = np.asarray(embeddings)
        if emb.ndim != 2 or emb.shape[0] != self.n:
            raise DimensionError(f"embeddings: expected shape ({self.n}, d), got {emb.shape}")
        emb = l2_normalise(emb) if normalise else emb.astype(np.float32, copy=False)
        return dataclasses.replace(self, embeddings=emb)

    def check_query(self, vector: NDArray[Any], *, where: str = "query") -> NDArray[np.float32]:
        """Validate a query vector against this view and return it L2-normalised."""
        q = np.asarray(vector, dtype=np.float32)
        if q.ndim != 1:
            raise DimensionError(f"{where}: expected a 1-d vector, got shape {q.shape}")
        if self.n and q.shape[0] != self.dim:
            raise DimensionError(
                f"{where}: vector has dimension {q.shape[0]}, the memory has {self.dim}"
            )
        norm = np.sqrt(np.add.reduce(q * q))
        if np.isfinite(norm) and norm > 0:
            # the common case, in fewer NumPy calls: the same bits as l2_normalise (a
            # NaN or infinite entry, or squares overflowing, make the norm non-finite)
            return q / norm
        return l2_normalise(q, what=where)[0]


@dataclass(frozen=True, kw_only=True)
class Query:
    """A retrieval query: a vector, the time ``t`` it is asked (it sees steps < t), and
    its ground-truth evidence positions (all < t)."""

    qid: str
    vector: NDArray[np.float32]
    t: int
    evidence: tuple[int, ...]
    text: str = ""
    cell: str = ""


@dataclass(frozen=True, kw_only=True)
class Episode:
    """One evaluation episode: a memory view plus the queries asked of it."""

    episode_id: str
    view: MemoryView
    queries: tuple[Query, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
