"""Defaults of the evaluation that several modules share, defined once (and cheap to
import, so command-line option defaults can use them)."""

from __future__ import annotations

#: Random sign vectors per permutation test (the paper's 10,000).
N_PERMUTATIONS = 10_000

#: The paper's primary token budget per benchmark (the budget its headline tables and
#: Stage D / cross-tab comparisons are reported at).
PRIMARY_BUDGETS: dict[str, int] = {
    "synthetic": 256,
    "taubench": 256,
    "toolbench": 400,
    "locomo": 256,
}


#: The paper's budgets per benchmark (what its tables report).
BUDGETS: dict[str, tuple[int, ...]] = {
    "synthetic": (64, 128, 256, 512),
    "taubench": (64, 128, 256, 512),
    "toolbench": (200, 400, 800, 1600),
    "locomo": (128, 256, 512, 1024),
}

#: The ToolBench probe: the paper's evaluation seeds and the four methods of its table.
TOOLBENCH_SEEDS: tuple[int, ...] = (42, 123, 456)
TOOLBENCH_METHODS: tuple[str, ...] = (
    "flat",
    "osumem",
    "osumem_coverage",
    "osumem_coverage_disjoint",
)


def as_option(values: tuple[object, ...]) -> str:
    """A tuple of defaults as a comma-separated command-line value."""
    return ",".join(str(v) for v in values)


def primary_budget(benchmark: str, budgets: list[int] | None = None) -> int:
    """The paper's primary budget for ``benchmark`` (any name starting with a known
    benchmark, e.g. ``toolbench_beta``; 256 otherwise). With ``budgets``: that budget
    when it was run, else the middle one of ``budgets``."""
    b = benchmark.lower()
    want = next((v for k, v in PRIMARY_BUDGETS.items() if b.startswith(k)), 256)
    if budgets is None or want in budgets:
        return want
    return sorted(budgets)[len(budgets) // 2]


#: What a worker count (``--jobs``) accepts, in words (the one place that says it).
JOBS_RANGE = "auto, -1 (all cores) or a number of workers >= 1"
