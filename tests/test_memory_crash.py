"""A writer killed with SIGKILL in the middle of a long ingest leaves a store that
opens, passes its integrity check and holds every acknowledged step, whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from osumem.memory import Memory

WRITER = textwrap.dedent(
    """
    import json, sys
    from osumem.embed import HashingEncoder
    from osumem.memory import Memory

    path, start = sys.argv[1], int(sys.argv[2])
    with Memory.open(path, encoder=HashingEncoder(32), method="flat") as mem:
        for k in range(start, start + 100_000):
            msgs = [
                {"role": "user", "content": f"turn {k}: check reservation R{k}"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{k}",
                  "function": {"name": "get_reservation",
                               "arguments": json.dumps({"reservation_id": f"R{k}"})}}]},
                {"role": "tool", "tool_call_id": f"c{k}", "content": f"R{k}: flight HAT{k}"},
            ]
            ids = mem.add_messages(msgs, namespace="crash")
            print(json.dumps({"k": k, "ids": ids}), flush=True)
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_sigkill_mid_ingest_keeps_every_acknowledged_step(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    path = tmp_path / "crash.db"
    acked: dict[int, list[int]] = {}
    start = 0
    for kill_after in (40, 7, 25):  # three writers, each killed mid-stream
        proc = subprocess.Popen(
            [sys.executable, str(script), str(path), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert proc.stdout is not None
            for _ in range(kill_after):
                line = proc.stdout.readline()
                assert line, proc.stderr.read() if proc.stderr else "writer ended early"
                ack = json.loads(line)
                acked[ack["k"]] = ack["ids"]
            os.kill(proc.pid, signal.SIGKILL)  # the writer is still adding
        finally:
            proc.kill()
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL

        with Memory.open(path, method="flat") as mem:
            mem.check()  # PRAGMA integrity_check + positions, batches, blob sizes
            stored = set(mem.store.step_ids())
            view = mem.view("crash")
        assert all(set(ids) <= stored for ids in acked.values())
        # no half-written add: the steps come in whole user + tool-call pairs
        assert view.n % 2 == 0 and view.n >= 2 * len(acked)
        texts = list(view.texts)
        for k in acked:
            i = texts.index(f"user: turn {k}: check reservation R{k}")
            assert texts[i + 1] == (
                f'call: get_reservation({{"reservation_id":"R{k}"}})\nresult: R{k}: flight HAT{k}'
            )
        start = max(acked) + 1_000  # the next writer appends further on
        # the killed writer may have committed adds it never got to acknowledge
        assert len(stored) == view.n
