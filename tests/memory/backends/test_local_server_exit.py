"""A local Postgres in a temporary folder of its own is stopped when the process that
started it exits without stopping it; a forked child's exit leaves it running."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import os, socket, sys
from osumem.memory.backends.postgres.local import LocalServer
server = LocalServer.start(durable=False)
child = os.fork()
if child == 0:
    sys.exit(0)  # a forked child's exit: its exit hooks run, the server is not its
os.waitpid(child, 0)
with socket.socket() as probe:
    up = probe.connect_ex(("127.0.0.1", server.port)) == 0
print(server.folder, server.port, up, flush=True)
# no server.stop(): the process ends with the server running
"""


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_a_server_left_running_stops_with_the_process_that_started_it(pg_server):
    # pg_server: a local server can start here (else the test skips, or fails under CI)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr[-2000:]
    folder, port, up = out.stdout.split()
    assert up == "True"  # still running after the forked child exited
    assert not Path(folder).exists()
    assert not _listening(int(port))
