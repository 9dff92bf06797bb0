"""Benchmark of ``osumem serve`` over loopback HTTP.

Phases, in one run:

1. build a store of ``steps`` steps in one namespace (generated agent logs, or the logs
   of a chat-log file cycled), in process;
2. start ``osumem serve --transport http`` on a free loopback port over that store;
3. time the same queries in process (``Memory.retrieve`` on a memory reopened from the
   store) and over HTTP, interleaved query by query, so both see the same machine load;
   each query text is made unique per path so no embedding cache serves one path from
   the other's work;
4. ``clients`` threads, each with its own HTTP connection, run ``ops_per_client``
   operations (adds with probability ``add_share`` into the same big namespace, else
   retrievals), bounded by ``time_limit``;
5. the same concurrent load against an echo endpoint: FastAPI under uvicorn on
   127.0.0.1 (the server's stack), the same routes, answering each request with its
   own body; run right before and right after phase 4, so ``osumem serve``'s
   requests/s is reported as a ratio to what the stack alone does on the same machine
   at the same time (the mean of the two echo runs);
6. SIGKILL the server, reopen the store and count acknowledged adds that are missing.

With ``workers`` above 1 the server runs ``osumem serve --workers``, and the echo
endpoint as many uvicorn processes on one port: the same stack, scaled the same way.
CPU per operation then counts every process of each server.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from osumem.errors import ConfigError
from osumem.frozen import Boolean, Constraints, FrozenConfig, Interval, Options
from osumem.serve.connection_limits import HTTP_PROTOCOLS

NAMESPACE = "bench"
AIRPORTS = ("JFK", "SFO", "ORD", "ATL", "SEA", "BOS", "LAX", "MIA", "DEN", "PHX")
TOOLS = ("get_reservation", "search_flights", "update_baggage", "cancel_reservation")


@dataclass(frozen=True, kw_only=True)
class ServeBenchConfig(FrozenConfig):
    """Settings of the serve benchmark (see the module doc)."""

    steps: int = 10_000
    clients: int = 8
    ops_per_client: int = 40
    add_share: float = 0.25
    queries: int = 100
    budget: int = 256
    encoder: str = "hashing"
    method: str = "osumem"
    data: Path | None = None
    time_limit: float = 300.0
    #: the server's reader threads: its own default (``osumem serve --readers``), so
    #: the benchmark measures the server as it runs unless told otherwise
    readers: int = 4
    #: run the server with ``--inline-reads`` (its default: off)
    inline_reads: bool = False
    #: the HTTP protocol of the server and of the echo endpoint alike (``osumem serve
    #: --http-protocol``; ``auto``: httptools when installed, else h11)
    http_protocol: str = "auto"
    #: processes of the server (``osumem serve --workers``) and of the echo endpoint
    workers: int = 1
    seed: int = 0

    config_name = "bench serve"
    parameter_constraints: ClassVar[Constraints] = {
        "steps": Interval(int, 1, None),
        "clients": Interval(int, 1, None),
        "ops_per_client": Interval(int, 1, None),
        "add_share": Interval(float, 0, 1),
        "queries": Interval(int, 1, None),
        "budget": Interval(int, 1, None),
        "time_limit": Interval(float, 0, None, closed="neither"),
        "readers": Interval(int, 1, None),
        "inline_reads": Boolean(),
        "http_protocol": Options(HTTP_PROTOCOLS),
        "workers": Interval(int, 1, 64),
    }


def generated_turn(k: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """One agent turn (3 steps): a user request naming a reservation and a passenger,
    a tool call with its result, and the assistant's answer."""
    a, b = rng.choice(len(AIRPORTS), size=2, replace=False)
    tool = TOOLS[int(rng.integers(len(TOOLS)))]
    res, pax = f"R{k:05d}", f"P{int(rng.integers(500)):03d}"
    flight = f"HAT{int(rng.integers(1000)):03d}"
    return [
        {
            "role": "user",
            "content": f"Passenger {pax} asks about reservation {res} from {AIRPORTS[a]} "
            f"to {AIRPORTS[b]}.",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call{k}",
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({"reservation_id": res})},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": f"call{k}",
            "content": f"{res}: flight {flight} {AIRPORTS[a]}-{AIRPORTS[b]}, passenger {pax}, "
            f"{int(rng.integers(0, 4))} bags, paid by {'card' if k % 3 else 'voucher'}",
        },
        {"role": "assistant", "content": f"Done: {tool} for {res} ({flight})."},
    ]


def _logs(cfg: ServeBenchConfig) -> list[list[dict[str, Any]]]:
    """The chat logs of the store, each one add: generated ones holding about
    ``cfg.steps`` steps, or the logs of ``cfg.data`` (:func:`_build` adds them again,
    as further copies, until the store holds ``cfg.steps``)."""
    rng = np.random.default_rng(cfg.seed)
    if cfg.data is None:
        turns_per_log, steps_per_turn = 6, 3
        n_logs = -(-cfg.steps // (turns_per_log * steps_per_turn))
        return [
            [m for t in range(turns_per_log) for m in generated_turn(i * turns_per_log + t, rng)]
            for i in range(n_logs)
        ]
    from osumem.ingest.openai_chat import read_log

    source = read_log(cfg.data)
    if not source:
        raise ConfigError(f"bench serve: {cfg.data} holds no chat log")
    return source  # cycled up to cfg.steps by _build


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan")}
    arr = np.asarray(values) * 1000.0
    return {
        "n": len(values),
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
        "mean_ms": float(arr.mean()),
    }


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used; ``None`` when it cannot be
    read (the process is gone, or not ours to read)."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return float(t.user + t.system)


def descendants(pid: int) -> set[int]:
    """The processes alive now below process ``pid`` (a server's worker processes and
    theirs); empty when ``pid`` is gone."""
    import psutil

    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _tree_cpu_s(pid: int) -> float | None:
    """CPU seconds of process ``pid`` and of its descendants alive now (a server's
    worker processes); ``None`` when ``pid``'s cannot be read."""
    own = _cpu_s(pid)
    if own is None:
        return None
    return own + sum(_cpu_s(p) or 0.0 for p in descendants(pid))


def _cpu_ms_per_op(pid: int, load: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``load`` and add to its result the CPU milliseconds process ``pid`` and its
    worker processes spent per operation meanwhile (``None`` where that cannot be
    read)."""
    before = _tree_cpu_s(pid)
    out = load()
    after = _tree_cpu_s(pid)
    ops = out["operations"]
    spent = None if before is None or after is None or not ops else after - before
    return out | {"server_cpu_ms_per_op": None if spent is None else spent / ops * 1000.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(
    store: Path | str,
    cfg: ServeBenchConfig,
    token: str,
    readers: int,
    *,
    code: str = "from osumem.cli import main; main()",
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """``osumem serve`` as ``python -c code serve ...`` (``code`` runs the command
    line; ``env``: variables added to this process's), healthy; its URL."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable, "-c", code, "serve",
        "--store", str(store), "--transport", "http", "--port", str(port),
        "--method", cfg.method, "--readers", str(readers),
        "--inline-reads" if cfg.inline_reads else "--thread-reads",
        "--http-protocol", cfg.http_protocol, "--workers", str(cfg.workers),
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, **(env or {}), "OSUMEM_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: a SIGKILL reaches every worker
    )
    _wait_healthy(proc, url, "the server")
    return proc, url


#: The echo server: the routes the clients call, each answering with the request's
#: own JSON body (an add's also with an empty ``step_ids``), under uvicorn as
#: ``osumem serve`` runs (no server header, the same log level, the same HTTP
#: protocol and event loop); argv[1] is the port, argv[2] the protocol, argv[3] the
#: processes on the port (forked once it is bound, before uvicorn starts).
ECHO_SERVER = """
import os
import socket
import sys
import uvicorn
from fastapi import FastAPI, Request

app = FastAPI()

@app.get("/healthz")
async def healthz():
    return {"status": "ok"}

@app.post("/v1/namespaces/{namespace}/retrieve")
async def retrieve(namespace: str, request: Request):
    return await request.json()

@app.post("/v1/namespaces/{namespace}/messages")
async def messages(namespace: str, request: Request):
    return {**(await request.json()), "step_ids": []}

sock = socket.create_server(("127.0.0.1", int(sys.argv[1])), backlog=2048)
for _ in range(int(sys.argv[3]) - 1):
    if os.fork() == 0:
        break
config = uvicorn.Config(app, log_level="warning", server_header=False, http=sys.argv[2])
uvicorn.Server(config).run(sockets=[sock])
"""


def _wait_healthy(proc: subprocess.Popen[str], url: str, what: str) -> None:
    import httpx

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError(f"bench serve: {what} exited: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        try:
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.25)
    _kill_group(proc)
    raise ConfigError(f"bench serve: {what} did not start within 600 s")


def _start_echo(protocol: str, workers: int = 1) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", ECHO_SERVER, str(port), protocol, str(workers)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its forked processes in its group: stopped together
    )
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(proc, url, "the echo server")
    return proc, url


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc`` and every process of its group (its workers) and wait for it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def _echo_load(
    cfg: ServeBenchConfig, url: str, route: str, queries: list[str], nonce: str
) -> dict[str, Any]:
    """The concurrent phase's load against the echo server (nothing acknowledged)."""
    return _concurrent(cfg, url, {}, route, queries, nonce, [])


def run_serve_bench(
    cfg: ServeBenchConfig,
    work_dir: Path | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run every phase and return the measurements (see the module doc)."""
    say = progress or (lambda _m: None)
    with tempfile.TemporaryDirectory(prefix="osumem-bench-serve-") as tmp:
        folder = Path(tmp) if work_dir is None else Path(work_dir)
        folder.mkdir(parents=True, exist_ok=True)
        return _run(cfg, folder, say)


def _build(cfg: ServeBenchConfig, store: Path | str, say: Callable[[str], None]) -> dict[str, Any]:
    from osumem.memory import Memory

    logs = _logs(cfg)
    start = time.perf_counter()
    n = 0
    with Memory.open(store, encoder=cfg.encoder, method=cfg.method) as mem:
        n = mem.n_steps(NAMESPACE)
        i = 0
        at_cycle = n
        while n < cfg.steps:
            if i and i % len(logs) == 0:
                if n == at_cycle:  # a whole pass over the logs added nothing
                    raise ConfigError(
                        f"bench serve: {cfg.data or 'the generated logs'} give fewer than "
                        f"--steps {cfg.steps} steps"
                    )
                at_cycle = n
            added = mem.add_messages(
                logs[i % len(logs)],
                namespace=NAMESPACE,
                source=f"{NAMESPACE}/{i}",
                prefix_namespace=cfg.data is not None,
                hold_open_calls=False,
                # a cycled log is another copy (its own id), not a duplicate to skip
                log_id=f"{NAMESPACE}/{i}",
            )
            n += len(added)
            i += 1
            if i % 100 == 0:
                say(f"built {n}/{cfg.steps} steps")
        encoder_id = mem.store.encoder_id
    return {"steps": n, "build_s": time.perf_counter() - start, "encoder": encoder_id}


def _run(cfg: ServeBenchConfig, folder: Path, say: Callable[[str], None]) -> dict[str, Any]:
    import httpx

    from osumem.memory import Memory
    from osumem.serve.threads import set_torch_threads

    store = folder / "bench.db"  # kept in --work-dir: a rerun only tops it up
    say(f"building a {cfg.steps}-step store with encoder {cfg.encoder!r}")
    built = _build(cfg, store, say)
    rng = np.random.default_rng(cfg.seed + 1)
    nonce = secrets.token_hex(3)
    n_res = max(1, built["steps"] // 3)
    if cfg.data is None:
        base_queries = [
            f"which flight and bags are on reservation R{int(rng.integers(n_res)):05d}?"
            for _ in range(cfg.queries)
        ]
    else:  # the users' own requests, cut to a question's length
        asks = [
            m["content"][:120]
            for log in _logs(cfg)[:200]
            for m in log
            if m.get("role") == "user" and isinstance(m.get("content"), str) and m["content"]
        ]
        base_queries = [asks[int(rng.integers(len(asks)))] for _ in range(cfg.queries)]

    say("reopening the store in process")
    # In-process retrievals run on a worker thread with one torch thread, as the
    # server's do: on a busy machine torch's default pool can be many times slower per
    # query (measured; see docs/decisions.md), which would flatter HTTP.
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="in-process")
    t0 = time.perf_counter()
    mem = worker.submit(Memory.open, store, method=cfg.method).result()

    def load_encoder() -> None:  # in the thread that encodes, as the server does
        _ = mem.encoder
        set_torch_threads(1)

    worker.submit(load_encoder).result()

    def local_retrieve(query: str) -> Any:
        return worker.submit(mem.retrieve, query, cfg.budget, namespace=NAMESPACE).result()

    local_retrieve(f"warm up {nonce}")
    reopen_s = time.perf_counter() - t0

    token = secrets.token_hex(16)
    say("starting the server")
    t0 = time.perf_counter()
    proc, url = _start_server(store, cfg, token, readers=cfg.readers)
    start_s = time.perf_counter() - t0
    headers = {"authorization": f"Bearer {token}"}
    route = f"/v1/namespaces/{NAMESPACE}"
    acked: list[tuple[int, list[int]]] = []
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
            t0 = time.perf_counter()
            r = http.post(
                route + "/retrieve", json={"query": f"warm {nonce}", "budget": cfg.budget}
            )
            r.raise_for_status()
            first_s = time.perf_counter() - t0
            say(f"timing {cfg.queries} retrievals in process and over HTTP, interleaved")
            local, remote, same = [], [], 0
            for i, q in enumerate(base_queries):
                t0 = time.perf_counter()
                a = local_retrieve(f"{q} [{nonce} local {i}]")
                local.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                body = {"query": f"{q} [{nonce} http {i}]", "budget": cfg.budget}
                r = http.post(route + "/retrieve", json=body)
                remote.append(time.perf_counter() - t0)
                r.raise_for_status()
                same += int(len(a.steps) > 0 and len(r.json()["steps"]) > 0)
        worker.submit(mem.close).result()
        worker.shutdown()

        echo_proc, echo_url = _start_echo(cfg.http_protocol, cfg.workers)
        try:
            say(f"{cfg.clients} concurrent clients against the echo endpoint")
            echo_before = _cpu_ms_per_op(
                echo_proc.pid, lambda: _echo_load(cfg, echo_url, route, base_queries, nonce)
            )
            say(f"{cfg.clients} concurrent clients, {cfg.ops_per_client} operations each")
            loaded = _cpu_ms_per_op(
                proc.pid,
                lambda: _concurrent(cfg, url, headers, route, base_queries, nonce, acked),
            )
            say(f"{cfg.clients} concurrent clients against the echo endpoint again")
            echo_after = _cpu_ms_per_op(
                echo_proc.pid, lambda: _echo_load(cfg, echo_url, route, base_queries, nonce)
            )
        finally:
            _kill_group(echo_proc)
    finally:
        _kill_group(proc)  # no graceful shutdown: acknowledged adds must be on disk
    echo_rate = (echo_before["throughput_ops_s"] + echo_after["throughput_ops_s"]) / 2

    say("reopening the store after SIGKILL")
    with Memory.open(store, method=cfg.method) as check:
        check.check()
        stored = set(check.store.step_ids())
        n_after = check.n_steps(NAMESPACE)
    lost = sum(1 for _k, ids in acked for i in ids if i not in stored)
    in_proc, over_http = _percentiles(local), _percentiles(remote)
    return {
        "config": cfg.to_dict(),
        "store": built | {"steps_after": n_after},
        "reopen_and_first_retrieve_s": reopen_s,
        "server_start_s": start_s,
        "server_first_retrieve_s": first_s,
        "sequential": {
            "in_process": in_proc,
            "http": over_http,
            "p50_ratio": over_http["p50_ms"] / in_proc["p50_ms"],
            "p99_ratio": over_http["p99_ms"] / in_proc["p99_ms"],
            "both_nonempty": same,
        },
        "concurrent": loaded,
        "echo": {
            "before": echo_before,
            "after": echo_after,
            "throughput_ops_s": echo_rate,
            "ratio": loaded["throughput_ops_s"] / echo_rate if echo_rate else float("nan"),
        },
        "acknowledged_adds": len(acked),
        "acknowledged_steps": sum(len(ids) for _k, ids in acked),
        "lost_acknowledged_steps": lost,
    }


def _concurrent(
    cfg: ServeBenchConfig,
    url: str,
    headers: dict[str, str],
    route: str,
    queries: list[str],
    nonce: str,
    acked: list[tuple[int, list[int]]],
) -> dict[str, Any]:
    import httpx

    lock = threading.Lock()
    retrieve_lat: list[float] = []
    add_lat: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + cfg.time_limit

    def client(j: int) -> None:
        rng = np.random.default_rng(cfg.seed + 100 + j)
        with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
            for i in range(cfg.ops_per_client):
                if time.monotonic() > deadline:
                    return
                if rng.random() < cfg.add_share:
                    k = 10_000_000 + j * 100_000 + i
                    body: dict[str, Any] = {"messages": generated_turn(k, rng)}
                    t0 = time.perf_counter()
                    r = http.post(route + "/messages", json=body)
                    dt = time.perf_counter() - t0
                    if r.status_code == 200:
                        with lock:
                            add_lat.append(dt)
                            acked.append((k, r.json()["step_ids"]))
                    else:
                        errors.append(f"add {r.status_code}: {r.text[:200]}")
                else:
                    q = f"{queries[int(rng.integers(len(queries)))]} [{nonce} c{j} {i}]"
                    t0 = time.perf_counter()
                    r = http.post(route + "/retrieve", json={"query": q, "budget": cfg.budget})
                    dt = time.perf_counter() - t0
                    if r.status_code == 200:
                        with lock:
                            retrieve_lat.append(dt)
                    else:
                        errors.append(f"retrieve {r.status_code}: {r.text[:200]}")

    threads = [threading.Thread(target=client, args=(j,)) for j in range(cfg.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = len(retrieve_lat) + len(add_lat)
    return {
        "clients": cfg.clients,
        "operations": done,
        "wall_s": wall,
        "throughput_ops_s": done / wall if wall > 0 else float("nan"),
        "retrieve": _percentiles(retrieve_lat),
        "add": _percentiles(add_lat),
        "errors": errors[:5],
        "n_errors": len(errors),
    }


def render_report(result: dict[str, Any]) -> str:
    """The measurements as a Markdown table and a few lines."""
    seq, con, echo = result["sequential"], result["concurrent"], result["echo"]
    cfg = result["config"]
    rows = [
        f"serve benchmark: {result['store']['steps']} steps, encoder {result['store']['encoder']}, "
        f"method {cfg['method']}, budget {cfg['budget']}, "
        f"{cfg.get('readers', ServeBenchConfig.readers)} server reader threads"
        + (", inline reads" if cfg.get("inline_reads") else "")
        + f", HTTP protocol {cfg.get('http_protocol', 'auto')}"
        + (f", {cfg['workers']} worker processes" if cfg.get("workers", 1) > 1 else ""),
        "",
        "| path | n | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
        f"| in-process Memory.retrieve | {seq['in_process']['n']} | "
        f"{seq['in_process']['p50_ms']:.1f} | {seq['in_process']['p99_ms']:.1f} |",
        f"| HTTP retrieve, 1 client | {seq['http']['n']} | {seq['http']['p50_ms']:.1f} | "
        f"{seq['http']['p99_ms']:.1f} |",
        f"| HTTP retrieve, {con['clients']} clients, {cfg['add_share']:.0%} adds | "
        f"{con['retrieve']['n']} | "
        f"{con['retrieve']['p50_ms']:.1f} | {con['retrieve']['p99_ms']:.1f} |",
        f"| HTTP add (one turn), {con['clients']} clients | {con['add']['n']} | "
        f"{con['add']['p50_ms']:.1f} | {con['add']['p99_ms']:.1f} |",
        "",
        f"HTTP / in-process: p50 {seq['p50_ratio']:.2f}x, p99 {seq['p99_ratio']:.2f}x",
        f"concurrent: {con['operations']} operations in {con['wall_s']:.1f} s = "
        f"{con['throughput_ops_s']:.1f} ops/s ({con['n_errors']} errors)",
        f"echo endpoint (FastAPI + uvicorn, same load, before/after): "
        f"{echo['before']['throughput_ops_s']:.1f} / {echo['after']['throughput_ops_s']:.1f}"
        f" ops/s; osumem serve / echo: {echo['ratio']:.2f}x",
        *_cpu_line(con, echo),
        f"acknowledged adds: {result['acknowledged_adds']} ({result['acknowledged_steps']} "
        f"steps); lost after SIGKILL + reopen: {result['lost_acknowledged_steps']}",
        f"store build {result['store']['build_s']:.1f} s; reopen + first retrieve "
        f"{result['reopen_and_first_retrieve_s']:.1f} s; server start "
        f"{result['server_start_s']:.1f} s, its first retrieve "
        f"{result['server_first_retrieve_s']:.1f} s",
    ]
    return "\n".join(rows)


def _cpu_line(con: dict[str, Any], echo: dict[str, Any]) -> list[str]:
    """The servers' CPU per operation under the concurrent load, where it was read."""
    ours = con.get("server_cpu_ms_per_op")
    theirs = [echo[k].get("server_cpu_ms_per_op") for k in ("before", "after")]
    if ours is None or None in theirs:
        return []
    return [
        f"server CPU per operation: osumem serve {ours:.2f} ms, echo endpoint "
        f"{theirs[0]:.2f} / {theirs[1]:.2f} ms"
    ]
