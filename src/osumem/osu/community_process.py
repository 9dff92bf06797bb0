"""The similarity view's community detection in a child process, for refreshes that run
in the background (:class:`~osumem.osu.construct.RefreshJob`).

leidenalg (and networkx's Louvain) hold the interpreter lock for the whole run: 0.3 s
at 10,000 steps, over a second at 100,000, during which no other thread of the
process runs, so a refresh on a thread would still stall the agent's calls. Here the
graph goes to one long-lived child (``python -m osumem.osu.community_process FD``,
see :mod:`osumem.child`), started at the first refresh and shared by every pool of
the process; calls are serialised. The child runs the same function on the same
input with the same seed, so the communities are the ones the refresh would find in
process. A child that cannot start or that dies is replaced once; failing that, the
detection runs in this process (a :class:`RuntimeWarning` says so), so a refresh
never fails for want of a child. The child ends when this process closes its end
(at exit, or when it dies).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from osumem.child import start_child
from osumem.osu import background
from osumem.osu.views import _communities
from osumem.types import IntArray

__all__ = ["communities_in_child", "shutdown"]

_LOCK = threading.Lock()
_CHILD: _Child | None = None


class _Child:
    def __init__(self) -> None:
        self.conn, self.proc = start_child("osumem.osu.community_process", OPENBLAS_NUM_THREADS="1")

    def call(self, request: tuple[Any, ...]) -> list[IntArray]:
        self.conn.send(request)
        ok, *value = self.conn.recv()
        if not ok:
            raise value[0]
        lengths, flat = value
        return (
            [np.asarray(c) for c in np.split(flat, np.cumsum(lengths)[:-1])] if len(lengths) else []
        )

    def close(self, timeout: float = 5.0) -> None:
        self.conn.close()  # the child reads end-of-file and exits
        try:
            self.proc.wait(timeout)
        except Exception:  # still busy: it owes nothing
            self.proc.kill()
            self.proc.wait()


def _forget_after_fork() -> None:
    global _CHILD
    _CHILD = None  # a forked copy does not share the parent's child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def shutdown(timeout: float = 5.0) -> None:
    """End the child, killing it after ``timeout`` seconds if it is still busy (a later
    refresh starts another). Does not wait for a detection under way: its call fails
    and starts a new child."""
    global _CHILD
    child, _CHILD = _CHILD, None
    if child is not None:
        child.close(timeout)


# at exit (after background.exiting() turns true): a detection under way gets half a
# second, then the child is killed; a refresh thread still running starts no other
background.on_exit(lambda: shutdown(timeout=0.5))


def communities_in_child(
    n: int,
    src: IntArray,
    dst: IntArray,
    method: str,
    seed: int,
    initial: IntArray | None = None,
) -> list[IntArray]:
    """:func:`~osumem.osu.views.communities` (without its memo) computed in the child
    process; the same communities, in the same order."""
    global _CHILD
    request = (
        int(n),
        np.ascontiguousarray(src, dtype=np.int64),
        np.ascontiguousarray(dst, dtype=np.int64),
        method,
        int(seed),
        None if initial is None else np.ascontiguousarray(initial, dtype=np.int64),
    )
    if background.exiting():
        background.check_exit()  # a refresh thread stops: nobody will take its result
        return _communities(*request)
    with _LOCK:
        for _attempt in range(2):
            try:
                if _CHILD is None:
                    _CHILD = _Child()
                return _CHILD.call(request)
            except Exception as exc:
                # the exit hook closed the connection under the call (multiprocessing
                # then raises whatever its read of a closed handle raises): stop
                if not isinstance(exc, OSError | EOFError) and not background.exiting():
                    raise
                failed, _CHILD = _CHILD, None
                if failed is not None:
                    failed.close(timeout=0.0)
                if background.exiting():
                    background.check_exit()
                    return _communities(*request)
                reason = f"{type(exc).__name__}: {exc}"
    warnings.warn(
        f"osumem: the community detection process is not available ({reason}); "
        "the similarity refresh runs it in this process",
        RuntimeWarning,
        stacklevel=2,
    )
    return _communities(*request)


def _answer(comms: list[IntArray]) -> tuple[Any, ...]:
    lengths = np.fromiter(map(len, comms), dtype=np.int64, count=len(comms))
    flat = np.concatenate(comms) if comms else np.empty(0, dtype=np.int64)
    return (True, lengths, flat.astype(np.int64, copy=False))


def _send(conn: Connection, reply: tuple[Any, ...]) -> bool:
    """Send ``reply`` (an error that does not pickle as its type and text); ``False``
    when the parent has closed its end."""
    try:
        conn.send(reply)
    except (OSError, EOFError):
        return False
    except Exception:  # sent again as a RuntimeError, which pickles
        return _send(conn, (False, RuntimeError(f"{type(reply[1]).__name__}: {reply[1]}")))
    return True


def main(argv: list[str]) -> int:
    """The child: answer detection requests until the socket closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when it ends
    conn = Connection(int(argv[0]))
    try:
        while True:
            try:
                request = conn.recv()
            except (EOFError, ConnectionResetError):
                # closed, or reset (closed with an answer it never read): done, quietly
                return 0
            try:
                reply = _answer(_communities(*request))
            except Exception as exc:  # raised again in the parent, as it would be there
                reply = (False, exc)
            if not _send(conn, reply):
                return 0  # the parent closed its end (it is done): quietly
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
