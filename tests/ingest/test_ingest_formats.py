"""Agent logs in each supported format become the same canonical steps; nothing is
dropped silently (hand-written fixtures in examples/logs/)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from osumem.errors import ConfigError
from osumem.ingest import (
    LogFormatError,
    detect_format,
    normalize_messages,
    read_logs,
    read_messages,
)
from osumem.ingest.toolbench import read_toolbench
from osumem.ingest.toolbench_dfs import DEEPEST_PATH_NOTE

LOGS = Path(__file__).resolve().parents[2] / "examples" / "logs"

#: The steps of the flight-booking fixture: written out, not computed.
SEARCH = (
    'call: search_flights({"date":"2024-05-01","destination":"JFK","origin":"SFO"})\n'
    'result: [{"flight": "UA100", "price": 220}, {"flight": "DL200", "price": 180}]'
)
BOOK = 'call: book_flight({"flight":"DL200"})\nresult: {"confirmation": "XK42"}'
EXPECTED = [
    ("user", "user: Book the cheapest flight from SFO to JFK on 2024-05-01."),
    ("assistant", "assistant: Let me search."),
    ("tool", SEARCH),
    ("tool", BOOK),
    ("assistant", "assistant: Booked DL200, confirmation XK42."),
]


def steps_of(name: str, fmt: str = "auto"):
    (log,) = read_logs(LOGS / name, fmt)
    return log, read_messages(log.messages, source="ep")


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("openai.json", "openai"),
        ("openai_legacy.json", "openai-legacy"),
        ("anthropic.json", "anthropic"),
    ],
)
def test_each_format_ingests_into_the_expected_steps(name: str, fmt: str) -> None:
    log, steps = steps_of(name)
    assert log.format == fmt  # auto-detected
    assert [(s.role, s.text) for s in steps] == EXPECTED
    assert steps[2].entities == {"SFO", "JFK", "2024-05-01"}
    assert steps[2].tool_signature == "search_flights(date,destination,origin)"
    assert steps[3].entities == {"DL200"}
    # the explicit override reads the same
    _, again = steps_of(name, fmt)
    assert [s.text for s in again] == [s.text for s in steps]


def test_legacy_call_with_null_content_is_a_step_not_dropped() -> None:
    # regression: an assistant `function_call` with content null gave no step at all
    log = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        },
        {"role": "function", "name": "get_weather", "content": "18C, cloudy"},
    ]
    steps = read_messages(normalize_messages(log).messages)
    assert [s.text for s in steps] == [
        "user: weather in Paris?",
        'call: get_weather({"city":"Paris"})\nresult: 18C, cloudy',
    ]
    # the strict OpenAI reader refuses the legacy shape instead of dropping it
    with pytest.raises(LogFormatError, match=r"messages\[1\].*legacy"):
        read_messages(log)
    with pytest.raises(LogFormatError, match=r"messages\[1\].*openai-legacy"):
        normalize_messages(log, "openai")


def test_legacy_call_and_response_in_separate_batches_still_pair() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "lookup", "arguments": '{"id": "A1"}'},
    }
    first = normalize_messages([{"role": "user", "content": "find A1"}, call]).messages
    second = normalize_messages(
        [{"role": "function", "name": "lookup", "content": "found"}], "openai-legacy"
    ).messages
    steps = read_messages([*first, *second])
    assert steps[1].text == 'call: lookup({"id":"A1"})\nresult: found'


def test_legacy_function_message_without_a_call_is_an_error() -> None:
    with pytest.raises(LogFormatError, match=r"messages\[0\].*no 'name'"):
        normalize_messages([{"role": "function", "content": "x"}], "openai-legacy")


def test_anthropic_blocks_that_are_no_step_are_counted() -> None:
    log, _ = steps_of("anthropic.json")
    assert log.skip_counts() == {
        "system prompt (not a step)": 1,
        "thinking block (reasoning, not a step)": 1,
    }
    (thinking,) = [s for s in log.skipped if s.reason.startswith("thinking")]
    assert thinking.index == 1 and thinking.where.endswith("messages[1].content[0]")


def test_anthropic_error_results_and_images() -> None:
    log = {
        "messages": [
            {"role": "user", "content": [{"type": "image", "source": {}}, "x"]},
        ]
    }
    with pytest.raises(LogFormatError, match=r"content\[1\]: expected a content block"):
        normalize_messages(log, "anthropic")
    log = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": "bb"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True}],
        },
    ]
    out = normalize_messages(log)
    assert out.format == "anthropic"
    assert out.skip_counts() == {"non-text block 'image'": 1}
    steps = read_messages(out.messages)
    assert [s.text for s in steps] == ["user: hi", 'call: f({"a":"bb"})\nresult: error: ']


def test_anthropic_tool_use_without_id_is_an_error() -> None:
    log = [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]
    with pytest.raises(LogFormatError, match=r"messages\[0\]\.content\[0\].*'id'"):
        normalize_messages(log)


def test_anthropic_blocks_given_to_the_openai_reader_are_an_error() -> None:
    log = [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}]
    with pytest.raises(LogFormatError, match="another log format"):
        read_messages(log)


def test_a_message_that_maps_to_nothing_is_reported() -> None:
    log = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
    ]
    out = normalize_messages(log)
    assert [(s.index, s.reason) for s in out.skipped] == [
        (1, "empty assistant message"),
        (2, "empty assistant message"),
    ]
    assert len(read_messages(out.messages)) == 1  # the user turn only: two counted skips


def test_dfs_reads_the_last_train_messages_list() -> None:
    log, steps = steps_of("toolbench_dfs.json")
    assert log.format == "toolbench-dfs"
    assert [s.role for s in steps] == ["user", "assistant", "tool", "tool", "tool"]
    assert steps[1].text == "assistant: Thought: search first."
    assert steps[2].tool_action == "search_flights_for_skyapi"
    assert steps[2].entities == {"SFO", "JFK", "2024-05-01"}
    assert steps[3].text.endswith(
        """result: {"error": "", "response": "{'confirmation': 'XK42'}"}"""
    )
    finish = steps[4]
    assert finish.tool_action == "Finish"
    assert finish.entities == frozenset() and finish.tool_signature == ""


def test_dfs_without_train_messages_reads_the_winning_tree_path() -> None:
    log, steps = steps_of("toolbench_dfs_tree.json")
    assert log.format == "toolbench-dfs"
    texts = [s.text for s in steps]
    assert texts[:2] == [
        "user: Book the cheapest flight from SFO to JFK on 2024-05-01.",
        "assistant: Search first.",
    ]
    # the pruned branch (booking UA100) is not on the winning path
    assert [s.arguments for s in steps[2:]] == [
        {"origin": "SFO", "destination": "JFK", "date": "2024-05-01"},
        {"flight": "DL200"},
        {"return_type": "give_answer", "final_answer": "Booked DL200, confirmation XK42."},
    ]
    assert "UA100" not in {e for s in steps for e in s.entities}


def test_dfs_without_a_winning_path_reads_its_deepest_explored_path() -> None:
    """A failed search is still memory: without a winning leaf (and without
    train_messages) the deepest explored path is read, and the log says so."""
    record = json.loads((LOGS / "toolbench_dfs_tree.json").read_text())
    record["tree"]["tree"]["children"][0]["children"][0]["children"][0]["children"].pop()
    log = normalize_messages(record)
    steps = read_messages(log.messages)
    assert [s.arguments for s in steps[2:]] == [
        {"origin": "SFO", "destination": "JFK", "date": "2024-05-01"},
        {"flight": "UA100"},  # the only branch left: explored, then pruned
    ]
    assert [(s.index, s.where, s.reason) for s in log.skipped] == [
        (-1, "messages.tree", DEEPEST_PATH_NOTE)
    ]
    # two failed branches: the deeper one is read, the first of equal depth otherwise
    search = record["tree"]["tree"]["children"][0]["children"][0]["children"][0]
    shallow = {"node_type": "Action", "description": "cancel_for_skyapi", "children": []}
    search["children"].insert(0, shallow)
    steps = read_messages(normalize_messages(record).messages)
    assert steps[-1].arguments == {"flight": "UA100"}
    empty = {"answer_generation": {"query": "q"}, "tree": {"tree": {"children": []}}}
    with pytest.raises(LogFormatError, match="explored nothing"):
        normalize_messages(empty)


def test_format_detection_and_bad_formats() -> None:
    assert detect_format([{"role": "user", "content": "x"}]) == "openai"
    assert detect_format({"system": "s", "messages": []}) == "anthropic"
    assert detect_format([{"role": "function", "name": "f", "content": ""}]) == "openai-legacy"
    mixed = [
        {"role": "tool", "tool_call_id": "a", "content": ""},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
    ]
    with pytest.raises(LogFormatError, match="mixes"):
        normalize_messages(mixed)
    with pytest.raises(ConfigError, match="format must be one of"):
        normalize_messages([], "gemini")


def test_toolbench_reader_takes_any_file_name_and_finish_has_no_entities(tmp_path) -> None:
    record = {
        "query": "q",
        "available_tools": [{"name": "f_for_api", "parameters": {"properties": {"x": {}}}}],
        "answer": {
            "answer_details": [
                {
                    "role": "tool",
                    "message": "{'name': 'f_for_api', 'arguments': '{\"x\": \"AAPL\"}', 'r",
                    "next": [
                        {
                            "role": "tool",
                            "message": "{'name': 'Finish', 'arguments': "
                            '\'{"return_type": "give_answer"}\', \'r',
                            "next": [],
                        }
                    ],
                }
            ]
        },
    }
    (tmp_path / "my_run.json").write_text(json.dumps({"7": record}))
    (tmp_path / "notes.json").write_text(json.dumps({"other": "shape"}))
    with pytest.warns(UserWarning, match=r"left out: notes\.json"):
        (rec,) = read_toolbench(tmp_path)
    assert rec.split == "my_run"
    assert [s.entities for s in rec.steps] == [frozenset({"AAPL"}), frozenset()]


def test_cli_ingest_each_format(tmp_path) -> None:
    from osumem.cli import main

    runner = CliRunner()
    for name in ("openai_legacy.json", "anthropic.json", "toolbench_dfs.json"):
        store = tmp_path / f"{name}.db"
        res = runner.invoke(
            main,
            ["ingest", str(LOGS / name), "--store", str(store), "--encoder", "hashing", "--json"],
        )
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["steps_added"] == 5
    # an explicit wrong format is a one-line error, and nothing half-written
    bad = tmp_path / "legacy.json"
    shutil.copy(LOGS / "openai_legacy.json", bad)
    res = runner.invoke(
        main,
        ["ingest", str(bad), "--store", str(tmp_path / "x.db"), "--format", "anthropic"],
    )
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "not Anthropic" in res.stderr
    assert not (tmp_path / "x.db").exists()  # the log is read before the store opens
