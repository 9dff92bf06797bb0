"""Renamed names keep working for one release: a step's origin is ``source`` (the old
``namespace`` spelling warns), the encoder is ``encoder`` everywhere (old spellings
warn or are hidden aliases), and stores written under the old names still open."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from conftest import tool_call_log
from osumem.cli import main
from osumem.embed import CachedEncoder, Encoder, HashingEncoder
from osumem.errors import ConfigError, InvalidInputError
from osumem.ingest.openai_chat import read_messages
from osumem.memory import Memory
from osumem.types import MemoryView, Step

LOG = tool_call_log("Book flight AB123", "book", "booked", flight="AB123")


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


# --- the encoder: one word -----------------------------------------------------------


def test_encoders_name_themselves_encoder_id() -> None:
    enc = HashingEncoder(16)
    assert enc.encoder_id == "hashing:d16:n1" and isinstance(enc, Encoder)
    with pytest.warns(DeprecationWarning, match="encoder_id"):
        assert enc.model_id == enc.encoder_id


class _OldEncoder:
    """An encoder written for an earlier release: it names itself ``model_id``."""

    def __init__(self) -> None:
        self.inner = HashingEncoder(16)
        self.model_id = "custom:old"
        self.dim = 16

    def encode(self, texts):
        return self.inner.encode(texts)

    def count_tokens(self, texts):
        return self.inner.count_tokens(texts)


def test_an_encoder_of_an_earlier_release_still_works(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="encoder_id"):
        mem = Memory.open(tmp_path / "m.db", encoder=_OldEncoder())
    with mem:
        mem.add_messages(LOG, namespace="t")
        assert mem.store.encoder_id == "custom:old"
        assert mem.retrieve("flight AB123", 64, namespace="t").steps
    with pytest.warns(DeprecationWarning, match="encoder_id"):
        cached = CachedEncoder(_OldEncoder(), tmp_path / "cache.db")  # type: ignore[arg-type]
    with cached:
        assert cached.encoder_id == "custom:old"
        np.testing.assert_array_equal(cached.encode(["a b"]), HashingEncoder(16).encode(["a b"]))


def test_store_encoder_id_keeps_its_on_disk_name(tmp_path: Path) -> None:
    """The file keeps the meta row ``model_id`` (stores open both ways between
    releases); the API reads it as ``encoder_id``."""
    path = tmp_path / "m.db"
    with Memory.open(path, encoder="hashing:d32") as mem:
        mem.add_messages(LOG, namespace="t")
    with sqlite3.connect(path) as conn:
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    assert rows["model_id"] == "hashing:d32:n1" and "encoder_id" not in rows
    with Memory.open(path, read_only=True) as mem:
        assert mem.store.encoder_id == "hashing:d32:n1"
        with pytest.warns(DeprecationWarning, match="encoder_id"):
            assert mem.store.model_id == "hashing:d32:n1"


def _ingest(tmp_path: Path, *flags: str) -> Result:
    tmp_path.mkdir()
    log = tmp_path / "log.json"
    log.write_text(json.dumps([{"messages": LOG}]))
    store = tmp_path / "mem.db"
    return CliRunner().invoke(main, ["ingest", str(log), "--store", str(store), *flags, "--json"])


def test_cli_encoder_flag_and_hidden_model_alias(tmp_path: Path) -> None:
    new = _ingest(tmp_path / "a", "--encoder", "hashing:d32")
    assert new.exit_code == 0, new.output
    summary = json.loads(new.stdout)
    assert summary["encoder"] == summary["model"] == "hashing:d32:n1"
    assert "--model" not in new.stderr

    old = _ingest(tmp_path / "b", "--model", "hashing:d32")
    assert old.exit_code == 0, old.output
    assert json.loads(old.stdout)["encoder"] == "hashing:d32:n1"
    assert old.stderr.strip() == "osumem: note: --model is deprecated; use --encoder"

    both = _ingest(tmp_path / "c", "--encoder", "hashing:d32", "--model", "hashing:d64")
    assert both.exit_code == 2 and both.stderr.count("\n") == 1
    assert "--encoder or its old spelling --model" in both.stderr
    assert not (tmp_path / "c" / "mem.db").exists()


@pytest.mark.parametrize("command", [["ingest"], ["serve"], ["bench", "serve"]])
def test_help_shows_encoder_not_model(command: list[str]) -> None:
    text = CliRunner().invoke(main, [*command, "--help"]).output
    assert "--encoder" in text and "--model" not in text
