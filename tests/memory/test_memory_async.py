"""The asyncio face (:class:`osumem.serve.AsyncMemory`): many concurrent retrievals
from one event loop while another task adds, deletes and updates give exactly the
answers of sequential calls (and of the synchronous ``Memory`` on the same store);
every call is the synchronous implementation run off the loop, on threads of this
process or (``process=True``) in a child process. How long the loop is blocked is
measured by ``benchmarks/async_memory.py``."""

from __future__ import annotations

import asyncio

import pytest

from osumem.memory import Memory
from osumem.serve import AsyncMemory
from serve_helpers import turn

ENCODER = "hashing:d64"
QUERIES = [(f"reservation R{k % 30} passenger P{k % 7}", 32 + (k % 5) * 40) for k in range(100)]


PROCESS = pytest.mark.parametrize("process", [False, True], ids=["threads", "process"])


@PROCESS
def test_concurrent_retrievals_while_writing_equal_sequential_ones(tmp_path, process):
    path = tmp_path / "mem.db"

    async def main():
        memory = AsyncMemory.open(path, encoder=ENCODER, process=process)
        async with memory:
            for k in range(30):
                await memory.add_messages(turn(k), namespace="a", metadata={"k": k})
            sequential = [await memory.retrieve(q, b, namespace="a") for q, b in QUERIES]
            filtered = [
                await memory.retrieve(q, b, namespace="a", filter={"k": {"$lt": 15}})
                for q, b in QUERIES[:20]
            ]

            async def writer() -> list[int]:
                ids = []
                for k in range(20):
                    ids += await memory.add_messages(turn(k), namespace="b")
                    await memory.add(f"note {k}", namespace="b", metadata={"k": k})
                    if k % 5 == 4:
                        await memory.delete("b", [0])
                        await memory.update("b", 0, metadata={"seen": k})
                return ids

            *together, written = await asyncio.gather(
                *(memory.retrieve(q, b, namespace="a") for q, b in QUERIES),
                *(
                    memory.retrieve(q, b, namespace="a", filter={"k": {"$lt": 15}})
                    for q, b in QUERIES[:20]
                ),
                writer(),
            )
            steps_b = await memory.steps("b")
            return sequential, filtered, together, written, steps_b

    sequential, filtered, together, written, steps_b = asyncio.run(main())
    assert together[:100] == sequential and together[100:] == filtered
    assert all(s.metadata["k"] < 15 for r in filtered for s in r.steps)
    assert len(written) == 40 and len(steps_b) == 60 - 4  # every write landed
    assert steps_b[0].metadata == {"seen": 19}
    with Memory.open(path, encoder=ENCODER) as mem:  # the synchronous face, same answers
        assert [mem.retrieve(q, b, namespace="a") for q, b in QUERIES] == sequential


@PROCESS
def test_errors_come_back_typed_and_the_memory_keeps_working(process):
    from osumem.errors import InvalidFilterError, StepNotFoundError

    async def main():
        async with AsyncMemory.open(None, encoder=ENCODER, process=process) as memory:
            await memory.add("hello", namespace="x")
            outcomes = await asyncio.gather(
                memory.delete("x", [5]),
                memory.retrieve("hello", 32, namespace="x", filter={"nope": 1}),
                memory.retrieve("hello", 32, namespace="x"),
                return_exceptions=True,
            )
            return outcomes, await memory.n_steps("x"), await memory.namespaces()

    (missing, bad, ok), n, names = asyncio.run(main())
    assert isinstance(missing, StepNotFoundError) and "not position 5" in str(missing)
    assert isinstance(bad, InvalidFilterError) and ok.positions == [0]
    assert (n, names) == (1, ["x"])
