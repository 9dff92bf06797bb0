"""A server killed with SIGKILL while clients are adding loses no acknowledged add:
after a restart, every acknowledged step is stored whole and served again."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from osumem.memory import Memory
from serve_helpers import TOKEN, Server, httpx, turn, write_tokens


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_sigkill_loses_no_acknowledged_add(tmp_path):
    store = tmp_path / "kill.db"
    tokens = write_tokens(tmp_path / "tokens.txt")
    headers = {"authorization": f"Bearer {TOKEN}"}
    acked: dict[int, list[int]] = {}  # turn -> acknowledged step ids
    lock = threading.Lock()
    stop = threading.Event()
    enough = threading.Event()

    def writer(first: int, srv: Server) -> None:
        with httpx.Client(base_url=srv.url, headers=headers, timeout=30) as c:
            for k in range(first, first + 10_000, 3):
                if stop.is_set():
                    return
                try:
                    r = c.post(f"/v1/namespaces/ns{k % 3}/messages", json={"messages": turn(k)})
                except httpx.HTTPError:
                    return  # the server died mid-request: not acknowledged
                if r.status_code != 200:
                    return
                with lock:
                    acked[k] = r.json()["step_ids"]
                    if len(acked) >= 30:
                        enough.set()

    srv = Server(store, tokens)
    threads = [threading.Thread(target=writer, args=(j, srv)) for j in range(3)]
    for t in threads:
        t.start()
    assert enough.wait(120), "the writers got no acknowledgements"
    os.kill(srv.proc.pid, signal.SIGKILL)  # while adds are in flight
    srv.proc.wait(timeout=30)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert srv.proc.returncode == -signal.SIGKILL
    with lock:
        done = dict(acked)

    with Memory.open(store, encoder="hashing:d64") as mem:
        mem.check()  # integrity: positions, batches, blob sizes
        stored = set(mem.store.step_ids())
        texts = {ns: list(mem.view(ns).texts) for ns in mem.namespaces()}
    for k, ids in done.items():
        assert set(ids) <= stored, f"acknowledged turn {k} lost"
        column = texts[f"ns{k % 3}"]
        i = column.index(f"user: turn {k}: check reservation R{k} for passenger P{k % 7}")
        assert column[i + 1].startswith("call: get_reservation")  # whole, with its call

    again = Server(store, tokens)  # restart: the same store is served again
    try:
        with httpx.Client(base_url=again.url, headers=headers, timeout=30) as c:
            k = max(done)
            r = c.post(
                f"/v1/namespaces/ns{k % 3}/retrieve",
                json={"query": f"check reservation R{k}", "budget": 2000},
            )
            assert r.status_code == 200
            served = {s["step_id"] for s in r.json()["steps"]}
            assert set(done[k]) & served
    finally:
        again.stop()
