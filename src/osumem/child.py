"""Child Python processes of this package: ``python -m <module> FD``, started with the
same interpreter and the same ``osumem``, talking over one end of a socket pair.

Used where work must leave the agent's process because it holds the interpreter lock
(the memory of ``AsyncMemory(process=True)``, the similarity view's community
detection of a background refresh). Not ``multiprocessing``: its spawn start method
runs the parent's main script again in the child, and a script without an
``if __name__ == "__main__"`` guard would then run twice.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path

__all__ = ["child_env", "start_child"]


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment, with this ``osumem`` package first on the path, and
    ``extra`` set over it."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    rest = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = root + (os.pathsep + rest if rest else "")
    env.update(extra)
    return env


def start_child(module: str, **extra_env: str) -> tuple[Connection, subprocess.Popen[bytes]]:
    """Start ``python -m module FD`` (``FD``: the child's end of a socket pair, the
    child's only way in and out; its standard input is empty) and return this end as a
    :class:`~multiprocessing.connection.Connection`, with the process. Raises
    ``OSError`` when the process cannot start."""
    ours, theirs = socket.socketpair()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env=child_env(**extra_env),
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
    return Connection(ours.detach()), proc
