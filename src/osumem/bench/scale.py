"""Scale benchmark: build time, peak memory, the agent pattern (add one step, then
retrieve) and retrieve latency as the memory grows, with an ANN reference measured in
the same run.

Data is generated in-process from a seed: unit vectors around cluster centres that an
agent visits in runs (with revisits), entity / tool / subgoal annotations tied to the
runs, and token costs. Times are CPU seconds of this process (``time.process_time``),
so a busy machine slows the wall clock but not the numbers; compare methods by their
ratios within one run. Build and first-query times are also reported as wall time
(the step index of a large memory builds on a second thread), which only means
something on an otherwise idle machine.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from osumem.frozen import Constraints, FrozenConfig, Interval, TupleOf
from osumem.osu.construct import grown_prefix
from osumem.types import MemoryView, Step

#: Word ranks of the generated step texts and their Zipf probabilities.
_WORD_RANKS = np.arange(31, 20_001)
_WORD_P = _WORD_RANKS**-1.1 / (_WORD_RANKS**-1.1).sum()

#: The reference row's name in the tables.
ANN_REFERENCE = "ann_hnsw"


@dataclass(frozen=True, kw_only=True)
class ScaleConfig(FrozenConfig):
    """What ``osumem bench scale`` measures.

    Attributes:
        sizes: memory sizes n (steps).
        dim: embedding dimension.
        methods: registered retrieval methods to time (the ANN reference is always
            added).
        budget: token budget of every retrieve.
        queries: retrieves per method and size for the p50 / p99.
        agent_steps: "add one step, then retrieve" rounds per method and size ...
        agent_seconds: ... stopping early once a method spent this much CPU time.
        agent_max: the largest n at which the agent pattern is timed (it needs a
            second build).
        memory_max: the largest n at which the agent pattern is also timed through
            :class:`osumem.memory.Memory` (hashing encoder, SQLite file store), with a
            plain ``sqlite3`` insert of the same row (the add "floor") timed in the
            same run; 0: never.
        bulk_sizes: memory sizes at which one :meth:`Memory.add_steps
            <osumem.memory.Memory.add_steps>` call ingests every step, then the first
            retrieve is timed (per method of ``methods``).
        bulk_file: a tau-bench results file whose real step texts the bulk ingests
            use (its trajectories repeated, each copy its own source, up to the size);
            empty: the generated texts.
        seed: seed of the generated data and the retrievers.
    """

    sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    dim: int = 384
    methods: tuple[str, ...] = ("osumem", "flat")
    budget: int = 256
    queries: int = 100
    agent_steps: int = 1000
    agent_seconds: float = 60.0
    agent_max: int = 100_000
    memory_max: int = 10_000
    bulk_sizes: tuple[int, ...] = ()
    bulk_file: str = ""
    seed: int = 0

    config_name = "scale"
    parameter_constraints: ClassVar[Constraints] = {
        "sizes": TupleOf(Interval(int, 100, None)),
        "dim": Interval(int, 2, None),
        "budget": Interval(int, 1, None),
        "queries": Interval(int, 1, None),
        "agent_steps": Interval(int, 1, None),
        "agent_seconds": Interval(float, 0, None),
        "agent_max": Interval(int, 0, None),
        "memory_max": Interval(int, 0, None),
        "seed": Interval(int, 0, None),
    }

    def _cross_check(self) -> list[str]:
        from osumem.osu.views import hnsw_available
        from osumem.retrieve.registry import available

        problems = []
        if any(not isinstance(n, int) or n < 1 for n in self.bulk_sizes):
            problems.append(f"bulk_sizes must be sizes >= 1, got {self.bulk_sizes}")
        unknown = [m for m in self.methods if m not in available()]
        if unknown:
            problems.append(f"unknown method(s) {unknown}; known: {available()}")
        if not hnsw_available():
            problems.append("the ANN reference needs hnswlib: pip install 'osumem[scale]'")
        return problems


@dataclass(frozen=True)
class ScaleData:
    """A generated memory plus queries near its clusters."""

    view: MemoryView
    queries: NDArray[np.float32]
    texts: tuple[str, ...]
    query_texts: tuple[str, ...] = ()


def generate(n: int, dim: int, seed: int, n_queries: int = 100) -> ScaleData:
    """A seeded synthetic trajectory of ``n`` steps with clustered ``dim``-d embeddings.

    The agent works in runs of 5-40 steps on one cluster (topic); a run picks a recent
    topic again with probability .3. Each step carries 0-2 entities of its topic, a tool
    signature from 60 tools (a third of the steps none) and the run's subgoal label.
    Its text names the step, its topic and tool, then 12 words drawn from a Zipf law
    (exponent 1.1) over word ranks 31 to 20,000 (the first 30 ranks stand for stop
    words; the commonest word left is in about 8% of the steps, as in natural text); a
    query's text names its topic and four such words.
    """
    rng = np.random.default_rng(seed)
    n_topics = max(8, n // 250)
    centres = rng.standard_normal((n_topics, dim)).astype(np.float32)
    n_runs = n // 5 + 2
    lengths = rng.integers(5, 41, size=n_runs)
    fresh: list[int] = rng.integers(0, n_topics, size=n_runs).tolist()
    back: list[bool] = (rng.random(size=n_runs) < 0.3).tolist()
    lags: list[int] = rng.integers(1, 6, size=n_runs).tolist()
    run_topics: list[int] = []
    for i in range(n_runs):
        run_topics.append(run_topics[max(0, i - lags[i])] if back[i] and i > 0 else fresh[i])
    topics = np.asarray(run_topics, dtype=np.int64)
    run_of = np.repeat(np.arange(lengths.shape[0]), lengths)[:n]
    topic = topics[run_of]
    emb = centres[topic] + 0.9 * rng.standard_normal((n, dim)).astype(np.float32)
    ent_ids = topic * 4 + rng.integers(0, 4, size=n)
    n_ent = rng.choice(3, size=n, p=[0.4, 0.4, 0.2])
    ent2 = topic * 4 + rng.integers(0, 4, size=n)
    entities = tuple(
        frozenset() if k == 0 else frozenset({f"e{a}"} if k == 1 else {f"e{a}", f"e{b}"})
        for k, a, b in zip(n_ent.tolist(), ent_ids.tolist(), ent2.tolist(), strict=True)
    )
    tool_ids = rng.integers(0, 60, size=n)
    tools = np.where(rng.random(n) < 1 / 3, "", np.char.add("tool", tool_ids.astype(str)))
    subgoals = np.char.add("goal", (run_of % 500).astype(str))
    costs = rng.integers(10, 81, size=n)
    words = rng.choice(_WORD_RANKS, p=_WORD_P, size=(n, 12))
    texts = tuple(
        f"step {p} topic{t} {tl} " + " ".join(f"w{w}" for w in ws)
        for p, t, tl, ws in zip(range(n), topic, tools, words.tolist(), strict=True)
    )
    view = MemoryView.build(
        embeddings=emb,
        costs=costs,
        tool_actions=tools.tolist(),
        tool_signatures=tools.tolist(),
        entities=entities,
        subgoals=subgoals.tolist(),
        texts=list(texts),
    )
    q_topics = topic[rng.integers(0, n, size=n_queries)]
    queries = centres[q_topics] + 0.9 * rng.standard_normal((n_queries, dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    q_words = rng.choice(_WORD_RANKS, p=_WORD_P, size=(n_queries, 4))
    query_texts = tuple(
        f"topic{t} " + " ".join(f"w{w}" for w in ws)
        for t, ws in zip(q_topics.tolist(), q_words.tolist(), strict=True)
    )
    return ScaleData(view, queries, texts, query_texts)


def _rss() -> int:
    """Resident set size of this process in bytes."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class _Peak:
    """Samples the resident set size every few ms while a block runs."""

    start: int = 0
    peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> _Peak:
        self.start = self.peak = _rss()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def extra(self) -> int:
        return self.peak - self.start


class _AnnReference:
    """The reference: an HNSW index (hnswlib, one thread) answering the flat top-k."""

    def __init__(self, view: MemoryView, k: int, seed: int) -> None:
        import hnswlib

        self.k = k
        self.index = hnswlib.Index(space="ip", dim=view.dim)
        self.index.init_index(
            max_elements=view.n + 1024, M=16, ef_construction=100, random_seed=seed
        )
        self.index.set_num_threads(1)
        self.index.add_items(view.embeddings, np.arange(view.n))
        self.index.set_ef(max(64, 2 * k))

    def add(self, vector: NDArray[np.float32], label: int) -> None:
        if label >= self.index.get_max_elements():
            self.index.resize_index(2 * label)
        self.index.add_items(vector[None, :], np.array([label]))

    def query(self, q: NDArray[np.float32]) -> NDArray[np.int64]:
        labels, _ = self.index.knn_query(q[None, :], k=self.k)
        return labels[0].astype(np.int64)


def _percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p99, max and mean of ``values`` (seconds), in milliseconds."""
    if not values:
        return {"p50_ms": math.nan, "p99_ms": math.nan, "max_ms": math.nan, "mean_ms": math.nan}
    arr = np.asarray(values, dtype=np.float64) * 1000.0
    return {
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
        "max_ms": float(arr.max()),
        "mean_ms": float(arr.mean()),
    }


class _MethodTimer:
    """One method's build / query / add-then-query operations behind one shape."""

    def __init__(self, method: str, cfg: ScaleConfig, k_ref: int) -> None:
        self.method = method
        self.cfg = cfg
        self.k_ref = k_ref
        self.view: MemoryView | None = None
        self._ann: _AnnReference | None = None
        self._retriever: Any = None

    def build(self, view: MemoryView) -> None:
        """Build over ``view`` (``fit`` for a retriever)."""
        from osumem.retrieve.registry import create

        self.view = view
        if self.method == ANN_REFERENCE:
            self._ann = _AnnReference(view, self.k_ref, self.cfg.seed)
        else:
            self._retriever = create(self.method, seed=self.cfg.seed).fit(view)

    def query(self, q: NDArray[np.float32], text: str | None = None) -> None:
        """One retrieve (with the query's text: methods that read words use it)."""
        if self._ann is not None:
            self._ann.query(q)
        else:
            self._retriever.retrieve(q, self.cfg.budget, text=text)

    def safeguard(self) -> dict[str, tuple[int, int]]:
        """``(widened, scanned)`` counts of the recall safeguards so far: the step
        index's (``steps``) and the coarse stage's centroid index's (``centroids``)."""
        out: dict[str, tuple[int, int]] = {}
        for name, index in (
            ("steps", getattr(self._retriever, "step_index", None)),
            ("centroids", getattr(self._retriever, "_centroid_index", None)),
        ):
            if index is not None:
                out[name] = (int(index.raised), int(index.fallbacks))
        return out

    def add(self, grown: MemoryView) -> None:
        """The agent pattern's add: the last step of ``grown`` arrives."""
        if self._ann is not None:
            self._ann.add(grown.embeddings[-1], grown.n - 1)
        else:
            self._retriever.update(grown)


def measure_size(
    cfg: ScaleConfig, n: int, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """Every measurement at memory size ``n``: one row per method plus the reference."""
    data = generate(n, cfg.dim, cfg.seed, cfg.queries)
    view = data.view
    raw_bytes = int(view.embeddings.nbytes)
    k_ref = max(1, math.ceil(cfg.budget / float(view.costs.mean())) * 4)
    rows: list[dict[str, Any]] = []
    agent_from = max(1, n - min(cfg.agent_steps, n // 2))
    base = view.prefix(agent_from)
    for method in (*cfg.methods, ANN_REFERENCE):
        row: dict[str, Any] = {"n": n, "method": method, "dim": cfg.dim, "raw_bytes": raw_bytes}
        timer = _MethodTimer(method, cfg, k_ref)
        with _Peak() as peak:
            w0, t0 = time.perf_counter(), time.process_time()
            timer.build(view)
            build_s = time.process_time() - t0
            build_wall = time.perf_counter() - w0
        # the first query builds what is built lazily (the query-time HNSW indexes)
        with _Peak() as first_peak:
            w0, t0 = time.perf_counter(), time.process_time()
            timer.query(data.queries[0], data.query_texts[0])
            first_s = time.process_time() - t0
            first_wall = time.perf_counter() - w0
        row["build_cpu_s"] = build_s
        row["build_wall_s"] = build_wall
        row["first_query_wall_s"] = first_wall
        row["build_extra_bytes"] = peak.extra
        row["build_extra_x_raw"] = peak.extra / raw_bytes
        row["first_query_cpu_s"] = first_s
        row["first_query_extra_x_raw"] = first_peak.extra / raw_bytes
        row["total_extra_x_raw"] = (first_peak.peak - peak.start) / raw_bytes
        times = []
        for q, qt in zip(data.queries, data.query_texts, strict=True):
            t0 = time.process_time()
            timer.query(q, qt)
            times.append(time.process_time() - t0)
        row["retrieve"] = _percentiles(times)
        del timer
        agent = _MethodTimer(method, cfg, k_ref)
        if n <= cfg.agent_max:
            agent.build(base)
            agent.query(data.queries[0], data.query_texts[0])

        def grow(t: int, timer: _MethodTimer = agent) -> Callable[[], None]:
            grown = grown_view(view, t + 1)  # the caller's view of the memory, not timed
            return lambda: timer.add(grown)

        def ask(t: int, timer: _MethodTimer = agent) -> None:
            timer.query(data.queries[t % cfg.queries], data.query_texts[t % cfg.queries])

        walls: list[float] = []
        adds, gets, steps = agent_rounds(
            range(agent_from, n if n <= cfg.agent_max else agent_from),
            grow,
            ask,
            cfg.agent_seconds,
            walls,
        )
        row["safeguard"] = agent.safeguard()
        del agent, grow, ask
        row["agent_step"] = {**_percentiles(steps), "rounds": len(steps)}
        row["agent_step_wall"] = _percentiles(walls)
        row["agent_add"] = _percentiles(adds)
        row["agent_retrieve"] = _percentiles(gets)
        log(
            f"n={n} {method}: build {build_s:.2f} s CPU / {build_wall:.2f} s wall "
            f"(+{peak.extra / 2**20:.0f} MiB, {row['build_extra_x_raw']:.2f}x raw), "
            f"first query {first_s:.2f} s CPU / {first_wall:.2f} s wall "
            f"({row['total_extra_x_raw']:.2f}x raw in all), retrieve p50 "
            f"{row['retrieve']['p50_ms']:.2f} ms, add+retrieve p50 / p99 / max "
            f"{row['agent_step']['p50_ms']:.2f} / {row['agent_step']['p99_ms']:.2f} / "
            f"{row['agent_step']['max_ms']:.2f} ms CPU, "
            f"{row['agent_step_wall']['p50_ms']:.2f} / {row['agent_step_wall']['p99_ms']:.2f} / "
            f"{row['agent_step_wall']['max_ms']:.2f} ms wall ({len(steps)} rounds)"
            + "".join(
                f"; {name} safeguard in the rounds: {r} widened, {f} scanned"
                for name, (r, f) in row["safeguard"].items()
            )
        )
        rows.append(row)
    if cfg.memory_max and n <= cfg.memory_max:
        rows.append(_memory_row(cfg, data, n, log))
    return rows


def agent_rounds(
    rounds: range,
    add: Callable[[int], Callable[[], Any]],
    query: Callable[[int], Any],
    seconds: float,
    wall: list[float] | None = None,
) -> tuple[list[float], list[float], list[float]]:
    """CPU seconds of the add, the retrieve and both, per agent round ``t`` of
    ``rounds``: ``add(t)`` prepares the round's add (untimed) and returns it, then it
    and ``query(t)`` are timed; stops once the rounds spent ``seconds``. The CPU is the
    process's, so work on background threads during a call counts in it; ``wall``, when
    given, receives each round's wall-clock seconds (what the caller waited)."""
    adds: list[float] = []
    gets: list[float] = []
    steps: list[float] = []
    for t in rounds:
        do_add = add(t)
        w0 = time.perf_counter()
        t0 = time.process_time()
        do_add()
        t1 = time.process_time()
        query(t)
        t2 = time.process_time()
        if wall is not None:
            wall.append(time.perf_counter() - w0)
        adds.append(t1 - t0)
        gets.append(t2 - t1)
        steps.append(t2 - t0)
        if sum(steps) > seconds:
            break
    return adds, gets, steps


def grown_view(view: MemoryView, t: int) -> MemoryView:
    """Steps ``0 .. t-1`` of ``view`` as the agent memory hands a grown namespace to its
    retriever (:meth:`osumem.memory.buffer.NamespaceBuffer.data`): array slices, and
    the tuple columns (the entities) as :class:`~osumem.types.ListPrefix`es, not
    copies. ``view.prefix`` copies a tuple column, and the retriever's release of the
    previous round's copy (about 1 ms at 100k steps) would land inside the timed add."""
    return grown_prefix(view, t)


def repeated_view(view: MemoryView, repeats: int) -> MemoryView:
    """``view``'s steps ``repeats`` times over, each copy with its own subgoals and
    entities (a memory holding the same steps many times: equal embeddings, and OSUs
    with equal centroids)."""
    idx = np.tile(np.arange(view.n), repeats)
    copy = np.arange(idx.size) // view.n
    return MemoryView.build(
        embeddings=view.embeddings[idx],
        costs=view.costs[idx],
        tool_actions=[view.tool_actions[i] for i in idx],
        tool_signatures=[view.tool_signatures[i] for i in idx],
        entities=tuple(
            frozenset(f"{e}#{c}" for e in view.entities[i]) for i, c in zip(idx, copy, strict=True)
        ),
        subgoals=[f"{view.subgoals[i]}#{c}" for i, c in zip(idx, copy, strict=True)],
        texts=[view.texts[i] for i in idx],
    )


def shared_steps(embeddings: NDArray[np.float32], a: NDArray[Any], b: NDArray[Any]) -> int:
    """How many of the steps at positions ``a`` are among those at ``b``, equal copies
    of a step (equal embedding rows) counted as that step: an exact scan breaks ties
    between copies by position, an index by where its search went."""

    def steps(positions: NDArray[Any]) -> Counter[bytes]:
        return Counter(embeddings[p].tobytes() for p in np.asarray(positions).tolist())

    return (steps(a) & steps(b)).total()


def step_of(data: ScaleData, p: int) -> Step:
    """Step ``p`` of the generated memory as the agent memory stores it."""
    view = data.view
    return Step(
        role="assistant",
        text=data.texts[p],
        tool_action=str(view.tool_actions[p]),
        tool_signature=str(view.tool_signatures[p]),
        entities=view.entities[p],
        subgoal=str(view.subgoals[p]),
        cost=int(view.costs[p]),
    )


def _memory_row(
    cfg: ScaleConfig, data: ScaleData, n: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """The agent pattern through :class:`osumem.memory.Memory` (hashing encoder, a
    SQLite file store in a temporary directory): prefill ``n - agent_steps`` steps,
    then add one step (text) and retrieve (text query) per round; and the add
    "floor", a plain ``sqlite3`` insert of the same row, timed in the same run."""
    import tempfile

    from osumem.memory import Memory

    method = cfg.methods[0]
    agent_from = max(1, n - min(cfg.agent_steps, n // 2))
    with tempfile.TemporaryDirectory(prefix="osumem-scale-") as tmp:
        mem = Memory.open(
            Path(tmp) / "memory.db", encoder="hashing", method=method, seed=cfg.seed,
            budget=cfg.budget,
        )  # fmt: skip
        t0 = time.process_time()
        for lo in range(0, agent_from, 5000):
            mem.add_steps([step_of(data, p) for p in range(lo, min(agent_from, lo + 5000))])
        mem.retrieve("topic1 tool2")
        mem.wait_ready()
        prefill_s = time.process_time() - t0
        texts = data.query_texts

        def add_one(t: int) -> Callable[[], Any]:
            step = step_of(data, t)
            return lambda: mem.add_steps([step])

        walls: list[float] = []
        adds, gets, steps = agent_rounds(
            range(agent_from, n),
            add_one,
            lambda t: mem.retrieve(texts[t % len(texts)]),
            cfg.agent_seconds,
            walls,
        )
        dim = mem_dim()
        mem.close()
        floor = _sqlite_floor(data, range(agent_from, agent_from + len(steps)), dim, tmp)
    row: dict[str, Any] = {
        "n": n,
        "method": f"Memory[{method}, hashing]",
        "dim": dim,
        "raw_bytes": 0,
        "build_cpu_s": prefill_s,
        "agent_step": {**_percentiles(steps), "rounds": len(steps)},
        "agent_step_wall": _percentiles(walls),
        "agent_add": _percentiles(adds),
        "agent_retrieve": _percentiles(gets),
        "sqlite_floor_add": _percentiles(floor),
    }
    add_p50, floor_p50 = row["agent_add"]["p50_ms"], row["sqlite_floor_add"]["p50_ms"]
    row["add_p50_over_floor"] = add_p50 / floor_p50 if floor_p50 > 0 else math.nan
    log(
        f"n={n} {row['method']}: prefill {prefill_s:.2f} s CPU, add p50 {add_p50:.2f} ms "
        f"(sqlite3 floor {floor_p50:.2f} ms), add+retrieve p50 / p99 / max "
        f"{row['agent_step']['p50_ms']:.2f} / {row['agent_step']['p99_ms']:.2f} / "
        f"{row['agent_step']['max_ms']:.2f} ms ({len(steps)} rounds)"
    )
    return row


def _sqlite_floor(data: ScaleData, positions: range, dim: int, tmp: str) -> list[float]:
    """CPU seconds of a plain ``sqlite3`` insert of each step's row (the columns and
    settings of the memory's store: WAL, ``synchronous=FULL``, one transaction per
    add, the embedding as float32 bytes): what an add cannot go below."""
    import sqlite3

    from osumem.memory.backends.sqlite.schema import TABLES

    view = data.view
    conn = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(TABLES["steps"])
    rng = np.random.default_rng(0)
    out: list[float] = []
    for i, p in enumerate(positions):
        emb = rng.standard_normal(dim).astype(np.float32)
        ents = json.dumps(sorted(view.entities[p]))
        t0 = time.process_time()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO steps (ns, pos, batch, role, text, tool_action, arguments, "
            "tool_signature, entities, subgoal, source, cost, embedding) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                "default", i, i, "assistant", data.texts[p], str(view.tool_actions[p]), "",
                str(view.tool_signatures[p]), ents, str(view.subgoals[p]), "default",
                int(view.costs[p]), emb.tobytes(),
            ),
        )  # fmt: skip
        conn.execute("COMMIT")
        out.append(time.process_time() - t0)
    conn.close()
    return out


def bulk_steps(cfg: ScaleConfig, n: int) -> list[Step]:
    """``n`` steps for a bulk ingest: the generated memory's, or the real steps of
    :attr:`ScaleConfig.bulk_file` (tau-bench trajectories, repeated, each copy its
    own source so no two steps are one log)."""
    if not cfg.bulk_file:
        data = generate(n, cfg.dim, cfg.seed, 1)
        return [step_of(data, p) for p in range(n)]
    from dataclasses import replace

    from osumem.errors import InvalidInputError
    from osumem.ingest.taubench import load_taubench

    sources = load_taubench(cfg.bulk_file)
    if not any(src.steps for src in sources):
        raise InvalidInputError(f"{cfg.bulk_file}: no steps to ingest")
    out: list[Step] = []
    copy = 0
    while len(out) < n:
        for src in sources:
            name = f"c{copy}-{src.source}"
            out.extend(replace(st, source=name) for st in src.steps)
            if len(out) >= n:
                break
        copy += 1
    return out[:n]


def bulk_rows(cfg: ScaleConfig, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Per size of ``bulk_sizes`` and method: one ``Memory.add_steps`` call with every
    step (hashing encoder, SQLite file store), then the first retrieve and 20 more;
    CPU and wall time."""
    import tempfile

    from osumem.memory import Memory

    rows: list[dict[str, Any]] = []
    queries = generate(max(cfg.sizes[0], 100), cfg.dim, cfg.seed, 21).query_texts
    for n in cfg.bulk_sizes:
        steps = bulk_steps(cfg, n)
        for method in cfg.methods:
            with tempfile.TemporaryDirectory(prefix="osumem-bulk-") as tmp:
                mem = Memory.open(
                    Path(tmp) / "memory.db", encoder="hashing", method=method,
                    seed=cfg.seed, budget=cfg.budget,
                )  # fmt: skip
                w0, t0 = time.perf_counter(), time.process_time()
                mem.add_steps(steps)
                ingest = (time.process_time() - t0, time.perf_counter() - w0)
                w0, t0 = time.perf_counter(), time.process_time()
                mem.retrieve(queries[0])
                first = (time.process_time() - t0, time.perf_counter() - w0)
                later: list[float] = []
                for text in queries[1:]:
                    t0 = time.process_time()
                    mem.retrieve(text)
                    later.append(time.process_time() - t0)
                mem.close()
            nxt = _percentiles(later)
            row: dict[str, Any] = {
                "n": n,
                "method": f"bulk Memory[{method}, hashing]",
                "texts": "tau-bench" if cfg.bulk_file else "generated",
                "ingest_cpu_s": ingest[0],
                "ingest_wall_s": ingest[1],
                "first_retrieve_cpu_s": first[0],
                "first_retrieve_wall_s": first[1],
                "next_retrieves": nxt,
            }
            log(
                f"bulk n={n} {method}: ingest {ingest[0]:.2f} s CPU / {ingest[1]:.2f} s "
                f"wall, first retrieve {first[0] * 1000:.1f} ms CPU / "
                f"{first[1] * 1000:.1f} ms wall, next p50 "
                f"{nxt['p50_ms']:.2f} ms"
            )
            rows.append(row)
    return rows


def mem_dim() -> int:
    """Dimension of the default hashing encoder used by the Memory rows."""
    from osumem.embed import HashingEncoder

    return HashingEncoder().dim


def run_scale(cfg: ScaleConfig, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Measure every size of ``cfg``; returns one row per (size, method).

    BLAS runs on one thread so CPU time is work, not idle spinning of a thread pool;
    the libraries are imported before the first timing.
    """
    import hnswlib  # noqa: F401
    import igraph  # noqa: F401
    import leidenalg  # noqa: F401
    from threadpoolctl import threadpool_limits

    rows: list[dict[str, Any]] = []
    with threadpool_limits(limits=1):
        for n in cfg.sizes:
            rows.extend(measure_size(cfg, n, log))
        rows.extend(bulk_rows(cfg, log))
    return rows


def ratios(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per size and method: retrieve p50 and add + retrieve p50 over the ANN
    reference's (same run), the numbers anything that gates should read."""
    ref = {r["n"]: r for r in rows if r["method"] == ANN_REFERENCE}
    out = []
    for r in rows:
        base = ref.get(r["n"])
        if base is None or r["method"] == ANN_REFERENCE or "retrieve" not in r:
            continue
        out.append(
            {
                "n": r["n"],
                "method": r["method"],
                "retrieve_p50_over_ann": r["retrieve"]["p50_ms"] / base["retrieve"]["p50_ms"],
                "agent_p50_over_ann": r["agent_step"]["p50_ms"] / base["agent_step"]["p50_ms"],
                "agent_p99_ms": r["agent_step"]["p99_ms"],
                "agent_max_ms": r["agent_step"]["max_ms"],
            }
        )
    return out


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as Markdown tables (CPU milliseconds and seconds): build and retrieve
    per size and method, the agent rounds (add, retrieve and add + retrieve p50 / p99
    / max, the sqlite3 floor of an add) and the bulk ingests."""
    head = (
        "| n | method | build CPU s | build wall s | build extra (× raw f32) | "
        "first query CPU s | first query wall s | extra with first query (× raw) | "
        "retrieve p50 ms | retrieve p99 ms | retrieve max ms | add+retrieve p50 ms | "
        "add+retrieve mean ms | rounds |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []

    def ms(value: float | None) -> str:
        return "" if value is None else f"{value:.2f}"

    def three(part: dict[str, float] | None) -> str:
        if not part:
            return " | | "
        return f"{ms(part.get('p50_ms'))} | {ms(part.get('p99_ms'))} | {ms(part.get('max_ms'))}"

    for r in rows:
        if "agent_step" not in r:
            continue
        ret = r.get("retrieve") or {}
        ag = r["agent_step"]
        lines.append(
            f"| {r['n']:,} | {r['method']} | {r['build_cpu_s']:.2f} | "
            f"{ms(r.get('build_wall_s'))} | {ms(r.get('build_extra_x_raw'))} | "
            f"{ms(r.get('first_query_cpu_s'))} | {ms(r.get('first_query_wall_s'))} | "
            f"{ms(r.get('total_extra_x_raw'))} | {ms(ret.get('p50_ms'))} | "
            f"{ms(ret.get('p99_ms'))} | {ms(ret.get('max_ms'))} | {ag['p50_ms']:.2f} | "
            f"{ag['mean_ms']:.2f} | {ag['rounds']} |"
        )
    out = head + "\n".join(lines) + "\n"
    agent = [r for r in rows if "agent_add" in r and r["agent_step"]["rounds"]]
    if agent:
        out += (
            "\nAgent rounds (add one step, then retrieve), CPU ms of the process (background\n"
            "builds included) and wall ms of the round:\n\n"
            "| n | method | add p50 | add p99 | add max | retrieve p50 | retrieve p99 | "
            "retrieve max | add+retrieve p50 | add+retrieve p99 | add+retrieve max | "
            "add+retrieve wall p50 | wall p99 | wall max | "
            "sqlite3 floor add p50 | add p50 / floor | rounds |\n"
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        )
        for r in agent:
            floor = r.get("sqlite_floor_add") or {}
            out += (
                f"| {r['n']:,} | {r['method']} | {three(r['agent_add'])} | "
                f"{three(r['agent_retrieve'])} | {three(r['agent_step'])} | "
                f"{three(r.get('agent_step_wall'))} | "
                f"{ms(floor.get('p50_ms'))} | {ms(r.get('add_p50_over_floor'))} | "
                f"{r['agent_step']['rounds']} |\n"
            )
    bulk = [r for r in rows if "ingest_cpu_s" in r]
    if bulk:
        out += (
            "\nBulk ingest (one add of every step), then the first retrieve:\n\n"
            "| n | method | texts | ingest CPU s | ingest wall s | first retrieve CPU ms | "
            "first retrieve wall ms | next retrieves p50 ms | p99 ms | max ms |\n"
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n"
        )
        for r in bulk:
            out += (
                f"| {r['n']:,} | {r['method']} | {r['texts']} | {r['ingest_cpu_s']:.2f} | "
                f"{r['ingest_wall_s']:.2f} | {r['first_retrieve_cpu_s'] * 1000:.1f} | "
                f"{r['first_retrieve_wall_s'] * 1000:.1f} | {three(r['next_retrieves'])} |\n"
            )
    return out


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Log-log PNG: build time, retrieve p50 and add + retrieve p50 against n."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = [
        ("build + first query CPU s", lambda r: r["build_cpu_s"] + r.get("first_query_cpu_s", 0.0)),
        ("retrieve p50 ms", lambda r: r.get("retrieve", {}).get("p50_ms")),
        ("add + retrieve p50 ms", lambda r: r["agent_step"]["p50_ms"]),
    ]
    rows = [r for r in rows if "agent_step" in r]
    methods = sorted({r["method"] for r in rows})
    colour = {m: f"C{i}" for i, m in enumerate(methods)}  # the same colour in every panel
    for ax, (title, get) in zip(axes, panels, strict=True):
        for m in methods:
            pts = [(r["n"], get(r)) for r in rows if r["method"] == m and get(r) is not None]
            pts = [(x, y) for x, y in pts if y == y and y > 0]  # log axes: no NaN or 0
            if pts:
                xs, ys = zip(*sorted(pts), strict=True)
                ax.plot(xs, ys, marker="o", label=m, color=colour[m])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("steps in memory (n)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    handles = [plt.Line2D([], [], color=colour[m], marker="o", label=m) for m in methods]
    axes[0].legend(handles=handles, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(rows: Sequence[dict[str, Any]], cfg: ScaleConfig, out: Path) -> dict[str, Path]:
    """Write ``scale.json``, ``scale.md`` and ``scale.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "scale.json", "md": out / "scale.md", "png": out / "scale.png"}
    payload = {"config": cfg.to_dict(), "rows": list(rows), "ratios": ratios(rows)}
    paths["json"].write_text(json.dumps(payload, indent=2) + "\n")
    paths["md"].write_text(markdown(rows))
    plot(rows, paths["png"])
    return paths
