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
