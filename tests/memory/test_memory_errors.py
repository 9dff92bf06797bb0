"""Every bad input is rejected with a typed error naming what and where, and leaves
the store byte-for-byte unchanged (same content hash)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from conftest import tool_call_log
from osumem.embed import HashingEncoder
from osumem.errors import (
    BudgetError,
    ConfigError,
    DimensionError,
    InvalidInputError,
    NonFiniteError,
    UnknownMethodError,
)
from osumem.frozen import FrozenConfig
from osumem.ingest.openai_chat import LogFormatError
from osumem.memory import (
    IncompatibleStoreError,
    Memory,
    MemoryConfig,
    OversizedInputError,
    open_store,
)
from osumem.types import Step

ENC = HashingEncoder(32)

GOOD = tool_call_log("cancel reservation ABC123", "cancel", "cancelled", reservation_id="ABC123")


@pytest.fixture
def mem(tmp_path):
    m = Memory.open(tmp_path / "mem.db", encoder=ENC, max_text_chars=500)
    m.add_messages(GOOD)
    m.add_messages([{"role": "user", "content": "and then?"}], namespace="other")
    yield m
    m.close()


BAD_MESSAGES = [
    # (messages, error type, text the message must contain)
    ("not a list", InvalidInputError, "expected a list"),
    ([{"role": "user", "content": "ok"}, "oops"], LogFormatError, "messages[1]"),
    ([{"content": "no role"}], LogFormatError, "messages[0]: message has no 'role'"),
    ([{"role": "wizard", "content": "x"}], LogFormatError, "unknown role 'wizard'"),
    ([{"role": "user", "content": "bad \ud800 text"}], InvalidInputError, "not valid Unicode"),
    (
        [{"role": "tool", "tool_call_id": "zz", "content": "x"}],
        LogFormatError,
        "messages[0]: tool message without a matching tool_call_id ('zz')",
    ),
    (
        [{"role": "user", "content": "fine"}, {"role": "user", "content": "y" * 501}],
        OversizedInputError,
        "messages[1].content: 501 characters",
    ),
    (
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "k",
                        "function": {"name": "f", "arguments": json.dumps({"a": "z" * 600})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "k", "content": "ok"},
        ],
        OversizedInputError,
        "characters; max_text_chars is 500",
    ),
    (
        [{"role": "assistant", "tool_calls": [{"id": "k", "function": {"arguments": "{}"}}]}],
        LogFormatError,
        "messages[0].tool_calls[0]: tool call has no function name",
    ),
    (
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "k", "function": {"name": "f", "arguments": "{"}}],
            }
        ],
        LogFormatError,
        "arguments are not valid JSON",
    ),
]


@pytest.mark.parametrize("messages,error,text", BAD_MESSAGES)
def test_bad_messages_rejected_store_unchanged(mem, messages, error, text):
    h = mem.store.content_hash()
    n = mem.n_steps()
    with pytest.raises(error) as info:
        mem.add_messages(messages)
    assert text in str(info.value)
    assert mem.store.content_hash() == h and mem.n_steps() == n
    assert mem.view().n == n  # the live view did not move either
    mem.check()


def _steps(k: int = 2) -> list[Step]:
    return [Step(role="tool", text=f"step {i}", cost=4) for i in range(k)]


BAD_STEPS = [
    (lambda: (["not a step"], None), InvalidInputError, "steps[0]: expected a Step"),
    (lambda: ([Step(role="", text="x")], None), InvalidInputError, "steps[0]: role"),
    (
        lambda: ([*_steps(), Step(role="user", text="x", cost=0)], None),
        InvalidInputError,
        "steps[2]: cost",
    ),
    (
        lambda: ([Step(role="user", text="w" * 501)], None),
        OversizedInputError,
        "steps[0]: text has 501",
    ),
    (
        lambda: ([Step(role="tool", text="x", arguments={"f": object()})], None),
        InvalidInputError,
        "steps[0]: arguments are not JSON",
    ),
    (
        lambda: (_steps(), np.ones((2, 31))),
        DimensionError,
        "dimension 31, the memory store holds dimension 32",
    ),
    (lambda: ([Step(role="user", text="x\ud800")], None), InvalidInputError, "not valid Unicode"),
    (
        lambda: ([Step(role="user", text="x", cost=2**40)], None),
        InvalidInputError,
        "exceeds the maximum",
    ),
    (
        lambda: ([Step(role="tool", text="x", arguments={"v": float("nan")})], None),
        InvalidInputError,
        "arguments are not JSON",
    ),
    (lambda: (_steps(), np.ones((3, 32))), DimensionError, "expected shape (2, d)"),
    (lambda: (_steps(), np.full((2, 32), np.nan)), NonFiniteError, "row 0"),
]


@pytest.mark.parametrize("make,error,text", BAD_STEPS)
def test_bad_steps_rejected_store_unchanged(mem, make, error, text):
    steps, emb = make()
    h = mem.store.content_hash()
    with pytest.raises(error) as info:
        mem.add_steps(steps, embeddings=emb)
    assert text in str(info.value)
    assert mem.store.content_hash() == h


def test_bad_queries_and_settings(mem):
    h = mem.store.content_hash()
    with pytest.raises(DimensionError, match="dimension 5, the memory store has 32"):
        mem.retrieve(np.ones(5), 64)
    with pytest.raises(BudgetError):
        mem.retrieve("x", 0)
    with pytest.raises(InvalidInputError, match="before"):
        mem.retrieve("x", 64, before=-1)
    with pytest.raises(InvalidInputError, match="namespace"):
        mem.add_messages(GOOD, namespace="")
    assert mem.store.content_hash() == h
    with pytest.raises(UnknownMethodError):
        Memory.open(encoder=ENC, method="nope")
    with pytest.raises(ConfigError):
        Memory.open(encoder=ENC, params={"no_such_param": 1})


def test_memory_config_is_a_frozen_config_with_the_error_types_callers_catch():
    """Every bad setting is a typed error naming its field: a budget a BudgetError
    (as every budget check), max_text_chars and ann_min_steps one ConfigError naming
    both (an InvalidInputError, as before), a method an UnknownMethodError; replace,
    with_strings and to_dict come from FrozenConfig."""
    for bad in (0, -1, 1.5, True, "256"):
        with pytest.raises(BudgetError, match="budget must be a positive integer"):
            MemoryConfig(budget=bad)
    with pytest.raises(InvalidInputError) as info:
        MemoryConfig(max_text_chars=0, ann_min_steps=1.5)
    assert type(info.value) is ConfigError
    assert str(info.value) == (
        "MemoryConfig: max_text_chars must be >= 1, got 0; "
        "ann_min_steps must be an integer >= 1, got 1.5"
    )
    with pytest.raises(ConfigError, match="max_text_chars must be an integer >= 1, got 'x'"):
        MemoryConfig(max_text_chars="x")
    with pytest.raises(UnknownMethodError, match="nope"):
        MemoryConfig(method="nope")
    with pytest.raises(ConfigError, match="no_such_param"):
        MemoryConfig(params={"no_such_param": 1})
    cfg = MemoryConfig(method="flat")
    assert isinstance(cfg, FrozenConfig) and cfg == MemoryConfig(method="flat")
    assert cfg.replace(budget=64).budget == 64 and cfg.budget == 256
    with pytest.raises(ConfigError, match="unknown parameter"):
        cfg.replace(no_such_field=1)
    with pytest.raises(BudgetError):
        cfg.replace(budget=0)
    got = cfg.with_strings({"budget": "128", "prefix_namespace": "true", "ann_min_steps": "9"})
    assert (got.budget, got.prefix_namespace, got.ann_min_steps) == (128, True, 9)
    plain = json.loads(json.dumps(cfg.to_dict()))
    assert plain["method"] == "flat" and plain["boilerplate"] == sorted(cfg.boilerplate)


def test_incompatible_stores(tmp_path, mem):
    path = mem.store.path
    mem.close()
    with pytest.raises(IncompatibleStoreError, match="made with encoder 'hashing:d32:n1'"):
        Memory.open(path, encoder=HashingEncoder(64))
    con = sqlite3.connect(path)
    h = _file_hash(con)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    with pytest.raises(IncompatibleStoreError, match="schema version 99"):
        Memory.open(path)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(IncompatibleStoreError, match="not an osumem memory store"):
        open_store(other)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"definitely not sqlite" * 100)
    with pytest.raises(IncompatibleStoreError, match="not a readable SQLite database"):
        open_store(junk)
    assert junk.read_bytes() == b"definitely not sqlite" * 100
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.commit()
    assert _file_hash(con) == h


def _file_hash(con: sqlite3.Connection) -> list:
    return [
        con.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
        for t in ("meta", "steps", "batches", "pending")
    ]
