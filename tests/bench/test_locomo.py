"""LoCoMo: the loader, evidence ids, ingestion through the memory, the bench command,
the reproduce spec and its summary, on a tiny conversation written here (the real
data's licence keeps its text out of the repository); one slow test on the
development file."""

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from osumem.bench.locomo import (
    LoCoMoConfig,
    build_locomo,
    load_samples,
    parse_evidence,
    render_turn,
)
from osumem.cli import main
from osumem.errors import ConfigError, DataFileError

CONVERSATION = {
    "speaker_a": "Ana",
    "speaker_b": "Ben",
    "session_1_date_time": "1:00 pm on 2 May, 2023",
    "session_1": [
        {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben! I adopted a grey cat called Pixel."},
        {"speaker": "Ben", "dia_id": "D1:2", "text": "Congrats! I started learning the cello."},
        {
            "speaker": "Ana",
            "dia_id": "D1:3",
            "text": "Here is Pixel on the sofa.",
            "blip_caption": "a photo of a grey cat on a sofa",
        },
        {"speaker": "Ben", "dia_id": "D1:4", "text": ""},
    ],
    "session_2_date_time": "9:30 am on 20 June, 2023",
    "session_2": [
        {"speaker": "Ben", "dia_id": "D2:1", "text": "I played my first cello concert in Lisbon."},
        {"speaker": "Ana", "dia_id": "D2:2", "text": "Amazing. Pixel knocked over my coffee."},
        {"speaker": "Ben", "dia_id": "D2:03", "text": "Ha, cats. Did you finish the training?"},
        {"speaker": "Ana", "dia_id": "D2:4", "text": "Yes, I ran 42 km in Porto on Sunday."},
    ],
}
QA = [
    {
        "question": "What is the name of Ana's cat?",
        "answer": "Pixel",
        "evidence": ["D1:1"],
        "category": 4,
    },
    {
        "question": "Where did Ben play a concert?",
        "answer": "Lisbon",
        "evidence": ["D2:01"],
        "category": 4,
    },
    {
        "question": "What does the cat look like, what did it do?",
        "answer": "grey",
        "evidence": ["D1:3; D2:2"],
        "category": 1,
    },
    {
        "question": "When did Ana run in Porto?",
        "answer": "June 2023",
        "evidence": ["D:2:4"],
        "category": 2,
    },
    {
        "question": "What instrument does Ana play?",
        "adversarial_answer": "cello",
        "evidence": ["D1:2"],
        "category": 5,
    },
    {"question": "Broken evidence?", "answer": "x", "evidence": ["D", "D9:9"], "category": 3},
]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    second = {**CONVERSATION, "speaker_a": "Cy", "speaker_b": "Di"}
    for s in ("session_1", "session_2"):
        second[s] = [
            {**t, "speaker": "Cy" if t["speaker"] == "Ana" else "Di"} for t in CONVERSATION[s]
        ]
    data = [
        {"sample_id": "tiny-1", "conversation": CONVERSATION, "qa": QA},
        {"sample_id": "tiny-2", "conversation": second, "qa": QA[:2]},
    ]
    path.write_text(json.dumps(data))
    return path


def test_evidence_ids_are_read_leniently():
    assert parse_evidence(["D1:3; D2:2"]) == ([(1, 3), (2, 2)], [])
    assert parse_evidence(["D30:05"]) == ([(30, 5)], [])
    assert parse_evidence("D:11:26") == ([(11, 26)], [])
    assert parse_evidence(["D", "D4:1,D4:2"]) == ([(4, 1), (4, 2)], ["D"])
    assert render_turn({"text": "Look", "blip_caption": "a dog"}) == "Look and shared a dog"


def test_conversations_go_through_the_memory(tiny):
    eps, stats = build_locomo(tiny, LoCoMoConfig(categories=(1, 2, 3, 4, 5)), encoder="hashing")
    ep = eps[0][1]
    view = ep.view
    # the empty assistant turn made no step: 7 steps from 8 turns
    assert view.n == 7
    assert list(view.roles[:3]) == ["user", "assistant", "user"]
    assert view.texts[2].endswith("and shared a photo of a grey cat on a sofa")
    assert list(view.sources[:2]) == ["Ana", "Ben"]
    assert view.subgoals[0] == "session 1 (1:00 pm on 2 May, 2023)"
    by_q = {q.text: q for q in ep.queries}
    assert by_q["What is the name of Ana's cat?"].evidence == (0,)
    assert by_q["Where did Ben play a concert?"].evidence == (3,)  # D2:01 -> D2:1
    assert by_q["What does the cat look like, what did it do?"].evidence == (2, 4)
    assert by_q["When did Ana run in Porto?"].evidence == (6,)  # D:2:4
    assert by_q["What instrument does Ana play?"].cell == "cat5"
    assert "Broken evidence?" not in by_q
    assert stats["dropped_no_evidence"] == 1
    assert sorted(stats["unmapped_evidence_ids"]) == ["tiny-1#5:D", "tiny-1#5:D9:9"]
    assert all(q.t == view.n for q in ep.queries)
    # default categories 1-4, a chosen sample, unit costs
    eps, stats = build_locomo(
        tiny, LoCoMoConfig(samples=("tiny-2",), unit_costs=True), encoder="hashing"
    )
    assert [e.episode_id for _, e in eps] == ["tiny-2"]
    assert set(eps[0][1].view.costs.tolist()) == {1}
    with pytest.raises(DataFileError):
        build_locomo(tiny, LoCoMoConfig(samples=("nope",)), encoder="hashing")


def test_bad_files_and_configs(tmp_path):
    with pytest.raises(DataFileError):
        load_samples(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"sample_id": "x"}]')
    with pytest.raises(DataFileError, match="conversation"):
        load_samples(bad)
    with pytest.raises(ConfigError):
        LoCoMoConfig(categories=(7,))


def test_bench_locomo_command(tiny, tmp_path):
    out = tmp_path / "rows"
    r = CliRunner().invoke(
        main,
        ["bench", "locomo", "--data", str(tiny), "--encoder", "hashing", "--methods",
         "flat,bm25,hybrid,osumem_hybrid", "--budgets", "16,64", "--out", str(out), "--quiet"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = pd.read_parquet(out / "locomo.parquet")
    assert set(rows["cell"]) == {"cat1", "cat2", "cat4"}
    assert (rows["cost"] <= rows["budget"]).all()
    assert set(rows["method"]) == {"flat", "bm25", "hybrid", "osumem_hybrid"}


def test_reproduce_locomo_writes_the_summary(tiny, tmp_path):
    out = tmp_path / "res"
    r = CliRunner().invoke(
        main,
        ["reproduce", "locomo", "--data", str(tiny), "--encoder", "hashing", "--out", str(out),
         "--jobs", "1", "--permutations", "100", "--quiet"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    for name in ("locomo", "locomo_adversarial", "locomo_topk"):
        assert (out / f"{name}.parquet").exists()
    summary = (out / "locomo_summary.md").read_text()
    assert "DRAGON" in summary and "0.567" in summary and "all-hit" in summary
    topk = pd.read_parquet(out / "locomo_topk.parquet")
    assert sorted(topk["budget"].unique()) == [5, 10, 25]
    assert (topk["n_selected"] <= topk["budget"]).all()
    adv = pd.read_parquet(out / "locomo_adversarial.parquet")
    assert set(adv["cell"]) == {"cat5"}


@pytest.mark.slow
def test_development_file_smallest_conversation(shared_data):
    path = shared_data / "locomo" / "locomo-dev.json"
    if not path.exists():
        pytest.skip("the LoCoMo development file is not there")
    eps, stats = build_locomo(path, LoCoMoConfig(samples=("conv-30",)), encoder="hashing")
    ep = eps[0][1]
    assert ep.view.n == 369 and stats["queries"] == 81 and stats["dropped_no_evidence"] == 0
    assert stats["unmapped_evidence_ids"] == []
    assert all(0 <= e < ep.view.n for q in ep.queries for e in q.evidence)
