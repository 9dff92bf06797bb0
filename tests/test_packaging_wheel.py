"""The package works from a wheel installed outside the repository: the paper's
experiment files ship as package data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    res = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{args}\n{res.stdout}\n{res.stderr}"
    return res.stdout


@pytest.mark.slow
def test_reproduce_synthetic_from_an_installed_wheel(tmp_path: Path) -> None:
    project = tmp_path / "project"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(
        REPO / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, project / name)
    pip = [sys.executable, "-m", "pip", "-q"]
    _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", "dist", "."],
        project,
    )
    wheels = list((project / "dist").glob("osumem-*.whl"))
    assert len(wheels) == 1
    site = tmp_path / "site"
    _run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheels[0])],
        tmp_path,
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    where = _run([sys.executable, "-c", "import osumem; print(osumem.__file__)"], elsewhere, env)
    assert Path(where.strip()).is_relative_to(site)
    # the viewer page's files ship as package data
    code = "from osumem.serve import ui; print(ui.server_page(), ui.asset('app.js')[:40])"
    assert "/ui/app.js" in _run([sys.executable, "-c", code], elsewhere, env)
    out = elsewhere / "D"
    cli = [sys.executable, "-c", "from osumem.cli import main; main()"]
    _run(
        [
            *cli,
            "reproduce",
            "synthetic",
            "--episodes",
            "4",
            "--out",
            str(out),
            "--jobs",
            "1",
            "--quiet",
        ],
        elsewhere,
        env,
    )
    names = {e["name"] for e in json.loads((out / "experiments.json").read_text())}
    assert {"table2", "budget_sweep", "ablations", "mmax_sweep", "efficiency"} <= names
    assert (out / "synthetic.parquet").exists()
    assert "Table 2" in (out / "report.md").read_text()
