"""Bench flags: every problem reported at once on one line, each bad value named with
what it accepts; progress bars only on a terminal."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from osumem.cli import main
from osumem.errors import ConfigError
from osumem.evaluate.runner import AUTO_JOBS_MIN_EPISODES, auto_jobs, check_jobs


def bench(*args: str):
    return CliRunner().invoke(main, ["bench", "synthetic", *args])


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("osumem: error: ")
    assert "Traceback" not in result.stderr
    return result.stderr


@pytest.mark.parametrize("jobs", ["0", "-2", "abc", "1.5"])
def test_bad_jobs_is_a_one_line_error_naming_the_range(jobs: str) -> None:
    err = one_line_error(bench("--jobs", jobs, "--episodes", "1", "--methods", "flat"))
    accepted = "auto, -1 (all cores) or a number of workers >= 1"
    assert f"--jobs: expected {accepted}, got {jobs}" in err.replace("'", "")


def test_every_problem_is_reported_at_once() -> None:
    err = one_line_error(bench("--methods", "nope,flat", "--budgets", "-1", "--set", "bad"))
    assert "3 problems" in err
    assert "--budgets: expected comma-separated integers >= 1 (tokens), got -1" in err
    assert "--set: expected NAME.PARAM=VALUE, got 'bad'" in err
    assert "unknown method 'nope'" in err


def test_bad_values_are_named_with_what_they_accept() -> None:
    err = one_line_error(
        bench(
            "--episodes",
            "0",
            "--seeds",
            "1,x",
            "--set",
            "osumem.max_memberships=abc",
            "--set",
            "synthetic.dim=abc",
            "--set",
            "synthetic.event_weights=1,2",
        )
    )
    assert "5 problems" in err
    assert "--episodes: expected an integer >= 1, got 0" in err
    assert "--seeds: expected comma-separated integers >= 0, got x" in err
    assert "--set osumem.max_memberships: expected an integer, got 'abc'" in err
    assert "--set synthetic.dim: expected an integer, got 'abc'" in err
    assert "--set synthetic.event_weights: expected 4 numbers written a,b,c,d, got '1,2'" in err
    assert "<class" not in err


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("synthetic.noise_scale=-1", "noise_scale must be a finite number >= 0, got -1.0"),
        ("synthetic.query_weights=0,0,0,0", "query_weights must be finite numbers >= 0"),
        ("osumem.max_memberships=0", "max_memberships (M_max) must be >= 1, got 0"),
    ],
)
def test_out_of_range_settings_are_rejected_before_running(setting: str, message: str) -> None:
    assert message in one_line_error(bench("--set", setting))


def test_click_usage_errors_are_one_line_too() -> None:
    err = one_line_error(bench("--bogus"))
    assert "No such option '--bogus'" in err and "bench synthetic --help" in err


def test_runner_rejects_bad_jobs_for_every_caller() -> None:
    assert check_jobs(-1) == -1 and check_jobs(2) == 2
    assert auto_jobs(AUTO_JOBS_MIN_EPISODES - 1) == 1 and auto_jobs(AUTO_JOBS_MIN_EPISODES) == -1
    for bad in (0, -2, True, 1.0):
        with pytest.raises(ConfigError, match=">= 1"):
            check_jobs(bad)


def test_no_progress_bar_when_stderr_is_not_a_terminal() -> None:
    r = bench("--episodes", "3", "--methods", "flat", "--budgets", "64", "--jobs", "1")
    assert r.exit_code == 0, r.output
    assert "\r" not in r.stderr and "ep/s" not in r.stderr and "ep]" not in r.stderr
