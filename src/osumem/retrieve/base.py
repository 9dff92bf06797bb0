"""The retriever interface.

Every method, baselines, ablations and oracles included, is a :class:`Retriever`
subclass plus a frozen config dataclass. ``fit`` builds the method's structure over a
:class:`~osumem.types.MemoryView`; ``retrieve`` validates the query and budget at the
boundary and returns step positions packed under the budget by the shared packer
(:mod:`osumem.retrieve.packing`). The flat cosine ranking, exact or from an HNSW index
for large memories, is the retriever's :class:`~osumem.retrieve.step_index.StepIndex`.

A fitted structure can be handed over without refitting through the state protocol:
:meth:`Retriever.state_key` says what determines it (``None``: nothing to share),
:meth:`Retriever.state` detaches it (a :class:`RetrieverState`, shared read-only),
:meth:`Retriever.state_arrays` writes it as plain arrays (snapshots; a method may
have arrays without a shareable structure) and :meth:`Retriever.load_state` takes
either, as ``fit`` would have left it. :meth:`Retriever.state_format` is ``None`` for
methods that keep nothing a snapshot could restore.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, Self, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from osumem.errors import ConfigError, DimensionError, InvalidInputError, NotFittedError
from osumem.frozen import FrozenConfig
from osumem.retrieve.budget import check_budget, validated_budget
from osumem.retrieve.packing import greedy_pack, pack_first_fit
from osumem.retrieve.step_index import StepIndex
from osumem.types import IntArray, MemoryView

if TYPE_CHECKING:
    from osumem.osu.pool import OSUPool

__all__ = [
    "ConfigT",
    "Retriever",
    "RetrieverConfig",
    "RetrieverState",
    "Selection",
    "check_budget",
    "greedy_pack",
    "pack_first_fit",
]


@dataclass(frozen=True, kw_only=True)
class RetrieverConfig(FrozenConfig):
    """Base of every method's frozen, keyword-only parameter set (``replace``,
    ``with_strings``, ``to_dict`` and declared constraints come from
    :class:`~osumem.frozen.FrozenConfig`)."""


#: The config type a :class:`Retriever` subclass takes.
ConfigT = TypeVar("ConfigT", bound=RetrieverConfig)


@dataclass(frozen=True)
class Selection:
    """What a retriever returns: positions in selection order and their total cost."""

    positions: IntArray
    cost: int

    def __len__(self) -> int:
        return int(self.positions.shape[0])


class Structure(Protocol):
    """A fitted structure that a :class:`RetrieverState` carries: it can write itself
    as plain arrays (``.npz``-ready, no pickle)."""

    def state(self) -> dict[str, NDArray[Any]]: ...


@dataclass(frozen=True)
class RetrieverState:
    """A retriever's fitted structure, detached from it (:meth:`Retriever.state`).

    Attributes:
        key: the :meth:`Retriever.state_key` of the retriever it came from: two
            retrievers with equal keys fitted on the same steps build equal states.
        n_steps: the number of steps it covers.
        structure: the structure itself (e.g. an :class:`~osumem.osu.pool.OSUPool`);
            retrievers that load it share it and only read it.
    """

    key: Hashable
    n_steps: int
    structure: Structure

    def arrays(self) -> dict[str, NDArray[Any]]:
        """The state as plain arrays, what :meth:`Retriever.load_state` reads back."""
        return self.structure.state()


def unit_probe(dim: int) -> NDArray[np.float32]:
    """A unit query vector (the first axis): the probe a warm-up retrieves with."""
    probe = np.zeros(dim, dtype=np.float32)
    probe[0] = 1.0
    return probe


class Retriever(ABC, Generic[ConfigT]):
    """A retrieval method. Subclasses set ``name`` and ``Config`` (and name the config
    type, ``class FlatMMR(Retriever[MMRConfig])``, so ``self.config`` is typed) and
    implement :meth:`_build` (optional) and :meth:`_select` (or :meth:`_select_query`,
    for methods that read the query's text).

    Learned state lives in attributes ending with ``_`` and is set by :meth:`fit`;
    :attr:`fitted_view` is the fitted view (a :class:`~osumem.errors.NotFittedError`
    before ``fit``).
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[RetrieverConfig]] = RetrieverConfig
    #: True for methods that read ground-truth evidence (oracles); reports label them.
    is_oracle: ClassVar[bool] = False
    #: With a background step index (a memory's retriever): whether updates go on
    #: without a pool's similarity refresh still being computed past its application
    #: point (``OSUPool.defer_refresh``); a retriever built for one filtered query
    #: waits there instead, as it is never synced again.
    defer_refresh: bool = True

    def __init__(self, config: ConfigT | None = None, *, seed: int = 0) -> None:
        if config is None:
            config = cast(ConfigT, self.Config())
        if not isinstance(config, self.Config):
            raise ConfigError(
                f"{type(self).__name__} takes a {self.Config.__name__}, got {type(config).__name__}"
            )
        self.config: ConfigT = config
        self.seed = int(seed)
        self.view_: MemoryView | None = None
        #: The flat cosine ranking of the fitted steps (exact, or HNSW when large).
        self.step_index = StepIndex(seed=self.seed)

    @property
    def ann_min_steps(self) -> int:
        """Memory size from which whole-memory queries use the HNSW indexes
        (:data:`~osumem.retrieve.step_index.ANN_MIN_STEPS` unless set; the agent
        memory sets its own)."""
        return self.step_index.ann_min_steps

    @ann_min_steps.setter
    def ann_min_steps(self, value: int) -> None:
        self.step_index.ann_min_steps = int(value)

    @property
    def fitted_view(self) -> MemoryView:
        """The view this retriever was fitted on."""
        if self.view_ is None:
            raise NotFittedError(f"{type(self).__name__}: call fit() before retrieve()")
        return self.view_

    def fit(self, view: MemoryView) -> Self:
        """Build this method's structure over ``view`` (the causal prefix it may see)."""
        self.view_ = view
        self.step_index.reset()
        self._build(view)
        return self

    def update(self, view: MemoryView) -> Self:
        """Bring the structure up to date with ``view``, which extends the fitted view
        by new steps at the end (the agent-facing memory calls this after each add).

        The default rebuilds; methods with incremental structures (OSU-Mem) override
        it to add only the new steps.
        """
        return self.fit(view)

    def update_waits(self, n_steps: int) -> bool:
        """Whether :meth:`update` to a view of ``n_steps`` steps would now wait for work
        running in the background (a memory's after-add preparation stops before such an
        update and leaves it to the next query). The default: never."""
        return False

    def apply_ready(self) -> None:
        """Take background work that is done and that an update went on without (a
        pool's similarity refresh; see :meth:`update_waits`); never waits. The
        default: nothing."""

    def _build(self, view: MemoryView) -> None:
        """Build the index; the default keeps nothing but the view."""

    def wait_ready(self) -> None:
        """Wait until the indexes building on background threads are ready (with
        ``step_index.background`` set, queries never wait for them and scan exactly
        meanwhile; call this where answers must not depend on timing): after it the
        indexes the next whole-memory query uses are built and up to date."""
        self.step_index.wait(self.view_)

    # The state protocol -----------------------------------------------------------

    def state_key(self) -> Hashable | None:
        """What besides the steps determines this method's fitted structure (two
        retrievers with equal keys fitted on the same steps build the same one), or
        ``None`` when it keeps none that :meth:`state` can hand over (the default)."""
        return None

    def state_format(self) -> tuple[Any, ...] | None:
        """The layout version of :meth:`RetrieverState.arrays` and the switches that
        shape the structure besides the config (what a stored snapshot must match),
        ``None`` when the method keeps no state (the default)."""
        return None

    def state(self) -> RetrieverState:
        """The fitted structure, detached (see :class:`RetrieverState`)."""
        raise InvalidInputError(f"{type(self).__name__} keeps no state to hand over")

    def state_arrays(self) -> dict[str, NDArray[Any]]:
        """The fitted structure as plain arrays (what a snapshot stores;
        :meth:`load_state` reads them back). The default: :meth:`state`'s arrays; a
        method whose snapshot holds more than its shareable structure (an index of
        its own) adds it here."""
        return self.state().arrays()

    def state_arrays_later(self) -> Callable[[], dict[str, NDArray[Any]]]:
        """:meth:`state_arrays` in two parts, for a snapshot written while this
        retriever goes on taking updates: what must be read now is read (copied) by
        this call, and the returned function, which may run on another thread, gives
        the arrays as they were at this call. The default reads everything now."""
        arrays = {name: np.array(arr, copy=True) for name, arr in self.state_arrays().items()}
        return lambda: arrays

    def load_state(
        self, view: MemoryView, state: RetrieverState | Mapping[str, NDArray[Any]]
    ) -> Self:
        """Take ``state`` (a :class:`RetrieverState` of a retriever with the same
        :meth:`state_key`, shared as is, or its :meth:`RetrieverState.arrays`, checked
        first) as the structure over ``view``, as ``fit`` and ``update`` would have left
        it. Arrays that do not fit raise ``ValueError``."""
        raise InvalidInputError(f"{type(self).__name__} keeps no state to load")

    def osu_pool(self) -> OSUPool | None:
        """The OSU pool this method retrieves over (``None`` for methods without
        OSUs): what OSU handles and analyses read."""
        return None

    # Retrieval --------------------------------------------------------------------

    def warm_up(self) -> None:
        """Build now what a query would otherwise build lazily (index catch-ups,
        cached statistics), so that the next queries only read: a server runs its
        queries on several threads at once and warms each retriever after every write.
        The default asks one query (a unit vector, a budget of one token), which does
        that work and more; a method that knows which of its structures are lazy does
        only that (see :meth:`OSUMem.warm_up <osumem.retrieve.osumem.OSUMem.warm_up>`)."""
        view = self.fitted_view
        if view.n:
            self.retrieve(unit_probe(view.dim), 1)

    def retrieve(
        self,
        query: NDArray[Any],
        budget: int,
        *,
        before: int | None = None,
        evidence: NDArray[Any] | None = None,
        text: str | None = None,
    ) -> Selection:
        """Select steps for ``query`` under ``budget`` tokens.

        Args:
            query: the query embedding (any scale; normalised here).
            budget: token budget, a positive integer.
            before: only steps at positions ``< before`` may be returned (causality);
                ``None`` means every fitted step.
            evidence: ground-truth evidence positions, read only by oracle methods
                (``is_oracle``); every other method ignores it.
            text: the query's text, when it has one; read only by methods that rank
                by words as well as by the vector (:meth:`_select_query`), ignored by
                the others.
        """
        view = self.fitted_view
        with validated_budget(budget) as b:
            q = view.check_query(query)
            return self.retrieve_unit(q, b, before=before, evidence=evidence, text=text)

    def retrieve_unit(
        self,
        query: NDArray[np.float32],
        budget: int,
        *,
        before: int | None = None,
        evidence: NDArray[Any] | None = None,
        text: str | None = None,
    ) -> Selection:
        """:meth:`retrieve` for a query already in the form it uses: the output of
        the fitted view's ``check_query`` (float32, unit length, the memory's
        dimension), taken as given. A caller that asks one query of many methods or
        budgets normalises it once (the evaluation runner does); the answer is the
        one :meth:`retrieve` gives for the raw vector."""
        view = self.fitted_view
        q = query
        if q.dtype != np.float32 or q.ndim != 1 or (view.n and q.shape[0] != view.dim):
            raise DimensionError(
                f"query: expected a float32 vector of dimension {view.dim} (check_query's "
                f"output), got {q.dtype} of shape {q.shape}"
            )
        with validated_budget(budget) as b:
            limit = view.n if before is None else max(0, min(int(before), view.n))
            if limit == 0:
                return Selection(np.empty(0, dtype=np.int64), 0)
            ev = None if evidence is None else np.asarray(evidence, dtype=np.int64)
            positions = self._select_query(q, text, b, limit, ev)
        cost = int(view.costs[positions].sum()) if positions.size else 0
        return Selection(positions, cost)

    def _select_query(
        self,
        q: NDArray[np.float32],
        text: str | None,
        budget: int,
        limit: int,
        evidence: IntArray | None,
    ) -> IntArray:
        """:meth:`_select` for a query that may carry its text. Methods that read the
        query's words (lexical rankers, fusions) override this; the default ignores
        ``text`` and calls :meth:`_select`."""
        return self._select(q, budget, limit, evidence)

    @abstractmethod
    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        """Return positions ``< limit`` whose total cost is at most ``budget``."""

    # Shared helpers (the flat cosine ranking of the fitted steps) -------------------

    def _cosines(self, q: NDArray[np.float32], limit: int) -> NDArray[np.float32]:
        """Cosine of every visible step with the query (rows are unit length)."""
        return self.fitted_view.embeddings[:limit] @ q

    def _flat_order(self, q: NDArray[np.float32], limit: int) -> IntArray:
        """Visible positions by descending cosine (stable: ties keep position order)."""
        return np.argsort(-self._cosines(q, limit), kind="stable").astype(np.int64)

    def _flat_head(
        self, q: NDArray[np.float32], limit: int, tokens: float, min_count: int = 1
    ) -> IntArray:
        """The head of :meth:`_flat_order` holding at least ``tokens`` tokens and at
        least ``min_count`` steps (see :meth:`StepIndex.head
        <osumem.retrieve.step_index.StepIndex.head>`)."""
        return self.step_index.head(self.fitted_view, q, limit, tokens, min_count)

    def _flat_pack(
        self,
        q: NDArray[np.float32],
        limit: int,
        budget: int,
        exclude: IntArray | None = None,
    ) -> IntArray:
        """First fit of the flat ranking (minus the steps in ``exclude``) under
        ``budget`` (see :meth:`StepIndex.pack
        <osumem.retrieve.step_index.StepIndex.pack>`)."""
        return self.step_index.pack(self.fitted_view, q, limit, budget, exclude)
