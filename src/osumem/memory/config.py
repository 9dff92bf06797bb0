"""The settings of the agent memory (:class:`MemoryConfig`) and its defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from osumem.frozen import Constraints, FrozenConfig, Interval, Options
from osumem.retrieve.budget import check_budget
from osumem.types import DEFAULT_BOILERPLATE

#: The namespace used when none is given.
DEFAULT_NAMESPACE = "default"
#: What an add does with a log the namespace already holds (see ``on_duplicate``).
ON_DUPLICATE = ("append", "skip", "error")
#: Memory size from which a memory's whole-memory queries use the HNSW indexes
#: (``MemoryConfig.ann_min_steps``). Below it they scan exactly. The indexes build on
#: background threads and queries scan exactly until they are ready, so no query waits
#: for a build (docs/decisions.md).
MEMORY_ANN_MIN_STEPS = 20_000


@dataclass(frozen=True, kw_only=True)
class MemoryConfig(FrozenConfig):
    """Settings of a :class:`Memory` (all keyword-only, validated on construction:
    a bad ``budget`` raises :class:`~osumem.errors.BudgetError`, a bad
    ``max_text_chars``, ``ann_min_steps`` or ``blas_threads`` one :class:`~osumem.errors.ConfigError`
    naming each, an unknown ``method`` :class:`~osumem.errors.UnknownMethodError`, bad
    ``params`` the method config's :class:`~osumem.errors.ConfigError`).

    Attributes:
        method: registered retrieval method (``osumem list`` / ``osumem methods``).
        params: parameter overrides of the method's config.
        seed: seed of the retriever (similarity-view communities); fixed so a reopened
            store rebuilds the same structure.
        budget: default token budget of :meth:`Memory.retrieve`.
        max_text_chars: longest accepted step or message text, in characters; also
            the bound of every other stored string (argument values, keys, labels);
            a whole message may hold ``2 * max_text_chars + 4096`` characters.
        boilerplate: tool names that get no tool signature (no tool OSU).
        prefix_namespace: prefix entities and tool signatures with the step's source
            name (set it when one namespace holds several unrelated episodes).
        replay_batches: rebuild a reopened namespace along its add-batch boundaries
            (identical results to the writing session) rather than in one ``fit``.
        ann_min_steps: from this many steps in a namespace on, queries over all of it
            take their candidates from HNSW indexes (hnswlib, the ``scale`` extra),
            built on background threads (queries scan exactly until an index is
            ready; :meth:`Memory.wait_ready` waits for it); below it they scan exactly.
        on_duplicate: the default of :meth:`Memory.add_messages`' ``on_duplicate``
            (``"skip"``; ``"append"`` for an agent that repeats messages on purpose and
            gives no ``log_id``).
        blas_threads: most BLAS (OpenBLAS, MKL) threads while the memory adds,
            retrieves or rebuilds (1 by default: a memory's matrices are too small for
            more to pay); the caller's own setting is restored after each call
            (:mod:`osumem.memory.blas`). ``None``: leave the process's setting alone.
    """

    method: str = "osumem"
    params: Mapping[str, Any] | None = None
    seed: int = 0
    budget: int = 256
    max_text_chars: int = 100_000
    boilerplate: frozenset[str] = DEFAULT_BOILERPLATE
    prefix_namespace: bool = False
    replay_batches: bool = True
    ann_min_steps: int = MEMORY_ANN_MIN_STEPS
    on_duplicate: str = "skip"
    blas_threads: int | None = 1

    parameter_constraints: ClassVar[Constraints] = {
        "on_duplicate": Options(ON_DUPLICATE),
        "budget": Interval(int, 1, None),  # checked first, as a BudgetError
        "max_text_chars": Interval(int, 1, None),
        "ann_min_steps": Interval(int, 1, None),
        "blas_threads": (Interval(int, 1, None), None),
    }

    def __post_init__(self) -> None:
        from osumem.retrieve.registry import check_deployable, make_config

        check_budget(self.budget)  # a BudgetError, as every budget check raises
        super().__post_init__()
        make_config(self.method, self.params)  # unknown method / parameter fails here
        check_deployable(self.method)  # an oracle needs ground truth a memory lacks
