"""SIGTERM (what `kill`, systemd and container runtimes send) closes `osumem serve` as
cleanly as Ctrl-C: running requests finish, the structure snapshot is written, the
write-ahead log is checkpointed into the store, and the exit status is 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from osumem.memory.store import MemoryStore
from serve_helpers import OSUMEM, Server, httpx, serve_env, turn

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_http_server_closes_cleanly_on_a_signal(tmp_path, sig):
    store = tmp_path / "mem.db"
    srv = Server(store, None, "--no-auth")
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        for k in range(4):
            assert c.post("/v1/namespaces/t/messages", json={"messages": turn(k)}).is_success
        assert c.post("/v1/namespaces/t/retrieve", json={"query": "R2", "budget": 50}).is_success
    assert store.with_name("mem.db-wal").exists()  # commits since the last checkpoint
    srv.proc.send_signal(sig)
    _, err = srv.proc.communicate(timeout=60)
    assert srv.proc.returncode == 0, err
    wal = store.with_name("mem.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # checkpointed
    st = MemoryStore(store, read_only=True)
    try:
        assert st.n_steps("t") == 8
        snap = st.snapshot("t")
        assert snap is not None and snap.steps == 8  # written at the clean close
    finally:
        st.close()


def test_stdio_server_exits_cleanly_on_sigterm(tmp_path):
    store = tmp_path / "mem.db"
    proc = subprocess.Popen(
        [*OSUMEM, "serve", "--store", str(store), "--encoder", "hashing:d64"],
        env=serve_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "MCP over stdio" in line and time.monotonic() < deadline, line
        time.sleep(0.5)  # the MCP loop is running
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert proc.returncode == 0, proc.stderr.read()
        assert not store.with_name("mem.db-wal").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
