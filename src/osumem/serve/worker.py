"""A memory in a process of its own: :class:`ProcessService`.

:class:`~osumem.serve.aio.AsyncMemory` runs the memory's work on threads of the
agent's own process. Those threads hold the interpreter lock while they rank, pack
and index (in 5 ms slices for Python code, and for the whole of a C call that does
not release it), so an event loop sharing the process waits for them now and then:
a few retrievals' worth at most (see ``benchmarks/async_memory.py``).
``AsyncMemory.open(..., process=True)`` moves the memory (store, encoder, indexes,
the service's reader and store threads) into a child Python process; the agent's
process keeps only two small threads that move pickled calls and answers over a
socket pair, so its loop is never left waiting for memory work.

The child is ``python -m osumem.serve.worker FD``, started with the same interpreter
and the same ``osumem`` package (no ``multiprocessing`` spawn, so a script without an
``if __name__ == "__main__"`` guard is not run twice). It ignores SIGINT (the agent's
process decides when it ends) and closes its store cleanly when told to, or when the
socket closes because the agent's process ended. Calls are answered in the child by
the same :class:`~osumem.serve.service.MemoryService` methods the in-process face
uses; an error raised there is raised here, of the same type (an error that cannot
cross a process boundary becomes a :class:`~osumem.errors.MemoryProcessError` with
its type and message). A child that dies fails every waiting call and every later
one with :class:`~osumem.errors.MemoryProcessError`.

A retrieval crosses the boundary in its wire form (plain tuples, see
:func:`~osumem.memory.retrieved.to_wire`), and the reader rebuilds it sharing the OSU
handles of earlier answers, so each answer leaves about one object per step for the
agent's garbage collector to walk. It comes without its lazy explainer: pass
``explain=True`` to ``retrieve`` for :meth:`Retrieved.explain
<osumem.memory.Retrieved.explain>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from osumem.child import start_child
from osumem.errors import MemoryProcessError
from osumem.memory.retrieved import Retrieved, from_wire, to_wire

#: The service coroutines a child answers (the names :class:`AsyncMemory` calls).
CALLS = frozenset(
    {
        "aadd",
        "aadd_messages",
        "adelete",
        "aupdate",
        "adelete_namespace",
        "aretrieve",
        "asteps_of",
        "anamespaces",
        "acall",
    }
)

_CLOSE = None  # the message that tells a child to finish and exit
_FAILED, _VALUE, _RETRIEVED = 0, 1, 2  # what an answer carries: an error, a value, a wire form
_YIELD = 5e-5  # seconds the reader sleeps between the answers of a burst


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a :class:`MemoryProcessError` naming it."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # any failure means: send a description instead
        return MemoryProcessError(f"{type(exc).__name__}: {exc}")
    return exc


def _sendable(result: Any) -> tuple[int, Any]:
    """What an answer carries and the payload: a retrieval in its wire form (see
    :func:`~osumem.memory.retrieved.to_wire`: no lazy explainer, and cheap for the
    agent's process to unpickle and to keep), any other result as it is."""
    if isinstance(result, Retrieved):
        return _RETRIEVED, to_wire(result)
    return _VALUE, result


class _Link:
    """The agent side of one child: the socket, the calls waiting for answers, the
    sender and reader threads. Threads and the finalizer hold this, never the
    :class:`ProcessService`, so a service nobody holds is collected (and its child
    closed)."""

    def __init__(self, conn: Connection, proc: subprocess.Popen[bytes]) -> None:
        self.conn = conn
        self.proc = proc
        self.pending: dict[int, Future[Any]] = {}
        self.outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.units: dict[Any, Any] = {}  # the OSU handles answers share (from_wire)
        self.dead: str | None = None  # why calls fail now
        self.closed = False
        self.sender = threading.Thread(target=self._send, name="osumem-process-send", daemon=True)
        self.reader = threading.Thread(target=self._read, name="osumem-process-read", daemon=True)
        self.sender.start()
        self.reader.start()

    def submit(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future[Any]:
        fut: Future[Any] = Future()
        with self.lock:
            if self.closed:
                raise RuntimeError("the memory service is closed")
            if self.dead is not None:
                raise MemoryProcessError(self.dead)
            call_id = next(self.ids)
            self.pending[call_id] = fut
        self.outbox.put((call_id, name, args, kwargs))
        return fut

    def _fail(self, call_id: int, exc: BaseException) -> None:
        with self.lock:
            fut = self.pending.pop(call_id, None)
        if fut is not None:
            fut.set_exception(exc)

    def _send(self) -> None:
        while True:
            msg = self.outbox.get()
            if msg is _CLOSE:
                with contextlib.suppress(OSError):  # the child may have gone already
                    self.conn.send(_CLOSE)
                return
            try:
                self.conn.send(msg)  # pickles first: a pickling error leaves the socket intact
            except OSError as exc:
                # the child is gone: the reader, at the socket's end, fails every waiting
                # call naming the child's exit code; only without a reader fail it here
                if not self.reader.is_alive():
                    self._fail(msg[0], MemoryProcessError(f"the memory process is gone ({exc})"))
            except Exception as exc:  # an argument pickle cannot carry
                self._fail(
                    msg[0],
                    TypeError(
                        f"{msg[1]}: its arguments cannot be sent to the memory's process "
                        f"({type(exc).__name__}: {exc})"
                    ),
                )

    def _read(self) -> None:
        while True:
            try:
                call_id, kind, payload = self.conn.recv()
            except (EOFError, OSError):
                break
            with self.lock:
                fut = self.pending.pop(call_id, None)
            if fut is None:
                continue
            if kind == _RETRIEVED:
                fut.set_result(from_wire(payload, self.units))
            elif kind == _VALUE:
                fut.set_result(payload)
            else:
                fut.set_exception(payload)
            # a burst: let a waiting event loop take the lock first (a socket closed
            # meanwhile ends the loop at the next read)
            with contextlib.suppress(OSError):
                if self.conn.poll(0):
                    time.sleep(_YIELD)
        code = self.proc.wait()
        with self.lock:
            self.dead = (
                "the memory process was closed"
                if self.closed
                else f"the memory process (pid {self.proc.pid}) ended with exit code {code}"
            )
            waiting, self.pending = self.pending, {}
        for fut in waiting.values():
            fut.set_exception(MemoryProcessError(self.dead))

    def close(self, timeout: float) -> None:
        """Let the child finish the calls sent, close its store and exit (killed after
        ``timeout`` seconds); then close the socket. Idempotent."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        self.outbox.put(_CLOSE)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=timeout)
        self.sender.join(timeout=timeout)
        self.conn.close()


def _child_cpus(spare_cpu: bool) -> list[int] | None:
    """The CPUs the child may run on: with ``spare_cpu``, all but one of those this
    process may use (the lowest stays free for the agent's own threads), so the event
    loop never waits for a core the memory's threads hold; ``None``: no restriction
    (``spare_cpu`` off, one CPU only, or a platform without CPU affinity)."""
    if not spare_cpu or not hasattr(os, "sched_getaffinity"):
        return None
    mine = sorted(os.sched_getaffinity(0))
    return mine[1:] if len(mine) > 1 else None


class ProcessService:
    """The service calls :class:`~osumem.serve.aio.AsyncMemory` makes, answered by a
    :class:`~osumem.serve.service.MemoryService` in a child process (see the module
    doc). Opening blocks until the child has opened the store and loaded the encoder.

    Args:
        path, encoder, method, readers, limits, settings: as
            :class:`~osumem.serve.service.MemoryService` takes them (the settings must
            pickle: plain values).
        spare_cpu: run the child on all but one of the CPUs this process may use
            (``cpus`` holds them; nothing changes on a single CPU), so the agent's
            event loop always finds a core free of the memory's threads. Off: the
            child may use every CPU (the memory's throughput under load matters
            more than the loop's wake-up latency).
        start_timeout: seconds to wait for the child to open the memory.
        close_timeout: seconds :meth:`close` waits for running calls before it kills
            the child.

    Raises:
        MemoryProcessError: the child could not be started or ended while opening.
        OSUMemError: what opening the memory raised in the child (a missing store
            directory, an unknown encoder, ...), of the same type.
    """

    def __init__(
        self,
        path: str | Path | None,
        *,
        encoder: str | None = None,
        method: str = "osumem",
        readers: int = 4,
        limits: Any = None,
        spare_cpu: bool = True,
        start_timeout: float = 600.0,
        close_timeout: float = 60.0,
        **settings: Any,
    ) -> None:
        self.close_timeout = close_timeout
        self.cpus = _child_cpus(spare_cpu)
        try:
            conn, proc = start_child("osumem.serve.worker")
        except OSError as exc:
            raise MemoryProcessError(f"could not start the memory's process: {exc}") from exc
        options = {"encoder": encoder, "method": method, "readers": readers, "limits": limits}
        opening = (path, self.cpus, {**options, **settings})
        try:
            pickle.dumps(opening)
        except Exception as exc:  # a setting that cannot cross: nothing opened, no child left
            proc.kill()
            proc.wait()
            conn.close()
            raise TypeError(
                "ProcessService: the settings cannot be sent to the memory's process "
                f"({type(exc).__name__}: {exc})"
            ) from exc
        try:
            conn.send(opening)
            if not conn.poll(start_timeout):
                raise MemoryProcessError(
                    f"the memory's process did not open {path!r} in {start_timeout:g} s"
                )
            kind, *info = conn.recv()
        except MemoryProcessError:
            proc.kill()
            proc.wait()
            conn.close()
            raise
        except (EOFError, OSError) as exc:
            code = proc.wait()
            conn.close()
            raise MemoryProcessError(
                f"the memory's process ended while opening {path!r} (exit code {code})"
            ) from exc
        if kind != "ready":
            proc.wait()
            conn.close()
            raise info[0]
        self.encoder_id: str = info[0]
        self.method: str = info[1]
        self.pid = proc.pid
        self._link = _Link(conn, proc)
        self._finalizer = weakref.finalize(self, self._link.close, close_timeout)

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future[Any]:
        return self._link.submit(name, args, kwargs)

    async def _await(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.wrap_future(self._call(name, args, kwargs))

    async def aadd(self, *args: Any, **kwargs: Any) -> Any:
        return await self._await("aadd", *args, **kwargs)

    async def aadd_messages(self, *args: Any, **kwargs: Any) -> Any:
        return await self._await("aadd_messages", *args, **kwargs)

    async def adelete(self, *args: Any, **kwargs: Any) -> Any:
        return await self._await("adelete", *args, **kwargs)

    async def aupdate(self, *args: Any, **kwargs: Any) -> Any:
        return await self._await("aupdate", *args, **kwargs)

    async def adelete_namespace(self, *args: Any, **kwargs: Any) -> Any:
        return await self._await("adelete_namespace", *args, **kwargs)

    async def aretrieve(self, *args: Any, **kwargs: Any) -> Any:
        return await self._await("aretrieve", *args, **kwargs)

    async def asteps_of(self, *args: Any, **kwargs: Any) -> Any:
        return await self._await("asteps_of", *args, **kwargs)

    async def anamespaces(self) -> Any:
        return await self._await("anamespaces")

    async def acall(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await self._await("acall", name, *args, **kwargs)

    @property
    def alive(self) -> bool:
        """Whether the child still answers (not closed, not ended)."""
        return not self._link.closed and self._link.dead is None

    def close(self) -> None:
        """Finish the calls sent, close the store in the child and end it (idempotent)."""
        self._finalizer()

    def __enter__(self) -> ProcessService:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- the child ----------------------------------------------------------------------


async def _answer(conn: Connection, service: Any, call: tuple[Any, ...]) -> None:
    call_id, name, args, kwargs = call
    try:
        if name not in CALLS:
            raise AttributeError(f"the memory's process answers no call named {name!r}")
        reply = (call_id, *_sendable(await getattr(service, name)(*args, **kwargs)))
    except Exception as exc:  # every error goes back to the caller
        reply = (call_id, _FAILED, _portable(exc))
    try:
        conn.send(reply)
    except Exception as exc:  # an answer pickle cannot carry
        conn.send(
            (call_id, _FAILED, MemoryProcessError(f"{name}: its answer cannot be sent: {exc}"))
        )


async def _serve(conn: Connection, service: Any) -> None:
    loop = asyncio.get_running_loop()
    running: set[asyncio.Task[None]] = set()
    while True:
        try:
            call = await loop.run_in_executor(None, conn.recv)
        except (EOFError, OSError):
            break  # the agent's process has ended
        if call is _CLOSE:
            break
        task = loop.create_task(_answer(conn, service, call))
        running.add(task)
        task.add_done_callback(running.discard)
    if running:
        await asyncio.gather(*running, return_exceptions=True)


def main(argv: list[str]) -> int:
    """The child: open the memory the first message names, answer calls until told
    to stop (or the socket closes), close the memory."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(argv[0]))
    path, cpus, options = conn.recv()
    if cpus is not None:  # before any thread starts: every thread inherits it
        os.sched_setaffinity(0, cpus)
    from osumem.serve.service import MemoryService

    try:
        service = MemoryService(path, **options)
    except Exception as exc:  # the agent's process raises it
        conn.send(("failed", _portable(exc)))
        return 1
    try:
        from osumem.serve.run import frozen_start

        with frozen_start():  # the memory opened: what lives as long as the child
            conn.send(("ready", service.encoder_id, service.method))
            asyncio.run(_serve(conn, service))
    finally:
        service.close()
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
