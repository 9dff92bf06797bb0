"""Malformed messages of any shape get a typed error naming what and where, in every
format: the three shapes fuzzing found (a non-string role, a content part whose
``text`` is not a string, a 4,400-digit integer as text) and random JSON of the same
kind, through ``Memory.add_messages`` and ``normalize_messages``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osumem.errors import InvalidInputError, OSUMemError
from osumem.ingest import FORMATS, normalize_messages
from osumem.memory import Memory

FOUND = [
    ([{"role": ["user"], "content": "x"}], "messages[0].role"),
    ([{"role": "assistant", "content": [{"text": {"n": 1}}]}], "messages[0].content[0].text"),
    ([{"role": "user", "content": [{"type": "text", "text": 10**4400}]}], "messages[0].content[0]"),
]


@pytest.fixture(scope="module")
def memory():
    with Memory.open(None, encoder="hashing:d32") as mem:
        yield mem


@pytest.mark.parametrize("fmt", ["auto", "openai", "openai-legacy", "anthropic"])
@pytest.mark.parametrize(("messages", "where"), FOUND)
def test_found_shapes_are_typed_errors_naming_the_field(memory, messages, where, fmt):
    with pytest.raises(InvalidInputError) as caught:
        memory.add_messages(messages, namespace="fuzz", format=fmt)
    assert where.split(".")[0] in str(caught.value)
    if fmt != "anthropic":  # the Anthropic reader names the block its own way
        assert where in str(caught.value)
    assert memory.n_steps("fuzz") == 0


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.just(4400).map(lambda digits: 10**digits),  # beyond int-to-text conversion
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["user", "assistant", "tool", "system", "function", "text", "tool_use"]),
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "content",
                    "text",
                    "type",
                    "id",
                    "name",
                    "tool_calls",
                    "function",
                    "arguments",
                    "tool_call_id",
                    "function_call",
                    "input",
                    "tool_use_id",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "assistant", "tool", "system"]), JSONISH)},
    optional={
        "content": JSONISH,
        "tool_calls": JSONISH,
        "tool_call_id": JSONISH,
        "function_call": JSONISH,
        "name": JSONISH,
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.lists(st.one_of(MESSAGE, JSONISH), min_size=1, max_size=3),
    fmt=st.sampled_from([f for f in FORMATS if f != "toolbench-dfs"]),
)
def test_random_messages_never_raise_an_untyped_error(memory, messages, fmt):
    for call in (
        lambda: normalize_messages(messages, fmt),
        lambda: memory.add_messages(messages, namespace="random", format=fmt),
    ):
        try:
            call()
        except OSUMemError as exc:
            assert str(exc) and "\n" not in str(exc)[:200]


@pytest.mark.parametrize(
    "part", [10**4400, [10**4400], {"text": 10**4400}], ids=["int", "list", "text"]
)
def test_assistant_content_part_beyond_int_to_text_is_not_an_untyped_error(part):
    """The empty-assistant check of the reader turned every content part into text; a
    4,400-digit integer raised Python's ValueError there (hypothesis found it)."""
    messages = [{"role": "assistant", "content": [part]}]
    try:
        normalize_messages(messages, "openai")
    except OSUMemError as exc:
        assert "messages[0].content[0]" in str(exc)


def test_a_content_part_of_a_huge_integer_type_is_skipped_and_named():
    # found by the random campaign below: the skip's reason once printed the type with
    # repr(), which refuses an integer of more than 4,300 digits
    log = [
        {"role": "user", "content": [{"type": 10**4400}, {"type": "text", "text": "hi"}]},
    ]
    skips = normalize_messages(log).skipped
    assert [s.where for s in skips] == ["messages[0].content[0]"]
    assert "an integer of" in skips[0].reason
