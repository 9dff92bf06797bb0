"""The agent-facing memory: incremental == batch, retrieval after every add,
persistence round trip, namespace isolation, held tool calls."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import tool_call as call
from conftest import tool_call_log
from osumem.embed import HashingEncoder
from osumem.errors import DimensionError
from osumem.memory import Memory, Retrieved
from osumem.osu.config import OSUConfig
from osumem.osu.pool import OSUPool
from osumem.retrieve.registry import create
from osumem.types import Step

NON_SIM = ("entity", "tool", "subgoal")
ENC = HashingEncoder(64)


def conversation(n_turns: int = 12) -> list[dict]:
    """A synthetic airline chat: user turns, tool calls sharing entities, answers."""
    msgs: list[dict] = [{"role": "system", "content": "You are an airline agent."}]
    for t in range(n_turns):
        res = f"R{t % 4}"
        user = f"user{t % 3}"
        msgs.append({"role": "user", "content": f"turn {t}: please check reservation {res}"})
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call(f"c{t}a", "get_user", user_id=user)],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{t}a", "content": f"{user} has {res}"})
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call(f"c{t}b", "get_reservation", reservation_id=res)],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{t}b", "content": f"{res}: flight HAT{t}"})
        msgs.append({"role": "assistant", "content": f"Reservation {res} is on flight HAT{t}."})
    return msgs


QUERIES = ["reservation R1 flight", "user2", "turn 7 please check", "flight HAT3"]


def results(mem: Memory, namespace: str = "default", budgets=(32, 96, 256)) -> list:
    return [
        (r.positions, [[str(h) for h in s.osus] for s in r.steps])
        for q in QUERIES
        for b in budgets
        for r in [mem.retrieve(q, b, namespace=namespace)]
    ]


def same_view(a, b) -> None:
    assert a.n == b.n
    assert np.array_equal(a.embeddings, b.embeddings)
    assert np.array_equal(a.costs, b.costs)
    for col in ("roles", "texts", "tool_signatures", "subgoals", "sources", "tool_actions"):
        assert list(getattr(a, col)) == list(getattr(b, col)), col
    assert a.entities == b.entities


def test_messages_one_at_a_time_equal_one_batch():
    msgs = conversation()
    with Memory.open(encoder=ENC) as inc, Memory.open(encoder=ENC) as batch:
        for m in msgs:
            inc.add_messages([m])
        batch.add_messages(msgs)
        same_view(inc.view(), batch.view())
        # 12 user turns, 3 steps per turn besides the user step
        assert batch.n_steps() == 12 * 4
        assert batch.view().subgoals[-1] == "default:sg12"


def test_incremental_pool_equals_batch_build_on_non_similarity_views():
    msgs = conversation()
    with Memory.open(encoder=ENC, params={"views": NON_SIM}) as inc:
        for m in msgs:
            inc.add_messages([m])
            inc.retrieve("reservation", 64)  # the pool is updated after every add
        pool = inc.retriever().fitted_pool
        full = OSUPool.build(inc.view(), OSUConfig(views=NON_SIM))
        assert pool.signature(NON_SIM) == full.signature(NON_SIM)
        assert any(k.startswith("get_reservation") for k in pool.keys)
        # the default method (similarity view too) agrees on the non-similarity views
    with Memory.open(encoder=ENC) as dflt:
        for m in msgs:
            dflt.add_messages([m])
            dflt.retrieve("reservation", 64)
        assert dflt.retriever().fitted_pool.signature(NON_SIM) == full.signature(NON_SIM)


@pytest.mark.parametrize("method,params", [("osumem", {"views": NON_SIM}), ("flat", None)])
def test_retrieval_after_every_add_equals_a_fresh_batch_build(method, params):
    msgs = conversation(6)
    with Memory.open(encoder=ENC, method=method, params=params) as mem:
        for i in range(0, len(msgs), 3):
            mem.add_messages(msgs[i : i + 3])
            view = mem.view()
            fresh = create(method, params).fit(view)
            for q in QUERIES:
                qv = ENC.encode([q])[0]
                for b in (24, 80, 200):
                    got = mem.retrieve(q, b)
                    want = fresh.retrieve(qv, b)
                    assert got.positions == want.positions.tolist()
                    assert got.cost <= b and all(p < view.n for p in got.positions)


def test_persistence_round_trip_identical(tmp_path):
    path = tmp_path / "mem.db"
    msgs = conversation()
    with Memory.open(path, encoder=ENC) as mem:
        for i in range(0, len(msgs), 5):  # several batches: the similarity view refreshes
            mem.add_messages(msgs[i : i + 5])
            mem.retrieve("reservation", 64)  # the live pool grows batch by batch
        before = results(mem)
        view = mem.view()
        h = mem.store.content_hash()
    with Memory.open(path) as again:  # encoder from the store's recorded model id
        assert again.encoder is not None and again.encoder.encoder_id == ENC.encoder_id
        same_view(again.view(), view)
        assert results(again) == before
        assert again.store.content_hash() == h
        again.check()


def test_namespaces_are_isolated():
    a_msgs = conversation(5)
    b_msgs = [
        {"role": "user", "content": "book a hotel in Paris"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("x", "search_hotels", city="Paris")],
        },
        {"role": "tool", "tool_call_id": "x", "content": "reservation R1 hotel"},
    ]
    with Memory.open(encoder=ENC) as mem:
        mem.add_messages(a_msgs, namespace="a")
        alone = results(mem, "a")
        mem.add_messages(b_msgs, namespace="b")
        assert mem.namespaces() == ["a", "b"]
        assert results(mem, "a") == alone  # adding to b changes nothing in a
        r = mem.retrieve("reservation R1 hotel Paris", 1000, namespace="b")
        assert sorted(r.positions) == [0, 1]  # all of b, nothing of a
        assert {s.namespace for s in r.steps} == {"b"}
        assert mem.retrieve("anything", 64, namespace="c").steps == ()


def test_open_tool_call_is_held_until_its_response(tmp_path):
    path = tmp_path / "m.db"
    msgs = conversation(2)
    with Memory.open(path, encoder=ENC) as mem:
        ids = mem.add_messages(msgs[:3])  # system, user, assistant calling get_user
        assert len(ids) == 1 and mem.store.pending("default")  # the call waits
    with Memory.open(path, encoder=ENC) as mem:  # the held call survives a reopen
        mem.add_messages(msgs[3:])
        assert not mem.store.pending("default")
        with Memory.open(encoder=ENC) as batch:
            batch.add_messages(msgs)
            same_view(mem.view(), batch.view())
        assert "result: user0 has R0" in mem.view().texts[1]


def test_retrieved_steps_and_render():
    with Memory.open(encoder=ENC) as mem:
        mem.add_messages(conversation(4))
        r = mem.retrieve("reservation R2 flight HAT2", 60)
        assert isinstance(r, Retrieved) and 0 < r.cost <= 60
        assert [s.rank for s in r.steps] == list(range(len(r)))
        v = mem.view()
        for s in r.steps:
            assert s.text == v.texts[s.position] and s.cost == v.costs[s.position]
        text = r.render()
        lines = text.splitlines()
        assert lines[0].startswith(f"# Retrieved memory ({len(r)} steps, {r.cost}/60 tokens")
        shown = [int(line.split("]")[0].split()[1]) for line in lines if line.startswith("[step ")]
        assert shown == sorted(r.positions)
        assert json.loads(json.dumps(r.to_dict()))["cost"] == r.cost
        # OSU handles come from the pool: every handle's span holds the step
        assert any(s.osus for s in r.steps)
        for s in r.steps:
            for h in s.osus:
                assert h.first <= s.position <= h.last and h.size >= 2


def test_before_limits_positions_and_vectors_work():
    with Memory.open(encoder=ENC) as mem:
        mem.add_messages(conversation(4))
        r = mem.retrieve(ENC.encode(["flight HAT3"])[0], 500, before=5)
        assert r.positions and max(r.positions) < 5


def test_add_steps_with_given_vectors():
    rng = np.random.default_rng(0)
    steps = [
        Step(role="tool", text=f"s{i}", cost=3 + i, entities=frozenset({"E"})) for i in range(4)
    ]
    with Memory.open(method="flat") as mem:
        ids = mem.add_steps(steps, embeddings=rng.standard_normal((4, 8)))
        assert ids == [1, 2, 3, 4]
        assert mem.store.encoder_id == "external:d8" and mem.store.dim == 8
        r = mem.retrieve(mem.view().embeddings[2], 6)
        assert r.positions == [2] and r.cost == 5


@pytest.mark.parametrize("method", ["osumem", "osumem_disjoint", "tree"])
def test_before_answers_as_the_memory_did_at_that_time(method):
    """retrieve(before=k) on a grown memory equals retrieve on a memory that only ever
    saw the first k steps (same add boundaries): later steps cannot shape the answer."""
    msgs = conversation(10)
    grown = Memory.open(encoder=ENC, method=method)
    for m in msgs:
        grown.add_messages([m])
    n = grown.n_steps()
    compared = 0
    for k in (7, n // 2, n - 3):
        young = Memory.open(encoder=ENC, method=method)
        for m in msgs:
            if young.n_steps() >= k:
                break
            young.add_messages([m])
        if young.n_steps() != k:  # k falls inside an add: compare at the add boundary
            continue
        for q in QUERIES:
            a = grown.retrieve(q, 96, before=k).positions
            b = young.retrieve(q, 96).positions
            assert list(a) == list(b)
            assert all(p < k for p in a)
        compared += 1
    assert compared >= 2


def test_first_vectors_must_match_the_encoder():
    mem = Memory.open(encoder=ENC)
    steps = [Step(role="user", text=f"t{i}", cost=5) for i in range(3)]
    with pytest.raises(DimensionError, match="dimension 8"):
        mem.add_steps(steps, embeddings=np.ones((3, 8)))
    assert mem.n_steps() == 0
    mem.add_steps(steps, embeddings=np.ones((3, ENC.dim)))
    assert len(mem.retrieve("t1", 50).positions) > 0


def test_add_messages_reads_legacy_and_anthropic_shapes_into_the_same_steps():
    """A legacy `function_call` log and an Anthropic log give the OpenAI log's steps."""
    from osumem.memory import Memory

    openai = tool_call_log("Book flight AB123 for Ann", "book", "booked AB123", flight="AB123")
    legacy = [
        openai[0],
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "book", "arguments": '{"flight": "AB123"}'},
        },
        {"role": "function", "name": "book", "content": "booked AB123"},
    ]
    anthropic = [
        openai[0],
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "book", "input": {"flight": "AB123"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "booked AB123"}],
        },
    ]
    with Memory.open(None, encoder="hashing") as mem:
        texts = {}
        for name, log in (("openai", openai), ("legacy", legacy), ("anthropic", anthropic)):
            assert len(mem.add_messages(log, namespace=name)) == 2
            got = mem.retrieve("flight AB123", budget=64, namespace=name)
            texts[name] = sorted(s.text for s in got.steps)
        assert texts["legacy"] == texts["openai"] == texts["anthropic"]


def test_delete_namespace_removes_steps_held_messages_and_log_digests(tmp_path):
    """A deleted namespace is empty, another handle forgets it, and the same log can
    be ingested again (its digest went with it)."""
    from osumem.memory import Memory

    log = tool_call_log("Refund order 42", "refund", None, order=42)
    path = tmp_path / "m.db"
    with Memory.open(path, encoder="hashing") as a, Memory.open(path, encoder="hashing") as b:
        assert len(a.add_messages(log[:1], namespace="keep")) == 1
        assert len(a.add_messages(log[:1], namespace="gone", on_duplicate="skip")) == 1
        a.add_messages(log, namespace="gone")  # the call is held
        assert a.held("gone") and b.n_steps("gone") == 2
        assert a.delete_namespace("gone") == 2
        assert a.n_steps("gone") == 0 and not a.held("gone")
        assert len(b.retrieve("refund", budget=64, namespace="gone").steps) == 0
        assert len(b.add_messages(log[:1], namespace="gone", on_duplicate="skip")) == 1
        assert a.n_steps("keep") == 1 and a.delete_namespace("never") == 0
