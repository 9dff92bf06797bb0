"""One way to reproduce an experiment: :class:`Spec` → :func:`reproduce` → a results
directory with rows, the resolved method table, run metadata and ``report.md``.

A :class:`Spec` is the benchmark, its experiments (read from the TOML files shipped in
``osumem/experiments``, see :mod:`osumem.report.experiment`) and the run-wide choices
(episodes per seed, seeds, encoder, permutations). :func:`reproduce` does the same for
every benchmark:

1. group the experiments by row file (experiments sharing a row file run their methods
   and budgets together, over the same episodes);
2. build the episodes of each group (cached by configuration, so a sweep at the main
   size reuses them), run every method × budget, and write ``<rows>.parquet`` with
   ``<rows>.json`` beside it, always in one shape: benchmark, experiments, seeds,
   config, stage_d, encoder, construction statistics, methods, the resolved method
   table, budgets, version and seconds;
3. the analyses an experiment asks for (reachability and evidence-OSU membership;
   membership under its method parameters), efficiency at each dimension;
4. ``experiments.json``, ``spec.json`` (the run-wide choices), ``report.md``
   (:func:`~osumem.report.build.build_report`) with the benchmark's summary appended
   (ours beside the paper's), and ``timings.json``.

``osumem reproduce synthetic|taubench|toolbench`` are :func:`load_spec` then
:func:`reproduce`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from osumem.errors import ConfigError, DataFileError
from osumem.evaluate.defaults import N_PERMUTATIONS
from osumem.report.experiment import Experiment, load_experiments, shipped_experiments

BENCHMARKS: tuple[str, ...] = ("synthetic", "taubench", "toolbench", "locomo")


@dataclass(frozen=True, kw_only=True)
class Spec:
    """Everything one reproduction runs.

    ``episodes``: episodes per seed of every quality run (``None``: each benchmark's
    default; it also caps efficiency); ``sweep_episodes``: episodes per seed of the
    experiments marked ``sweep`` (``None``: the experiment's own ``episodes``);
    ``full_sweeps``: run those at the main size instead; ``seeds``: replaces every
    experiment's seeds; ``benchmark_params``: benchmark config values under every
    experiment's own; ``encoder``: ``sbert`` or ``hashing``; ``cache``: the embedding
    cache file."""

    benchmark: str
    experiments: tuple[Experiment, ...]
    episodes: int | None = None
    sweep_episodes: int | None = None
    full_sweeps: bool = False
    seeds: tuple[int, ...] | None = None
    benchmark_params: Mapping[str, Any] = field(default_factory=dict)
    encoder: str = "sbert"
    cache: Path | None = None
    n_permutations: int = N_PERMUTATIONS

    def replace(self, **changes: Any) -> Spec:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


def load_spec(benchmark: str, configs: Sequence[Path | Traversable] = (), **options: Any) -> Spec:
    """The :class:`Spec` of ``benchmark`` from experiment files (default: the shipped
    ones), every problem reported at once; ``options`` are :class:`Spec` fields."""
    if benchmark not in BENCHMARKS:
        raise ConfigError(f"unknown benchmark {benchmark!r}; known: {list(BENCHMARKS)}")
    paths = list(configs) or shipped_experiments(benchmark)
    exps = load_experiments(paths)
    other = sorted({e.benchmark for e in exps} - {benchmark})
    if other:
        raise ConfigError(f"experiments for {other} given to reproduce {benchmark}")
    if not any(e.kind != "efficiency" for e in exps):
        raise ConfigError(f"no {benchmark} quality experiment among {[str(c) for c in paths]}")
    return Spec(benchmark=benchmark, experiments=tuple(exps), **options)


def spec_dict(spec: Spec, *, data: Path | None = None) -> dict[str, Any]:
    """The run-wide choices of ``spec`` (and the data file's name), JSON-ready: what
    ``spec.json`` records beside the results (the experiments go to
    ``experiments.json``)."""
    d = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    d.pop("experiments")
    d["benchmark_params"] = dict(spec.benchmark_params)
    d["seeds"] = list(spec.seeds) if spec.seeds is not None else None
    d["data"] = Path(data).name if data is not None else None
    return d


# -- benchmarks: configuration and episodes -------------------------------------------


def _config(benchmark: str, params: Mapping[str, Any]) -> Any:
    """The benchmark's config with ``params`` applied (typed TOML values)."""
    if benchmark == "synthetic":
        from osumem.bench.synthetic import SyntheticConfig

        return SyntheticConfig().with_strings({k: str(v) for k, v in params.items()}, benchmark)
    if benchmark == "taubench":
        from osumem.bench.taubench import TauBenchConfig

        return TauBenchConfig().with_strings(dict(params), benchmark)
    if benchmark == "locomo":
        from osumem.bench.locomo import LoCoMoConfig

        # TOML lists become tuples (a config is hashable: episodes are cached by it)
        typed = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
        return LoCoMoConfig().with_strings(typed, benchmark)
    from osumem.bench.toolbench import ToolBenchConfig

    return ToolBenchConfig().with_strings(dict(params), benchmark)


class _Builder:
    """Builds ``(seed, episode)`` pairs and construction statistics for one benchmark,
    loading data, the encoder and (ToolBench) the corpus once."""

    def __init__(self, spec: Spec, data: Path | None, encoder: Any) -> None:
        self.spec, self.data, self._encoder = spec, data, encoder
        self._corpus: dict[tuple[Any, ...], Any] = {}

    def encoder(self) -> Any:
        """The step encoder (ToolBench), loaded on first use."""
        if self._encoder is None:
            from osumem.embed import HashingEncoder, load_encoder

            self._encoder = (
                HashingEncoder(384) if self.spec.encoder == "hashing" else load_encoder()
            )
        return self._encoder

    def __call__(
        self, cfg: Any, seeds: Sequence[int], stage_d: bool
    ) -> tuple[list[tuple[int, Any]], dict[str, Any]]:
        bench = self.spec.benchmark
        if bench == "synthetic":
            from osumem.bench import synthetic

            eps = [(s, ep) for s in seeds for ep in synthetic.generate(cfg, s)]
            return eps, synthetic.construction_stats([ep for _, ep in eps])
        assert self.data is not None  # checked by reproduce before anything runs
        if bench == "taubench":
            from osumem.bench.taubench_report import build_taubench

            if self._encoder is not None:
                raise ConfigError("tau-bench takes its encoder by name (Spec.encoder)")
            return build_taubench(
                self.data,
                cfg,
                list(seeds),
                stage_d=stage_d,
                encoder=self.spec.encoder,
                cache=self.spec.cache,
            )
        if bench == "locomo":
            from osumem.bench.locomo import build_locomo

            return build_locomo(
                self.data, cfg, encoder=self._encoder or self.spec.encoder, cache=self.spec.cache
            )
        from osumem.bench.toolbench import build_corpus, construction_stats, generate
        from osumem.ingest.toolbench import read_toolbench

        key = (cfg.signature_level, cfg.step_roles, cfg.n_neighbors)
        if key not in self._corpus:
            records = read_toolbench(self.data, signature_level=cfg.signature_level)
            self._corpus[key] = build_corpus(
                records, self.encoder(), step_roles=cfg.step_roles, n_neighbors=cfg.n_neighbors
            )
        eps = [(s, ep) for s in seeds for ep in generate(self._corpus[key], cfg, s)]
        return eps, construction_stats([ep for _, ep in eps])


# -- the run ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Group:
    """The experiments sharing one row file, resolved: one run."""

    rows: str
    experiments: tuple[Experiment, ...]
    methods: tuple[str, ...]
    budgets: tuple[int, ...]
    seeds: tuple[int, ...]
    config: Any
    stage_d: bool
    analyses: tuple[Experiment, ...]


def _n_episodes(spec: Spec, exp: Experiment) -> int | None:
    """Episodes per seed of a quality experiment (``None``: the config's default)."""
    if exp.sweep and spec.full_sweeps:
        return spec.episodes
    if exp.sweep:
        return spec.sweep_episodes if spec.sweep_episodes is not None else exp.episodes
    return spec.episodes if spec.episodes is not None else exp.episodes


def _groups(spec: Spec) -> list[_Group]:
    """The quality experiments grouped by row file, in order of first appearance;
    the members of a group must agree on how their episodes are built."""
    by_rows: dict[str, list[Experiment]] = {}
    for e in spec.experiments:
        if e.kind != "efficiency":
            by_rows.setdefault(e.row_file, []).append(e)
    out = []
    for rows, exps in by_rows.items():
        keys = {
            (
                spec.seeds or e.seeds,
                json.dumps(dict(e.benchmark_params), sort_keys=True, default=str),
                e.stage_d,
                _n_episodes(spec, e),
            )
            for e in exps
        }
        if len(keys) > 1:
            raise ConfigError(
                f"experiments writing {rows!r} disagree on seeds, benchmark_params, stage_d "
                "or episodes: "
                + "; ".join(
                    f"{e.source}: seeds {e.seeds}, {dict(e.benchmark_params)}, "
                    f"stage_d {e.stage_d}, episodes {_n_episodes(spec, e)}"
                    for e in exps
                )
            )
        first = exps[0]
        params = {**spec.benchmark_params, **first.benchmark_params}
        n = _n_episodes(spec, first)
        if n is not None:
            params["n_episodes"] = n
        out.append(
            _Group(
                rows=rows,
                experiments=tuple(exps),
                methods=tuple(dict.fromkeys(m for e in exps for m in e.run_methods())),
                budgets=tuple(sorted({b for e in exps for b in e.budgets})),
                seeds=tuple(spec.seeds or first.seeds),
                config=_config(spec.benchmark, params),
                stage_d=first.stage_d,
                analyses=tuple({e.analysis: e for e in exps if e.analysis}.values()),
            )
        )
    return out


def _membership(
    episodes: Sequence[tuple[int, Any]], method_params: Mapping[str, Any], jobs: int
) -> Any:
    """Evidence-OSU membership rows (overlap and disjoint constructions with
    ``method_params``) for ``(seed, episode)`` pairs, in parallel."""
    import pandas as pd
    from joblib import Parallel, delayed

    from osumem.evaluate.membership import DEFAULT_MODES, membership_rows

    modes = {m: {**ch, **method_params} for m, ch in DEFAULT_MODES.items()}
    parts = Parallel(n_jobs=jobs)(
        delayed(membership_rows)([ep], modes, seed=s) for s, ep in episodes
    )
    return pd.concat(parts, ignore_index=True)


def run_efficiency(exp: Experiment, *, episodes_cap: int | None, progress: bool) -> tuple[Any, Any]:
    """Measure an efficiency experiment (synthetic episodes) at each of its dims;
    returns the raw measurements and the table."""
    import pandas as pd

    from osumem.bench.synthetic import generate
    from osumem.evaluate.efficiency import efficiency_table, measure
    from osumem.evaluate.runner import parse_method_runs

    runs = parse_method_runs(list(exp.run_methods()))
    n = exp.episodes
    if episodes_cap is not None:
        n = min(n, episodes_cap) if n is not None else episodes_cap
    frames = []
    for dim in exp.dims:
        params: dict[str, Any] = {**exp.benchmark_params, "dim": dim}
        if n is not None:
            params["n_episodes"] = n
        cfg = _config("synthetic", params)
        eps = [ep for seed in exp.seeds for ep in generate(cfg, seed)]
        _say(progress, f"efficiency: {len(runs)} methods × {len(eps)} episodes at {dim}-d")
        frames.append(measure(eps, runs, budget=exp.primary_budget, dim_label=str(dim)))
    raw = pd.concat(frames, ignore_index=True)
    return raw, efficiency_table(raw, reference=exp.reference)


def _say(progress: bool, text: str) -> None:
    if progress:
        import sys

        print(text, file=sys.stderr, flush=True)


#: The benchmark summaries appended to the report (ours beside the paper's), by
#: benchmark: ``(results, spec) -> markdown``, and the file each is also written to.
def _summaries() -> dict[str, tuple[Callable[[Path, Spec], str], str]]:
    from osumem.bench.locomo_report import summary_markdown as locomo_summary
    from osumem.bench.taubench_report import summary_markdown as taubench_summary
    from osumem.bench.toolbench_report import summary_markdown as toolbench_summary

    return {
        "locomo": (
            lambda out, spec: locomo_summary(out, n_permutations=spec.n_permutations),
            "locomo_summary.md",
        ),
        "taubench": (
            lambda out, spec: taubench_summary(out, n_permutations=spec.n_permutations),
            "taubench_summary.md",
        ),
        "toolbench": (toolbench_summary, "toolbench_summary.md"),
    }


def reproduce(
    spec: Spec,
    *,
    out: Path,
    data: Path | None = None,
    jobs: int = -1,
    progress: bool = True,
    encoder: Any = None,
) -> dict[str, Any]:
    """Run ``spec`` into ``out``: rows, method table and metadata per row file, the
    analyses, efficiency, ``experiments.json``, ``report.md`` (with the benchmark's
    summary appended and also written alone) and ``timings.json``. ``data``: the
    benchmark's input (tau-bench JSON file, ToolBench directory); ``encoder``: an
    encoder object to use instead of ``spec.encoder`` (ToolBench). Returns the report
    path and the timings."""
    import pandas as pd

    from osumem import __version__
    from osumem.bench.toolbench_report import params_membership_path
    from osumem.evaluate.methods import TABLE_KEY, method_table
    from osumem.evaluate.osu_analysis import episode_osu_analysis, write_osu_analysis
    from osumem.evaluate.runner import parse_method_runs, run_episodes, write_results
    from osumem.report.build import ReportSettings, build_report

    started = time.perf_counter()
    groups = _groups(spec)  # every configuration problem before anything runs
    runs_by_group = {g.rows: parse_method_runs(list(g.methods)) for g in groups}
    if spec.benchmark != "synthetic" and (data is None or not Path(data).exists()):
        raise DataFileError(f"reproduce {spec.benchmark}: data not found: {data}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    build = _Builder(spec, Path(data) if data is not None else None, encoder)
    cache: dict[tuple[Any, ...], tuple[list[tuple[int, Any]], dict[str, Any]]] = {}
    timings: dict[str, Any] = {}
    for g in groups:
        t0 = time.perf_counter()
        key = (g.config, g.seeds, g.stage_d)
        if key not in cache:
            cache[key] = build(g.config, g.seeds, g.stage_d)
        eps, stats = cache[key]
        runs = runs_by_group[g.rows]
        # the OSU analysis runs beside each episode's evaluation, on the pools it built
        osu = any(e.analysis == "osu" for e in g.analyses)
        after = partial(episode_osu_analysis, budgets=list(g.budgets)) if osu else None
        rows, parts, after_s = run_episodes(
            eps, runs, list(g.budgets), benchmark=g.rows, jobs=jobs, progress=progress, after=after
        )
        seconds = round(time.perf_counter() - t0, 1)  # with the analysis beside it
        write_results(
            out,
            rows,
            {
                "benchmark": g.rows,
                "experiments": [e.name for e in g.experiments],
                "seeds": list(g.seeds),
                "config": g.config.to_dict(),
                "stage_d": g.stage_d,
                "encoder": spec.encoder,
                "construction": stats,
                "methods": list(g.methods),
                TABLE_KEY: method_table(runs),
                "budgets": list(g.budgets),
                "version": __version__,
                "seconds": seconds,
            },
            name=g.rows,
        )
        timings[f"{g.rows}_s"] = seconds
        for e in g.analyses:
            t0 = time.perf_counter()
            if e.analysis == "osu":
                _say(progress, f"{g.rows}: reachability and evidence-OSU membership")
                write_osu_analysis(out, g.rows, eps, list(g.budgets), parts=parts, seconds=after_s)
            else:
                path = params_membership_path(out, g.rows)  # read by the summary
                path.parent.mkdir(parents=True, exist_ok=True)
                _membership(eps, e.method_params, jobs).to_parquet(path, index=False)
            # the OSU analysis: its seconds inside the run (summed over workers) + writing
            spent = after_s if e.analysis == "osu" else 0.0
            timings[f"{g.rows}_{e.analysis}_s"] = round(time.perf_counter() - t0 + spent, 1)
    eff = [e for e in spec.experiments if e.kind == "efficiency"]
    if eff:
        t0 = time.perf_counter()
        raws, tables = [], []
        for e in eff:
            raw, table = run_efficiency(e, episodes_cap=spec.episodes, progress=progress)
            raws.append(raw)
            tables.append(table)
        pd.concat(tables).to_csv(out / "efficiency.csv", index=False)
        pd.concat(raws).to_csv(out / "efficiency_raw.csv.gz", index=False)
        timings["efficiency_s"] = round(time.perf_counter() - t0, 1)
    (out / "experiments.json").write_text(
        json.dumps([e.to_dict() for e in spec.experiments], indent=2, default=str) + "\n"
    )
    (out / "spec.json").write_text(
        json.dumps(spec_dict(spec, data=data), indent=2, default=str) + "\n"
    )
    t0 = time.perf_counter()
    report = build_report(
        out, settings=ReportSettings(n_permutations=spec.n_permutations, jobs=jobs)
    )
    summary = _summaries().get(spec.benchmark)
    if summary is not None:
        fn, name = summary
        text = fn(out, spec)
        (out / name).write_text(text)
        with report.open("a", encoding="utf-8") as fh:
            fh.write("\n" + text)
    timings["report_s"] = round(time.perf_counter() - t0, 1)
    timings["total_s"] = round(time.perf_counter() - started, 1)
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    return {"report": str(report), **timings}
