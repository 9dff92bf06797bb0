"""The token budget, validated once per call path.

A retrieval passes through several public entry points (the HTTP route, the
service, :meth:`Memory.retrieve <osumem.memory.Memory.retrieve>`,
:meth:`Retriever.retrieve <osumem.retrieve.Retriever.retrieve>` and
``retrieve_unit``), and each may be called on its own, so each must check the budget
it is given. :func:`validated_budget` lets the outermost one check it and the nested
ones take it as given, the idea of scikit-learn's ``prefer_skip_nested_validation``:
inside a validated scope a nested entry point handed the same budget skips the check.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Any

import numpy as np

from osumem.errors import BudgetError, show_value

#: Largest accepted budget (beyond it token sums would leave 64-bit integers).
MAX_BUDGET = 2**62

#: The budget the innermost validated scope of this thread (or task) checked.
_VALIDATED: ContextVar[int | None] = ContextVar("osumem_validated_budget", default=None)


def check_budget(budget: Any) -> int:
    """Validate a token budget: a positive integer of at most :data:`MAX_BUDGET`;
    returns it as an ``int``. Raises :class:`~osumem.errors.BudgetError`."""
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer):
        raise BudgetError(f"budget must be a positive integer, got {show_value(budget)}")
    if budget <= 0:
        raise BudgetError(f"budget must be a positive integer, got {show_value(budget)}")
    if budget > MAX_BUDGET:
        raise BudgetError(
            f"budget must be a positive integer of at most 2**62, got {show_value(budget)}"
        )
    return int(budget)


class validated_budget:
    """The budget of a public entry point, validated unless an enclosing entry point
    already validated this same budget; inside the ``with`` block nested entry points
    given it skip their check.

    >>> with validated_budget(256) as b:                          # doctest: +SKIP
    ...     retriever.retrieve(q, b)    # does not check b again

    (A class, not a generator: the evaluation enters one per retrieval.)
    """

    __slots__ = ("_budget", "_token")

    def __init__(self, budget: Any) -> None:
        self._budget = budget
        self._token: Token[int | None] | None = None

    def __enter__(self) -> int:
        budget = self._budget
        checked = _VALIDATED.get()
        if checked is not None and type(budget) is int and budget == checked:
            return budget
        value = check_budget(budget)
        self._token = _VALIDATED.set(value)
        return value

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _VALIDATED.reset(self._token)
            self._token = None
