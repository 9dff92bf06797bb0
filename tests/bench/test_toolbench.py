"""ToolBench reader and planted-evidence probe (SPEC §6.3)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from osumem.bench.toolbench import (
    ToolBenchConfig,
    build_corpus,
    construction_stats,
    evidence_positions,
    generate,
)
from osumem.embed import HashingEncoder
from osumem.errors import ConfigError, DataFileError, InvalidInputError
from osumem.ingest.toolbench import (
    api_of,
    parse_arguments,
    parse_record,
    parse_tool_message,
    read_toolbench,
)

VIN_MSG = (
    "{'name': 'vin_decode_for_vin_decoder_v4', 'arguments': "
    '\'{\\n  "vin": "WBAWY32040L678750"\\n}\', \'respon'
)
CUT_MSG = "{'name': 'spam_database_lookup_for_viewdns', 'arguments': '{\\n  \"ip\": \"123.456.789.0\",\\n  \"output\": "


def _tool(name: str, args: str) -> dict:
    return {"role": "tool", "message": f"{{'name': '{name}', 'arguments': '{args}', 'respon"}


def _record(query: str, calls: list[tuple[str, str]], tools: list[str]) -> dict:
    chain: dict = {"role": "system", "message": "", "next": []}
    node = chain
    for msg in [{"role": "user", "message": query[:100]}] + [_tool(n, a) for n, a in calls]:
        nxt = {**msg, "next": []}
        node["next"] = [nxt]
        node = nxt
    return {
        "query": query,
        "available_tools": [
            {"name": t, "parameters": {"properties": {"city": {}, "day": {}}}} for t in tools
        ],
        "answer": {"method": "x", "total_steps": len(calls), "answer_details": [chain]},
    }


def _toolbench_data(root: Path) -> Path:
    """A small ToolBench data directory under ``root``: 40 answer files of four calls
    each, over 7 APIs, 5 cities and 3 query topics."""
    recs = []
    for r in range(40):
        calls = [(f"f{j}_for_api{r % 7}", f'{{"city": "c{r % 5}", "day": {j}}}') for j in range(4)]
        recs.append({"query": f"query about topic {r % 3} item {r}", "calls": calls})
    data = root / "toolbench_data"
    data.mkdir()
    payload = {str(i): _record(x["query"], x["calls"], []) for i, x in enumerate(recs)}
    (data / "G1_tool.json").write_text(json.dumps(payload))
    return data


def test_tool_name_and_complete_arguments() -> None:
    call = parse_tool_message(VIN_MSG)
    assert call is not None
    assert call.name == "vin_decode_for_vin_decoder_v4"
    assert dict(call.arguments) == {"vin": "WBAWY32040L678750"}
    assert not call.truncated
    assert api_of(call.name) == "vin_decoder_v4"
    assert api_of("Finish") == "Finish"


def test_cut_arguments_keep_complete_pairs_only() -> None:
    call = parse_tool_message(CUT_MSG)
    assert call is not None and call.truncated
    assert dict(call.arguments) == {"ip": "123.456.789.0"}
    assert call.raw_arguments.endswith('"output": ')


@pytest.mark.parametrize(
    "raw, expected",
    [
        ('{"a": 1, "b": "x y"}', {"a": 1, "b": "x y"}),
        ('{"a": 1, "b": "x y', {"a": 1}),
        ('{"a": tr', {}),
        ("", {}),
        ('{"n": -2.5,\n "ok": true, "z": null}', {"n": -2.5, "ok": True, "z": None}),
    ],
)
def test_parse_arguments_never_crashes(raw: str, expected: dict) -> None:
    args, _ = parse_arguments(raw)
    assert args == expected


@given(st.text(max_size=120))
def test_parse_tool_message_total(text: str) -> None:
    parse_tool_message(text)  # never raises on arbitrary (cut) text
    parse_arguments(text)


def test_name_cut_inside_is_completed_from_available_tools() -> None:
    call = parse_tool_message("{'name': 'get_weather_fo", ["get_weather_for_meteo", "Finish"])
    assert call is not None and call.name == "get_weather_for_meteo"
    assert parse_tool_message("{'name': 'get_", ["get_a_for_x", "get_b_for_x"]) is None


def test_parse_record_steps_annotations_and_boilerplate() -> None:
    rec = parse_record(
        "7",
        _record(
            "Weather in Paris?",
            [
                ("weather_for_meteo", '{"city": "Paris", "day": 3}'),
                ("weather_for_meteo", '{"city": "Paris", "da'),
                ("Finish", '{"return_type": "give_answer"}'),
            ],
            ["weather_for_meteo", "Finish"],
        ),
        split="G1_tool",
    )
    assert rec.source == "G1_tool:7"
    assert rec.query == "Weather in Paris?"
    assert [s.role for s in rec.steps] == ["tool", "tool", "tool"]  # user turn is the query
    a, b, fin = rec.steps
    assert a.entities == frozenset({"Paris", "3"})
    assert b.entities == frozenset({"Paris"}) and b.truncated
    # declared keys, so the cut cannot change the signature
    assert a.tool_signature == b.tool_signature == "weather_for_meteo(city,day)"
    assert fin.tool_signature == "" and fin.is_boilerplate
    assert rec.tool_steps == (0, 1)
    assert {s.subgoal for s in rec.steps} == {"G1_tool:7#task"}
    api = parse_record("7", _record("q", [("w_for_meteo", "{}")], []), signature_level="api")
    assert api.steps[0].tool_signature == "meteo()"


@pytest.mark.parametrize(
    "bad, what",
    [
        ({"available_tools": [], "answer": {"answer_details": []}}, "query"),
        ({"query": "q", "available_tools": []}, "answer_details"),
        ({"query": "q", "answer": {"answer_details": [{"role": "tool"}]}}, "role/message"),
        (
            {"query": "q", "answer": {"answer_details": [{"role": "tool", "message": "zz"}]}},
            "no parsable name",
        ),
    ],
)
def test_malformed_records_name_the_record(bad: dict, what: str) -> None:
    with pytest.raises(InvalidInputError, match=rf"G2_x:99.*{what}"):
        parse_record("99", bad, split="G2_x")


def test_missing_directory() -> None:
    with pytest.raises(DataFileError):
        read_toolbench("/nonexistent/toolbench")


def test_real_files_parse(shared_data) -> None:
    recs = read_toolbench(shared_data / "toolbench")
    assert len(recs) == 500
    assert len({r.source for r in recs}) == 500  # ids repeat across files
    first = next(r for r in recs if r.source == "G1_instruction:42700")
    assert [s.tool_action for s in first.steps][:3] == ["vin_decode_for_vin_decoder_v4"] * 3
    assert first.steps[0].entities == frozenset({"WBAWY32040L678750"})
    tool_steps = [s for r in recs for s in r.steps if s.role == "tool"]
    assert len(tool_steps) == 2198 and all(s.tool_action for s in tool_steps)


@given(st.integers(1, 2000), st.integers(1, 6))
def test_evidence_evenly_spaced(n: int, k: int) -> None:
    if k > n:
        return
    pos = evidence_positions(n, k)
    assert pos.size == k and pos[0] >= 0 and pos[-1] < n
    assert np.all(np.diff(pos) >= n // (k + 1))  # gaps differ by at most one
    assert np.ptp(np.diff(np.concatenate([[-1], pos, [n]]))) <= 2 if k > 1 else True


def _corpus(n_records: int = 12):
    recs = []
    for r in range(n_records):
        calls = [(f"f{j}_for_api{r}", f'{{"city": "c{r}", "day": {j}}}') for j in range(4)]
        recs.append(
            parse_record(
                str(r),
                _record(f"query about topic {r % 3} item {r}", calls, []),
                split="S",
                signature_level="api",
            )
        )
    return build_corpus(recs, HashingEncoder(64), n_neighbors=3)


def test_background_composition_and_placement() -> None:
    corpus = _corpus()
    cfg = ToolBenchConfig(n_episodes=5, evidence_size=3, background_size=40, n_neighbors=3)
    eps = list(generate(corpus, cfg, 42))
    assert len(eps) == 5
    for ep in eps:
        (q,) = ep.queries
        assert ep.view.n == 43 and q.t == 43
        assert q.evidence == tuple(int(p) for p in evidence_positions(43, 3)) == (10, 21, 32)
        target = ep.meta["target"]
        assert {ep.view.sources[i] for i in q.evidence} == {target}
        others = [i for i in range(43) if i not in q.evidence]
        assert target not in {ep.view.sources[i] for i in others}
        mask = ep.meta["confounder_mask"]
        assert int(mask.sum()) == 30  # 75% of 40
        t = int(target.split(":")[1])
        neigh = {corpus.records[j].source for j in corpus.neighbors[t]}
        assert {ep.view.sources[i] for i in np.flatnonzero(mask)} <= neigh
        assert not neigh & {ep.view.sources[i] for i in others if not mask[i]}
        # 3 neighbours x 4 steps = 12 distinct confounders, each drawn 2 or 3 times
        _, counts = np.unique(ep.view.texts[mask], return_counts=True)
        assert counts.size == 12 and counts.min() >= 2 and counts.max() <= 3
        # default: no namespace prefix, so entities stay as parsed
        assert all("::" not in e for i in q.evidence for e in ep.view.entities[i])
        assert np.allclose(q.vector, corpus.query_embeddings[t])
    stats = construction_stats(eps)
    assert stats["confounder_share"] == pytest.approx(0.75)
    assert stats["share_T+"] == 1.0  # api-level signatures: one API per trajectory


def test_generation_is_deterministic_and_validated() -> None:
    corpus = _corpus()
    cfg = ToolBenchConfig(n_episodes=3, background_size=30, n_neighbors=3)
    a = [ep.queries[0].evidence for ep in generate(corpus, cfg, 7)]
    b = [ep.queries[0].evidence for ep in generate(corpus, cfg, 7)]
    assert a == b
    ta = [ep.meta["target"] for ep in generate(corpus, cfg, 7)]
    assert len(set(ta)) == 3  # targets drawn without replacement
    with pytest.raises(ConfigError):
        list(generate(corpus, cfg.replace(evidence_size=5), 7))
    with pytest.raises(ConfigError):
        ToolBenchConfig(confounder_share=1.5)


def test_namespace_prefix_off_by_default_on_as_option() -> None:
    corpus = _corpus()
    off = ToolBenchConfig(n_episodes=2, background_size=40, n_neighbors=3)
    assert off.namespace_prefix is False
    on = off.replace(namespace_prefix=True)
    for a, b in zip(generate(corpus, off, 3), generate(corpus, on, 3), strict=True):
        (q,) = a.queries
        target = a.meta["target"]
        assert b.meta["target"] == target and b.queries[0].evidence == q.evidence
        for i in q.evidence:
            # same step, raw vs prefixed annotations
            assert a.view.tool_signatures[i] == f"api{target.split(':')[1]}()"
            assert b.view.tool_signatures[i] == f"{target}::{a.view.tool_signatures[i]}"
            assert {f"{target}::{e}" for e in a.view.entities[i]} == set(b.view.entities[i])
        # unprefixed, two trajectories passing "day": 0 share the entity string "0"
        shared = [set(a.view.entities[i]) & {"0"} for i in range(a.view.n)]
        assert sum(bool(x) for x in shared) >= 2
        assert not any("0" in b.view.entities[i] for i in range(b.view.n))


def test_beta_override_reaches_the_disjoint_variant() -> None:
    from osumem.retrieve.registry import create, params_for, parse_overrides

    over = parse_overrides(["osumem_coverage.beta=0.08", "osumem_coverage.gap=16"])
    disj = create("osumem_coverage_disjoint", params_for("osumem_coverage_disjoint", over))
    over_ = create("osumem_coverage", params_for("osumem_coverage", over))
    assert disj.config.beta == over_.config.beta == 0.08
    assert disj.config.gap == over_.config.gap == 16
    assert disj.config.max_memberships == 1 and over_.config.max_memberships == 5


def test_reproduce_writes_rows_summary_and_report(tmp_path) -> None:
    from osumem.bench.reproduce import load_spec, reproduce
    from osumem.report.experiment import Experiment

    data = _toolbench_data(tmp_path)
    out = tmp_path / "out"
    spec = load_spec(
        "toolbench",
        seeds=(1, 2),
        episodes=3,
        sweep_episodes=2,
        benchmark_params={"background_size": 40, "n_neighbors": 5},
    )
    keep = []
    for e in spec.experiments:
        if e.role == "beta_sweep":
            e = replace(e, grid={"beta": (0.12,)})
        if e.role == "evidence_sweep" and e.benchmark_params["evidence_size"] != 3:
            continue
        if e.role != "sensitivity":
            keep.append(e)
    sens = Experiment(  # two parameters: the label must use the spec grammar's ';'
        name="toolbench_sens_x",
        title="x",
        kind="rows",
        benchmark="toolbench",
        rows="toolbench_sens_x",
        seeds=(42,),
        budgets=(200, 400, 800, 1600),
        primary_budget=400,
        reference="osumem_coverage",
        methods=("osumem_coverage", "osumem_coverage_disjoint"),
        method_params={"gap": 16, "similarity_scope": "all"},
        role="sensitivity",
        analysis="membership",
    )
    spec = spec.replace(experiments=(*keep, sens))
    reproduce(spec, data=data, out=out, jobs=1, progress=False, encoder=HashingEncoder(32))
    text = (out / "toolbench_summary.md").read_text()
    for name in ("toolbench", "toolbench_beta", "toolbench_k3", "toolbench_sens_x"):
        assert (out / f"{name}.parquet").exists()
    import pandas as pd

    sens_rows = pd.read_parquet(out / "toolbench_sens_x.parquet")
    assert set(sens_rows["method"]) == {
        "osumem_coverage[gap=16;similarity_scope=all]",
        "osumem_coverage_disjoint[gap=16;similarity_scope=all]",
    }
    assert set(sens_rows["seed"]) == {1, 2}  # the spec's seeds replace the experiment's
    assert (out / "analysis" / "toolbench_membership.parquet").exists()
    assert "SENSITIVITY (not used to pick defaults): x" in text
    assert "β=0.12" in text and "k=3" in text and "k=2" not in text
    assert "+6.2" in text and "(2.16)" in text  # the paper's numbers beside ours
    report = (out / "report.md").read_text()
    assert report.rstrip().endswith(text.rstrip())
