"""Deleting and updating stored steps: after ``Memory.delete`` or ``Memory.update`` a
retrieval equals that of a memory built from scratch from the remaining (or edited)
steps in the same add batches, for every deployable method, live and after a reopen;
nothing of the old text stays in the store file or the lexical index; positions move
down, ids stay; metadata-only updates rebuild nothing; bad input is typed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_memory_api import conversation

from osumem.embed import HashingEncoder
from osumem.errors import InvalidInputError, StepNotFoundError
from osumem.memory import Memory
from osumem.memory.rows import kept_ends
from osumem.retrieve.registry import deployable
from osumem.types import Step, l2_normalise

ENC = HashingEncoder(64)
NS = "trip"
QUERIES = ["reservation R1 flight", "user2", "turn 7 please check", "flight HAT3 SECRET"]
BUDGETS = (24, 80, 200)
SECRET = "SECRETPASSPHRASE"


def filled(path, method: str) -> Memory:
    """A memory of 32 steps in 8 adds (a conversation of 8 turns, one add per turn), one of whose
    steps holds :data:`SECRET`."""
    msgs = conversation(8)[1:]
    msgs[11] = {**msgs[11], "content": f"my passphrase is {SECRET}"}  # an answer
    mem = Memory.open(path, encoder=ENC, method=method)
    for t in range(8):
        mem.add_messages(msgs[6 * t : 6 * t + 6], namespace=NS, metadata={"turn": t})
    return mem


def answers(mem: Memory) -> list:
    out = []
    for q in QUERIES:
        for b in BUDGETS:
            d = mem.retrieve(q, b, namespace=NS).to_dict()
            out.append(
                [
                    {k: v for k, v in s.items() if k not in ("step_id", "time", "metadata")}
                    for s in d["steps"]
                ]
            )
    return out


def scratch(path, method: str, data, keep, edits=None) -> Memory:
    """A new memory holding the steps of ``data`` at ``keep`` (with the text ``edits``
    give some positions), added in the same batches, encoded as the memory would."""
    edits = edits or {}
    v = data.view
    steps = []
    for p in keep:
        text = edits.get(p, str(v.texts[p]))
        cost = int(ENC.count_tokens([text])[0]) if p in edits else int(v.costs[p])
        steps.append(
            Step(
                role=str(v.roles[p]),
                text=text,
                tool_action=str(v.tool_actions[p]),
                arguments=json.loads(data.arguments[p]),
                tool_signature=str(v.tool_signatures[p]),
                entities=v.entities[p],
                subgoal=str(v.subgoals[p]),
                source=str(v.sources[p]),
                cost=cost,
            )
        )
    mem = Memory.open(path, encoder=ENC, method=method)
    start = 0
    for end in kept_ends(data.batch_ends, np.asarray(keep)):
        mem.add_steps(steps[start:end], namespace=NS)  # encoded as the adds were
        start = end
    assert mem.view(NS).embeddings.tobytes() == _expected(data, keep, edits)
    return mem


def _expected(data, keep, edits) -> bytes:
    rows = [
        l2_normalise(ENC.encode([edits[p]]))[0] if p in edits else data.view.embeddings[p]
        for p in keep
    ]
    return np.stack(rows).astype(np.float32).tobytes()


@pytest.mark.parametrize("method", deployable())
def test_delete_equals_a_memory_built_without_the_steps(tmp_path, method):
    mem = filled(tmp_path / "a.db", method)
    answers(mem)  # the retriever exists before the delete
    data = mem.store.load(NS)
    gone = [9, 2, 30, 31]  # the secret answer, a call, and a whole add's start
    ids = mem.delete(NS, gone)
    assert ids == [int(data.step_ids[p]) for p in gone]
    keep = [p for p in range(data.view.n) if p not in gone]
    expected = answers(scratch(tmp_path / "b.db", method, data, keep))
    assert answers(mem) == expected
    mem.close()
    with Memory.open(tmp_path / "a.db", encoder=ENC, method=method) as again:
        assert answers(again) == expected


@pytest.mark.parametrize("method", deployable())
def test_update_equals_a_memory_built_with_the_new_text(tmp_path, method):
    mem = filled(tmp_path / "a.db", method)
    answers(mem)
    data = mem.store.load(NS)
    edits = {9: "assistant: the passphrase changed to swordfish", 25: "call: rebook(flight HAT3)"}
    for p, text in edits.items():
        mem.update(NS, p, text=text)
    expected = answers(scratch(tmp_path / "b.db", method, data, range(data.view.n), edits))
    assert answers(mem) == expected
    mem.close()
    with Memory.open(tmp_path / "a.db", encoder=ENC, method=method) as again:
        assert answers(again) == expected


def test_a_snapshot_before_the_change_is_used_and_one_covering_it_is_dropped(tmp_path):
    path = tmp_path / "a.db"
    with filled(path, "osumem") as mem:
        answers(mem)  # the snapshot at close covers every step
        n = mem.n_steps(NS)
    with Memory.open(path, encoder=ENC) as mem:
        assert mem.store.snapshot(NS).steps == n
        mem.delete(NS, [n - 1])  # inside what the snapshot covers: dropped
        assert mem.store.snapshot(NS) is None
        answers(mem)  # the snapshot at close covers the n - 1 steps
    with Memory.open(path, encoder=ENC) as mem:
        covered = mem.store.snapshot(NS).steps
        assert covered == n - 1
        for t in range(2):
            mem.add(f"later turn {t}", namespace=NS)
        data = mem.store.load(NS)
        mem.delete(NS, [covered])  # after it: kept and restored from
        assert mem.store.snapshot(NS).steps == covered
        got = answers(mem)
        assert mem._retrievers.snapshot_steps(NS) == covered
    keep = [p for p in range(data.view.n) if p != covered]
    assert got == answers(scratch(tmp_path / "b.db", "osumem", data, keep))


@pytest.mark.parametrize("method", ["bm25", "hybrid", "osumem_hybrid"])
def test_nothing_of_a_deleted_or_replaced_text_remains(tmp_path, method):
    path = tmp_path / "a.db"
    mem = filled(path, method)
    (at,) = [s.position for s in mem.steps(NS) if SECRET in s.text]
    assert mem.retrieve(SECRET, 64, namespace=NS).steps[0].position == at
    token = SECRET.lower()

    def indexed() -> bool:
        terms = bytes(mem.retriever(NS).lexical_.state()["terms"]).split(b"\x00")
        return token.encode() in terms

    assert indexed() and any(SECRET.encode() in f.read_bytes() for f in tmp_path.iterdir())
    mem.update(NS, at, text="assistant: nothing to see")
    assert not indexed()
    mem.update(NS, at + 1, text=f"user: {SECRET} again")
    assert indexed()
    mem.delete(NS, [at + 1])
    assert not indexed()
    mem.close()
    for name in ("a.db", "a.db-wal"):
        file = tmp_path / name
        assert not file.exists() or SECRET.encode() not in file.read_bytes()


def test_positions_move_down_ids_stay_and_other_memories_follow(tmp_path):
    path = tmp_path / "a.db"
    mem = filled(path, "flat")
    other = Memory.open(path, encoder=ENC, method="flat")
    before = other.steps(NS)
    other.retrieve("flight", 64, namespace=NS)  # cached there
    mem.delete(NS, ids=[before[0].step_id, before[5].step_id])
    after = other.steps(NS)
    assert [s.step_id for s in after] == [s.step_id for s in before[1:5] + before[6:]]
    assert [s.position for s in after] == list(range(len(before) - 2))
    assert after[0].text == before[1].text and after[4].position == 4
    n = mem.n_steps(NS)
    mem.add("a new turn", namespace=NS)
    assert mem.steps(NS, positions=[n])[0].step_id > max(s.step_id for s in before)
    mem.update(NS, 0, metadata={"pinned": True})  # the other memory sees it too
    assert other.steps(NS, positions=0)[0].metadata == {"pinned": True}
    mem.check()
    mem.close()
    other.close()


def test_a_metadata_update_rebuilds_nothing(tmp_path):
    mem = filled(tmp_path / "a.db", "osumem")
    before = answers(mem)
    retriever = mem.retriever(NS)
    step = mem.update(NS, 3, metadata={"label": "important"})
    assert step.metadata == {"label": "important"} and step.updated is not None
    assert step.time is not None and step.text == mem.steps(NS)[3].text
    assert mem.retriever(NS) is retriever and answers(mem) == before
    hit = mem.retrieve("reservation", 256, namespace=NS, filter={"label": "important"})
    assert [s.position for s in hit.steps] == [3]
    mem.close()


@pytest.mark.parametrize("edits", [1, 2], ids=["one-edit", "two-edits"])
def test_another_writers_metadata_update_keeps_this_memorys_structure(tmp_path, monkeypatch, edits):
    """Another writer's metadata update (and adds after it): this memory keeps its
    retriever, which takes the added steps as an update; the new metadata filters; the
    answers equal a fresh memory's. A text update by the other writer drops the
    retriever. One edit since this memory's last look is read as the steps it changed
    (and those added); more are read as the whole namespace again."""
    path = tmp_path / "a.db"
    mem = filled(path, "osumem")
    retriever = mem.retriever(NS)
    n = mem.n_steps(NS)
    with Memory.open(path, encoder=ENC, method="osumem") as other:
        other.update(NS, 3, metadata={"label": "important"})
        if edits == 2:
            other.update(NS, 9, metadata={"label": "later"})
        other.add("and the return flight R2?", namespace=NS)
    loads = []
    real_load = mem.store.load
    monkeypatch.setattr(
        mem.store, "load", lambda *a, **kw: loads.append((a, kw)) or real_load(*a, **kw)
    )
    assert mem.refresh() == {NS}
    monkeypatch.undo()
    whole = [((NS,), {})]
    assert loads == ([((NS, 3, 4), {}), ((NS,), {"start": n})] if edits == 1 else whole)
    assert mem.retriever(NS) is retriever
    hit = mem.retrieve("reservation", 256, namespace=NS, filter={"label": "important"})
    assert [s.position for s in hit.steps] == [3] and hit.method == "osumem"
    with Memory.open(path, encoder=ENC, method="osumem") as fresh:
        assert answers(mem) == answers(fresh)
        assert mem.steps(NS)[3].metadata == fresh.steps(NS)[3].metadata
    assert mem.refresh() == set()
    with Memory.open(path, encoder=ENC, method="osumem") as other:
        other.update(NS, 5, text="the order R7 moved to Friday")
    monkeypatch.setattr(
        mem.store, "load", lambda *a, **kw: loads.append((a, kw)) or real_load(*a, **kw)
    )
    loads.clear()
    mem.refresh()
    monkeypatch.undo()
    assert loads == [((NS, 5, 6), {})]
    assert mem.retriever(NS) is not retriever
    assert mem.steps(NS)[5].text == "the order R7 moved to Friday"
    with Memory.open(path, encoder=ENC, method="osumem") as fresh:
        assert answers(mem) == answers(fresh)
    mem.close()


def test_deleting_inside_a_transaction_that_fails_changes_nothing(tmp_path):
    mem = filled(tmp_path / "a.db", "osumem")
    before, h = answers(mem), mem.store.content_hash()
    with pytest.raises(RuntimeError), mem.transaction():
        mem.delete(NS, [0, 1])
        mem.update(NS, 0, text="user: changed")
        raise RuntimeError("boom")
    assert mem.store.content_hash() == h and answers(mem) == before
    mem.close()


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (
            lambda m: m.delete(NS, [48]),
            StepNotFoundError,
            r"positions\[0\]: .*0\.\.31, not position 48",
        ),
        (lambda m: m.delete(NS, [0, -1]), StepNotFoundError, r"positions\[1\]"),
        (lambda m: m.delete(NS, ids=[10**9]), StepNotFoundError, r"ids\[0\]: no step with id"),
        (lambda m: m.delete("nowhere", [0]), StepNotFoundError, "holds no steps"),
        (lambda m: m.delete(NS, [1, 1]), InvalidInputError, "named twice"),
        (lambda m: m.delete(NS, [0], ids=[1]), InvalidInputError, "exactly one"),
        (lambda m: m.delete(NS, ["0"]), InvalidInputError, r"positions\[0\]: expected an integer"),
        (lambda m: m.update(NS, 99, text="x"), StepNotFoundError, "position: .* not position 99"),
        (lambda m: m.update(NS, id=10**9, metadata={}), StepNotFoundError, "id: no step"),
        (lambda m: m.update(NS, 0), InvalidInputError, "text=, metadata="),
        (lambda m: m.update(NS, 0, text="  "), InvalidInputError, "text: expected a non-empty"),
        (lambda m: m.update(NS, 0, metadata=[1]), InvalidInputError, "metadata: expected a dict"),
        (
            lambda m: m.update(NS, 0, metadata={"x": float("nan")}),
            InvalidInputError,
            "metadata.x: nan",
        ),
        (
            lambda m: m.update(NS, 0, metadata={}, cost=3),
            InvalidInputError,
            "give them with the new text",
        ),
        (lambda m: m.add("hi", namespace=NS, role="tool"), InvalidInputError, "role: add takes"),
        (lambda m: m.add("", namespace=NS), InvalidInputError, "text: expected a non-empty"),
        (lambda m: m.add("hi", namespace=NS, metadata="x"), InvalidInputError, "metadata"),
        (lambda m: m.add("hi", namespace=NS, time="noon"), InvalidInputError, "time: expected"),
    ],
)
def test_bad_edits_are_typed_and_change_nothing(tmp_path, call, error, text):
    mem = filled(tmp_path / "a.db", "flat")
    h = mem.store.content_hash()
    with pytest.raises(error, match=text):
        call(mem)
    assert mem.store.content_hash() == h
    mem.close()


def test_add_text_is_the_message_one_liner(tmp_path):
    with Memory.open(None, encoder=ENC) as a, Memory.open(None, encoder=ENC) as b:
        ids = a.add("Book me a flight to Oslo", namespace="n", metadata={"user": "ana"}, time=5.0)
        b.add_messages([{"role": "user", "content": "Book me a flight to Oslo"}], namespace="n")
        assert len(ids) == 1
        (sa,), (sb,) = a.steps("n"), b.steps("n")
        assert (sa.text, sa.role, sa.cost) == (sb.text, sb.role, sb.cost)
        assert (sa.metadata, sa.time) == ({"user": "ana"}, 5.0)
        assert a.add("Book me a flight to Oslo", namespace="n") == []  # a duplicate: skipped
        a.add("It is booked.", namespace="n", role="assistant")
        assert a.steps("n")[1].text == "assistant: It is booked."


def test_export_and_import_carry_metadata_and_times(tmp_path):
    from osumem.memory import export

    with filled(tmp_path / "a.db", "osumem") as mem:
        mem.update(NS, 2, metadata={"turn": 0, "note": "edited"})
        lines = list(export.export_lines(mem))
        before = mem.steps(NS)
    data = export.read_export(lines, "x", max_text_chars=100_000)
    with Memory.open(tmp_path / "b.db", encoder=ENC) as copy:
        export.import_export(copy, data)
        assert [(s.metadata, s.time, s.updated) for s in copy.steps(NS)] == [
            (s.metadata, s.time, s.updated) for s in before
        ]
        assert export.import_export(copy, data).outcome == {NS: "unchanged"}
    records = [json.loads(line) for line in lines]
    records[3]["metadata"] = [0]
    with pytest.raises(export.ExportFormatError, match="line 4: 'metadata': expected dict"):
        export.read_export([json.dumps(r) for r in records], "x", max_text_chars=100_000)
