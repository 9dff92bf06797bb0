"""Entities from text (osumem.annotate.extract_text_entities) and their use by
osumem_hybrid's entity view; the paper's rule (arguments only) is unchanged."""

import numpy as np

from osumem.annotate import extract_entities, extract_text_entities
from osumem.bench.synthetic import SyntheticConfig, generate_episode
from osumem.evaluate.runner import evaluate_episode, parse_method_runs
from osumem.retrieve import create
from osumem.types import MemoryView


def test_the_kinds_of_strings_people_and_tools_say():
    got = extract_text_entities(
        "Hey Mel! I went to the LGBTQ support group in New York on 8 May, 2023. "
        "I ran 5 km, paid $20 at Bank of America; mail me at mel@example.com. "
        "Booking HAT123 from JFK."
    )
    for value in (
        "mel", "lgbtq", "new york", "8 may 2023", "5 km", "$20", "bank of america",
        "mel@example.com", "hat123", "jfk",
    ):  # fmt: skip
        assert value in got, value
    assert "hey" not in got and "i" not in got


def test_sentence_starts_and_other_scripts():
    assert extract_text_entities("The cat sat on the mat. Yesterday it rained.") == frozenset()
    assert extract_text_entities("Мария поехала в Москву.") == {"мария", "москву"}
    assert extract_text_entities("") == frozenset()
    assert extract_text_entities("   \n") == frozenset()
    long = "word " * 20_000 + "Lisbon"
    assert "lisbon" in extract_text_entities(long)


def test_deterministic_and_the_paper_rule_unchanged():
    text = "Caroline met John Smith in Paris on 2024-05-20."
    assert extract_text_entities(text) == extract_text_entities(text)
    assert extract_entities({"city": "Paris", "n": 3}) == {"Paris", "3"}


def _view(texts, entities):
    return MemoryView.build(
        np.eye(len(texts), 8, dtype=np.float32) + 0.1,
        [3] * len(texts),
        texts=texts,
        entities=entities,
        subgoals=["s"] * len(texts),
        sources=["a"] * len(texts),
    )


def test_text_entities_fill_in_where_arguments_name_none():
    texts = ["user: I fly to Lisbon", "call: book(...)", "user: Lisbon is sunny", "x"]
    ents = [frozenset(), frozenset({"HAT1"}), frozenset(), frozenset()]
    h = create("osumem_hybrid").fit(_view(texts, ents))
    seen = h._with_text_entities(h.view_).entities
    assert seen[0] == {"lisbon"} and seen[1] == {"HAT1"} and seen[2] == {"lisbon"}
    paper = create("osumem_paper").fit(_view(texts, ents))
    assert paper.view_.entities[0] == frozenset()


def test_the_runner_does_not_share_pools_of_other_entities():
    ep = generate_episode(SyntheticConfig(n_episodes=1), 2, 0)
    texts = [f"user: talk about Lisbon {i % 3}" for i in range(ep.view.n)]
    view = MemoryView(**{**{c: getattr(ep.view, c) for c in ep.view.column_names()},
                         "entities": (frozenset(),) * ep.view.n,
                         "texts": np.asarray(texts, dtype=object)})  # fmt: skip
    ep = type(ep)(episode_id=ep.episode_id, view=view, queries=ep.queries, meta=ep.meta)
    runs = parse_method_runs(["osumem_hybrid[entity_source=text]", "osumem_adaptive"])
    together = evaluate_episode(ep, runs, [64, 256], benchmark="x", seed=0)
    alone = evaluate_episode(ep, runs[1:], [64, 256], benchmark="x", seed=0)
    key = ("query", "budget", "recall", "n_found")
    pick = [tuple(r[k] for k in key) for r in together if r["method"] == "osumem_adaptive"]
    assert pick == [tuple(r[k] for k in key) for r in alone]
