"""Similarity refreshes off the add path (``OSUPool.background_refresh``): an add that
makes a refresh due does not wait for it; the refresh is applied at a fixed step
count, after which the pool is, bit for bit, the pool that refreshed in place; a
snapshot taken meanwhile restores the same refresh; the community detection runs in a
child process and finds what it finds in process."""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import pytest

from osumem.bench.synthetic import SyntheticConfig, generate_episode
from osumem.osu import OSUConfig, OSUPool
from osumem.osu import community_process as cp
from osumem.osu import construct as construct_mod
from osumem.osu.construct import grown_prefix
from osumem.osu.views import _communities, hnsw_available

CFG = OSUConfig(similarity_refresh=10, similarity_refresh_ratio=0.25, similarity_scope="all")


@pytest.fixture(scope="module")
def view():
    return generate_episode(SyntheticConfig(n_episodes=1), 1001, 0).view


def assert_same_state(a: OSUPool, b: OSUPool) -> None:
    sa, sb = a.state(), b.state()
    assert sa.keys() == sb.keys()
    for name in sa:
        np.testing.assert_array_equal(sa[name], sb[name], err_msg=name)
    assert (a.members != b.members).nnz == 0
    np.testing.assert_array_equal(a.centroids, b.centroids)


def _feed(pools, view, start, stop, chunk=3):
    for t in range(start, stop, chunk):
        for p in pools:
            p.add(grown_prefix(view, min(t + chunk, stop)))


def _until_two_adds_into_a_refresh(pool, view, *others):
    """Add one step at a time (to ``others`` too) until ``pool`` has taken two adds
    since its background refresh began; the step count reached."""
    t = 0
    while not (pool.refresh_pending and len(pool.similarity.job.add_counts) >= 2):
        t += 1
        for p in (pool, *others):
            p.add(grown_prefix(view, t))
    return t


@pytest.fixture(params=["exact", "hnsw"])
def path(request, monkeypatch):
    if request.param == "hnsw":
        if not hnsw_available():
            pytest.skip("needs hnswlib (the scale extra)")
        monkeypatch.setattr(construct_mod, "EXACT_KNN_MAX", 40)  # the warm-start path
    monkeypatch.setattr(construct_mod, "REFRESH_LAG_MIN", 4)
    return request.param


def test_after_each_apply_the_pool_is_the_in_place_one_bit_for_bit(view, path):
    inline = OSUPool(CFG, seed=0)
    background = OSUPool(CFG, seed=0)
    background.background_refresh = True
    started = applied = 0
    for t in range(2, view.n + 1, 2):
        had = background.similarity.job
        for p in (inline, background):
            p.add(grown_prefix(view, t))
        job = background.similarity.job
        started += job is not None and job is not had
        if had is not None and job is not had:
            applied += 1
            if job is None:  # applied, no new one started: nothing pending
                assert_same_state(inline, background)
    assert started >= 3 and applied >= 2
    background.finish_refresh()
    assert not background.refresh_pending
    assert_same_state(inline, background)


def test_an_add_that_makes_a_refresh_due_does_not_wait_for_it(view, monkeypatch, held_detection):
    monkeypatch.setattr(construct_mod, "REFRESH_LAG_MIN", 10**6)  # applied at the due point
    gate = held_detection
    head = 60
    inline = OSUPool.build(grown_prefix(view, head), CFG, 0)
    background = OSUPool.build(grown_prefix(view, head), CFG, 0)
    background.background_refresh = True
    before = background.similarity.partition, background.similarity.upto
    due = head + max(CFG.similarity_refresh, int(np.ceil(CFG.similarity_refresh_ratio * head)))
    done = threading.Event()

    def adds():  # the due add and every one before the next due point
        for t in range(head + 1, due + 15):
            background.add(grown_prefix(view, t))
        done.set()

    threading.Thread(target=adds, daemon=True).start()
    assert done.wait(10), "an add waited for the gated refresh"
    assert background.refresh_pending
    assert (background.similarity.partition, background.similarity.upto) == before
    gate.set()
    for t in range(head + 1, due + 15):
        inline.add(grown_prefix(view, t))
    background.finish_refresh()
    assert_same_state(inline, background)


def test_a_deferring_pool_goes_on_without_its_refresh_and_takes_it_once_built(
    view, monkeypatch, held_detection
):
    """``defer_refresh``: adds past the application point of a refresh still being
    computed do not wait for it (the similarity groups stay as they were); once the
    refreshed state has caught up, ``apply_ready_refresh`` takes it without waiting,
    and the pool is then, bit for bit, the pool that refreshed in place."""
    monkeypatch.setattr(construct_mod, "REFRESH_LAG_MIN", 4)
    monkeypatch.setattr(construct_mod, "DEFER_MIN_STEPS", 0)
    head, stop = 60, 90  # due at 75, applied from 79; the next due point is 94
    inline = OSUPool.build(grown_prefix(view, head), CFG, 0)
    deferring = OSUPool.build(grown_prefix(view, head), CFG, 0)
    deferring.background_refresh = deferring.defer_refresh = True
    before = deferring.similarity.partition, deferring.similarity.upto
    done = threading.Event()

    def adds():
        for t in range(head + 1, stop + 1):
            deferring.add(grown_prefix(view, t))
        done.set()

    threading.Thread(target=adds, daemon=True).start()
    assert done.wait(10), "an add waited for the held refresh"
    job = deferring.similarity.job
    assert job is not None and deferring.n_steps == stop >= job.apply_at
    assert (deferring.similarity.partition, deferring.similarity.upto) == before
    assert not deferring.apply_ready_refresh()  # not built: nothing to take
    held_detection.set()
    deadline = time.monotonic() + 20
    while not job.caught_up:
        assert time.monotonic() < deadline, "the refresh never caught up"
        time.sleep(0.01)
    assert deferring.apply_ready_refresh()
    assert not deferring.refresh_pending
    for t in range(head + 1, stop + 1):
        inline.add(grown_prefix(view, t))
    assert_same_state(inline, deferring)


def test_a_deferring_pool_waits_for_its_refresh_at_the_next_due_point(
    view, monkeypatch, held_detection
):
    """A deferring pool goes on without a refresh still being computed only until the
    next refresh's due point: the add that reaches it waits for the refresh (so adds
    that outrun the refreshes never leave the similarity view more than one refresh
    behind), and once it is built the pool is the in-place one, the next refresh due
    at that point started."""
    monkeypatch.setattr(construct_mod, "REFRESH_LAG_MIN", 4)
    monkeypatch.setattr(construct_mod, "DEFER_MIN_STEPS", 0)
    head = 60  # due at 75, applied from 79; the next due point is 94
    inline = OSUPool.build(grown_prefix(view, head), CFG, 0)
    pool = OSUPool.build(grown_prefix(view, head), CFG, 0)
    pool.background_refresh = pool.defer_refresh = True
    for t in range(head + 1, 94):
        pool.add(grown_prefix(view, t))
    job = pool.similarity.job
    assert job is not None and job.upto == 75 and not job.ready
    assert not pool.refresh_blocks(93)  # deferred up to the next due point
    assert pool.refresh_blocks(94)  # the add reaching it would wait
    done = threading.Event()
    add = threading.Thread(target=lambda: (pool.add(grown_prefix(view, 94)), done.set()))
    add.daemon = True
    add.start()
    assert not done.wait(0.5), "the add at the next due point did not wait"
    held_detection.set()
    assert done.wait(30)
    assert pool.similarity.upto == 75 and pool.similarity.job is not None  # the next one
    assert pool.similarity.job.upto == 94
    pool.finish_refresh()
    for t in range(head + 1, 95):
        inline.add(grown_prefix(view, t))
    assert_same_state(inline, pool)


def test_a_pool_below_the_deferring_size_waits_at_the_application_point(
    view, monkeypatch, held_detection
):
    """Deferring starts at ``DEFER_MIN_STEPS`` steps: below it, the add reaching the
    application point of a refresh still being computed waits for it, as in a pool
    that does not defer."""
    monkeypatch.setattr(construct_mod, "REFRESH_LAG_MIN", 4)
    monkeypatch.setattr(construct_mod, "DEFER_MIN_STEPS", 79)
    pool = OSUPool.build(grown_prefix(view, 60), CFG, 0)
    pool.background_refresh = pool.defer_refresh = True
    for t in range(61, 76):
        pool.add(grown_prefix(view, t))
    job = pool.similarity.job
    assert job is not None and job.apply_at == 79 and not job.ready
    assert not pool.refresh_blocks(79)  # 79 steps: deferred
    monkeypatch.setattr(construct_mod, "DEFER_MIN_STEPS", 80)
    assert pool.refresh_blocks(79)  # one step below the size: it would wait
    held_detection.set()
    pool.finish_refresh()


def test_a_snapshot_taken_during_a_refresh_restores_the_same_refresh(view, path):
    inline = OSUPool(CFG, seed=0)
    background = OSUPool(CFG, seed=0)
    background.background_refresh = True
    t = _until_two_adds_into_a_refresh(background, view, inline)
    state = background.state()
    assert int(state["meta"][-1]) == background.similarity.job.upto
    restored = OSUPool.from_state(grown_prefix(view, t), CFG, 0, state)
    restored.background_refresh = True
    assert restored.refresh_pending
    assert restored.similarity.job.apply_at == background.similarity.job.apply_at
    # the restored job holds its adds as step counts; its own state records them so
    np.testing.assert_array_equal(restored.state()["refresh_adds"], state["refresh_adds"])
    _feed([inline, background, restored], view, t, view.n)
    for p in (background, restored):
        p.finish_refresh()
    assert_same_state(inline, background)
    assert_same_state(inline, restored)


def test_a_state_with_its_refresh_adds_out_of_order_is_refused(view):
    pool = OSUPool(CFG, seed=0)
    pool.background_refresh = True
    t = _until_two_adds_into_a_refresh(pool, view)
    state = pool.state()
    state["refresh_adds"] = state["refresh_adds"][::-1].copy()
    with pytest.raises(ValueError, match="out of order"):
        OSUPool.from_state(grown_prefix(view, t), CFG, 0, state)
    pool.finish_refresh()


def _graph(n=300, seed=4):
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(n), 6)
    dst = (src + rng.integers(1, 12, src.shape[0])) % n  # a ring of local neighbourhoods
    return n, src, dst


@pytest.mark.parametrize("warm", [False, True])
def test_the_child_finds_the_communities_found_in_process(warm):
    n, src, dst = _graph()
    initial = np.arange(n) // 20 if warm else None
    here = _communities(n, src, dst, "leiden", 7, initial)
    there = cp.communities_in_child(n, src, dst, "leiden", 7, initial=initial)
    assert len(here) == len(there) > 1
    for a, b in zip(here, there, strict=True):
        np.testing.assert_array_equal(a, b)


def test_without_a_child_the_detection_runs_here_and_says_so(monkeypatch):
    cp.shutdown()

    def no_process(*args, **kwargs):
        raise OSError("no processes left")

    monkeypatch.setattr(cp, "start_child", no_process)
    n, src, dst = _graph()
    with pytest.warns(RuntimeWarning, match="no processes left"):
        got = cp.communities_in_child(n, src, dst, "leiden", 7)
    want = _communities(n, src, dst, "leiden", 7, None)
    assert [c.tolist() for c in got] == [c.tolist() for c in want]


def test_a_child_that_died_is_replaced(monkeypatch):
    n, src, dst = _graph()
    first = cp.communities_in_child(n, src, dst, "leiden", 7)
    child = cp._CHILD
    assert child is not None
    child.proc.kill()
    child.proc.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # replaced, not run here
        again = cp.communities_in_child(n, src, dst, "leiden", 7)
    assert cp._CHILD is not child
    assert [c.tolist() for c in again] == [c.tolist() for c in first]


def test_a_detection_cut_off_by_the_exit_stops_its_thread(monkeypatch):
    """At exit the hook closes the child's connection under a call in progress, and
    multiprocessing's read of the closed handle raises a ``TypeError``: on a refresh
    thread that is the exit (``Cancelled``), not a failure to redo in place; outside
    the exit the same error still propagates."""
    from osumem.osu import background

    n, src, dst = _graph()
    cp.communities_in_child(n, src, dst, "leiden", 7)  # a child to break
    child = cp._CHILD
    assert child is not None

    exit_begins = False

    def closed_under_the_call(request):
        if exit_begins:  # the exit starts while the call waits for its answer
            monkeypatch.setattr(background, "_exiting", True)
        raise TypeError("'NoneType' object cannot be interpreted as an integer")

    monkeypatch.setattr(child, "call", closed_under_the_call)
    with pytest.raises(TypeError):
        cp.communities_in_child(n, src, dst, "leiden", 7)
    assert cp._CHILD is child
    exit_begins = True
    out: list[BaseException] = []

    def on_a_thread():
        try:
            cp.communities_in_child(n, src, dst, "leiden", 7)
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=on_a_thread)
    t.start()
    t.join(30)
    assert len(out) == 1 and isinstance(out[0], background.Cancelled)


def test_a_failed_refresh_is_done_in_place_and_says_so(view, monkeypatch):
    def broken(*args, **kwargs):
        raise MemoryError("no room for the graph")

    monkeypatch.setattr(cp, "communities_in_child", broken)
    pool = OSUPool(CFG, seed=0)
    pool.background_refresh = True
    t = _until_two_adds_into_a_refresh(pool, view)
    with pytest.warns(RuntimeWarning, match="no room for the graph"):
        assert pool.finish_refresh()
    assert not pool.refresh_pending and pool.similarity.upto == t  # refreshed here, at t
    assert (pool.view_codes == 3).any()  # with similarity units


def test_the_thread_of_a_dropped_pool_ends(view):
    import gc

    pool = OSUPool(CFG, seed=0)
    pool.background_refresh = True
    _until_two_adds_into_a_refresh(pool, view)
    thread = pool.similarity.job._call._thread
    del pool
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()


def test_a_refresh_whose_pool_was_dropped_skips_its_detection(view, monkeypatch):
    """The detection (a child process round trip, seconds at 100k) and the
    re-derivation are skipped once nobody holds the refresh."""
    import gc

    entered, gate, detected = threading.Event(), threading.Event(), []
    real_scope = construct_mod.similarity_scope

    def held_scope(*args):
        if threading.current_thread() is not threading.main_thread():
            entered.set()
            assert gate.wait(30)
        return real_scope(*args)

    monkeypatch.setattr(construct_mod, "similarity_scope", held_scope)
    monkeypatch.setattr(cp, "communities_in_child", lambda *a, **k: detected.append(1))
    pool = OSUPool(CFG, seed=0)
    pool.background_refresh = True
    t = 0
    while not pool.refresh_pending:
        t += 1
        pool.add(grown_prefix(view, t))
    assert entered.wait(10)
    thread = pool.similarity.job._call._thread
    del pool
    gc.collect()
    gate.set()
    thread.join(10)
    assert not thread.is_alive() and detected == []


def _community_child():
    """The community-detection child on a socket pair, its standard error captured:
    ``(process, this end)``."""
    import socket
    import subprocess
    import sys
    from multiprocessing.connection import Connection

    from osumem.child import child_env

    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(
        [sys.executable, "-m", "osumem.osu.community_process", str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    theirs.close()
    return proc, Connection(ours.detach())


def _random_graph(n: int, degree: int):
    rng = np.random.default_rng(0)
    src = rng.integers(0, n, degree * n).astype(np.int64)
    dst = rng.integers(0, n, degree * n).astype(np.int64)
    return (n, src, dst, "leiden", 0, None)


def _exits_quietly(proc) -> None:
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert err == b""


def test_the_community_child_ends_quietly_when_the_parent_has_gone():
    """A detection whose parent closed its end before the answer (a memory closed
    during a background refresh): the child exits 0 without a traceback."""
    proc, conn = _community_child()
    conn.send(_random_graph(2000, 8))
    conn.close()  # gone before the answer
    _exits_quietly(proc)


def test_the_community_child_ends_quietly_when_the_parent_left_its_answer_unread():
    """The parent closed its end with the child's answer unread (a memory closed, or a
    process ending, while a refresh thread waited for it): the socket is reset rather
    than closed, and the child still exits 0 without a traceback."""
    proc, conn = _community_child()
    conn.send(_random_graph(200, 4))
    assert conn.poll(60), "no answer from the child"
    conn.close()  # the answer is still unread
    _exits_quietly(proc)
