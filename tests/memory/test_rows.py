"""The step row's own helpers."""

from __future__ import annotations

from dataclasses import fields, replace

from osumem.memory.rows import StepRow


def test_stamped_is_replace_of_metadata_and_time_keeping_every_other_field() -> None:
    values = {
        f.name: (("e1", "e2") if f.name == "entities" else 7 if f.name == "cost" else f.name)
        for f in fields(StepRow)
    }
    values.update(time=1.5, updated=2.5)
    row = StepRow(**values)
    stamped = row.stamped('{"k": 1}', 9.0)
    assert stamped == replace(row, metadata_json='{"k": 1}', time=9.0)
    for f in fields(StepRow):  # a field added later must be carried over too
        if f.name not in ("metadata_json", "time"):
            assert getattr(stamped, f.name) == getattr(row, f.name), f.name
