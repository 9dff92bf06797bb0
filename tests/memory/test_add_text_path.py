"""``Memory.add(text)`` reads a plain turn without the chat reader; what it stores is
exactly what ``add_messages([{"role": role, "content": text}])`` stores (every column,
the embedding bytes, the held messages, the digests) and what it refuses, it refuses
with the same error, whatever came before in the namespace (held tool calls of this
source or another, earlier turns, other namespaces)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_memory_add_path import ANSWER, CALL

from osumem.memory import Memory

LIMIT = 60  # max_text_chars: texts near it take both sides of the length check

texts = st.one_of(
    # a blank text is refused by add and stored by add_messages (test below)
    st.text(min_size=1, max_size=70).filter(str.strip),
    st.sampled_from(
        ["  padded  ", "line\nbreak", "tab\there", "\ud800 lone surrogate", "é" * 54, "x" * 55]
    ),
)
# (kind, value): a text turn, a held call, its answer, a turn of another source
actions = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["user", "assistant"]), texts),
        st.just(("call", "")),
        st.just(("answer", "")),
        st.tuples(st.just("other"), texts),
    ),
    min_size=1,
    max_size=8,
)


def _stored(mem: Memory) -> list[Any]:
    out: list[Any] = []
    for ns in sorted(mem.store.namespaces()):
        data = mem.store.load(ns)
        v = data.view
        cols = [
            v.roles,
            v.texts,
            v.tool_actions,
            v.tool_signatures,
            v.subgoals,
            v.sources,
            v.costs,
            data.arguments,
        ]
        out.append((ns, [list(map(str, c)) for c in cols], [sorted(e) for e in v.entities]))
        out.append(np.ascontiguousarray(v.embeddings).tobytes())
        out.append((data.batch_ends, mem.store.pending_with_sources(ns), mem.store.digests(ns)))
    return out


def _run(mem: Memory, steps: list[tuple[str, str]], via_add: bool) -> list[Any]:
    """Apply ``steps``; each outcome is the ids returned or the error raised."""
    outcomes: list[Any] = []
    for kind, value in steps:
        try:
            if kind in ("user", "assistant"):
                if via_add:
                    got = mem.add(value, namespace="a", role=kind, time=1.0)
                else:
                    got = mem.add_messages(
                        [{"role": kind, "content": value}], namespace="a", time=1.0
                    )
            elif kind == "call":
                got = mem.add_messages([CALL], namespace="a", log_id=None, on_duplicate="append")
            elif kind == "answer":
                got = mem.add_messages([ANSWER], namespace="a", on_duplicate="append")
            else:
                got = mem.add(value, namespace="a", source="other", time=1.0)
            outcomes.append(got)
        except Exception as exc:  # the same refusal on both sides
            outcomes.append((type(exc).__name__, str(exc)))
    return outcomes


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=actions)
def test_add_stores_what_add_messages_stores(tmp_path_factory: Any, steps: Any) -> None:
    base = tmp_path_factory.mktemp("text")
    results = []
    for via_add in (True, False):
        with Memory.open(base / f"{via_add}.db", encoder="hashing", max_text_chars=LIMIT) as mem:
            outcomes = _run(mem, steps, via_add)
            results.append((outcomes, _stored(mem)))
    assert results[0] == results[1]


def test_the_text_path_is_taken_and_skips_the_chat_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain turn with nothing held is read directly; with a call held for its
    source, or a text the checks refuse, the general path answers."""
    import osumem.ingest.openai_chat as chat

    calls = []
    real = chat.read_messages
    monkeypatch.setattr(chat, "read_messages", lambda *a, **k: calls.append(1) or real(*a, **k))
    with Memory.open(tmp_path / "m.db", encoder="hashing", max_text_chars=LIMIT) as mem:
        mem.add("book the aisle seat", namespace="a")
        assert calls == []
        mem.add_messages([CALL], namespace="a")  # held: the next turn joins it
        n = len(calls)
        mem.add("and a window for P2", namespace="a")
        assert len(calls) > n
        n = len(calls)
        with pytest.raises(Exception, match="max_text_chars"):
            mem.add("x" * LIMIT, namespace="b")
        assert len(calls) >= n


@pytest.mark.parametrize("blank", ["\r", " ", "\n\t "])
def test_add_refuses_a_blank_text_and_stores_nothing(tmp_path: Path, blank: str) -> None:
    """``add`` takes a turn of text: a blank one is refused (``add_messages`` stores a
    message of any content as the chat reader reads it)."""
    from osumem.errors import InvalidInputError

    with Memory.open(tmp_path / "m.db", encoder="hashing") as mem:
        mem.add("first", namespace="a")
        before = _stored(mem)
        with pytest.raises(InvalidInputError, match="non-empty text"):
            mem.add(blank, namespace="a")
        assert _stored(mem) == before
