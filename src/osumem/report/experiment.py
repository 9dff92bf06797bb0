"""Experiment configuration files, one per paper table.

The paper's experiments ship inside the package (``osumem/experiments/*.toml``, read
with :mod:`importlib.resources`, so they work from an installed wheel); any other file
in the same format can be given instead.

Format (TOML, read with :mod:`tomllib`)::

    [experiment]
    name = "table2"                 # unique; the report section id
    title = "Table 2: ..."          # the section heading
    kind = "comparison"             # comparison | sweep | ablation | efficiency
    benchmark = "synthetic"
    seeds = [0]
    budgets = [64, 128, 256, 512]
    primary_budget = 256            # must be one of budgets
    reference = "osumem"            # a method spec listed in methods
    metrics = ["recall", "hit2"]
    methods = ["osumem", "flat", "osumem[max_memberships=3]"]
    episodes = 20                   # optional: cap episodes per seed (efficiency)
    dims = [64, 384]                # efficiency only: embedding dimensions
    paper_note = "..."              # optional: what the paper says, printed under the title
    rows = "synthetic"              # optional: the row file (default: the benchmark);
                                    # experiments sharing one run their methods together
    stage_d = false                 # optional: Stage D augmentation (tau-bench)
    sweep = false                   # optional: run at the sweep size (ToolBench β / k)
    role = "main"                   # optional: the part of the benchmark's summary it feeds
    analysis = "osu"                # optional: "osu" (reach + membership rows) or
                                    # "membership" (evidence-OSU membership with method_params)
    [experiment.benchmark_params]   # optional: benchmark config overrides
    noise_scale = 0.875
    [experiment.method_params]      # optional: parameters given to every method
    gap = 16
    [experiment.grid]               # optional: every method once per value
    beta = [0.04, 0.12]

Kinds ``comparison``, ``sweep`` and ``ablation`` are report sections of their own;
``rows`` experiments only produce rows (the benchmark's summary presents them);
``efficiency`` measures time and storage. A file holds one ``[experiment]`` table or
several ``[[experiment]]`` tables. ``methods = ["ALL"]`` means every registered
non-oracle method whose module imports.

:func:`load_experiments` validates every file and reports every problem at once in a
single :class:`~osumem.errors.ConfigError` (unknown keys, wrong types, methods that are
not registered or whose module is not available, budgets, references).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from osumem.errors import ConfigError, OSUMemError
from osumem.evaluate.metrics import METRICS as ALL_METRICS

KINDS: tuple[str, ...] = ("comparison", "sweep", "ablation", "rows", "efficiency")
#: The kinds with a report section of their own (configured tables).
SECTION_KINDS: tuple[str, ...] = ("comparison", "sweep", "ablation")
ANALYSES: tuple[str, ...] = ("", "osu", "membership")
METRICS: tuple[str, ...] = tuple(ALL_METRICS)
_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "title": str,
    "kind": str,
    "benchmark": str,
    "seeds": list,
    "budgets": list,
    "primary_budget": int,
    "reference": str,
    "metrics": list,
    "methods": list,
    "episodes": int,
    "dims": list,
    "benchmark_params": dict,
    "paper_note": str,
    "rows": str,
    "stage_d": bool,
    "sweep": bool,
    "role": str,
    "analysis": str,
    "method_params": dict,
    "grid": dict,
}
_REQUIRED = ("name", "kind", "benchmark", "budgets", "methods")


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """One paper table's experiment, validated."""

    name: str
    title: str
    kind: str
    benchmark: str
    seeds: tuple[int, ...] = (0,)
    budgets: tuple[int, ...]
    primary_budget: int
    reference: str
    metrics: tuple[str, ...] = ("recall", "hit2")
    methods: tuple[str, ...]
    episodes: int | None = None
    dims: tuple[int, ...] = ()
    benchmark_params: Mapping[str, Any] = field(default_factory=dict)
    paper_note: str = ""
    rows: str = ""
    stage_d: bool = False
    sweep: bool = False
    role: str = ""
    analysis: str = ""
    method_params: Mapping[str, Any] = field(default_factory=dict)
    grid: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    source: str = ""

    @property
    def row_file(self) -> str:
        """The row file this experiment's methods are written to (without suffix)."""
        return self.rows or self.benchmark

    def run_methods(self) -> tuple[str, ...]:
        """The method specs actually run: ``ALL`` expanded, every :attr:`grid` value
        (one spec per value and method, values outermost) and :attr:`method_params`
        written inline (``method[k=v;k=v]``)."""
        from osumem.evaluate.methods import runnable_methods
        from osumem.evaluate.runner import with_params

        names: list[str] = []
        for m in self.methods:
            names += runnable_methods() if m == "ALL" else [m]
        names = list(dict.fromkeys(names))
        combos: list[dict[str, Any]] = [{}]
        for key, values in self.grid.items():
            combos = [{**c, key: v} for c in combos for v in values]
        return tuple(with_params(m, {**c, **self.method_params}) for c in combos for m in names)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (written beside the results so the report can read it)."""
        d = asdict(self)
        d["benchmark_params"] = dict(self.benchmark_params)
        d["method_params"] = dict(self.method_params)
        d["grid"] = {k: list(v) for k, v in self.grid.items()}
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Experiment:
        """Inverse of :meth:`to_dict` (no validation: the data came from a loaded file)."""
        d = dict(data)
        for k in ("seeds", "budgets", "metrics", "methods", "dims"):
            d[k] = tuple(d.get(k, ()))
        d["grid"] = {k: tuple(v) for k, v in d.get("grid", {}).items()}
        return cls(**d)


def _check_ints(value: Any, key: str, where: str, problems: list[str]) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        problems.append(f"{where}: {key} must be a list of integers, got {value!r}")
        return ()
    return tuple(value)


def parse_experiments(data: Mapping[str, Any], where: str, problems: list[str]) -> list[Experiment]:
    """Validate a file's ``[experiment]`` table or ``[[experiment]]`` tables; append
    every problem to ``problems``."""
    tables = data.get("experiment")
    if isinstance(tables, dict):
        tables = [tables]
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        problems.append(f"{where}: missing [experiment] table")
        return []
    out = []
    for i, table in enumerate(tables):
        here = where if len(tables) == 1 else f"{where} (experiment {i + 1})"
        exp = parse_experiment(table, here, problems)
        if exp is not None:
            out.append(exp)
    return out


def parse_experiment(exp: Mapping[str, Any], where: str, problems: list[str]) -> Experiment | None:
    """Validate one experiment table; append every problem to ``problems``."""
    from osumem.evaluate.runner import parse_method_runs

    before = len(problems)
    for key in sorted(set(exp) - set(_KEYS)):
        problems.append(f"{where}: unknown key {key!r}; known: {sorted(_KEYS)}")
    for key in _REQUIRED:
        if key not in exp:
            problems.append(f"{where}: missing required key {key!r}")
    for key, typ in _KEYS.items():
        if key in exp and not isinstance(exp[key], typ):
            problems.append(f"{where}: {key} must be {typ}, got {exp[key]!r}")
    if len(problems) > before:
        return None
    kind = exp["kind"]
    if kind not in KINDS:
        problems.append(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    budgets = _check_ints(exp["budgets"], "budgets", where, problems)
    if any(b <= 0 for b in budgets) or not budgets:
        problems.append(f"{where}: budgets must be positive and non-empty, got {budgets}")
    seeds = _check_ints(exp.get("seeds", [0]), "seeds", where, problems)
    dims = _check_ints(exp.get("dims", []), "dims", where, problems)
    if kind == "efficiency" and not dims:
        problems.append(f"{where}: an efficiency experiment needs dims (e.g. [64, 384])")
    primary = exp.get("primary_budget", budgets[0] if budgets else 0)
    if budgets and primary not in budgets:
        problems.append(f"{where}: primary_budget {primary} is not one of budgets {budgets}")
    methods = exp["methods"]
    analysis = exp.get("analysis", "")
    if analysis not in ANALYSES:
        problems.append(f"{where}: analysis must be one of {ANALYSES}, got {analysis!r}")
    grid = exp.get("grid", {})
    bad_grid = [k for k, v in grid.items() if not isinstance(v, list) or not v]
    for key in bad_grid:
        problems.append(f"{where}: grid.{key} must be a non-empty list, got {grid[key]!r}")
    if not all(isinstance(m, str) for m in methods) or not methods:
        problems.append(f"{where}: methods must be a non-empty list of method specs")
        methods = []
    elif not bad_grid:
        draft = Experiment(
            name="",
            title="",
            kind=kind,
            benchmark="",
            budgets=(),
            primary_budget=0,
            reference="",
            methods=tuple(methods),
            method_params=dict(exp.get("method_params", {})),
            grid={k: tuple(v) for k, v in grid.items()},
        )
        try:
            parse_method_runs(list(draft.run_methods()))
        except OSUMemError as exc:  # every unknown / unavailable method at once
            problems.append(f"{where}: {exc}")
    reference = exp.get("reference", methods[0] if methods else "")
    if methods and reference not in methods and "ALL" not in methods:
        problems.append(f"{where}: reference {reference!r} is not among the methods")
    metrics = exp.get("metrics", ["recall", "hit2"])
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        problems.append(f"{where}: unknown metrics {bad}; known: {METRICS}")
    episodes = exp.get("episodes")
    if episodes is not None and episodes < 1:
        problems.append(f"{where}: episodes must be >= 1, got {episodes}")
    if len(problems) > before:
        return None
    return Experiment(
        name=exp["name"],
        title=exp["title"] if "title" in exp else exp["name"],
        kind=kind,
        benchmark=exp["benchmark"],
        seeds=seeds,
        budgets=budgets,
        primary_budget=int(primary),
        reference=reference,
        metrics=tuple(metrics),
        methods=tuple(methods),
        episodes=episodes,
        dims=dims,
        benchmark_params=dict(exp.get("benchmark_params", {})),
        paper_note=exp.get("paper_note", ""),
        rows=exp.get("rows", ""),
        stage_d=exp.get("stage_d", False),
        sweep=exp.get("sweep", False),
        role=exp.get("role", ""),
        analysis=analysis,
        method_params=dict(exp.get("method_params", {})),
        grid={k: tuple(v) for k, v in grid.items()},
        source=where,
    )


def load_experiments(paths: Iterable[Path | Traversable]) -> list[Experiment]:
    """Load and validate experiment files (paths, or the shipped files of
    :func:`shipped_experiments`); one :class:`ConfigError` lists every problem."""
    problems: list[str] = []
    out: list[Experiment] = []
    for path in paths:
        where = str(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            problems.append(f"{where}: no such file")
            continue
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"{where}: not valid TOML: {exc}")
            continue
        out += parse_experiments(data, where, problems)
    names = [e.name for e in out]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"experiment name {dup!r} is used by more than one file")
    if problems:
        raise ConfigError(
            f"{len(problems)} problem(s) in the experiment configuration:\n  - "
            + "\n  - ".join(problems)
        )
    return out


def shipped_dir() -> Traversable:
    """The paper's experiment files inside the installed package (``osumem/experiments``)."""
    return resources.files("osumem").joinpath("experiments")


def experiment_files(
    directory: Path | Traversable | None, benchmark: str
) -> list[Path | Traversable]:
    """The experiment files for ``benchmark`` (``*<benchmark>*.toml`` holding an
    ``[experiment]`` table) in ``directory``; ``None``: the shipped ones. Other TOML
    files (e.g. a grid another tool reads) are left alone."""
    root: Path | Traversable = shipped_dir() if directory is None else directory
    out: list[Path | Traversable] = []
    candidates = sorted(
        (p for p in root.iterdir() if p.is_file() and p.name.endswith(".toml")),
        key=lambda p: p.name,
    )
    for p in candidates:
        if benchmark not in p.name:
            continue
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            out.append(p)  # let the loader report it
            continue
        if "experiment" in data:
            out.append(p)
    return out


def shipped_experiments(benchmark: str) -> list[Path | Traversable]:
    """The paper's shipped experiment files for ``benchmark``."""
    return experiment_files(None, benchmark)
