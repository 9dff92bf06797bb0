"""The interpreter's exit with background index builds under way: no thread is ended
inside hnswlib's C++ code (which aborted the process, exit status 134), and an index
built in pieces is the index one insertion call builds."""

import subprocess
import sys
import threading

import numpy as np
import pytest

from osumem.osu import background
from osumem.osu.views import INSERT_CHUNK, KnnIndex

pytest.importorskip("hnswlib")

# Several builds of different sizes, started right before the script ends, so that
# some return from hnswlib while the interpreter finalises (before the fix: 8 aborts
# in 8 runs on a 2-core machine).
SCRIPT = """
import numpy as np
import osumem.memory, scipy.sparse, sklearn  # noqa: F401  (a finalisation that takes a while)
from osumem.osu.construct import KnnPrebuild
rng = np.random.default_rng(0)
builds = []
for n in (100, 200, 400, 800, 1600, 3200):
    rows = rng.standard_normal((n, 64)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    builds.append(KnnPrebuild(rows, 64, 0))
print("started", flush=True)
"""


@pytest.mark.slow
def test_a_script_ending_during_background_builds_exits_cleanly():
    for _ in range(3):
        run = subprocess.run(
            [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
        )
        assert "terminate called" not in run.stderr
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.strip() == "started"


def test_native_calls_are_refused_off_the_main_thread_once_the_exit_began(monkeypatch):
    monkeypatch.setattr(background, "_exiting", True)
    with background.native_call():  # the main thread goes on (a close in a later hook)
        pass
    background.check_exit()
    seen = []

    def off_main():
        for call in (background.check_exit, lambda: background.native_call().__enter__()):
            try:
                call()
            except background.Cancelled:
                seen.append("cancelled")

    t = threading.Thread(target=off_main)
    t.start()
    t.join()
    assert seen == ["cancelled", "cancelled"]
    assert background._inside == {}


def test_the_exit_waits_for_a_thread_inside_a_native_call(monkeypatch):
    monkeypatch.setattr(background, "_exit_hooks", [])
    monkeypatch.setattr(background, "_exiting", False)
    inside, release = threading.Event(), threading.Event()
    left = []

    def worker():
        with background.native_call():
            inside.set()
            release.wait(10)
        left.append(True)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(10)
    threading.Timer(0.2, release.set).start()
    background._at_exit()  # returns only once the worker left the native call
    assert release.is_set() and background._inside == {}
    t.join()
    assert left == [True]


def test_an_index_inserted_in_pieces_is_the_one_insertion_call_builds():
    import hnswlib

    rng = np.random.default_rng(3)
    n, dim = 2 * INSERT_CHUNK + 300, 24
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    pieces = KnnIndex(dim, seed=7, capacity=n)
    pieces.add(rows)
    whole = hnswlib.Index(space="ip", dim=dim)
    whole.init_index(max_elements=max(1024, n), M=16, ef_construction=100, random_seed=7)
    whole.set_num_threads(1)
    whole.add_items(rows, np.arange(n))
    whole.set_ef(40)
    queries = rng.standard_normal((50, dim)).astype(np.float32)
    for q in queries:
        expected, _ = whole.knn_query(q[None, :], k=20)
        np.testing.assert_array_equal(pieces.query(q, 20, ef=40), expected[0])
