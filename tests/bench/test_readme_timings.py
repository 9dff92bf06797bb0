"""``benchmarks/readme_timings.py``: a command's wall and CPU time from a fresh
folder, and a failing command's own output in the failure."""

from __future__ import annotations

import sys

import pytest

from script_helpers import load_script


@pytest.fixture
def script():
    module = load_script("benchmarks/readme_timings.py")
    yield module
    sys.modules.pop("readme_timings", None)


def test_a_command_is_timed_in_a_folder_it_leaves_behind_clean(script, tmp_path, monkeypatch):
    monkeypatch.setattr(script.tempfile, "tempdir", str(tmp_path))
    wall, cpu = script.measure([sys.executable, "-c", "sum(range(10**6))"])
    assert wall > 0 and cpu > 0
    assert list(tmp_path.iterdir()) == []  # the folder and the output log are removed


def test_a_failing_command_is_reported_with_the_end_of_its_output(script, tmp_path, monkeypatch):
    monkeypatch.setattr(script.tempfile, "tempdir", str(tmp_path))
    lines = "; ".join(f"print('line {i}')" for i in range(60))
    failing = [sys.executable, "-c", f"import sys; {lines}; sys.exit('it broke')"]
    with pytest.raises(SystemExit) as stopped:
        script.measure(failing)
    first, *shown = str(stopped.value).splitlines()
    assert "failed (exit status 1)" in first
    # the last 40 lines of its output, stderr in order with stdout
    assert shown == [f"line {i}" for i in range(21, 60)] + ["it broke"]
    assert list(tmp_path.iterdir()) == []
