"""Interleaved writers on one namespace: a held tool call belongs to the source that
added it. Another source's add leaves it held; its result, from its own source, then
lands on its step. A result sent under another source is refused naming the source
whose call it answers. One source is one conversation: its next add steps a call that
is still unanswered (the conversation moved on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from osumem.embed import HashingEncoder
from osumem.ingest.openai_chat import LogFormatError
from osumem.memory import Memory

ENC = HashingEncoder(32)


def user(text):
    return {"role": "user", "content": text}


def call(cid, key):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "function": {"name": "lookup", "arguments": json.dumps({"key": key})}}
        ],
    }


def result(cid, text):
    return {"role": "tool", "tool_call_id": cid, "content": text}


@pytest.fixture
def two(tmp_path):
    a = Memory.open(tmp_path / "m.db", encoder=ENC)
    b = Memory.open(tmp_path / "m.db", encoder=ENC)
    yield a, b
    a.close()
    b.close()


def test_another_sources_add_leaves_a_held_call_held(two):
    a, b = two
    a.add_messages([user("find order 7"), call("c1", "order 7")], namespace="ns", source="a")
    assert [m["role"] for m in a.held("ns")] == ["assistant"]
    b.add_messages([user("what is the weather")], namespace="ns", source="b")
    assert len(b.held("ns")) == 1  # still held: b's add did not touch a's call
    b.add_messages([user("b holds one too"), call("c2", "weather")], namespace="ns", source="b")
    assert len(a.held("ns")) == 2
    ids = a.add_messages([result("c1", "order 7 shipped")], namespace="ns", source="a")
    assert len(ids) == 1
    b.add_messages([result("c2", "sunny")], namespace="ns", source="b")
    texts = list(a.view("ns").texts)
    assert 'call: lookup({"key":"order 7"})\nresult: order 7 shipped' in texts
    assert 'call: lookup({"key":"weather"})\nresult: sunny' in texts
    assert a.held("ns") == [] and b.held("ns") == []
    a.check()


def test_a_result_under_another_source_names_the_calls_source(two):
    a, b = two
    a.add_messages([user("find order 8"), call("c8", "order 8")], namespace="ns", source="agent-a")
    n = b.n_steps("ns")
    with pytest.raises(LogFormatError, match=r"messages\[0\].*'c8'.*source 'agent-a'"):
        b.add_messages([result("c8", "done")], namespace="ns", source="agent-b")
    assert b.n_steps("ns") == n and len(b.held("ns")) == 1  # nothing changed


def test_one_source_is_one_conversation(two):
    a, b = two
    a.add_messages([user("find order 9"), call("c9", "order 9")], namespace="ns")
    b.add_messages([user("never mind")], namespace="ns")  # the same (default) source
    assert b.held("ns") == []  # the unanswered call became a step without a result
    assert 'call: lookup({"key":"order 9"})' in list(b.view("ns").texts)
    with pytest.raises(LogFormatError):
        a.add_messages([result("c9", "late")], namespace="ns")


WRITER = textwrap.dedent(
    """
    import json, random, sys, time
    from osumem.embed import HashingEncoder
    from osumem.memory import Memory

    path, w, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(w)
    with Memory.open(path, encoder=HashingEncoder(32)) as mem:
        for j in range(n):
            tag = f"{w}-{j}"
            mem.add_messages([{"role": "user", "content": f"user {tag}"},
                              {"role": "assistant", "content": None, "tool_calls": [
                                  {"id": f"c{tag}", "function": {"name": "lookup",
                                   "arguments": json.dumps({"key": tag})}}]}],
                             namespace="shared", source=w)
            time.sleep(rng.random() * 0.01)  # the tool runs; the others write meanwhile
            mem.add_messages([{"role": "tool", "tool_call_id": f"c{tag}",
                               "content": f"result {tag}"}], namespace="shared", source=w)
    print("done")
    """
)


def test_three_writer_processes_each_get_their_results(tmp_path):
    path = tmp_path / "mem.db"
    Memory.open(path, encoder=ENC).close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    n = 12
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"w{k}", str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for k in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-1500:] for _, err in outs]
    with Memory.open(path, encoder=ENC) as mem:
        mem.check()
        texts = list(mem.view("shared").texts)
        assert mem.held("shared") == []
    for k in range(3):
        for j in range(n):
            tag = f"w{k}-{j}"
            assert f'call: lookup({{"key":"{tag}"}})\nresult: result {tag}' in texts, tag
    assert len(texts) == 3 * n * 2  # each turn: its user step and its call step
