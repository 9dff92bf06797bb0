"""Evaluate methods × budgets over episodes into per-query result rows.

Rows are the single source of truth for every table, test and plot. Each method is
fitted once per distinct query time on the causal prefix (steps before ``t``), so no
method can see the future; construction time is recorded and spread over the
retrievals that share the fit (``build_share_s``), giving amortised latency.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from osumem.errors import ConfigError, OSUMemError
from osumem.evaluate.metrics import score_query
from osumem.retrieve.budget import check_budget
from osumem.retrieve.registry import get_class, get_spec, make_config, params_for
from osumem.types import Episode

if TYPE_CHECKING:  # pandas is imported where rows are built (the ``bench`` extra)
    import pandas as pd

#: Columns every result row has (more may follow).
ROW_COLUMNS: tuple[str, ...] = (
    "benchmark",
    "seed",
    "episode",
    "query",
    "method",
    "budget",
    "hit1",
    "hit2",
    "recall",
    "n_evidence",
    "n_found",
    "cell",
    "latency_s",
    "build_share_s",
    "build_s",
    "n_steps",
    "t",
    "n_selected",
    "cost",
    "ev_distance",
    "ev_found",
)


@dataclass(frozen=True)
class MethodRun:
    """One method column of an experiment: a label, a registry name and parameters."""

    label: str
    method: str
    params: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what run metadata records)."""
        return {"label": self.label, "method": self.method, "params": dict(self.params)}


_SPEC_RE = re.compile(r"^(?P<name>[A-Za-z0-9_]+)(?:\[(?P<params>[^\]]*)\])?$")


def split_methods(text: str) -> list[str]:
    """Split a ``--methods`` value on commas outside brackets."""
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [m for m in out if m]


def with_params(spec: str, params: Mapping[str, Any]) -> str:
    """The method spec ``spec`` with ``params`` added inline (``name[k=v;k=v]``, the
    grammar :func:`parse_method_runs` reads); ``spec`` itself when there are none."""
    if not params:
        return spec
    m = _SPEC_RE.match(spec.strip())
    if not m:
        raise ConfigError(f"cannot parse method spec {spec!r}")
    parts = [p for p in (m.group("params") or "").split(";") if p]
    parts += [f"{k}={v}" for k, v in params.items()]
    return f"{m.group('name')}[{';'.join(parts)}]"


def parse_method_runs(
    methods: Iterable[str], overrides: Mapping[str, Mapping[str, str]] | None = None
) -> list[MethodRun]:
    """Turn method specs into runs, validating every one before anything runs.

    A spec is a registry name, optionally with inline parameters:
    ``osumem[max_memberships=3;novelty=false]`` (its label is the spec itself).
    ``overrides`` are the ``--set`` values; inline parameters win over them. All
    problems are reported at once in one :class:`ConfigError`.
    """
    runs, problems = [], []
    for spec in methods:
        m = _SPEC_RE.match(spec.strip())
        if not m:
            problems.append(f"cannot parse method spec {spec!r}")
            continue
        name = m.group("name")
        try:
            get_spec(name)
        except KeyError as exc:
            problems.append(str(exc))
            continue
        params = dict(params_for(name, overrides or {}))
        for part in filter(None, (m.group("params") or "").split(";")):
            key, sep, value = part.partition("=")
            if not sep:
                problems.append(f"{spec}: expected param=value, got {part!r}")
                continue
            params[key.strip()] = value.strip()
        try:
            make_config(name, params)
        except OSUMemError as exc:  # report every bad spec together
            problems.append(str(exc))
            continue
        runs.append(MethodRun(label=spec.strip(), method=name, params=params))
    labels = [r.label for r in runs]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        problems.append(f"methods listed twice: {dupes}")
    if problems:
        raise ConfigError("; ".join(problems))
    return runs


#: Configs by (registry name, parameters), made once per process: a config is
#: immutable, and validating one per method and episode cost more than the small
#: methods' retrieval.
_CONFIGS: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}


def _run_config(run: MethodRun) -> Any:
    key = (run.method, tuple(sorted(run.params.items())))
    config = _CONFIGS.get(key)
    if config is None:
        config = _CONFIGS[key] = make_config(run.method, run.params)
    return config


def evaluate_episode(
    episode: Episode,
    runs: Sequence[MethodRun],
    budgets: Sequence[int],
    *,
    benchmark: str,
    seed: int,
    pools: dict[tuple[Any, int], tuple[Any, float]] | None = None,
) -> list[dict[str, Any]]:
    """Per-query rows for one episode, every method and budget. ``pools`` (optional):
    a dict that receives the fitted states built (``Retriever.state``: the OSU pools),
    ``(Retriever.state_key(), t) -> (state, build seconds)``, for an analysis of the
    same episode to reuse.

    Runs that name the same method (class and config; e.g. ``osumem`` and
    ``osumem[max_memberships=5]``) are evaluated once: the others get the same rows
    under their own label, timing columns included (the runs are one computation)."""
    from osumem.osu.views import shared_communities

    # constructions that differ only in M_max partition the same similarity graph
    with shared_communities():
        return _evaluate_episode(episode, runs, budgets, benchmark, seed, pools)


def _evaluate_episode(
    episode: Episode,
    runs: Sequence[MethodRun],
    budgets: Sequence[int],
    benchmark: str,
    seed: int,
    pools: dict[tuple[Any, int], tuple[Any, float]] | None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    by_t: dict[int, list] = defaultdict(list)
    for q in episode.queries:
        by_t[int(q.t)].append(q)
    # every query is validated and normalised once, for every method and budget
    unit = {q.qid: episode.view.check_query(q.vector, where=q.qid) for q in episode.queries}
    # methods whose OSU pools have the same construction settings share one build per
    # prefix (a pool is read-only to retrieval); each row keeps that build's time
    if pools is None:
        pools = {}
    done: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for run in runs:
        config = _run_config(run)
        cls = get_class(run.method)
        try:
            key: tuple[Any, ...] | None = (cls, hash(config), config)
        except TypeError:  # a config with unhashable values is never shared
            key = None
        same = None if key is None else done.get(key)
        if same is not None:
            rows.extend({**row, "method": run.label} for row in same)
            continue
        retriever = cls(config, seed=seed)
        run_rows: list[dict[str, Any]] = []
        for t in sorted(by_t):
            queries = by_t[t]
            view = episode.view.prefix(t)
            state_key = retriever.state_key()
            shared = None if state_key is None else pools.get((state_key, t))
            if shared is not None:
                retriever.load_state(view, shared[0])
                build_s = shared[1]
            else:
                start = time.perf_counter()
                retriever.fit(view)
                build_s = time.perf_counter() - start
                if state_key is not None:
                    pools[(state_key, t)] = (retriever.state(), build_s)
            share = build_s / (len(queries) * len(budgets))
            for q in queries:
                ev = np.asarray(q.evidence, dtype=np.int64) if retriever.is_oracle else None
                qv = unit[q.qid]
                for b in budgets:
                    start = time.perf_counter()
                    sel = retriever.retrieve_unit(qv, b, evidence=ev, text=q.text or None)
                    latency = time.perf_counter() - start
                    if sel.cost > b or (sel.positions.size and sel.positions.max() >= t):
                        raise RuntimeError(
                            f"{run.label} broke the budget or causality on {q.qid} at B={b}"
                        )
                    s = score_query(sel.positions, q.evidence, t)
                    run_rows.append(
                        {
                            "benchmark": benchmark,
                            "seed": seed,
                            "episode": episode.episode_id,
                            "query": q.qid,
                            "method": run.label,
                            "budget": int(b),
                            "hit1": s.hit1,
                            "hit2": s.hit2,
                            "recall": s.recall,
                            "n_evidence": s.n_evidence,
                            "n_found": s.n_found,
                            "cell": q.cell,
                            "latency_s": latency,
                            "build_share_s": share,
                            "build_s": build_s,
                            "n_steps": episode.view.n,
                            "t": t,
                            "n_selected": len(sel),
                            "cost": sel.cost,
                            "ev_distance": list(s.ev_distance),
                            "ev_found": list(s.ev_found),
                        }
                    )
        if key is not None:
            done[key] = run_rows
        rows.extend(run_rows)
    return rows


#: ``jobs="auto"`` runs in one process below this many episodes and on all cores from
#: it: each worker process re-imports the package, which small runs do not repay
#: (docs/decisions.md).
AUTO_JOBS_MIN_EPISODES = 20


def auto_jobs(n_episodes: int) -> int:
    """The worker count ``jobs="auto"`` means for a run over ``n_episodes`` episodes."""
    return 1 if n_episodes < AUTO_JOBS_MIN_EPISODES else -1


def check_jobs(jobs: Any) -> int:
    """Validate a worker count: -1 (all cores) or an integer >= 1."""
    if (
        isinstance(jobs, bool)
        or not isinstance(jobs, int | np.integer)
        or not (jobs == -1 or jobs >= 1)
    ):
        raise ConfigError(f"jobs must be -1 (all cores) or a number of workers >= 1, got {jobs!r}")
    return int(jobs)


#: Modules whose native thread pools a method's fit uses, imported before the thread
#: limit is set: threadpoolctl limits only libraries already loaded, and the tree
#: baseline imports scikit-learn (its OpenMP runtime) lazily, at its first fit.
_THREADED_IMPORTS: dict[str, str] = {"osumem.retrieve.tree": "sklearn.cluster"}


@contextmanager
def single_threaded(runs: Sequence[MethodRun] = ()) -> Iterator[None]:
    """Hold BLAS/OpenMP to one thread while ``runs`` are fitted and queried.

    An episode's matrices are small, so more threads only spin (scikit-learn's k-means
    in the ``tree`` baseline spent most of its CPU time that way on a busy machine);
    parallelism comes from the episode workers, which joblib already starts with one
    thread each. The native libraries of the methods in ``runs`` are loaded first, so
    the limit reaches them. Results do not depend on the thread count."""
    import importlib

    from threadpoolctl import threadpool_limits

    for r in runs:
        module = get_spec(r.method).target.partition(":")[0]
        if module in _THREADED_IMPORTS:
            with suppress(ImportError):  # the method reports a missing extra itself
                importlib.import_module(_THREADED_IMPORTS[module])
    with threadpool_limits(limits=1):
        yield


def run(
    episodes: Sequence[tuple[int, Episode]],
    runs: Sequence[MethodRun],
    budgets: Sequence[int],
    *,
    benchmark: str,
    jobs: int | str = 1,
    progress: bool = True,
) -> pd.DataFrame:
    """Evaluate ``runs`` × ``budgets`` over ``(seed, episode)`` pairs, in parallel over
    episodes with joblib (``jobs``: -1 for all cores, a number of workers >= 1, or
    ``"auto"``: :func:`auto_jobs`);
    returns the per-query rows in a deterministic order. The progress bar (``progress``)
    is drawn only when stderr is a terminal."""
    rows, _, _ = run_episodes(
        episodes, runs, budgets, benchmark=benchmark, jobs=jobs, progress=progress
    )
    return rows


def _episode_task(
    episode: Episode,
    runs: Sequence[MethodRun],
    budgets: Sequence[int],
    benchmark: str,
    seed: int,
    after: Callable[[int, Episode, dict[tuple[Any, int], tuple[Any, float]]], Any] | None,
) -> tuple[list[dict[str, Any]], Any, float]:
    pools: dict[tuple[Any, int], tuple[Any, float]] = {}
    rows = evaluate_episode(episode, runs, budgets, benchmark=benchmark, seed=seed, pools=pools)
    if after is None:
        return rows, None, 0.0
    start = time.perf_counter()
    extra = after(seed, episode, pools)
    return rows, extra, time.perf_counter() - start


def run_episodes(
    episodes: Sequence[tuple[int, Episode]],
    runs: Sequence[MethodRun],
    budgets: Sequence[int],
    *,
    benchmark: str,
    jobs: int | str = 1,
    progress: bool = True,
    after: Callable[[int, Episode, dict[tuple[Any, int], tuple[Any, float]]], Any] | None = None,
) -> tuple[pd.DataFrame, list[Any], float]:
    """:func:`run`, plus ``after(seed, episode, pools)`` called for every episode in
    the same worker right after it is evaluated, with the OSU pools its methods built
    (``(construction settings, t) -> (pool, build seconds)``), so an analysis of the
    same pools does not build them again. Returns the rows and, in episode order, what
    ``after`` returned (an empty list without ``after``), and the seconds spent in
    ``after``, summed over episodes."""
    import pandas as pd
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    jobs = auto_jobs(len(episodes)) if jobs == "auto" else check_jobs(jobs)
    budgets = [check_budget(b) for b in budgets]
    if not budgets:
        raise ConfigError("no budgets given")
    if not runs:
        raise ConfigError("no methods given")
    tasks = (
        delayed(_episode_task)(ep, runs, budgets, benchmark, seed, after) for seed, ep in episodes
    )
    parallel = Parallel(n_jobs=jobs, return_as="generator", batch_size="auto")
    results = tqdm(
        parallel(tasks),
        total=len(episodes),
        desc=f"{benchmark}",
        unit="ep",
        disable=True if not progress else None,  # None: only on a terminal
        leave=False,
    )
    rows: list[dict[str, Any]] = []
    extras: list[Any] = []
    after_s = 0.0
    with single_threaded(runs):
        for chunk, extra, seconds in results:
            rows += chunk
            extras.append(extra)
            after_s += seconds
    df = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    method_order = {r.label: i for i, r in enumerate(runs)}
    df["_m"] = df["method"].map(method_order)
    df = df.sort_values(["_m", "budget"], kind="stable").drop(columns="_m")
    return df.reset_index(drop=True), (extras if after is not None else []), after_s


def write_results(
    out_dir: Path, rows: pd.DataFrame, meta: Mapping[str, Any], *, name: str = "rows"
) -> Path:
    """Write ``rows`` to ``out_dir/<name>.parquet`` and metadata beside it, atomically
    (temporary files renamed into place, so nothing is half-written)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}.parquet"
    tmp = out_dir / f".{name}.parquet.tmp"
    rows.to_parquet(tmp, index=False)
    tmp.replace(target)
    meta_tmp = out_dir / f".{name}.json.tmp"
    meta_tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    meta_tmp.replace(out_dir / f"{name}.json")
    return target


def read_results(path: Path) -> pd.DataFrame:
    """Read result rows written by :func:`write_results` (a file or a directory)."""
    import pandas as pd

    path = Path(path)
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise FileNotFoundError(f"no result rows (*.parquet) in {path}")
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
