"""The README walk (scripts/readme_walk.py) reads the README's blocks with their
directives, carries exported variables and background processes from block to block,
skips only with a stated reason, and stops at the first failing command; the README's
test command is CI's."""

from __future__ import annotations

from pathlib import Path

import pytest

from script_helpers import load_script

ROOT = Path(__file__).resolve().parents[1]


walk = load_script("scripts/readme_walk.py")


def test_the_readme_test_command_is_the_one_ci_runs():
    readme = (ROOT / "README.md").read_text()
    command = next(
        line
        for line in readme.splitlines()
        if line.startswith("python3 -m venv .venv && ") and "pytest" in line
    )
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python3 scripts/readme_walk.py" in (ROOT / ".ci" / "run").read_text()


def test_every_readme_block_is_run_or_skipped_with_a_reason():
    found = walk.blocks(ROOT / "README.md")
    assert len(found) >= 15
    for b in found:
        assert b.directive in ("", "skip", "may-fail", "data")
        if b.directive == "skip":
            assert len(b.reason) > 10, b
    ran = [b for b in found if b.directive != "skip"]
    assert len(ran) > len(found) / 2  # most of it runs


SAMPLE = """# Title

```bash
export GREETING=hello
echo "$GREETING" > greeting.txt
sleep 30 &
```

<!-- readme-walk: skip (shows a command that takes an hour) -->
```bash
exit 3
```

```text
not a command
```

```python
import os, pathlib
assert os.environ["GREETING"] == "hello"
pathlib.Path("from-python.txt").write_text("ok")
```

```bash
osumem bench taubench --data gpt-4o-airline.json
```

```bash
false
echo never
```
"""


def test_the_walk_carries_state_skips_with_reasons_and_stops_at_a_failure(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(SAMPLE)
    found = walk.blocks(readme)
    assert [b.kind for b in found] == ["bash", "bash", "python", "bash", "bash"]
    assert found[1].directive == "skip" and found[1].reason == "shows a command that takes an hour"
    assert walk.needed_data(found[3]) == ["gpt-4o-airline.json"]
    clone = tmp_path / "clone"
    clone.mkdir()
    w = walk.Walk(clone, tmp_path)
    try:
        outcomes = [w.run(n, b) for n, b in enumerate(found)]
    finally:
        w.stop()
    assert [o.status for o in outcomes] == ["ok", "skip", "ok", "skip", "fail"]
    assert (clone / "greeting.txt").read_text() == "hello\n"
    assert (clone / "from-python.txt").read_text() == "ok"
    assert "gpt-4o-airline.json" in outcomes[3].reason and "absent" in outcomes[3].reason
    assert "exit status 1" in outcomes[4].reason


def test_a_skip_without_a_reason_is_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- readme-walk: skip -->\n```bash\necho x\n```\n")
    with pytest.raises(SystemExit, match="needs a reason"):
        walk.blocks(readme)
