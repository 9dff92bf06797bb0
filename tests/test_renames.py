"""Renamed names keep working for one release: a step's origin is ``source`` (the old
``namespace`` spelling warns), the encoder is ``encoder`` everywhere (old spellings
warn or are hidden aliases), and stores written under the old names still open."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from osumem.errors import ConfigError, InvalidInputError
from osumem.ingest.openai_chat import read_messages
from osumem.types import MemoryView, Step

LOG = [
    {"role": "user", "content": "Book flight AB123"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "book", "arguments": '{"flight": "AB123"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "booked"},
]


def test_step_source_and_deprecated_namespace() -> None:
    step = Step(role="user", text="hi", source="log-1")
    assert step.source == "log-1"
    assert "source" in {f.name for f in dataclasses.fields(Step)}
    assert "namespace" not in {f.name for f in dataclasses.fields(Step)}
    with pytest.warns(DeprecationWarning, match="Step.source"):
        old = Step(role="user", text="hi", namespace="log-1")
    assert old == step
    with pytest.warns(DeprecationWarning, match="Step.source"):
        assert step.namespace == "log-1"
    assert dataclasses.replace(step, source="log-2").source == "log-2"
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidInputError, match="not both"):
        Step(role="user", source="a", namespace="b")


def test_view_sources_and_deprecated_namespaces() -> None:
    emb = np.eye(3, dtype=np.float32)
    view = MemoryView.build(emb, [1, 1, 1], sources=["a", "b", "b"])
    assert list(view.sources) == ["a", "b", "b"] and "sources" in view.column_names()
    assert "namespaces" not in view.column_names()
    with pytest.warns(DeprecationWarning, match="MemoryView.sources"):
        old = MemoryView.build(emb, [1, 1, 1], namespaces=["a", "b", "b"])
    assert list(old.sources) == list(view.sources)
    with pytest.warns(DeprecationWarning, match="MemoryView.sources"):
        assert list(view.namespaces) == ["a", "b", "b"]
    steps = [Step(role="user", source="x"), Step(role="tool", source="y")]
    assert list(MemoryView.from_steps(steps, np.eye(2)).sources) == ["x", "y"]


def test_read_messages_source_and_deprecated_namespace() -> None:
    new = read_messages(LOG, source="ep", prefix_namespace=True)
    assert {s.source for s in new} == {"ep"}
    assert all(e.startswith("ep::") for s in new for e in s.entities)
    assert new[0].subgoal == "ep:sg1"
    with pytest.warns(DeprecationWarning, match="source="):
        old = read_messages(LOG, namespace="ep", prefix_namespace=True)
    assert old == new
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="not both"):
        read_messages(LOG, source="a", namespace="b")
