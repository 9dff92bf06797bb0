"""The frozen-config base: replace, strings coerced to field types, to_dict."""

from __future__ import annotations

import json

import pytest

from osumem.bench.synthetic import SyntheticConfig
from osumem.bench.taubench import TauBenchConfig
from osumem.bench.toolbench import ToolBenchConfig
from osumem.errors import ConfigError


@pytest.mark.parametrize("cls", [SyntheticConfig, TauBenchConfig, ToolBenchConfig])
def test_to_dict_round_trips_through_json(cls) -> None:
    cfg = cls()
    back = json.loads(json.dumps(cfg.to_dict()))
    rebuilt = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in back.items()})
    assert rebuilt == cfg
    assert list(back) == cls.field_names()


def test_with_strings_coerces_to_the_declared_types() -> None:
    cfg = SyntheticConfig().with_strings(
        {"noise_scale": "1.25", "n_episodes": "7", "event_size": "1,2"}
    )
    assert cfg.noise_scale == 1.25 and cfg.n_episodes == 7 and cfg.event_size == (1, 2)
    assert TauBenchConfig().with_strings({"prefix_namespace": "off"}).prefix_namespace is False


def test_with_strings_reports_every_problem_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        SyntheticConfig().with_strings(
            {"colour": "red", "n_episodes": "many", "noise_scale": "x"}, "synthetic"
        )
    msg = str(err.value)
    assert "colour" in msg and "synthetic.n_episodes" in msg and "synthetic.noise_scale" in msg


def test_replace_rejects_unknown_names_and_validates_values() -> None:
    with pytest.raises(ConfigError, match="unknown parameter"):
        ToolBenchConfig().replace(nope=1)
    with pytest.raises(ConfigError):
        SyntheticConfig().replace(n_episodes=0)
    assert SyntheticConfig().replace(n_episodes=3).n_episodes == 3


# --- declarative constraints -------------------------------------------------------

import dataclasses  # noqa: E402
import math  # noqa: E402
from pathlib import Path  # noqa: E402

from osumem.bench.augment import StageDConfig  # noqa: E402
from osumem.bench.llm_stage import LLMStageConfig  # noqa: E402
from osumem.bench.scale import ScaleConfig  # noqa: E402
from osumem.bench.serve import ServeBenchConfig  # noqa: E402
from osumem.evaluate import runner  # noqa: E402
from osumem.frozen import (  # noqa: E402
    Boolean,
    FrozenConfig,
    IncreasingPair,
    Interval,
    Options,
    Permutation,
    Subset,
    TupleOf,
    Weights,
)
from osumem.osu.config import OSUConfig  # noqa: E402
from osumem.osu.views import hnsw_available  # noqa: E402
from osumem.retrieve.adaptive import AdaptiveConfig  # noqa: E402
from osumem.retrieve.osumem import OSUMemConfig  # noqa: E402
from osumem.retrieve.registry import available, get_class, make_config  # noqa: E402

BENCH_CONFIGS = [
    SyntheticConfig,
    TauBenchConfig,
    ToolBenchConfig,
    StageDConfig,
    ServeBenchConfig,
    LLMStageConfig,
]


def every_config_class() -> list[type[FrozenConfig]]:
    classes = {get_class(name).Config for name in available()}
    return sorted(classes | {OSUConfig, ScaleConfig, *BENCH_CONFIGS}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", every_config_class(), ids=lambda c: c.__name__)
def test_every_config_is_frozen_config_with_constraints_on_its_own_fields(cls) -> None:
    assert issubclass(cls, FrozenConfig)
    fields = set(cls.field_names())
    assert set(cls.constraints()) <= fields, set(cls.constraints()) - fields
    assert set(cls.symbols()) <= fields
    if cls is ScaleConfig and not hnsw_available():
        return  # its default needs hnswlib (the scale extra)
    cfg = cls()  # the defaults meet every constraint
    assert json.loads(json.dumps(cfg.to_dict())).keys() == fields
    assert cfg.replace() == cfg


def test_every_field_problem_is_reported_at_once_with_field_and_value() -> None:
    with pytest.raises(ConfigError) as err:
        OSUMemConfig(gap=-1, views=(), community="kmeans", coarse_ratio=0.0, novelty="yes")
    msg = str(err.value)
    assert msg.startswith("osumem: ")
    for part in (
        "gap (Δ_gap) must be >= 0, got -1",
        "views must be a non-empty subset of ('entity', 'tool', 'subgoal', 'similarity'), got ()",
        "community must be 'leiden' or 'louvain', got 'kmeans'",
        "coarse_ratio (ρ) must be > 0, got 0.0",
        "novelty must be True or False, got 'yes'",
    ):
        assert part in msg
    assert msg.count(";") == 4  # five problems, one error


def test_a_value_of_the_wrong_type_is_named_with_the_type() -> None:
    with pytest.raises(ConfigError, match=r"gap \(Δ_gap\) must be an integer >= 0, got '4'"):
        OSUConfig(gap="4")
    with pytest.raises(ConfigError, match=r"must be an integer >= 1, got 2\.5"):
        SyntheticConfig(n_episodes=2.5)
    with pytest.raises(ConfigError, match="must be an integer >= 1, got True"):
        SyntheticConfig(n_episodes=True)


def test_cross_field_checks_run_with_the_field_checks_once_types_are_right() -> None:
    with pytest.raises(ConfigError) as err:
        OSUConfig(min_osu_size=30, knn_k=0)
    msg = str(err.value)
    assert "knn_k must be >= 1, got 0" in msg
    assert "min_osu_size (f_min) must not exceed max_osu_size (S_max)" in msg
    with pytest.raises(ConfigError, match=r"min_shared must be in \[2, seed_steps\], got 5"):
        AdaptiveConfig(seed_steps=4, min_shared=5)
    # a wrongly typed field: the cross-field check is skipped, not crashed
    with pytest.raises(ConfigError, match="max_osu_size") as err:
        OSUConfig(max_osu_size="20")
    assert "f_min" not in str(err.value)


@pytest.mark.parametrize(
    ("constraint", "good", "bad", "text"),
    [
        (Interval(int, 1, None), [1, 7], [0, -1, 1.0, True, "1"], ">= 1"),
        (Interval(float, 0, None, closed="neither"), [0.5, 3], [0, -1.0, math.nan], "> 0"),
        (Interval(float, 0, 1), [0, 0.5, 1.0], [-0.1, 1.1, math.nan], "in [0, 1]"),
        (Interval(float, 0, 1, closed="left"), [0], [1], "in [0, 1)"),
        (
            Interval(float, 0, math.inf, closed="left"),
            [0.0, 1e9],
            [math.inf, -1],
            "a finite number >= 0",
        ),
        (Options(("a", "b")), ["a"], ["c", None, ["a"]], "'a' or 'b'"),
        (Options(("a", "b", "c")), ["c"], ["d"], "one of 'a', 'b', 'c'"),
        (Subset(("a", "b")), [("a",), ("b", "a")], [(), ("c",), "a"], "a non-empty subset"),
        (Permutation(("a", "b")), [("b", "a")], [("a",), ("a", "a")], "an ordering of all"),
        (Boolean(), [True, False], [0, 1, "true"], "True or False"),
        (Weights(2), [(0, 1.0)], [(0, 0), (1,), (-1, 2), (math.inf, 1)], "finite numbers >= 0"),
        (IncreasingPair(1), [(1, 1), (2, 5)], [(0, 1), (3, 2), (1,), (1.0, 2)], "increasing"),
        (TupleOf(Interval(int, 100, None)), [(100, 1000)], [(), (99,), 100], "each >= 100"),
    ],
)
def test_constraints_accept_and_reject_and_say_what_they_want(constraint, good, bad, text) -> None:
    assert all(constraint.holds(v) for v in good)
    assert not any(constraint.holds(v) for v in bad)
    assert text in constraint.describe()


def test_strings_are_read_as_the_declared_type_named_in_words() -> None:
    with pytest.raises(ConfigError, match=r"s\.event_weights: expected 4 numbers written a,b,c,d"):
        SyntheticConfig().with_strings({"event_weights": "1,2"}, "s")
    with pytest.raises(ConfigError, match=r"s\.max_gap: expected an integer or none, got 'x'"):
        make_config("disjoint_hierarchy").with_strings({"max_gap": "x"}, "s")
    assert SyntheticConfig().with_strings({"event_size": "2+3"}).event_size == (2, 3)


def test_none_as_an_alternative() -> None:
    assert make_config("disjoint_hierarchy", {"max_gap": "none"}).max_gap is None
    with pytest.raises(ConfigError, match=r"max_gap must be >= 1 or None, got 0"):
        make_config("disjoint_hierarchy", {"max_gap": 0})


def test_with_strings_reports_unknown_unreadable_and_out_of_range_together() -> None:
    with pytest.raises(ConfigError) as err:
        make_config("osumem", {"zz": "1", "novelty": "maybe", "max_memberships": "0"})
    msg = str(err.value)
    assert "unknown parameter(s) ['zz']" in msg
    assert "osumem.novelty: expected true or false, got 'maybe'" in msg
    assert "max_memberships (M_max) must be >= 1, got 0" in msg


def test_osu_part_is_derived_from_the_construction_fields() -> None:
    cfg = make_config("osumem_adaptive", {"gap": "6", "knn_k": "7"})
    osu = cfg.osu_config()
    assert type(osu) is OSUConfig
    assert osu == OSUConfig(**{f: getattr(cfg, f) for f in OSUConfig.field_names()})
    assert osu.gap == 6 and osu.knn_k == 7 and osu.max_memberships == 1
    plain = OSUConfig(gap=3)
    assert plain.osu_config() is plain
    with pytest.raises(ConfigError, match="does not extend"):
        plain.part(OSUMemConfig)


def test_to_dict_is_json_ready_for_paths_and_keeps_tuples() -> None:
    d = ServeBenchConfig(data=Path("a/b.jsonl")).to_dict()
    assert d["data"] == "a/b.jsonl"
    assert OSUConfig().to_dict()["views"] == OSUConfig().views
    assert OSUMemConfig().to_dict() == dataclasses.asdict(OSUMemConfig())


def test_method_specs_report_every_project_error_but_let_bugs_through(monkeypatch) -> None:
    with pytest.raises(ConfigError) as err:
        runner.parse_method_runs(["osumem[gap=-1]", "tree[branching=1]", "nope"])
    msg = str(err.value)
    assert "gap (Δ_gap)" in msg and "branching must be >= 2" in msg and "nope" in msg

    def broken(name, params):
        raise RuntimeError("a bug, not a bad spec")

    monkeypatch.setattr(runner, "make_config", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        runner.parse_method_runs(["flat"])
