"""The memory in a process of its own (``AsyncMemory.open(..., process=True)``,
:mod:`osumem.serve.worker`): opening errors arrive with their own type, a child that
dies fails the waiting and later calls with a typed error naming its exit code, an
argument that cannot cross processes is refused without breaking the link, closing
closes the store, and results explain themselves when asked with ``explain=True``."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from osumem.errors import InvalidInputError, MemoryProcessError, OSUMemError
from osumem.memory import Memory
from osumem.serve import AsyncMemory
from osumem.serve.worker import ProcessService

ENCODER = "hashing:d64"


def test_an_error_while_opening_is_raised_with_its_type(tmp_path):
    with pytest.raises(OSUMemError) as in_process:
        Memory.open(tmp_path / "no" / "such" / "dir" / "mem.db", encoder="no-such-encoder")
    with pytest.raises(type(in_process.value)) as in_child:
        ProcessService(tmp_path / "no" / "such" / "dir" / "mem.db", encoder="no-such-encoder")
    assert str(in_child.value) == str(in_process.value)


def test_closing_finishes_the_calls_sent_and_closes_the_store(tmp_path):
    path = tmp_path / "mem.db"
    memory = AsyncMemory.open(path, encoder=ENCODER, process=True)
    pid = memory.service.pid

    async def main():
        writes = [memory.add(f"note {k}", namespace="n") for k in range(20)]
        return await asyncio.gather(*writes)

    ids = asyncio.run(main())
    memory.service.close()
    memory.service.close()  # idempotent
    assert sorted(i for one in ids for i in one) == list(range(1, 21))
    assert not memory.service.alive
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the child has exited (and was reaped)
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(memory.n_steps("n"))
    with Memory.open(path) as mem:  # everything acknowledged is in the store
        assert mem.n_steps("n") == 20


def test_a_child_that_dies_fails_waiting_and_later_calls_naming_its_exit(tmp_path):
    service = ProcessService(None, encoder=ENCODER)
    memory = AsyncMemory(service)
    asyncio.run(memory.add("hello", namespace="x"))
    os.kill(service.pid, signal.SIGKILL)
    with pytest.raises(MemoryProcessError, match=r"ended with exit code -9"):
        asyncio.run(memory.retrieve("hello", 32, namespace="x"))
    with pytest.raises(MemoryProcessError, match=r"exit code -9"):
        asyncio.run(memory.namespaces())
    assert not service.alive
    service.close()  # still closes cleanly


def test_an_argument_that_cannot_cross_is_refused_and_the_link_still_works():
    with AsyncMemory.open(None, encoder=ENCODER, process=True).service as service:
        memory = AsyncMemory(service)
        lock = threading.Lock()  # cannot be pickled
        with pytest.raises(TypeError, match=r"aadd: its arguments cannot be sent"):
            asyncio.run(memory.add("hello", namespace="x", metadata={"lock": lock}))
        assert asyncio.run(memory.add("hello", namespace="x")) == [1]
        assert asyncio.run(memory.n_steps("x")) == 1


def test_results_cross_without_their_lazy_explainer():
    async def main():
        async with AsyncMemory.open(None, encoder=ENCODER, process=True) as memory:
            await memory.add("I prefer aisle seats", namespace="ana")
            plain = await memory.retrieve("seat preference?", 64, namespace="ana")
            explained = await memory.retrieve("seat preference?", 64, namespace="ana", explain=True)
            return plain, explained

    plain, explained = asyncio.run(main())
    assert plain == explained and plain.positions == [0]
    assert explained.explain().steps[0].position == 0
    with pytest.raises(InvalidInputError, match="explain=true"):
        plain.explain()


def test_the_child_answers_only_the_service_calls():
    with ProcessService(None, encoder=ENCODER) as service:
        with pytest.raises(AttributeError, match="no call named 'close'"):
            asyncio.run(service._await("close"))
        assert asyncio.run(service.anamespaces()) == []


def test_the_child_leaves_one_cpu_to_the_agent(monkeypatch):
    import osumem.serve.worker as worker

    mine = sorted(os.sched_getaffinity(0))
    with ProcessService(None, encoder=ENCODER) as service:
        expected = mine[1:] if len(mine) > 1 else mine
        assert sorted(os.sched_getaffinity(service.pid)) == expected
    with ProcessService(None, encoder=ENCODER, spare_cpu=False) as service:
        assert service.cpus is None and sorted(os.sched_getaffinity(service.pid)) == mine
    monkeypatch.setattr(worker.os, "sched_getaffinity", lambda pid: {3, 5, 7})
    assert worker._child_cpus(True) == [5, 7] and worker._child_cpus(False) is None
    monkeypatch.setattr(worker.os, "sched_getaffinity", lambda pid: {2})
    assert worker._child_cpus(True) is None


def test_a_setting_that_cannot_cross_is_refused_and_no_child_is_left():
    import subprocess

    started = []
    real = subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real(*args, **kwargs))
        return started[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(subprocess, "Popen", popen)
        with pytest.raises(TypeError, match="settings cannot be sent"):
            ProcessService(None, encoder=ENCODER, ann_min_steps=threading.Lock())
    assert len(started) == 1 and started[0].poll() is not None  # the child was ended
