"""A server under mixed load while edits send its namespace's structure to be rebuilt
in the background: adds, deletes and retrievals on several threads, bounded in count.
No request fails; a retrieval that starts after a delete returned never holds a
deleted step; once the last rebuild is taken, the answers equal a fresh memory's."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

from osumem.bench.serve import generated_turn
from osumem.memory import Memory, retrievers
from osumem.serve.service import MemoryService

ENC = "hashing:d64"
NS = "agent"
QUERIES = ["change reservation R00003", "which flight is on R00011?", "bags for P7"]


@pytest.mark.slow
@pytest.mark.parametrize("inline", [False, True])
def test_edits_rebuilt_in_the_background_under_load(tmp_path, monkeypatch, inline):
    monkeypatch.setattr(retrievers, "REBUILD_BACKGROUND_STEPS", 40)
    path = tmp_path / "m.db"
    rng = np.random.default_rng(0)
    with Memory.open(path, encoder=ENC) as mem:
        for k in range(60):
            mem.add_messages(generated_turn(k, rng), namespace=NS)
    errors: Counter[str] = Counter()
    deleted: set[int] = set()  # ids whose delete has returned
    lock = threading.Lock()
    stop = threading.Event()
    stand_ins = Counter[str]()

    with MemoryService(path, encoder=ENC, readers=3, inline_reads=inline) as svc:

        def reader(j: int) -> None:
            i = 0
            while not stop.is_set() and i < 400:
                with lock:
                    gone = set(deleted)
                try:
                    r = svc.retrieve(f"{QUERIES[i % 3]} {j}", 128, namespace=NS)
                    stand_ins[r.method] += 1
                    back = gone & {s.step_id for s in r.steps}
                    if back:
                        errors[f"deleted steps answered: {sorted(back)}"] += 1
                except Exception as exc:  # every failure is the finding
                    errors[f"{type(exc).__name__}: {exc}"] += 1
                i += 1

        def writer() -> None:
            r = np.random.default_rng(7)
            for i in range(25):
                try:
                    svc.add_messages(NS, generated_turn(1_000 + i, r))
                    if i % 3 == 0:
                        n = svc.n_steps(NS)
                        pos = int(r.integers(0, n // 2))
                        step = svc.steps_of(NS, positions=[pos])[0]
                        ids = svc.delete(NS, [pos])
                        assert ids == [step.step_id]
                        with lock:
                            deleted.update(ids)
                except Exception as exc:
                    errors[f"{type(exc).__name__}: {exc}"] += 1
                time.sleep(0.01)
            stop.set()

        threads = [threading.Thread(target=reader, args=(j,)) for j in range(3)]
        threads.append(threading.Thread(target=writer))
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors.most_common(3)
        assert stand_ins["flat"] > 0  # the load met the stand-in
        deadline = time.monotonic() + 30
        while svc.retrieve(QUERIES[0], 128, namespace=NS).method == "flat":
            assert time.monotonic() < deadline, "the last rebuild was never taken"
            time.sleep(0.02)
        mine = [[s.step_id for s in svc.retrieve(q, 128, namespace=NS).steps] for q in QUERIES]
    with Memory.open(path, encoder=ENC) as fresh:
        theirs = [[s.step_id for s in fresh.retrieve(q, 128, namespace=NS).steps] for q in QUERIES]
    assert mine == theirs
