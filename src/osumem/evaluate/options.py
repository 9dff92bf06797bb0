"""The options of a benchmark run, as strings from a command line: checked all at once,
split, read as the types the configs declare, and the run they describe.

A front end (the ``osumem bench`` commands) parses its flags into strings, asks
:func:`check_experiment` for every problem at once, and calls :func:`run_experiment`;
nothing here prints.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from osumem import __version__
from osumem.errors import ConfigError, OSUMemError, UnknownMethodError
from osumem.evaluate.defaults import JOBS_RANGE
from osumem.evaluate.methods import method_table
from osumem.evaluate.runner import (
    _SPEC_RE,
    parse_method_runs,
    run,
    split_methods,
    write_results,
)
from osumem.frozen import coerce
from osumem.retrieve.registry import get_class, get_spec, make_config, parse_overrides

if TYPE_CHECKING:
    import pandas as pd


def check_int(text: str, flag: str, accepted: str, ok: Callable[[int], bool]) -> int | str:
    """``text`` as an int, or the problem (a string) naming ``flag`` and ``accepted``."""
    try:
        value = int(str(text).strip())
    except ValueError:
        return f"{flag}: expected {accepted}, got {text!r}"
    return value if ok(value) else f"{flag}: expected {accepted}, got {value}"


def check_int_list(text: str, flag: str, accepted: str, ok: Callable[[int], bool]) -> str | None:
    """The problem with a comma-separated integer list, or None when it is fine."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        return f"{flag}: expected comma-separated {accepted}, got {text!r}"
    bad = [x for x in items if isinstance(check_int(x, flag, accepted, ok), str)]
    if bad:
        return f"{flag}: expected comma-separated {accepted}, got {', '.join(bad)}"
    return None


def read_value(value: str, annotation: Any, where: str) -> Any:
    """A ``--set`` string read as the type a config field declares; an unreadable
    value raises :class:`ConfigError` naming ``where`` and the type in words."""
    return coerce(value, annotation, where)


def read_overrides(cfg: Any, values: Mapping[str, str], where: str) -> tuple[dict, list[str]]:
    """``<benchmark>.<param>=value`` strings read as ``cfg``'s field types, and every
    problem (unknown names, unreadable values)."""
    hints = typing.get_type_hints(type(cfg))
    known = {f.name for f in dataclasses.fields(cfg)}
    problems = []
    unknown = sorted(set(values) - known)
    if unknown:
        problems.append(f"{where}: unknown parameter(s) {unknown}; known: {sorted(known)}")
    read = {}
    for k, v in values.items():
        if k in known:
            try:
                read[k] = read_value(v, hints[k], f"{where}.{k}")
            except ConfigError as exc:
                problems.append(str(exc))
    return read, problems


def apply_overrides(cfg: Any, values: Mapping[str, str], where: str) -> Any:
    """A copy of the benchmark config ``cfg`` with ``<benchmark>.<param>=value`` applied;
    every unknown name and unreadable value is reported together in one
    :class:`ConfigError`, then the config's own range checks run."""
    read, problems = read_overrides(cfg, values, where)
    if problems:
        raise ConfigError("; ".join(problems))
    return cfg.replace(**read)


def split_overrides(
    overrides: Sequence[str], benchmark: str
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Split ``NAME.PARAM=VALUE`` strings into method overrides (by method) and the
    overrides of ``benchmark``'s own config."""
    bench: dict[str, str] = {}
    methods: list[str] = []
    for item in overrides:
        if item.split(".", 1)[0].strip() == benchmark:
            key, _, value = item.partition("=")
            bench[key.split(".", 1)[1].strip()] = value.strip()
        else:
            methods.append(item)
    return parse_overrides(methods), bench


def check_experiment(
    benchmark: str,
    *,
    bench_config: type | None = None,
    methods: str,
    budgets: str,
    episodes: str | None,
    seeds: str | None,
    jobs: str,
    overrides: Sequence[str],
) -> tuple[list[str], dict[str, Any]]:
    """Every problem with a benchmark run's options, and the parsed numeric values.

    ``bench_config`` is the config class ``<benchmark>.<param>=value`` overrides reach
    (None: the benchmark has none to check). Returns ``(problems, values)``:
    ``problems`` lists every bad value, each named with what it accepts; ``values``
    holds ``jobs`` (an integer or ``"auto"``) and ``episodes`` (an integer or None).
    """
    problems: list[str] = []
    values: dict[str, Any] = {"episodes": None}
    jobs_value: int | str = "auto"
    if str(jobs).strip().lower() != "auto":
        jobs_value = check_int(jobs, "--jobs", JOBS_RANGE, lambda v: v == -1 or v >= 1)
        if isinstance(jobs_value, str):
            problems.append(jobs_value)
    values["jobs"] = jobs_value
    if episodes is not None:
        n = check_int(episodes, "--episodes", "an integer >= 1", lambda v: v >= 1)
        if isinstance(n, str):
            problems.append(n)
        values["episodes"] = n
    for flag, text, accepted, ok in (
        ("--budgets", budgets, "integers >= 1 (tokens)", lambda v: v >= 1),
        ("--seeds", seeds, "integers >= 0", lambda v: v >= 0),
    ):
        if text is not None:
            problem = check_int_list(text, flag, accepted, ok)
            if problem:
                problems.append(problem)
    method_over: dict[str, dict[str, str]] = {}
    bad_methods: set[str] = set()
    bench_over: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        name, dot, param = key.strip().partition(".")
        if not sep or not dot or not name or not param.strip():
            problems.append(f"--set: expected NAME.PARAM=VALUE, got {item!r}")
            continue
        param, value = param.strip(), value.strip()
        if name == benchmark:
            bench_over[param] = value
            continue
        try:
            get_spec(name)
        except UnknownMethodError:
            problems.append(
                f"--set {item!r}: {name!r} is neither a method (see `osumem methods`) "
                f"nor this benchmark ({benchmark!r})"
            )
            continue
        try:
            hints = typing.get_type_hints(get_class(name).Config)
            if param in hints:
                read_value(value, hints[param], f"--set {name}.{param}")
            method_over.setdefault(name, {})[param] = value
        except OSUMemError as exc:
            problems.append(str(exc))
            bad_methods.add(name)
    for name, params in method_over.items():  # --set for methods not run, too
        if name in bad_methods:
            continue
        try:
            make_config(name, params)
        except OSUMemError as exc:
            problems.append(f"--set {name}: {exc}")
            bad_methods.add(name)
    if bench_over and bench_config is not None:
        read, bench_problems = read_overrides(bench_config(), bench_over, f"--set {benchmark}")
        problems.extend(bench_problems)
        if not bench_problems:
            try:
                bench_config().replace(**read)
            except OSUMemError as exc:
                problems.append(f"--set {exc}")
    if methods != "ALL":
        specs = split_methods(methods)
        inline, unreadable = inline_value_problems(specs)
        problems.extend(inline)
        good = {k: v for k, v in method_over.items() if k not in bad_methods}
        try:
            parse_method_runs([m for m in specs if m not in unreadable], good)
        except OSUMemError as exc:
            problems.append(f"--methods: {exc}")
    return problems, values


def inline_value_problems(specs: Sequence[str]) -> tuple[list[str], set[str]]:
    """Unreadable inline parameter values (``osumem[max_memberships=abc]``), each named
    with the type it needs, and the specs that hold them; other problems are left to
    the method parser."""
    problems: list[str] = []
    unreadable: set[str] = set()
    for spec in specs:
        m = _SPEC_RE.match(spec.strip())
        if not m or not m.group("params"):
            continue
        try:
            hints = typing.get_type_hints(get_class(m.group("name")).Config)
        except OSUMemError:
            continue
        for part in m.group("params").split(";"):
            key, sep, value = part.partition("=")
            if sep and key.strip() in hints:
                try:
                    read_value(
                        value.strip(), hints[key.strip()], f"--methods {spec}: {key.strip()}"
                    )
                except OSUMemError as exc:
                    problems.append(str(exc))
                    unreadable.add(spec)
    return problems, unreadable


def run_experiment(
    *,
    benchmark: str,
    episodes: Sequence[tuple[int, Any]],
    methods: str,
    budgets: Sequence[int],
    jobs: int | str,
    out: Path | None,
    overrides: Mapping[str, Mapping[str, str]],
    meta: Mapping[str, Any],
    progress: bool,
) -> tuple[pd.DataFrame, Path | None]:
    """Run ``methods`` (a ``--methods`` string) × ``budgets`` over ``episodes``; with
    ``out``, write the rows and the run metadata (``meta`` plus the benchmark, the
    methods, the resolved method table, the budgets and the version) there.

    Returns the rows and the path of the row file (None without ``out``)."""
    runs = parse_method_runs(split_methods(methods), overrides)
    budget_list = list(budgets)
    rows = run(episodes, runs, budget_list, benchmark=benchmark, jobs=jobs, progress=progress)
    if out is None:
        return rows, None
    full_meta = {
        **meta,
        "benchmark": benchmark,
        "methods": [r.to_dict() for r in runs],
        "method_table": method_table(runs),
        "budgets": budget_list,
        "version": __version__,
    }
    return rows, write_results(out, rows, full_meta, name=benchmark)
