"""Defaults of the evaluation that several modules share, defined once (and cheap to
import, so command-line option defaults can use them)."""

from __future__ import annotations

#: Random sign vectors per permutation test (the paper's 10,000).
N_PERMUTATIONS = 10_000

#: The paper's primary token budget per benchmark (the budget its headline tables and
#: Stage D / cross-tab comparisons are reported at).
PRIMARY_BUDGETS: dict[str, int] = {"synthetic": 256, "taubench": 256, "toolbench": 400}


def primary_budget(benchmark: str, budgets: list[int] | None = None) -> int:
    """The paper's primary budget for ``benchmark`` (any name starting with a known
    benchmark, e.g. ``toolbench_beta``; 256 otherwise). With ``budgets``: that budget
    when it was run, else the middle one of ``budgets``."""
    b = benchmark.lower()
    want = next((v for k, v in PRIMARY_BUDGETS.items() if b.startswith(k)), 256)
    if budgets is None or want in budgets:
        return want
    return sorted(budgets)[len(budgets) // 2]
