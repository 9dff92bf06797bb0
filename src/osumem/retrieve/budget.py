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

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


def _already_validated(budget: Any) -> bool:
    checked = _VALIDATED.get()
    return checked is not None and type(budget) is int and budget == checked


@contextmanager
def validated_budget(budget: Any) -> Iterator[int]:
    """The budget of a public entry point, validated unless an enclosing entry point
    already validated this same budget; inside the ``with`` block nested entry points
    given it skip their check.

    >>> with validated_budget(256) as b:                          # doctest: +SKIP
    ...     retriever.retrieve(q, b)    # does not check b again
    """
    if _already_validated(budget):
        yield budget
        return
    checked = check_budget(budget)
    token = _VALIDATED.set(checked)
    try:
        yield checked
    finally:
        _VALIDATED.reset(token)
