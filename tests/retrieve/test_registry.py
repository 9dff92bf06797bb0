"""The method registry: which ``--set`` override reaches which method."""

from __future__ import annotations

import pytest

from osumem.evaluate.runner import parse_method_runs
from osumem.retrieve.registry import (
    available,
    base_of,
    make_config,
    params_for,
    parse_overrides,
)


def _config(name: str, items: list[str]):
    return make_config(name, params_for(name, parse_overrides(items)))


def test_override_of_a_variant_reaches_only_that_variant() -> None:
    items = ["osumem_disjoint.novelty=false"]
    assert _config("osumem_disjoint", items).novelty is False
    assert _config("osumem", items).novelty is True
    assert _config("osumem_sim_only", items).novelty is True
    assert _config("osumem_no_novelty", []).novelty is False


def test_override_of_the_base_reaches_its_variants_except_fixed_parameters() -> None:
    items = ["osumem.max_memberships=3", "osumem.novelty=false"]
    assert _config("osumem", items).max_memberships == 3
    disjoint = _config("osumem_disjoint", items)
    assert disjoint.max_memberships == 1  # the variant fixes it
    assert disjoint.novelty is False
    assert _config("osumem_sim_only", items).novelty is False
    # another class never receives it
    assert _config("osumem_coverage", items).max_memberships == 5


def test_explicit_variant_override_wins_over_the_base() -> None:
    items = ["osumem.novelty=false", "osumem_sim_only.novelty=true"]
    assert _config("osumem_sim_only", items).novelty is True
    assert _config("osumem_disjoint", items).novelty is False


def test_run_parsing_applies_the_same_rule() -> None:
    over = parse_overrides(["osumem_disjoint.novelty=false"])
    runs = {r.label: r for r in parse_method_runs(["osumem", "osumem_disjoint"], over)}
    assert dict(runs["osumem"].params) == {}
    assert dict(runs["osumem_disjoint"].params) == {"novelty": "false"}


@pytest.mark.parametrize("name", available())
def test_every_variant_has_a_base_of_its_class(name: str) -> None:
    from osumem.retrieve.registry import get_spec

    base = base_of(name)
    if get_spec(name).overrides:
        assert base is not None and get_spec(base).target == get_spec(name).target
    else:
        assert base is None


def test_osumem_paper_pins_the_paper_configuration() -> None:
    paper = make_config("osumem_paper")
    assert (paper.max_memberships, paper.coarse_ratio, paper.novelty_weight) == (5, 2.0, 0.2)
    assert (paper.novelty, paper.novelty_min_budget, paper.coarse_k_rule) == (
        True,
        192,
        "mean_cost",
    )
    # osumem keeps the paper's parameters (docs/decisions.md, round 2, step 1)
    assert make_config("osumem") == paper
