"""``retrieve(filter=...)``: a filtered retrieval never returns a step that fails the
filter, fills its budget from the steps that pass, and equals the retrieval of a memory
built from the passing steps alone, for every deployable method; the filter language
(fields, metadata paths, operators, times); typed errors naming the clause."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from test_memory_edit import ENC, NS, QUERIES, filled, scratch

from osumem.errors import InvalidFilterError
from osumem.memory import Memory
from osumem.memory.filters import StepFilter
from osumem.retrieve.registry import deployable

#: Filters and the positions of the 32-step memory of ``filled`` they pass.
PASSING = {"turn": {"$in": [1, 3, 4, 6]}}


def passing(mem: Memory, spec) -> list[int]:
    return [s.position for s in mem.steps(NS, filter=spec)]


def comparable(result, mapping=None) -> list[dict]:
    """The steps of a result without ids, times and metadata (a scratch memory has
    other ids and none of them), positions (and unit spans) through ``mapping``."""
    place = (lambda p: p) if mapping is None else (lambda p: int(mapping[p]))
    out = []
    for s in result.steps:
        units = [f"{h.view}:{h.key}@{place(h.first)}-{place(h.last)}" for h in s.osus]
        out.append((place(s.position), s.text, s.cost, units))
    return out


@pytest.mark.parametrize("method", deployable())
def test_a_filtered_retrieval_is_that_of_a_memory_of_the_passing_steps(tmp_path, method):
    mem = filled(tmp_path / "a.db", method)
    keep = passing(mem, PASSING)
    assert 0 < len(keep) < mem.n_steps(NS)
    other = scratch(tmp_path / "b.db", method, mem.store.load(NS), keep)
    for q in QUERIES:
        for budget in (16, 60, 400):
            got = mem.retrieve(q, budget, namespace=NS, filter=PASSING)
            assert all(s.metadata["turn"] in (1, 3, 4, 6) for s in got.steps)
            assert got.cost <= budget
            want = other.retrieve(q, budget, namespace=NS)
            assert comparable(got) == comparable(want, np.asarray(keep))
    mem.close()
    other.close()


def test_a_filtered_retrieval_fills_the_budget_from_the_passing_steps(tmp_path):
    mem = filled(tmp_path / "a.db", "flat")
    costs = {s.position: s.cost for s in mem.steps(NS)}
    keep = set(passing(mem, PASSING))
    for q in QUERIES:
        for budget in (10, 40, 90):
            got = mem.retrieve(q, budget, namespace=NS, filter=PASSING)
            chosen = {s.position for s in got.steps}
            assert chosen <= keep
            left = budget - got.cost
            # first fit over the passing steps: none left out would still fit
            assert all(costs[p] > left for p in keep - chosen), (q, budget)
            plain = mem.retrieve(q, budget, namespace=NS)
            if {s.position for s in plain.steps} - keep:  # the filter changed something
                assert chosen != {s.position for s in plain.steps}
    mem.close()


def test_explanations_and_units_of_a_filtered_retrieval_name_namespace_positions(tmp_path):
    mem = filled(tmp_path / "a.db", "osumem")
    keep = passing(mem, PASSING)
    got = mem.retrieve("reservation R1 flight", 60, namespace=NS, filter=PASSING)
    why = got.explain()
    assert [s.position for s in why.steps] == got.positions
    assert {o.position for o in why.left_out} <= set(keep)
    for s in got.steps:
        for h in s.osus:
            assert h.first in keep and h.last in keep
    mem.close()


def test_when_nothing_or_everything_passes(tmp_path):
    mem = filled(tmp_path / "a.db", "osumem")
    none = mem.retrieve("flight", 100, namespace=NS, filter={"turn": 99})
    assert none.steps == () and none.explain().cost == 0
    every = mem.retrieve("flight", 100, namespace=NS, filter={"turn": {"$gte": 0}})
    assert every == mem.retrieve("flight", 100, namespace=NS)
    mem.close()


def test_fields_metadata_paths_operators_and_times(tmp_path):
    day = datetime(2026, 5, 1, tzinfo=UTC).timestamp()
    with Memory.open(None, encoder=ENC) as mem:
        mem.add("book UA100", namespace=NS, metadata={"user": {"id": "ana"}, "n": 1}, time=day)
        mem.add_messages(
            [
                {"role": "user", "content": "cancel R1"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "function": {"name": "cancel", "arguments": '{"r": "R1"}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c", "content": "ok"},
            ],
            namespace=NS,
            metadata={"user": {"id": "bob"}, "n": 2, "role": "admin"},
            time=day + 3600,
        )
        mem.add("thanks", namespace=NS, role="assistant", metadata={"n": 2.5}, time=day + 7200)
        cases = {
            "role": ({"role": "user"}, [0, 1]),
            "tool": ({"tool": "cancel"}, [2]),
            "no tool": ({"tool": {"$exists": False}}, [0, 1, 3]),
            "nested": ({"user.id": "ana"}, [0]),
            "named like a field": ({"metadata.role": "admin"}, [1, 2]),
            "range": ({"n": {"$gt": 1, "$lte": 2.5}}, [1, 2, 3]),
            "ne (a missing key passes)": ({"user.id": {"$ne": "bob"}}, [0, 3]),
            "nin": ({"n": {"$nin": [1, 2]}}, [3]),
            "true is not 1": ({"n": True}, []),
            "iso time": ({"time": {"$gte": "2026-05-01T01:00:00Z"}}, [1, 2, 3]),
            "datetime": ({"time": {"$lt": datetime(2026, 5, 1, 1, 0)}}, [0]),  # naive: UTC
            "epoch": ({"time": {"$gt": day + 3600}}, [3]),
            "or": ({"$or": [{"n": 1}, {"tool": "cancel"}]}, [0, 2]),
            "not": ({"$not": {"role": "user"}}, [2, 3]),
            "and": ({"$and": [{"n": 2}, {"role": "user"}]}, [1]),
            "text range": ({"user.id": {"$gte": "b"}}, [1, 2]),
            "source": ({"source": NS}, [0, 1, 2, 3]),
        }
        for name, (spec, want) in cases.items():
            assert passing(mem, spec) == want, name
            got = mem.retrieve("cancel book thanks", 500, namespace=NS, filter=spec)
            assert sorted(got.positions) == want, name
        never = mem.steps(NS, filter={"updated": {"$gte": 0}})
        assert never == []  # nothing was updated: not an error
        mem.update(NS, 3, metadata={"n": 3})
        assert passing(mem, {"updated": {"$gte": 0}}) == [3]


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({"n": {"$between": [1, 2]}}, r"filter\['n'\]: unknown operator '\$between'"),
        ({"$nor": []}, r"filter\['\$nor'\]: unknown operator"),
        ({"usr": "ana"}, r"filter\['usr'\]: no step of namespace 'trip' has metadata 'usr'"),
        ({"n": {"$gt": [1]}}, r"filter\['n'\]\['\$gt'\]: \$gt compares numbers or text"),
        ({"n": {"$in": 3}}, r"\$in takes a list"),
        ({"n": {"$exists": 1}}, r"\$exists takes true or false"),
        ({"n": {"$gt": 1, "x": 2}}, "mixes operators and keys"),
        ({"time": {"$gte": "yesterday"}}, "not an ISO 8601 time"),
        ({"role": 3}, "role is text"),
        ({"$or": []}, "non-empty list"),
        ({"a..b": 1}, "empty part"),
        ([("role", "user")], "expected an object of clauses"),
        ({"n": float("nan")}, "not JSON data"),
    ],
)
def test_bad_filters_are_typed_and_name_the_clause(spec, text):
    with Memory.open(None, encoder=ENC) as mem:
        mem.add("book UA100", namespace=NS, metadata={"n": 1})
        with pytest.raises(InvalidFilterError, match=text):
            mem.retrieve("book", 64, namespace=NS, filter=spec)
        with pytest.raises(InvalidFilterError, match=text):
            mem.steps(NS, filter=spec)


def test_exists_false_on_a_key_no_step_has_is_no_error():
    with Memory.open(None, encoder=ENC) as mem:
        mem.add("book UA100", namespace=NS)
        assert passing(mem, {"gone": {"$exists": False}}) == [0]
        assert mem.retrieve("x", 64, namespace="empty", filter={"gone": 1}).steps == ()


def test_filter_with_before_is_a_memory_of_the_earlier_passing_steps(tmp_path):
    mem = filled(tmp_path / "a.db", "osumem")
    keep = [p for p in passing(mem, PASSING) if p < 20]
    other = scratch(tmp_path / "b.db", "osumem", mem.store.load(NS), keep)
    for q in QUERIES:
        got = mem.retrieve(q, 60, namespace=NS, filter=PASSING, before=20)
        assert comparable(got) == comparable(other.retrieve(q, 60, namespace=NS), np.asarray(keep))
    mem.close()
    other.close()


def test_a_filter_object_is_reusable_and_shown():
    flt = StepFilter({"role": "user"})
    assert "role" in repr(flt)
    with Memory.open(None, encoder=ENC) as mem:
        mem.add("hello", namespace=NS)
        mem.add("hi there", namespace=NS, role="assistant")
        assert mem.retrieve("hello", 64, namespace=NS, filter=flt).positions == [0]
