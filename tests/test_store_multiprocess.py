"""Three processes write one namespace while a long-lived reader answers queries:
every acknowledged message is stored once, in its writer's order, with the ids the
writer was given; the reader's answers equal a fresh open's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from osumem.embed import HashingEncoder
from osumem.memory import Memory

WRITER = textwrap.dedent(
    """
    import json, sys
    from osumem.embed import HashingEncoder
    from osumem.errors import InvalidInputError
    from osumem.memory import Memory

    path, w, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    def call(cid):
        return {"role": "assistant", "content": None, "tool_calls": [{"id": cid,
                "function": {"name": "lookup", "arguments": json.dumps({"key": cid})}}]}
    with Memory.open(path, encoder=HashingEncoder(32), method=sys.argv[4]) as mem:
        for j in range(n):
            tag = f"{w}-{j}"
            if j % 3 == 0:  # a held call, answered by a second add
                ids = mem.add_messages([{"role": "user", "content": f"user {tag}"},
                                        call(f"c{tag}")], namespace="shared")
                print(json.dumps({"tag": tag, "ids": ids, "call": f"c{tag}"}), flush=True)
                try:
                    ids = mem.add_messages([{"role": "tool", "tool_call_id": f"c{tag}",
                                             "content": f"result {tag}"}], namespace="shared")
                    print(json.dumps({"tag": tag + "r", "ids": ids}), flush=True)
                except InvalidInputError:  # another writer stepped the call first
                    print(json.dumps({"tag": tag + "r", "rejected": True}), flush=True)
            else:
                ids = mem.add_messages([{"role": "user", "content": f"user {tag}"},
                                        call(f"c{tag}"),
                                        {"role": "tool", "tool_call_id": f"c{tag}",
                                         "content": f"result {tag}"}], namespace="shared")
                print(json.dumps({"tag": tag, "ids": ids, "call": f"c{tag}"}), flush=True)
    """
)


def _answers(mem: Memory) -> list:
    return [
        mem.retrieve(q, 48, namespace="shared").to_dict()
        for q in ("user w0-3", "lookup cw1-7", "result w2-11", "key")
    ]


def test_three_writers_and_a_long_lived_reader(tmp_path):
    path = tmp_path / "mem.db"
    method = "osumem"
    with Memory.open(path, encoder=HashingEncoder(32), method=method) as m:
        m.add_messages([{"role": "user", "content": "start"}], namespace="shared")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    n = 24
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"w{k}", str(n), method],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for k in range(3)
    ]
    reader = Memory.open(path, encoder=HashingEncoder(32), method=method)
    seen = []
    while any(p.poll() is None for p in procs):
        r = reader.retrieve("user result", 64, namespace="shared")
        n_now = reader.n_steps("shared")
        assert all(s.position < n_now for s in r.steps)
        v = reader.view("shared")
        assert v.n >= (seen[-1] if seen else 0)
        for s in r.steps:  # a position always points at the step it names
            assert v.texts[s.position] == s.text
        seen.append(v.n)
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    acks = [json.loads(line) for out, _ in outs for line in out.splitlines()]
    with Memory.open(path, encoder=HashingEncoder(32), method=method) as fresh:
        fresh.check()
        view = fresh.view("shared")
        assert reader.view("shared").n == view.n
        assert _answers(reader) == _answers(fresh)
        ids = fresh.store.step_ids()
        texts = list(view.texts)
        id_of = {int(i): p for p, i in enumerate(fresh._namespace("shared").step_ids)}
        held = json.dumps(fresh.held("shared"))
    assert len(ids) == len(set(ids)) == view.n
    acked_ids = [i for a in acks for i in a.get("ids", [])]
    assert len(acked_ids) == len(set(acked_ids)) == view.n - 1  # + the "start" step
    for a in acks:
        for i in a.get("ids", []):
            assert i in id_of
        tag = a["tag"].rstrip("r")
        if "call" in a:  # an acknowledged call is a step or still held, exactly once
            hits = sum(t.startswith(f'call: lookup({{"key":"{a["call"]}"}})') for t in texts)
            assert hits + held.count(f'"id": "{a["call"]}"') == 1, a
        if a.get("ids") and not a["tag"].endswith("r"):  # its user message is one of its steps
            stepped = [texts[id_of[i]] for i in a["ids"]]
            assert f"user: user {tag}" in stepped, (a, stepped)
            positions = [id_of[i] for i in a["ids"]]
            assert positions == list(range(positions[0], positions[0] + len(positions)))
    for k in range(3):  # each writer's adds are stored in its order
        order = [texts.index(f"user: user w{k}-{j}") for j in range(n)]
        assert order == sorted(order)
    reader.close()
