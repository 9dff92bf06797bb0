"""Ingest one hand-written log of each supported format into one memory.

The logs in ``examples/logs/`` tell the same flight booking as OpenAI ``tool_calls``,
legacy OpenAI ``function_call``, Anthropic Messages and two ToolBench DFS answer files
(one with ``train_messages``, one read from the search tree). Each becomes steps in its
own namespace; the script prints the format found, what became no step, and the steps.

Run:  python examples/ingest_formats.py
"""

from __future__ import annotations

from pathlib import Path

from osumem.ingest import read_logs
from osumem.memory import Memory

LOGS = Path(__file__).resolve().parent / "logs"


def main() -> None:
    with Memory.open(None, encoder="hashing") as memory:  # in RAM, no torch needed
        for path in sorted(LOGS.glob("*.json")):
            (log,) = read_logs(path)  # format="auto": read from the log's fields
            # a finished log: a call without a result (ToolBench's last Finish) is
            # stored as a step now instead of waiting for its result
            ids = memory.add_messages(
                list(log.messages), namespace=path.stem, hold_open_calls=False
            )
            print(f"{path.name}: {log.format}, {len(ids)} steps, no step: {log.skip_counts()}")
        for namespace in memory.namespaces():
            result = memory.retrieve("Which flight was booked?", 32, namespace=namespace)
            print(f"\n[{namespace}] 'Which flight was booked?' within 32 tokens:")
            print(result.render())


if __name__ == "__main__":
    main()
