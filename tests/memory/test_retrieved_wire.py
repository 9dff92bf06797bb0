"""A retrieval's wire form (:func:`osumem.memory.retrieved.to_wire` /
:func:`~osumem.memory.retrieved.from_wire`), how results cross into the agent's process
with ``AsyncMemory.open(..., process=True)``: it comes back equal for every method,
with metadata, times, OSU handles and a computed explanation; decoded results share
their handles and ``osus`` tuples through the caller's cache, so each adds one
object per step for the garbage collector to walk; the cache starts afresh past its
limit."""

from __future__ import annotations

import gc
import itertools
import pickle

import pytest

import osumem.memory.retrieved as retrieved
from osumem.memory import Memory
from osumem.memory.retrieved import from_wire, to_wire
from serve_helpers import turn

ENCODER = "hashing:d64"
QUERIES = [(f"reservation R{k} passenger P{k % 7}", 96 + 16 * k) for k in range(6)]


def results(method: str, *, nested: bool = True) -> list[retrieved.Retrieved]:
    with Memory.open(None, encoder=ENCODER, method=method) as mem:
        for k in range(40):
            tags = [k % 3] if nested else str(k % 3)  # a list is one more object per step
            mem.add_messages(turn(k), namespace="a", metadata={"k": k, "tags": tags})
        return [mem.retrieve(q, b, namespace="a") for q, b in QUERIES]


def crossed(result: retrieved.Retrieved, cache: dict | None = None) -> retrieved.Retrieved:
    wire = pickle.loads(pickle.dumps(to_wire(result), protocol=pickle.HIGHEST_PROTOCOL))
    return from_wire(wire, cache)


@pytest.mark.parametrize("method", ["osumem", "flat", "bm25"])
def test_a_result_comes_back_equal_field_for_field(method):
    for result in results(method):
        back = crossed(result)
        assert back == result and back.steps  # the dataclasses compare every field
        for a, b in zip(back.steps, result.steps, strict=True):
            assert (a.osus, a.metadata, a.time, a.rank) == (b.osus, b.metadata, b.time, b.rank)
            assert [h.size for h in a.osus] == [h.size for h in b.osus]
        assert back.render() == result.render()
        assert back.explanation is None and back._explainer is None
    assert any(s.osus for s in result.steps) == (method == "osumem")


def test_a_computed_explanation_goes_along():
    result = results("osumem")[0]
    why = result.explain()
    assert crossed(result).explain() == why


def test_decoded_results_share_handles_and_add_one_object_per_step():
    originals = results("osumem", nested=False)
    cache: dict = {}
    first = [crossed(r, cache) for r in originals]
    wires = [pickle.dumps(to_wire(r)) for r in originals]
    gc.collect()
    gc.disable()
    try:
        before = {id(o) for o in gc.get_objects()}
        again = [from_wire(pickle.loads(w), cache) for w in wires]
        made = {id(o) for o in gc.get_objects()} - before
        # what the results hold (another thread, e.g. an earlier memory's similarity
        # refresh still finishing, may make objects meanwhile: they are not counted)
        held, stack = {id(again)}, list(again)
        while stack:
            o = stack.pop()
            if id(o) not in held:
                held.add(id(o))
                stack.extend(gc.get_referents(o))
        new = (made & held) - {id(again)}
    finally:
        gc.enable()
    assert again == originals
    steps = sum(len(r.steps) for r in again)
    # each step (slotted: no __dict__); each result and its steps tuple
    assert len(new) <= steps + 3 * len(again)
    for a, b in zip(first, again, strict=True):
        for s, t in zip(a.steps, b.steps, strict=True):
            assert s.osus is t.osus and all(x is y for x, y in zip(s.osus, t.osus, strict=True))


def test_the_cache_starts_afresh_past_its_limit(monkeypatch):
    monkeypatch.setattr(retrieved, "WIRE_CACHE_LIMIT", 3)
    cache: dict = {}
    originals = results("osumem")
    sizes = []
    for r in originals + originals:
        assert crossed(r, cache) == r
        sizes.append(len(cache))
        # what one result adds: its units, and the osus tuple of each of its steps
        assert len(cache) <= 3 + len(to_wire(r)[5]) + len(r.steps)
    assert any(b < a for a, b in itertools.pairwise(sizes))  # emptied, then filled again
