"""The OpenAI-format chat reader on small hand-written logs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from osumem.embed import HashingEncoder
from osumem.errors import DataFileError, InvalidInputError
from osumem.ingest import LogFormatError, read_log, read_messages, steps_to_view


def call(cid: str, name: str, args: dict | str) -> dict:
    raw = args if isinstance(args, str) else json.dumps(args)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": raw}}


LOG = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "Cancel reservation ABC123 please."},
    {
        "role": "assistant",
        "content": "Let me look it up.",
        "tool_calls": [
            call("c1", "get_reservation_details", {"reservation_id": "ABC123"}),
            call("c2", "think", {"thought": "check policy"}),
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "get_reservation_details", "content": "{}"},
    {"role": "tool", "tool_call_id": "c2", "content": ""},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [call("c3", "cancel_reservation", {"reservation_id": "ABC123"})],
    },
    {"role": "tool", "tool_call_id": "c3", "content": "Error: reservation not found"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    {"role": "assistant", "content": "Done."},
]


def test_steps_roles_and_order() -> None:
    steps = read_messages(LOG, source="ep1")
    assert [s.role for s in steps] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "user",
        "assistant",
    ]
    assert steps[0].text == "user: Cancel reservation ABC123 please."
    assert steps[1].text == "assistant: Let me look it up."
    assert steps[5].text == "user: Thanks"  # content parts joined


def test_multiple_tool_calls_in_one_message_each_get_their_observation() -> None:
    steps = read_messages(LOG, source="ep1")
    get, think = steps[2], steps[3]
    assert get.text == 'call: get_reservation_details({"reservation_id":"ABC123"})\nresult: {}'
    assert get.tool_action == "get_reservation_details"
    assert get.tool_signature == "get_reservation_details(reservation_id)"
    assert get.entities == frozenset({"ABC123"})
    assert think.tool_action == "think" and think.tool_signature == ""  # boilerplate
    assert think.text.endswith("\nresult: ")


def test_tool_error_is_an_observation() -> None:
    cancel = read_messages(LOG)[4]
    assert cancel.text.endswith("result: Error: reservation not found")
    assert cancel.entities == frozenset({"ABC123"})


def test_subgoals_are_segments_between_user_turns() -> None:
    steps = read_messages(LOG, source="ep1")
    assert [s.subgoal for s in steps] == ["ep1:sg1"] * 5 + ["ep1:sg2"] * 2
    pre = read_messages([{"role": "assistant", "content": "Hi"}, {"role": "user", "content": "x"}])
    assert [s.subgoal for s in pre] == ["sg0", "sg1"]
    explicit = read_messages([{"role": "user", "content": "x", "subgoal": "book"}])
    assert explicit[0].subgoal == "book"


def test_namespace_prefixing() -> None:
    plain = read_messages(LOG, source="ep1")
    pref = read_messages(LOG, source="ep1", prefix_namespace=True)
    assert pref[2].entities == frozenset({"ep1::ABC123"})
    assert pref[2].tool_signature == "ep1::get_reservation_details(reservation_id)"
    assert pref[3].tool_signature == ""  # boilerplate stays empty
    assert all(s.source == "ep1" for s in plain)
    assert plain[2].tool_signature == "get_reservation_details(reservation_id)"


def test_configurable_boilerplate() -> None:
    steps = read_messages(LOG, boilerplate={"get_reservation_details"})
    assert steps[2].tool_signature == ""
    assert steps[3].tool_signature == "think(thought)"


def test_reused_call_id_answers_oldest_open_call() -> None:
    log = [
        {"role": "assistant", "tool_calls": [call("x", "a", {})]},
        {"role": "tool", "tool_call_id": "x", "content": "one"},
        {"role": "assistant", "tool_calls": [call("x", "b", {})]},
        {"role": "tool", "tool_call_id": "x", "content": "two"},
    ]
    assert [s.text for s in read_messages(log)] == [
        "call: a({})\nresult: one",
        "call: b({})\nresult: two",
    ]


def test_call_without_response_has_no_result_line() -> None:
    steps = read_messages([{"role": "assistant", "tool_calls": [call("c", "f", {"k": 1})]}])
    assert steps[0].text == 'call: f({"k":1})' and steps[0].entities == frozenset({"1"})


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (
            {"role": "tool", "tool_call_id": "nope", "content": "x"},
            r"messages\[1\]: tool message without a matching tool_call_id",
        ),
        ({"role": "robot", "content": "x"}, r"messages\[1\]: unknown role 'robot'"),
        ({"content": "x"}, r"messages\[1\]: message has no 'role'"),
        ({"role": "user"}, r"messages\[1\]: user message has no 'content'"),
        ({"role": "assistant"}, r"messages\[1\]: assistant message has neither"),
        ("hello", r"messages\[1\]: expected a message object"),
        (
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]},
            r"messages\[1\]\.tool_calls\[0\]: tool call has no function name",
        ),
        (
            {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
            r"messages\[1\]\.tool_calls\[0\]: tool call 'f' has no 'id'",
        ),
        (
            {"role": "assistant", "tool_calls": [call("c", "f", "{not json")]},
            r"messages\[1\]\.tool_calls\[0\]: arguments are not valid JSON",
        ),
        (
            {"role": "assistant", "tool_calls": [call("c", "f", "[1, 2]")]},
            r"arguments must be a JSON object",
        ),
    ],
)
def test_malformed_messages_name_the_index(bad, match) -> None:
    log = [{"role": "user", "content": "hi"}, bad]
    with pytest.raises(LogFormatError, match=match):
        read_messages(log)
    assert issubclass(LogFormatError, InvalidInputError)


def test_second_response_to_one_call_is_rejected() -> None:
    log = [
        {"role": "assistant", "tool_calls": [call("c", "f", {})]},
        {"role": "tool", "tool_call_id": "c", "content": "a"},
        {"role": "tool", "tool_call_id": "c", "content": "b"},
    ]
    with pytest.raises(LogFormatError, match=r"log\.json\[2\]: tool message without a matching"):
        read_messages(log, where="log.json")


def test_steps_to_view_uses_encoder_costs_and_embeddings() -> None:
    steps = read_messages(LOG, source="ep1", prefix_namespace=True)
    enc = HashingEncoder(32)
    view = steps_to_view(steps, enc)
    assert view.n == 7 and view.dim == 32
    # "user: Cancel reservation ABC123 please." -> 5 word tokens
    assert view.costs[0] == 5
    np.testing.assert_array_equal(view.costs, enc.count_tokens([s.text for s in steps]))
    np.testing.assert_allclose(view.embeddings, enc.encode([s.text for s in steps]), atol=1e-6)
    assert view.entities[2] == frozenset({"ep1::ABC123"})
    assert steps_to_view([], enc).n == 0


def test_read_log_shapes(tmp_path) -> None:
    one = tmp_path / "one.json"
    one.write_text(json.dumps(LOG))
    assert read_log(one) == [LOG]
    wrapped = tmp_path / "many.json"
    wrapped.write_text(json.dumps([{"messages": LOG}, {"traj": LOG[:2]}]))
    assert [len(x) for x in read_log(wrapped)] == [len(LOG), 2]
    lines = tmp_path / "logs.jsonl"
    lines.write_text(json.dumps({"messages": LOG}) + "\n\n" + json.dumps(LOG[:3]) + "\n")
    assert [len(x) for x in read_log(lines)] == [len(LOG), 3]
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(LogFormatError, match=r"bad\.json: invalid JSON"):
        read_log(bad)
    with pytest.raises(DataFileError):
        read_log(tmp_path / "missing.json")


def test_observation_cut_to_max_chars_with_marker() -> None:
    from osumem.errors import ConfigError
    from osumem.ingest.openai_chat import CUT_MARKER

    whole = read_messages(LOG, source="ep1")
    cut = read_messages(LOG, source="ep1", max_observation_chars=5)
    by_call = {s.tool_action: s.text for s in cut if s.tool_action}
    # "Error: reservation not found" (28 chars) is cut to "Error" + marker
    assert by_call["cancel_reservation"].endswith("\nresult: Error" + CUT_MARKER)
    assert by_call["get_reservation_details"].endswith("\nresult: {}")  # fits: unchanged
    assert [s.text for s in whole if s.tool_action == "cancel_reservation"] == [
        'call: cancel_reservation({"reservation_id":"ABC123"})\n'
        "result: Error: reservation not found"
    ]
    # non-tool steps and annotations are untouched by the cut
    assert [s.text for s in whole if not s.tool_action] == [
        s.text for s in cut if not s.tool_action
    ]
    assert [s.entities for s in whole] == [s.entities for s in cut]
    for bad in (-1, 2.5, True):
        with pytest.raises(ConfigError, match="max_observation_chars"):
            read_messages(LOG, max_observation_chars=bad)
