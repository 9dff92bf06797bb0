"""A serving process leaves what it made at its start (imported modules, the app, the
opened store) out of later garbage collections: ``osumem serve`` over HTTP or stdio,
and the child of ``AsyncMemory.open(..., process=True)``, freeze them before they
answer their first request, and put them back when they stop serving (a frozen
interpreter's shutdown can crash while a daemon thread runs)."""

from __future__ import annotations

import gc
import socket
from multiprocessing.connection import Connection
from typing import Any

import pytest

pytest.importorskip("uvicorn")

from osumem.serve import worker
from osumem.serve.auth import TokenTable
from osumem.serve.run import run_http, run_stdio
from osumem.serve.service import MemoryService

ENCODER = "hashing:d64"


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process's objects back in its collections


def test_the_http_server_freezes_its_start_before_serving(unfrozen, monkeypatch, tmp_path):
    import uvicorn

    seen: list[int] = []
    monkeypatch.setattr(
        uvicorn.Server, "run", lambda self, sockets=None: seen.append(gc.get_freeze_count())
    )
    with MemoryService(tmp_path / "m.db", encoder=ENCODER) as service:
        assert gc.get_freeze_count() == 0
        run_http(service, TokenTable(), port=0)
    assert len(seen) == 1 and seen[0] > 1000
    assert gc.get_freeze_count() == 0


def test_the_stdio_server_freezes_its_start_before_serving(unfrozen, monkeypatch, tmp_path):
    import anyio

    seen: list[int] = []
    monkeypatch.setattr(anyio, "run", lambda *args, **kwargs: seen.append(gc.get_freeze_count()))
    with MemoryService(tmp_path / "m.db", encoder=ENCODER) as service:
        run_stdio(service)
    assert len(seen) == 1 and seen[0] > 1000
    assert gc.get_freeze_count() == 0


def test_the_memory_process_freezes_its_start_before_answering(unfrozen, monkeypatch, tmp_path):
    seen: list[int] = []

    async def serve(conn: Any, service: Any) -> None:
        seen.append(gc.get_freeze_count())

    monkeypatch.setattr(worker, "_serve", serve)
    ours, theirs = socket.socketpair()
    parent = Connection(ours.detach())
    parent.send((str(tmp_path / "m.db"), None, {"encoder": ENCODER}))
    assert worker.main([str(theirs.detach())]) == 0
    assert parent.recv()[0] == "ready"
    parent.close()
    assert len(seen) == 1 and seen[0] > 1000
    assert gc.get_freeze_count() == 0
