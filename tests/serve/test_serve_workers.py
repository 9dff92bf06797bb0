"""``osumem serve --workers N``: one port, N server processes over one store. Each
answer sees every acknowledged add, whichever process took the add and whichever
answers; a stop signal stops every worker cleanly; a worker that dies stops the rest,
and the command fails saying so."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from osumem.bench.serve import _cpu_s, descendants
from osumem.memory import open_store
from serve_helpers import OSUMEM, Server, httpx, serve_env, turn

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    pytest.mark.slow,
]


def _children(pid: int) -> list[int]:
    """The live processes below ``pid`` that run a worker (a zombie has no command
    line)."""
    out = []
    for proc in descendants(pid):
        try:
            with open(f"/proc/{proc}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"spawn_main" in cmd:
            out.append(proc)
    return out


def _workers(srv: Server, n: int) -> list[int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = _children(srv.proc.pid)
        if len(found) == n:
            return found
        time.sleep(0.2)
    raise AssertionError(f"expected {n} workers, found {_children(srv.proc.pid)}")


def test_every_worker_answers_with_every_acknowledged_add(tmp_path):
    store = tmp_path / "mem.db"
    srv = Server(store, None, "--no-auth", "--workers", "2")
    try:
        workers = _workers(srv, 2)
        before = [_cpu_s(w) for w in workers]
        for k in range(6):
            with httpx.Client(base_url=srv.url, timeout=30) as c:  # a new connection each
                r = c.post("/v1/namespaces/t/messages", json={"messages": turn(k)})
                assert r.is_success, r.text
            for _ in range(4):  # new connections: the kernel spreads them over the workers
                with httpx.Client(base_url=srv.url, timeout=30) as c:
                    r = c.post(
                        "/v1/namespaces/t/retrieve",
                        json={"query": f"reservation R{k}", "budget": 400},
                    )
                    assert r.is_success, r.text
                    texts = " ".join(s["text"] for s in r.json()["steps"])
                    assert f"R{k}:" in texts or f"R{k} " in texts, texts
        # both answered some of the 30 connections (each spent CPU on requests)
        assert all((_cpu_s(w) or 0) > (t or 0) for w, t in zip(workers, before, strict=True))
        srv.proc.send_signal(signal.SIGTERM)
        _, err = srv.proc.communicate(timeout=90)
        assert srv.proc.returncode == 0, err
        assert err.count("stopped by SIGTERM; store") == 2  # each worker closed its store
        assert not _children(srv.proc.pid)
    finally:
        srv.stop()
    st = open_store(store, read_only=True)
    try:
        assert st.n_steps("t") == 12  # two steps per turn
    finally:
        st.close()


def test_a_worker_that_dies_stops_the_others(tmp_path):
    srv = Server(tmp_path / "mem.db", None, "--no-auth", "--workers", "2")
    try:
        first, second = _workers(srv, 2)
        os.kill(first, signal.SIGKILL)
        _, err = srv.proc.communicate(timeout=90)
        assert srv.proc.returncode == 1, err
        assert "exit code -9; the other workers were stopped" in err
        assert not _children(srv.proc.pid)
        with pytest.raises(ProcessLookupError):
            os.kill(second, 0)
    finally:
        srv.stop()


def test_workers_need_the_http_transport(tmp_path):
    import subprocess

    done = subprocess.run(
        [*OSUMEM, "serve", "--store", str(tmp_path / "m.db"), "--workers", "2"],
        env=serve_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "--workers" in done.stderr and "--transport http" in done.stderr
    assert not (tmp_path / "m.db").exists()  # nothing opened
