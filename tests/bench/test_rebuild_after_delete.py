"""``benchmarks/rebuild_after_delete.py``: both modes run on copies of one store; the
background mode's next retrieve is answered by the stand-in, the other's by the
memory's method, and the answers after ``wait_ready`` are compared."""

from __future__ import annotations

import sys

from osumem.memory import retrievers
from script_helpers import load_script


def test_both_modes_run_and_their_answers_are_compared(tmp_path, monkeypatch):
    monkeypatch.setattr(retrievers, "REBUILD_BACKGROUND_STEPS", 50)
    script = load_script("benchmarks/rebuild_after_delete.py")
    try:
        result = script.run(steps=300, repeat=1, position=5, work=tmp_path)
    finally:
        sys.modules.pop("rebuild_after_delete", None)
    rows = {r["mode"]: r for r in result["rows"]}
    assert rows["background"]["next_retrieve_method"] == "flat"
    assert rows["before answering"]["next_retrieve_method"] == "osumem"
    assert rows["before answering"]["retrieves_while_rebuilding"] == 0
    assert result["same_answers"]
    assert "| 1 | background |" in script.render(result)


def test_a_text_update_is_measured_the_same_way(tmp_path, monkeypatch):
    monkeypatch.setattr(retrievers, "REBUILD_BACKGROUND_STEPS", 50)
    script = load_script("benchmarks/rebuild_after_delete.py")
    try:
        result = script.run(steps=300, repeat=1, position=5, work=tmp_path, edit="update")
    finally:
        sys.modules.pop("rebuild_after_delete", None)
    rows = {r["mode"]: r for r in result["rows"]}
    assert rows["background"]["next_retrieve_method"] == "flat"
    assert rows["before answering"]["next_retrieve_method"] == "osumem"
    assert result["same_answers"]
    assert script.render(result).startswith("a text update by it in a ")
    assert "| round | rebuild | update s |" in script.render(result)


def test_another_writers_metadata_update_rebuilds_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(retrievers, "REBUILD_BACKGROUND_STEPS", 50)
    script = load_script("benchmarks/rebuild_after_delete.py")
    try:
        result = script.run(
            steps=300, repeat=1, position=5, work=tmp_path, edit="metadata", by="other"
        )
    finally:
        sys.modules.pop("rebuild_after_delete", None)
    for row in result["rows"]:
        assert row["next_retrieve_method"] == "osumem" and row["retrieves_while_rebuilding"] == 0
    assert result["same_answers"]
    assert script.render(result).startswith("a metadata update by another writer in a ")
