"""BLAS threads during the library's own calls (``MemoryConfig.blas_threads``).

Why: a memory's matrices are small (one query vector against a few thousand to a few
hundred thousand steps, one add's rows), so OpenBLAS's thread pool costs more than it
gives: with every core's thread, per-retrieve CPU was 2.4-4x that of one thread and an
8-client server answered about half the requests per second (docs/decisions.md, "No
stalls in the agent loop"). Benchmarks and the evaluation harness pinned one thread
already; :class:`~osumem.memory.Memory`, the command line and the server did not.

How: :func:`blas_threads` lowers the thread count of the BLAS libraries loaded in the
process (threadpoolctl, ``user_api="blas"``) for the duration of a library call and
restores the caller's count afterwards, so a program that sets its own limits, or
runs its own matrix work between memory calls, keeps them. OpenMP pools (torch's, in
the SBERT encoder) are left alone: the server sets torch's threads itself
(``torch_threads``). The limit is process-wide while it holds (BLAS libraries have one
setting per process), so it is reference-counted: calls that overlap on several
threads share one limit (the first one's count), set when the first starts and
restored when the last ends.

threadpoolctl (from 3.7) lets only one Python thread, the first that set a limit,
change OpenBLAS's pthreads pool, and silently ignores the others; a memory used from
worker threads (a server's, an agent framework's executor) would get no limit at all.
The counter's lock already keeps this module's threads from fighting over the
setting, so it calls threadpoolctl's unrestricted setter where there is one
(:func:`_set_threads`). ``osumem serve`` and the other commands also set the
process's BLAS threads once at start, from the main thread (:func:`limit_process`):
they own their process, and a call then finds nothing to change.

The list of loaded BLAS libraries is looked up once (about 3 ms) and again only when
a compiled extension module has been imported since (a new import may have loaded
another BLAS, e.g. SciPy's own OpenBLAS); imports of pure-Python modules between two
calls (a cold command's first retrieve imports the method's modules) cost a count of
the extensions, about 0.1 ms, and a call with no import since costs a lock and a
get/set of each library's count (microseconds). In a process whose ``osumem`` command
set every BLAS library's thread variable before NumPy loaded
(:data:`osumem.process.blas_threads_at_start`), a call whose limit is that count or
more has nothing to lower and looks nothing up: a cold ``osumem query`` imports no
threadpoolctl at all.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import wraps
from typing import Any, TypeVar

import osumem.process
from osumem.memory.process_wide import ProcessWide
from osumem.process import BLAS_THREAD_VARIABLES

_F = TypeVar("_F", bound=Callable[..., Any])

_lock = threading.Lock()
_libraries: list[Any] = []
_modules_seen = -1
_extensions_seen = -1


def _extension_modules() -> int:
    """How many modules in :data:`sys.modules` are compiled extensions (a BLAS comes
    into the process with one: NumPy's, SciPy's, torch's)."""
    count = 0
    for module in list(sys.modules.values()):
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None)
        if isinstance(origin, str) and not origin.endswith(".py") and "." in origin:
            count += 1
    return count


def _blas_libraries() -> list[Any]:
    """threadpoolctl's controllers of the BLAS libraries loaded now (call under the
    lock)."""
    global _libraries, _modules_seen, _extensions_seen
    n = len(sys.modules)
    if n != _modules_seen:
        extensions = _extension_modules()
        if extensions != _extensions_seen:
            from threadpoolctl import ThreadpoolController

            _libraries = list(ThreadpoolController().select(user_api="blas").lib_controllers)
            extensions = _extension_modules()  # threadpoolctl's own imports included
        _modules_seen, _extensions_seen = len(sys.modules), extensions
    return _libraries


def _limited_at_start(limit: int) -> bool:
    """Whether every BLAS library of the process started with at most ``limit`` threads
    (the ``osumem`` command set their variables before any loaded,
    :data:`osumem.process.blas_threads_at_start`) and the variables still say so: then
    no call has anything to lower, and the libraries are not looked up."""
    start = osumem.process.blas_threads_at_start
    if start is None or start > limit:
        return False
    wanted = str(start)
    return all(os.environ.get(v) == wanted for v in BLAS_THREAD_VARIABLES)


def _set_threads(lib: Any, count: int) -> None:
    """Set ``lib``'s thread count from whichever thread calls (see the module doc)."""
    setter = getattr(lib, "_real_set_num_threads", None) or lib.set_num_threads
    setter(count)


def limit_process(limit: int | None) -> None:
    """Lower the BLAS threads of the whole process to ``limit`` for good (``None``:
    nothing): for a command or a server that owns its process. Call it from the main
    thread after the libraries are imported; later calls of the library find nothing
    to change."""
    if limit is None or _limited_at_start(limit):
        return
    with _lock:
        for lib in _blas_libraries():
            current = lib.get_num_threads()
            if isinstance(current, int) and current > limit:
                _set_threads(lib, limit)


def _lower(limit: int) -> list[tuple[Any, int]]:
    """Lower every loaded BLAS library above ``limit`` threads to it (call under the
    lock); the libraries changed and their counts before."""
    changed = []
    for lib in _blas_libraries():
        current = lib.get_num_threads()
        if isinstance(current, int) and current > limit:
            _set_threads(lib, limit)
            changed.append((lib, current))
    return changed


def _put_back(changed: list[tuple[Any, int]]) -> None:
    for lib, count in changed:
        _set_threads(lib, count)


#: The blocks of :func:`blas_threads`, overlapping on any threads: the first one's
#: limit holds for them all (under the lock that guards the library list).
_held = ProcessWide(_lower, _put_back, lock=_lock)


def blas_threads(limit: int | None) -> AbstractContextManager[None]:
    """At most ``limit`` BLAS threads inside the ``with`` block (``None``: leave them as
    they are); the caller's counts come back when the last overlapping block ends."""
    if limit is None or _limited_at_start(limit):
        return nullcontext()
    return _held.held(limit)


def limited(method: _F) -> _F:
    """Run a :class:`~osumem.memory.Memory` method under its config's
    ``blas_threads`` (nested calls share the outer limit)."""

    @wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with blas_threads(self.config.blas_threads):
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
