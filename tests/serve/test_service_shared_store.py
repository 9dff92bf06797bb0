"""Two services on one SQLite store, as two servers (or a server and another writer)
share a file: each service's reader threads read the store's change counter while its
store thread writes. Those reads run under the service's shared lock, so none is open
on the connection when the store thread begins a write transaction: before, a reader's
read of an older snapshot of the file made SQLite refuse the write at once (a
``StoreBusyError`` after no wait at all) whenever the other service had just committed,
and a counter read in another thread stood for the writer's own (a ``UNIQUE`` failure on
the batch end: the writer took the other service's positions for free)."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np

from osumem.bench.serve import generated_turn
from osumem.memory import Memory
from osumem.serve.service import MemoryService

ENC = "hashing:d64"
NS = "agent"


def test_two_services_on_one_store_under_load(tmp_path):
    path = tmp_path / "shared.db"
    rng = np.random.default_rng(0)
    with Memory.open(path, encoder=ENC) as mem:
        for k in range(40):
            mem.add_messages(generated_turn(k, rng), namespace=NS)
    services = [MemoryService(path, encoder=ENC, readers=2) for _ in range(2)]
    errors: Counter[str] = Counter()
    acked: list[list[int]] = []
    lock = threading.Lock()

    def client(j: int) -> None:
        r = np.random.default_rng(100 + j)
        service = services[j % 2]
        for i in range(80):
            try:
                if r.random() < 0.3:
                    added = service.add_messages(NS, generated_turn(1_000 + 100 * j + i, r))
                    with lock:
                        acked.append(list(added.step_ids))
                else:
                    service.retrieve(f"change reservation {j} {i}", 128, namespace=NS)
            except Exception as exc:  # every failure is the finding
                errors[f"{type(exc).__name__}: {exc}"] += 1

    try:
        threads = [threading.Thread(target=client, args=(j,)) for j in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
    finally:
        for service in services:
            service.close()
    assert not errors, errors.most_common(3)
    with Memory.open(path, encoder=ENC) as mem:
        mem.check()  # positions 0..n-1, batch ends, blobs: a sound store
        n = mem.n_steps(NS)
        stored = {s.step_id for s in mem.steps(NS)}
    assert len(stored) == n
    assert all(i in stored for added in acked for i in added)  # every acknowledged add
