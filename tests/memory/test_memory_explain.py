"""Retrieved.explain(): for every method the explained steps are the returned ones with
their true cosines and flat ranks; OSU-Mem's parts say which kept unit brought a step in;
left-out candidates are really left out, for the reason given; a lexical index fills
the lexical part; a result of a namespace written since cannot be explained."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from osumem.cli import main
from osumem.memory import Memory
from osumem.memory.explain import Explanation, StaleResultError, explain
from osumem.retrieve.flat import FlatVector
from osumem.retrieve.registry import deployable
from store_fixtures import build

QUERY = "which reservation was cancelled for P3?"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("explain") / "mem.db"
    build(path, held=False)
    return path


@pytest.mark.parametrize("method", deployable())  # a memory refuses oracles
def test_every_method_explains_what_it_returned(store, method):
    with Memory.open(store, method=method, read_only=True) as mem:
        for budget in (30, 256):
            result = mem.retrieve(QUERY, budget, namespace="trip")
            why = result.explain()
            assert [s.position for s in why.steps] == result.positions
            assert [s.rank for s in why.steps] == list(range(len(result)))
            assert why.cost == result.cost and why.left == budget - result.cost
            view = mem.view("trip")
            cos = (view.embeddings @ view.check_query(mem.encoder.encode([QUERY])[0])).astype(
                np.float64
            )
            flat_rank = 1 + np.argsort(np.argsort(-cos, kind="stable"), kind="stable")
            for s in why.steps:
                assert s.cosine == float(cos[s.position])
                assert s.flat_rank == int(flat_rank[s.position])
                assert s.cost == int(view.costs[s.position])
            returned = set(result.positions)
            for o in why.left_out:
                assert o.position not in returned
                assert (o.reason == "budget") == (o.cost > why.left)
            assert Explanation.from_dict(json.loads(json.dumps(why.to_dict()))) == why


def test_osumem_says_which_kept_unit_brought_a_step_in(store):
    with Memory.open(store, read_only=True) as mem:
        result = mem.retrieve(QUERY, 60, namespace="trip")
        why = result.explain()
    assert why.summary["kept_units"] >= 1
    stages = {s.stage for s in why.steps}
    assert stages <= {"unit", "flat fill"} and "unit" in stages
    for s in why.steps:
        handles = {str(h) for h in result.steps[s.rank].osus}
        assert {str(u) for u in s.units} == handles  # the same units the answer names
        if s.stage == "unit":
            assert s.via is not None and s.via.kept
            assert s.via.coarse_rank == min(u.coarse_rank for u in s.units if u.kept)
        else:
            assert not any(u.kept for u in s.units)
    ranks = sorted(u.coarse_rank for s in why.steps for u in s.units)
    assert ranks[0] >= 1


def test_lexical_part_comes_from_a_lexical_index(store):
    class Lexical(FlatVector):
        def lexical_scores(self, text, positions):
            return [len(text) + float(p) for p in positions]

    with Memory.open(store, read_only=True) as mem:
        view = mem.view("trip")
        q = mem.encoder.encode([QUERY])[0]
    r = Lexical().fit(view)
    q = view.check_query(q)
    sel = r.retrieve(q, 50, text=QUERY)
    why = explain(r, q, QUERY, 50, sel.positions, method="lexical")
    assert [s.lexical for s in why.steps] == [len(QUERY) + float(p) for p in sel.positions]
    assert "lexical" in why.render()
    plain = explain(FlatVector().fit(view), q, QUERY, 50, sel.positions, method="flat")
    assert all(s.lexical is None for s in plain.steps)


def test_a_result_of_a_changed_namespace_cannot_be_explained(tmp_path):
    with Memory.open(tmp_path / "m.db", encoder="hashing:d64") as mem:
        mem.add_messages([{"role": "user", "content": "book flight HAT001"}], namespace="a")
        old = mem.retrieve("flight", 20, namespace="a")
        kept = mem.retrieve("flight", 20, namespace="a")
        kept.explain()  # explained before the write: kept
        mem.add_messages([{"role": "user", "content": "cancel flight HAT001"}], namespace="a")
        # an add leaves the retriever as it was; the next retrieval brings it up to date
        mem.retrieve("flight", 20, namespace="a")
        with pytest.raises(StaleResultError, match="retrieve again"):
            old.explain()
        assert kept.explain().steps[0].position == 0
        empty = mem.retrieve("flight", 20, namespace="none-yet")
        assert empty.explain().steps == () and empty.to_dict(explain=True)["explanation"]


def test_query_explain_cli(store):
    runner = CliRunner()
    args = ["query", QUERY, "--store", str(store), "--namespace", "trip", "--budget", "40"]
    text = runner.invoke(main, [*args, "--explain"], standalone_mode=False)
    assert text.exit_code == 0, text.output
    assert "# Why these steps (osumem; " in text.output and "[unit]" in text.output
    as_json = runner.invoke(main, [*args, "--explain", "--json"], standalone_mode=False)
    data = json.loads(as_json.output)
    assert [s["position"] for s in data["explanation"]["steps"]] == [
        s["position"] for s in data["steps"]
    ]
    plain = runner.invoke(main, [*args, "--json"], standalone_mode=False)
    assert "explanation" not in json.loads(plain.output)
