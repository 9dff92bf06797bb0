"""One BLAS thread inside the memory's own calls (``MemoryConfig.blas_threads``), the
caller's setting restored afterwards, overlapping calls on several threads sharing one
limit, and the ``--blas-threads`` option of the commands."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from numpy.typing import NDArray
from threadpoolctl import threadpool_info, threadpool_limits

from osumem.embed import HashingEncoder
from osumem.errors import ConfigError
from osumem.memory import Memory, MemoryConfig
from osumem.memory.blas import blas_threads


def _blas_counts() -> list[int]:
    return [int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]


pytestmark = pytest.mark.skipif(not _blas_counts(), reason="no BLAS library loaded")


class RecordingEncoder(HashingEncoder):
    """The hashing encoder, noting the BLAS thread counts while it encodes (inside the
    memory's add and retrieve)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[int]] = []

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.seen.append(_blas_counts())
        return super().encode(texts)


def test_memory_calls_run_with_one_blas_thread_and_restore_the_callers() -> None:
    enc = RecordingEncoder()
    with threadpool_limits(limits=3, user_api="blas"):
        assert set(_blas_counts()) == {3}
        with Memory.open(None, encoder=enc) as mem:
            mem.add("book the aisle seat on flight HAT001", namespace="a")
            mem.retrieve("which seat?", 64, namespace="a")
            assert set(_blas_counts()) == {3}  # between calls: the caller's setting
        assert enc.seen and all(set(s) == {1} for s in enc.seen)


def test_blas_threads_none_leaves_the_process_alone() -> None:
    enc = RecordingEncoder()
    with threadpool_limits(limits=3, user_api="blas"):
        with Memory.open(None, encoder=enc, blas_threads=None) as mem:
            mem.add("book the aisle seat", namespace="a")
            mem.retrieve("which seat?", 64, namespace="a")
        assert enc.seen and all(set(s) == {3} for s in enc.seen)


def test_blas_threads_setting_is_used_and_checked() -> None:
    enc = RecordingEncoder()
    with threadpool_limits(limits=4, user_api="blas"):
        with Memory.open(None, encoder=enc, blas_threads=2) as mem:
            mem.add("book the aisle seat", namespace="a")
        assert all(set(s) == {2} for s in enc.seen)
    for bad in (0, -1, 1.5, "1"):
        with pytest.raises(ConfigError, match="blas_threads"):
            MemoryConfig(blas_threads=bad)


def test_overlapping_calls_share_one_limit_and_restore_at_the_last_end() -> None:
    inside = threading.Barrier(2)
    first_left = threading.Event()
    seen: dict[str, list[int]] = {}

    def first() -> None:
        with blas_threads(1):
            inside.wait()
        first_left.set()

    def second() -> None:
        with blas_threads(1):
            inside.wait()
            first_left.wait(10)
            seen["after the first left"] = _blas_counts()

    with threadpool_limits(limits=3, user_api="blas"):
        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert set(seen["after the first left"]) == {1}  # still limited for the second
        assert set(_blas_counts()) == {3}  # both ended: restored


def test_an_error_inside_restores_the_setting() -> None:
    with threadpool_limits(limits=3, user_api="blas"):
        with pytest.raises(RuntimeError), blas_threads(1):
            assert set(_blas_counts()) == {1}
            raise RuntimeError("boom")
        assert set(_blas_counts()) == {3}


def test_query_and_ingest_take_blas_threads(tmp_path: Any) -> None:
    from osumem.cli import main

    log = tmp_path / "log.json"
    log.write_text(
        '[{"role": "user", "content": "book the aisle seat on HAT001"},'
        ' {"role": "assistant", "content": "Booked HAT001, aisle."}]'
    )
    store = tmp_path / "m.db"
    runner = CliRunner()
    r = runner.invoke(
        main,
        ["ingest", str(log), "--store", str(store), "--encoder", "hashing", "--blas-threads", "1"],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["query", "which seat?", "--store", str(store), "--blas-threads", "2"])
    assert r.exit_code == 0, r.output
    assert "HAT001" in r.output
    r = runner.invoke(main, ["query", "which seat?", "--store", str(store), "--blas-threads", "-1"])
    assert r.exit_code == 2
    assert "blas-threads" in r.output


def test_a_memory_used_from_worker_threads_gets_the_limit_too() -> None:
    # threadpoolctl lets only one thread change OpenBLAS's pool; a server's readers and
    # an agent framework's executor call the memory from other threads
    from concurrent.futures import ThreadPoolExecutor

    enc = RecordingEncoder()
    with threadpool_limits(limits=3, user_api="blas"), Memory.open(None, encoder=enc) as mem:
        with ThreadPoolExecutor(1) as pool:
            pool.submit(mem.add, "book the aisle seat", namespace="a").result()
            list(pool.map(lambda q: mem.retrieve(q, 64, namespace="a"), ["seat?", "aisle?"]))
        assert set(_blas_counts()) == {3}
    assert len(enc.seen) >= 3 and all(set(s) == {1} for s in enc.seen)


def test_libraries_are_looked_up_again_only_after_a_compiled_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pure-Python import between two calls keeps the list of BLAS libraries (a cold
    command's first retrieve imports its method's modules); a compiled extension's
    import may bring another BLAS, so the list is looked up again."""
    import importlib.machinery
    import sys
    import types

    import threadpoolctl

    from osumem.memory import blas

    lookups: list[int] = []

    class Counting(threadpoolctl.ThreadpoolController):
        def __init__(self) -> None:
            lookups.append(1)
            super().__init__()

    monkeypatch.setattr(threadpoolctl, "ThreadpoolController", Counting)
    monkeypatch.setattr(blas, "_modules_seen", -1)
    monkeypatch.setattr(blas, "_extensions_seen", -1)

    def fake_module(name: str, origin: str) -> None:
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, origin=origin)
        monkeypatch.setitem(sys.modules, name, module)

    with blas_threads(1):
        pass
    assert len(lookups) == 1
    fake_module("_osumem_test_pure", "/somewhere/pure.py")
    with blas_threads(1):
        pass
    assert len(lookups) == 1
    fake_module("_osumem_test_compiled", "/somewhere/compiled.cpython-311-x86_64-linux-gnu.so")
    with blas_threads(1):
        pass
    assert len(lookups) == 2
    with blas_threads(1):
        pass
    assert len(lookups) == 2
