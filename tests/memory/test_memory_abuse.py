"""Regressions for the store under abuse: no accepted add wedges a namespace, every
boundary error is typed, held messages can be inspected and discarded, a multi-add
transaction is all-or-nothing, and a log added twice is recognised."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from osumem.cli import main
from osumem.embed import HashingEncoder
from osumem.errors import (
    ConfigError,
    DimensionError,
    DuplicateInputError,
    InvalidInputError,
    NonFiniteError,
    OSUMemError,
)
from osumem.memory import Memory, OversizedInputError, StoreReadOnlyError
from osumem.types import Step

ENC = HashingEncoder(32)
U = {"role": "user", "content": "find order 42"}


def call(cid: str, arguments: str, name: str = "lookup") -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": cid, "function": {"name": name, "arguments": arguments}}],
    }


def result(cid: str, content: str = "ok") -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": content}


@pytest.fixture
def mem(tmp_path):
    # these tests add the same message again and again: an agent repeating itself
    m = Memory.open(tmp_path / "mem.db", encoder=ENC, max_text_chars=2000, on_duplicate="append")
    yield m
    m.close()


WEDGES = [
    ('{"x":1e999}', InvalidInputError),
    ('{"x":NaN}', InvalidInputError),
    ('{"x":"\\ud800"}', InvalidInputError),
    (json.dumps({"x": "a" * 150_000}), OversizedInputError),
    ('{"x":' + "9" * 5000 + "}", InvalidInputError),
    ('{"x":' + "[" * 900 + "]" * 900 + "}", InvalidInputError),
]


@pytest.mark.parametrize("arguments,error", WEDGES)
def test_a_held_call_is_validated_before_it_is_acknowledged(tmp_path, arguments, error):
    """Issue reproducer: a held call with bad arguments used to be stored and fail
    every later add; now the add that brings it is rejected and nothing is stored."""
    mem = Memory.open(tmp_path / "w.db", encoder=ENC, max_text_chars=100_000, on_duplicate="append")
    h = mem.store.content_hash()
    with pytest.raises(error):
        mem.add_messages([U, call("a", arguments)])
    assert mem.store.content_hash() == h and mem.held() == []
    assert mem.add_messages([U]) and mem.add_messages([U])  # the namespace still takes adds
    mem.close()


def test_a_result_after_a_newer_call_travels_with_its_call(mem):
    mem.add_messages([U, call("c1", '{"k": 1}')])
    assert [m.get("tool_calls", [{}])[0].get("id") for m in mem.held()] == ["c1"]
    mem.add_messages([call("c2", '{"k": 2}'), result("c1", "first")])
    held = mem.held()
    assert [m["role"] for m in held] == ["assistant", "assistant", "tool"]  # c1 kept with c2
    ids = mem.add_messages([U])  # the next add must work and step both calls
    texts = [s for s in mem.view().texts]
    assert ids and not mem.held()
    assert any("result: first" in t for t in texts)
    assert any(t.startswith('call: lookup({"k":2})') for t in texts)
    assert mem.n_steps() == 4


def test_held_messages_can_be_inspected_and_discarded(mem):
    mem.add_messages([U, call("c1", '{"k": 1}')])
    assert mem.held()[0]["tool_calls"][0]["id"] == "c1"
    n = mem.n_steps()
    gone = mem.discard_held()
    assert gone[0]["tool_calls"][0]["id"] == "c1" and mem.held() == []
    assert mem.n_steps() == n
    with pytest.raises(InvalidInputError, match="tool_call_id"):
        mem.add_messages([result("c1")])  # the call is gone, so is its match
    # a damaged held entry is reported typed and can still be discarded
    mem.store.conn.execute("INSERT INTO pending (ns, messages) VALUES ('bad', 'not json')")
    with pytest.raises(OSUMemError, match="discard them"):
        mem.add_messages([U], namespace="bad")
    assert mem.discard_held("bad") == [{"unreadable": "not json"}]
    assert mem.add_messages([U], namespace="bad")


DEEP: list = [1]
for _ in range(40):
    DEEP = [DEEP]

BOUNDARY = [
    ([{"role": "tool", "tool_call_id": ["x"], "content": "y"}], "tool_call_id"),
    ([{"role": "tool", "tool_call_id": {"x": 1}, "content": "y"}], "tool_call_id"),
    ([call("c", "{}") | {"tool_calls": [{"id": ["l"], "function": {"name": "f"}}]}], "id"),
    ([{"role": "user", "content": "x", 3: "int key"}], "not a string"),
    ([{"role": "user", "content": "x", "extra": "y" * 10_000}], "characters"),
    ([{"role": "user", "content": "x", "meta": {"deep": DEEP}}], "nested"),
    ([{"role": "user", "content": "x", "n": 10**4400}], "64-bit"),
    ([{"role": "user", "content": "x", "k\ud800": 1}], "Unicode"),
    ([{"role": "user", "content": "x", "b": b"bytes"}], "not JSON"),
    ([{"role": "user", "content": {"\r\nkey": 10**30}}], r"\['\\r\\nkey'\]: integer"),
    ([call("c", json.dumps({"\ud800": 1}))], "Unicode"),
]


@pytest.mark.parametrize("messages,text", BOUNDARY)
def test_boundary_inputs_get_typed_errors(mem, messages, text):
    mem.add_messages([U])
    h = mem.store.content_hash()
    with pytest.raises(InvalidInputError, match=text):
        mem.add_messages(messages)
    assert mem.store.content_hash() == h
    assert mem.add_messages([U])


def test_namespace_and_step_limits(mem):
    for ns in ("x\ud800", "n" * 2000, 3, ""):
        with pytest.raises(InvalidInputError):
            mem.add_messages([U], namespace=ns)
        with pytest.raises(InvalidInputError):
            mem.retrieve("order", 64, namespace=ns)
    with pytest.raises(InvalidInputError, match="role"):
        mem.add_steps([Step(role="r" * 100, text="x")])
    with pytest.raises(OversizedInputError, match="subgoal"):
        mem.add_steps([Step(role="user", text="x", subgoal="s" * 4000)])
    with pytest.raises(InvalidInputError, match="nested"):
        deep: dict = {}
        cur = deep
        for _ in range(40):
            cur["a"] = {}
            cur = cur["a"]
        mem.add_steps([Step(role="tool", text="x", arguments=deep)])
    with pytest.raises(InvalidInputError, match="not a string"):
        mem.add_steps([Step(role="tool", text="x", arguments={1: "a"})])


@pytest.mark.parametrize(
    "query,error",
    [
        (b"order", InvalidInputError),
        (["order"], InvalidInputError),
        ({"q": 1}, InvalidInputError),
        ("", InvalidInputError),
        ("   ", InvalidInputError),
        ("bad \ud800", InvalidInputError),
        (np.full(32, np.nan), NonFiniteError),
        (np.zeros((2, 32)), DimensionError),
        ([], DimensionError),
        (object(), InvalidInputError),
    ],
)
def test_bad_queries_are_typed(mem, query, error):
    mem.add_messages([U])
    with pytest.raises(error):
        mem.retrieve(query, 64)


def test_transaction_is_all_or_nothing(mem):
    mem.add_messages([U])
    h = mem.store.content_hash()
    with pytest.raises(InvalidInputError), mem.transaction():
        mem.add_messages([U, {"role": "assistant", "content": "fine"}])
        mem.add_messages([{"role": "wizard"}])
    assert mem.store.content_hash() == h and mem.n_steps() == 1 and mem.view().n == 1
    with mem.transaction():
        mem.add_messages([U])
        mem.add_messages([U])
    assert mem.n_steps() == 3 and mem.view().n == 3


def test_a_log_added_twice_is_recognised(mem):
    log = [U, call("c1", '{"order_id": "42"}'), result("c1", "shipped")]
    first = mem.add_messages(log, on_duplicate="skip")
    assert len(first) == 2
    assert mem.add_messages(log, on_duplicate="skip") == []
    with pytest.raises(DuplicateInputError, match="added before"):
        mem.add_messages(log, on_duplicate="error")
    assert mem.n_steps() == 2
    assert len(mem.add_messages(log)) == 2  # append (this memory's default) adds again
    streamed = [{"role": "user", "content": "streamed once"}]
    mem.add_messages(streamed)  # a streaming add (append, no id) is not remembered
    assert len(mem.add_messages(streamed, on_duplicate="skip")) == 1
    assert mem.add_messages([U], log_id="run-1", on_duplicate="skip")
    assert (
        mem.add_messages(
            [{"role": "user", "content": "other"}], log_id="run-1", on_duplicate="skip"
        )
        == []
    )
    with pytest.raises(ConfigError, match="on_duplicate"):
        mem.add_messages(log, on_duplicate="maybe")


def test_failed_open_leaves_no_file(tmp_path, monkeypatch):
    path = tmp_path / "new.db"
    with pytest.raises(InvalidInputError):
        Memory.open(path, encoder="no-such-encoder")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # the extra is missing
    with pytest.raises(InvalidInputError, match="sbert"):
        Memory.open(path, encoder="sbert")
    assert list(tmp_path.iterdir()) == []
    log = tmp_path / "log.json"
    log.write_text(json.dumps([U]))
    r = CliRunner().invoke(main, ["ingest", str(log), "--store", str(path)])  # default: sbert
    assert r.exit_code == 2 and "sbert" in r.stderr, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.json"]


def test_read_only_open_answers_queries_and_refuses_writes(tmp_path):
    path = tmp_path / "mem.db"
    with Memory.open(path, encoder=ENC, method="flat") as m:
        m.add_messages([U, {"role": "assistant", "content": "order 42 shipped"}])
        expected = m.retrieve("order 42", 64).to_dict()
    with Memory.open(path, encoder=ENC, method="flat", read_only=True) as ro:
        assert ro.store.read_only
        assert ro.retrieve("order 42", 64).to_dict() == expected
        h = ro.store.content_hash()
        with pytest.raises(StoreReadOnlyError, match="read-only"):
            ro.add_messages([U])
        with pytest.raises(StoreReadOnlyError):
            ro.discard_held()
        assert ro.store.content_hash() == h
        ro.check()


def test_fuzz_findings_long_namespace_and_huge_numbers(mem):
    """Found by the long fuzz profile: a namespace near its length limit used to make
    every add_messages into it fail (its subgoal label outgrew max_text_chars), and
    printing a 5,000-digit cost or budget raised ValueError instead of a typed error."""
    ns = "n" * 1000
    assert mem.add_steps([Step(role="user", text="x")], namespace=ns)
    assert mem.add_messages([U], namespace=ns) and mem.add_messages([U], namespace=ns)
    with pytest.raises(InvalidInputError, match="bits"):
        mem.add_steps([Step(role="user", text="x", cost=10**5000)])
    with pytest.raises(InvalidInputError):
        mem.add_steps([Step(role="user", text="x", cost=-(10**5000))])
    with pytest.raises(InvalidInputError, match="bits"):
        mem.retrieve("order", 10**5000)
    with pytest.raises(InvalidInputError, match="bits"):
        mem.add_messages([U], namespace=10**5000)
