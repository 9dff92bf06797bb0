"""Benchmark of several ``osumem serve`` processes on one shared store (Postgres).

Phases, in one run:

1. build a store of ``steps`` steps in one namespace (generated agent logs) at the
   store URL, in process;
2. start ``servers`` servers (``osumem serve --transport http``) on it, each on its own
   loopback port;
3. ``clients`` threads run ``ops_per_client`` operations each, bounded by
   ``time_limit``: adds (share ``add_share``) and retrievals, spread over the servers.
   After every acknowledged add, the client asks *another* server for the steps of its
   turn (they carry a reservation id no other turn has): that server must list all of
   them, with their units, before it answers (``read_after_write_misses`` counts the
   answers that did not; an add sent again after a killed server had committed it is
   answered as a skipped duplicate, with no ids, and its steps must be found all the
   same). Meanwhile server 1 is killed with SIGKILL ``kills`` times and
   started again; requests that fail because of it are retried on another server and
   are not acknowledged;
4. once the load ends, the same queries through every server and through a fresh
   in-process open must give the same steps (``reads_equal_fresh_open``);
5. SIGKILL every server, reopen the store and count acknowledged steps that are
   missing (``lost_acknowledged_steps``).

Latencies are wall time seen by the clients (p50 / p99 per operation kind); the CPU
time of this process and of the servers (from ``/proc``, Linux) is reported beside
them, so a run on a busy machine can be read as a ratio.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from osumem.bench.serve import (
    NAMESPACE,
    ServeBenchConfig,
    _build,
    _percentiles,
    _start_server,
    generated_turn,
)
from osumem.errors import ConfigError
from osumem.frozen import Constraints, FrozenConfig, Interval


@dataclass(frozen=True, kw_only=True)
class ClusterBenchConfig(FrozenConfig):
    """Settings of the several-servers benchmark (see the module doc)."""

    store: str
    servers: int = 2
    steps: int = 2_000
    clients: int = 8
    ops_per_client: int = 60
    add_share: float = 0.3
    kills: int = 20
    queries: int = 20
    budget: int = 256
    encoder: str = "hashing"
    method: str = "osumem"
    time_limit: float = 600.0
    seed: int = 0

    config_name = "bench serve (several servers)"
    parameter_constraints: ClassVar[Constraints] = {
        "servers": Interval(int, 2, 16),
        "steps": Interval(int, 1, None),
        "clients": Interval(int, 1, None),
        "ops_per_client": Interval(int, 1, None),
        "add_share": Interval(float, 0, 1),
        "kills": Interval(int, 0, 1000),
        "queries": Interval(int, 1, None),
        "budget": Interval(int, 1, None),
        "time_limit": Interval(float, 0, None, closed="neither"),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if "://" not in self.store:
            raise ConfigError(
                f"bench serve --servers: --store must be a server URL (postgresql://...), "
                f"got {self.store!r}: a SQLite file is served by one server"
            )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (0 where /proc is not there)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


class _Servers:
    """The running servers; server 1 is the one killed and restarted."""

    def __init__(self, cfg: ClusterBenchConfig, token: str) -> None:
        self.cfg = cfg
        self.token = token
        self.serve_cfg = ServeBenchConfig(encoder=cfg.encoder, method=cfg.method)
        self.procs: list[subprocess.Popen[str] | None] = []
        self.urls: list[str] = []
        self.up: list[threading.Event] = []
        self.cpu_s = 0.0
        self.restart_s: list[float] = []
        for _ in range(cfg.servers):
            proc, url = self._start()
            self.procs.append(proc)
            self.urls.append(url)
            self.up.append(threading.Event())
            self.up[-1].set()

    def _start(self) -> tuple[subprocess.Popen[str], str]:
        return _start_server(self.cfg.store, self.serve_cfg, self.token, readers=4)

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        self.up[i].clear()
        if proc is not None:
            self.cpu_s += _cpu_seconds(proc.pid)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        self.procs[i] = None

    def restart(self, i: int) -> None:
        t0 = time.perf_counter()
        proc, url = self._start()
        self.restart_s.append(time.perf_counter() - t0)
        self.procs[i], self.urls[i] = proc, url
        self.up[i].set()

    def kill_all(self) -> None:
        for i in range(len(self.procs)):
            self.kill(i)


def run_cluster_bench(
    cfg: ClusterBenchConfig, *, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Run every phase and return the measurements (see the module doc)."""
    from osumem.memory import Memory

    say = progress or (lambda _m: None)
    say(f"building a {cfg.steps}-step store with encoder {cfg.encoder!r}")
    serve_cfg = ServeBenchConfig(steps=cfg.steps, encoder=cfg.encoder, method=cfg.method)
    built = _build(serve_cfg, cfg.store, say)
    token = secrets.token_hex(16)
    say(f"starting {cfg.servers} servers on one store")
    cpu0 = time.process_time()
    servers = _Servers(cfg, token)
    acked: list[tuple[int, list[int]]] = []
    try:
        loaded = _load(cfg, servers, token, acked, say)
        say("comparing every server's answers with a fresh open")
        equal, compared = _compare(cfg, servers, token)
    finally:
        servers.kill_all()  # no graceful shutdown: acknowledged adds must be stored
    client_cpu = time.process_time() - cpu0
    say("reopening the store after SIGKILL")
    with Memory.open(cfg.store, method=cfg.method) as check:
        check.check()
        stored = set(check.store.step_ids())
        n_after = check.n_steps(NAMESPACE)
    lost = sum(1 for _k, ids in acked for i in ids if i not in stored)
    return {
        "config": cfg.to_dict() | {"store": _masked(cfg.store)},
        "store": built | {"steps_after": n_after},
        "concurrent": loaded,
        "kills": loaded.pop("kills"),
        "restart_s": _percentiles(servers.restart_s) | {"max_s": max(servers.restart_s, default=0)},
        "acknowledged_adds": len(acked),
        "acknowledged_steps": sum(len(ids) for _k, ids in acked),
        "lost_acknowledged_steps": lost,
        "reads_compared": compared,
        "reads_equal_fresh_open": equal,
        "cpu_s": {"clients": client_cpu, "servers": servers.cpu_s},
    }


def _masked(url: str) -> str:
    import re

    return re.sub(r"(://[^/:@]*):[^/@]*@", r"\1:***@", url)


def _load(
    cfg: ClusterBenchConfig,
    servers: _Servers,
    token: str,
    acked: list[tuple[int, list[int]]],
    say: Callable[[str], None],
) -> dict[str, Any]:
    import httpx

    headers = {"authorization": f"Bearer {token}"}
    route = f"/v1/namespaces/{NAMESPACE}"
    lock = threading.Lock()
    lat: dict[str, list[float]] = {"retrieve": [], "add": [], "read_after_write": []}
    counts = {"misses": 0, "failed_requests": 0, "kills": 0}
    errors: list[str] = []
    missed: list[str] = []
    deadline = time.monotonic() + cfg.time_limit
    done = threading.Event()
    local = threading.local()

    def request(j: int, i: int, method: str, path: str, **kw: Any) -> tuple[int, Any, float]:
        """Send to server (j + i) mod servers, or the next one that is up; a request
        a killed server never answered is sent again elsewhere (never acknowledged)."""
        for attempt in range(4 * cfg.servers):
            s = (j + i + attempt) % cfg.servers
            if not servers.up[s].is_set():
                continue
            url = servers.urls[s]
            pool: dict[str, httpx.Client] = local.__dict__.setdefault("clients", {})
            http = pool.get(url)
            if http is None:  # one connection per client thread and server
                http = pool[url] = httpx.Client(base_url=url, headers=headers, timeout=60)
            t0 = time.perf_counter()
            try:
                r = http.request(method, path, **kw)
            except httpx.HTTPError:
                pool.pop(url).close()
                with lock:
                    counts["failed_requests"] += 1
                time.sleep(0.05)
                continue
            return s, r, time.perf_counter() - t0
        raise ConfigError("bench serve: no server answered")

    def client(j: int) -> None:
        rng = np.random.default_rng(cfg.seed + 100 + j)
        i = -1
        while time.monotonic() < deadline:  # at least ops_per_client, and until the kills end
            i += 1
            if i >= cfg.ops_per_client and done.is_set():
                return
            if rng.random() < cfg.add_share:
                k = 10_000_000 + j * 100_000 + i
                s, r, dt = request(
                    j, i, "POST", route + "/messages", json={"messages": generated_turn(k, rng)}
                )
                if r.status_code != 200:
                    errors.append(f"add {r.status_code}: {r.text[:200]}")
                    continue
                ids = r.json()["step_ids"]
                with lock:
                    lat["add"].append(dt)
                    acked.append((k, ids))
                # read it back through another server: all of its steps, with units
                _, back, dt = request(
                    s + 1,
                    0,
                    "GET",
                    route + "/steps",
                    params={"grep": f"R{k:05d}(?![0-9])", "limit": 50},
                )
                got = back.json().get("steps", []) if back.status_code == 200 else []
                with lock:
                    lat["read_after_write"].append(dt)
                    # each of its steps names the reservation; an add sent again after a
                    # killed server had committed it is skipped as a duplicate (no ids):
                    # its steps must still be there
                    if len(got) != len(ids) if ids else not got:
                        counts["misses"] += 1
                        missed.append(
                            f"R{k:05d}: added {len(ids)} steps, read back {len(got)} "
                            f"(HTTP {back.status_code}: {back.text[:120]})"
                        )
            else:
                q = f"which flight and bags are on reservation R{int(rng.integers(9999)):05d}?"
                _, r, dt = request(
                    j, i, "POST", route + "/retrieve", json={"query": q, "budget": cfg.budget}
                )
                if r.status_code == 200:
                    with lock:
                        lat["retrieve"].append(dt)
                else:
                    errors.append(f"retrieve {r.status_code}: {r.text[:200]}")
        for http in local.__dict__.get("clients", {}).values():
            http.close()

    def killer() -> None:
        rng = np.random.default_rng(cfg.seed + 7)
        try:
            while counts["kills"] < cfg.kills and time.monotonic() < deadline:
                time.sleep(float(rng.uniform(0.2, 1.0)))
                servers.kill(1)
                counts["kills"] += 1
                say(f"killed server 1 ({counts['kills']}/{cfg.kills}); restarting it")
                servers.restart(1)
        finally:
            done.set()  # the clients finish their operations and stop

    threads = [threading.Thread(target=client, args=(j,)) for j in range(cfg.clients)]
    kill_thread = threading.Thread(target=killer, daemon=True)
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    kill_thread.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    kill_thread.join(timeout=600)
    n = len(lat["retrieve"]) + len(lat["add"])
    return {
        "clients": cfg.clients,
        "servers": cfg.servers,
        "operations": n,
        "wall_s": wall,
        "throughput_ops_s": n / wall if wall > 0 else float("nan"),
        "retrieve": _percentiles(lat["retrieve"]),
        "add": _percentiles(lat["add"]),
        "read_after_write": _percentiles(lat["read_after_write"]),
        "read_after_write_misses": counts["misses"],
        "read_after_write_missed": missed[:5],
        "failed_requests_retried": counts["failed_requests"],
        "errors": errors[:5],
        "n_errors": len(errors),
        "kills": counts["kills"],
    }


def _compare(cfg: ClusterBenchConfig, servers: _Servers, token: str) -> tuple[bool, int]:
    """The same queries through every server and a fresh in-process open."""
    import httpx

    from osumem.memory import Memory

    for event in servers.up:
        event.wait(timeout=600)
    rng = np.random.default_rng(cfg.seed + 3)
    queries = [
        f"which flight and bags are on reservation R{int(rng.integers(9999)):05d}?"
        for _ in range(cfg.queries)
    ]
    headers = {"authorization": f"Bearer {token}"}
    route = f"/v1/namespaces/{NAMESPACE}/retrieve"
    answers: list[list[list[tuple[int, str]]]] = []
    for url in servers.urls:
        with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
            got = []
            for q in queries:
                r = http.post(route, json={"query": q, "budget": cfg.budget})
                r.raise_for_status()
                got.append([(s["position"], s["text"]) for s in r.json()["steps"]])
            answers.append(got)
    with Memory.open(cfg.store, method=cfg.method) as fresh:
        answers.append(
            [
                [
                    (s.position, s.text)
                    for s in fresh.retrieve(q, cfg.budget, namespace=NAMESPACE).steps
                ]
                for q in queries
            ]
        )
    return all(a == answers[-1] for a in answers), len(queries) * len(answers)


def render_cluster_report(result: dict[str, Any]) -> str:
    """The measurements as a Markdown table and a few lines."""
    con, cfg = result["concurrent"], result["config"]
    rows = [
        f"serve benchmark, {con['servers']} servers on one store ({cfg['store']}): "
        f"{result['store']['steps']} steps, encoder {result['store']['encoder']}, "
        f"method {cfg['method']}, budget {cfg['budget']}",
        "",
        "| operation | n | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
    ]
    for name, label in (
        ("retrieve", "HTTP retrieve"),
        ("add", "HTTP add (one turn)"),
        ("read_after_write", "its steps read back through another server"),
    ):
        p = con[name]
        rows.append(f"| {label} | {p['n']} | {p['p50_ms']:.1f} | {p['p99_ms']:.1f} |")
    rows += [
        "",
        f"{con['clients']} clients: {con['operations']} operations in {con['wall_s']:.1f} s = "
        f"{con['throughput_ops_s']:.1f} ops/s ({con['n_errors']} errors, "
        f"{con['failed_requests_retried']} requests to a killed server sent again)",
        f"SIGKILLs of server 1: {result['kills']} (restart p50 "
        f"{result['restart_s']['p50_ms'] / 1000:.1f} s)",
        f"acknowledged adds: {result['acknowledged_adds']} ({result['acknowledged_steps']} "
        f"steps); lost after SIGKILL + reopen: {result['lost_acknowledged_steps']}",
        f"read back through another server and missing: {con['read_after_write_misses']}",
        f"{result['reads_compared']} answers through every server and a fresh open: "
        f"{'all equal' if result['reads_equal_fresh_open'] else 'NOT all equal'}",
        f"CPU: clients {result['cpu_s']['clients']:.1f} s, servers "
        f"{result['cpu_s']['servers']:.1f} s",
    ]
    return "\n".join(rows)
