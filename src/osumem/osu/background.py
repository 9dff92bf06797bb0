"""One call run on a daemon thread, its result (or what it raised) taken later in the
caller's thread: how the step, centroid and similarity-view HNSW indexes build off
the query path (hnswlib releases the GIL while it inserts, so the build runs on a
second core).

At interpreter exit (:mod:`atexit`) no thread is left inside hnswlib: the calls that
release the GIL (an insertion of at most :data:`~osumem.osu.views.INSERT_CHUNK` rows,
a batch of k-NN queries) run inside :func:`native_call`, which refuses to start one
on a thread other than the main one once the exit has begun (:class:`Cancelled`),
and the exit waits up to :data:`EXIT_WAIT_S` for those under way to return. Without
this a daemon thread that came back from hnswlib's C++ code while the interpreter was
finalising was ended inside it, and the process aborted ("terminate called without
an active exception", exit status 134) after the program's own work had finished:
an agent script that ended right after a large add (its step index building in the
background) crashed on the way out. What the stopped calls were computing is lost
with the process, which owed it to no one. Threads waiting in Python (a refresh
waiting for adds, or for the community process) are ended by the interpreter as
before, which is safe outside C++ code.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

#: Longest time the interpreter's exit waits for the threads inside hnswlib to return.
EXIT_WAIT_S = 5.0

_state = threading.Condition()
_exiting = False
_inside: dict[threading.Thread, int] = {}  # threads inside native_call, with its depth
_exit_hooks: list[Callable[[], None]] = []


class Cancelled(Exception):
    """A background call stopped because the interpreter is exiting."""


def exiting() -> bool:
    """Whether the interpreter's exit has begun (this module's :mod:`atexit` hook)."""
    return _exiting


def check_exit() -> None:
    """Raise :class:`Cancelled` on a thread other than the main one once the exit has
    begun (the main thread's own calls, e.g. a ``close`` in a later exit hook, go
    on)."""
    if _exiting and threading.current_thread() is not threading.main_thread():
        raise Cancelled("the interpreter is exiting")


class native_call:
    """Around a call into native code that releases the GIL (hnswlib's insertions and
    queries): on a thread other than the main one, refused once the exit has begun
    (:class:`Cancelled`) and waited for by the exit while it runs.

    (A class, not a generator: every index query of a retrieve enters one, and on the
    main thread it does nothing.)"""

    __slots__ = ("_thread",)

    def __enter__(self) -> None:
        thread = threading.current_thread()
        if thread is threading.main_thread():
            self._thread = None
            return
        with _state:
            if _exiting:
                raise Cancelled("the interpreter is exiting")
            _inside[thread] = _inside.get(thread, 0) + 1
        self._thread = thread

    def __exit__(self, *exc: object) -> None:
        thread = self._thread
        if thread is None:
            return
        with _state:
            depth = _inside.pop(thread) - 1
            if depth:
                _inside[thread] = depth
            else:
                _state.notify_all()


def on_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` at exit, after :func:`exiting` turns true and before waiting for
    the threads inside native code (e.g. to end a child process a thread waits for)."""
    _exit_hooks.append(hook)


def _at_exit() -> None:
    global _exiting
    with _state:
        _exiting = True
    for hook in _exit_hooks:
        hook()
    deadline = time.monotonic() + EXIT_WAIT_S
    with _state:
        while _inside and (left := deadline - time.monotonic()) > 0:
            _state.wait(left)


atexit.register(_at_exit)


class BackgroundCall(Generic[T]):
    """``fn()`` started on a daemon thread named ``name``."""

    def __init__(self, fn: Callable[[], T], name: str) -> None:
        self._out: list[T] = []
        self._failed: list[BaseException] = []

        def work() -> None:
            try:
                self._out.append(fn())
            except BaseException as exc:  # re-raised by result(), in the caller's thread
                self._failed.append(exc)

        self._thread = threading.Thread(target=work, name=name, daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the call has not returned yet."""
        return self._thread.is_alive()

    def result(self) -> T:
        """Wait for the call; its return value, or raise what it raised."""
        self._thread.join()
        if self._failed:
            raise self._failed[0]
        return self._out[0]
