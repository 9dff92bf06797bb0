"""Annotation rules (SPEC §3): entities, tool signatures, namespace prefixes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from osumem.annotate import (
    DEFAULT_BOILERPLATE,
    extract_entities,
    prefix,
    prefix_entities,
    tool_signature,
)


def test_entity_length_bounds_2_to_80() -> None:
    args = {"a": "x", "b": "ab", "c": "y" * 80, "d": "z" * 81, "e": "  pad  "}
    assert extract_entities(args) == frozenset({"ab", "y" * 80, "pad"})


def test_numbers_become_strings_booleans_and_none_do_not() -> None:
    args = {"amount": 250, "ratio": 0.5, "flag": True, "none": None, "nan": float("nan")}
    assert extract_entities(args) == frozenset({"250", "0.5"})


def test_nested_dicts_and_lists_are_walked_keys_are_not_entities() -> None:
    args = {
        "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}],
        "passengers": [{"first_name": "Mia", "dob": "1990-04-05"}],
        "payment": {"method": {"id": "credit_card_4421486"}},
    }
    assert extract_entities(args) == frozenset(
        {"HAT136", "2024-05-20", "Mia", "1990-04-05", "credit_card_4421486"}
    )


def test_tool_signature_sorted_keys_and_boilerplate() -> None:
    assert tool_signature("search", {"origin": 1, "date": 2}) == "search(date,origin)"
    assert tool_signature("search", None) == "search()"
    assert tool_signature("", {"a": 1}) == ""
    assert tool_signature("Think", {"thought": "x"}) == ""  # case-insensitive
    assert "think" in DEFAULT_BOILERPLATE
    assert tool_signature("think", {}, boilerplate=()) == "think()"


def test_prefix() -> None:
    assert prefix("ep7", "JFK") == "ep7::JFK"
    assert prefix("", "JFK") == "JFK"
    assert prefix("ep7", "") == ""
    assert prefix_entities("a", ["x", "y"]) == frozenset({"a::x", "a::y"})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=100),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_entities_are_always_short_stripped_strings(value) -> None:
    for e in extract_entities(value):
        assert 2 <= len(e) <= 80 or e.lstrip("-").isdigit()
        assert e == e.strip()
