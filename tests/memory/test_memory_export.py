"""Export to JSON Lines and import back: exact round trip (every method of the registry
answers identically from the rebuilt memory), idempotent import, and every kind of bad
file refused with one typed error naming the line, the store unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest

from osumem.errors import IncompatibleStoreError, UnknownNamespaceError
from osumem.memory import Memory
from osumem.memory.export import (
    ExportFormatError,
    ImportConflictError,
    export_lines,
    import_file,
    read_export,
    write_export,
)
from osumem.retrieve.registry import deployable
from store_fixtures import ENCODER, build, turn

QUERIES = ["which reservation was cancelled?", "flight HAT012", "P3 passenger R2"]


def answers(path, method: str) -> list[list[int]]:
    with Memory.open(path, method=method, read_only=True) as mem:
        return [
            mem.retrieve(q, b, namespace=ns).positions
            for ns in ("trip", "other")
            for q in QUERIES
            for b in (40, 200)
        ]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "src.db"
    build(path)
    return path


@pytest.fixture(scope="module")
def exported(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("export-file") / "mem.jsonl"
    with Memory.open(source, read_only=True) as mem:
        write_export(mem, out)
    return out


def test_round_trip_answers_identically_for_every_method(source, exported, tmp_path):
    target = tmp_path / "copy.db"
    with Memory.open(target) as mem:
        summary = import_file(mem, exported)
    assert summary.outcome == {"other": "imported", "trip": "imported"}
    for method in deployable():  # a memory refuses oracles
        assert answers(target, method) == answers(source, method), method


def test_round_trip_is_exact_and_import_idempotent(source, exported, tmp_path):
    target = tmp_path / "copy.db"
    with Memory.open(target) as mem:
        import_file(mem, exported)
    with Memory.open(target) as mem:
        again = import_file(mem, exported)  # the same file once more: nothing changes
        before = mem.store.content_hash()
        assert again.outcome == {"other": "unchanged", "trip": "unchanged"}
        assert again.steps_written == 0
        assert mem.store.content_hash() == before
        assert mem.held("other") == Memory.open(source, read_only=True).held("other") != []
        assert mem.store.digests("trip") != []
        assert mem.store.encoder_id == "hashing:d64:n1"
        assert list(export_lines(mem)) == exported.read_text().splitlines()  # byte for byte
        assert mem.contains_log(turn(99), namespace="trip")  # the digest came along


def test_export_without_embeddings_encodes_again(source, tmp_path):
    out = tmp_path / "lean.jsonl"
    with Memory.open(source, read_only=True) as mem:
        write_export(mem, out, ["trip"], embeddings=False)
    assert '"embedding"' not in out.read_text()
    target = tmp_path / "lean.db"
    with Memory.open(target) as mem:
        import_file(mem, out)
        assert mem.namespaces() == ["trip"]
    with Memory.open(source, read_only=True) as a, Memory.open(target, read_only=True) as b:
        assert np.array_equal(a.view("trip").embeddings, b.view("trip").embeddings)
        assert a.retrieve("HAT003", 100, namespace="trip") == b.retrieve(
            "HAT003", 100, namespace="trip"
        )


def test_conflicting_namespace_refused_then_replaced(exported, tmp_path):
    target = tmp_path / "busy.db"
    with Memory.open(target, encoder=ENCODER) as mem:
        mem.add_messages(turn(1), namespace="trip")
        before = mem.store.content_hash()
        with pytest.raises(ImportConflictError, match=r"line \d+: namespace 'trip'"):
            import_file(mem, exported)
        assert mem.store.content_hash() == before
        assert mem.n_steps("trip") == 3  # the cached view is still right
        summary = import_file(mem, exported, replace=True)
        assert summary.outcome == {"other": "imported", "trip": "replaced"}
        assert mem.n_steps("trip") == 75  # the memory sees the replaced namespace at once
        assert len(mem.retrieve("R1", 30, namespace="trip")) > 0


def test_unknown_namespace(source, exported, tmp_path):
    missing = pytest.raises(UnknownNamespaceError, match="'nope' is not in memory store")
    with Memory.open(source, read_only=True) as mem, missing:
        list(export_lines(mem, ["nope"]))
    with Memory.open(tmp_path / "t.db") as mem:
        with pytest.raises(UnknownNamespaceError, match="'nope' is not in the file"):
            import_file(mem, exported, namespaces=["nope"])
        assert mem.namespaces() == []


def _bad(exported, tmp_path, edit) -> str:
    lines = exported.read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(edit(lines)))
    target = tmp_path / "target.db"
    with Memory.open(target, encoder=ENCODER) as mem:
        mem.add_messages(turn(3), namespace="keep")
        before = mem.store.content_hash()
        with pytest.raises((ExportFormatError, IncompatibleStoreError)) as info:
            import_file(mem, bad)
        assert mem.store.content_hash() == before  # nothing written
        assert mem.namespaces() == ["keep"]
    message = str(info.value)
    assert "\n" not in message and str(bad) in message
    return message


def test_file_cut_in_half(exported, tmp_path):
    def halve(lines):
        text = "".join(lines)
        return [text[: len(text) // 2]]

    message = _bad(exported, tmp_path, halve)
    assert "line" in message and ("cut short" in message or "ends" in message)


def test_file_cut_at_a_line_end(exported, tmp_path):
    message = _bad(exported, tmp_path, lambda lines: lines[: len(lines) // 2])
    assert f"line {len(exported.read_text().splitlines()) // 2 + 1}:" in message
    assert "cut short" in message


def test_line_that_is_not_an_object(exported, tmp_path):
    message = _bad(exported, tmp_path, lambda lines: [*lines[:5], "[1, 2]\n", *lines[6:]])
    assert "line 6: expected a JSON object, got a list" in message


def test_file_from_another_encoder(exported, tmp_path):
    def other_encoder(lines):
        header = json.loads(lines[0])
        header["encoder"] = "hashing:d32:n1"
        header["dim"] = 32
        return [json.dumps(header) + "\n", *lines[1:]]

    message = _bad(exported, tmp_path, other_encoder)
    assert "line 1:" in message and "hashing:d32:n1" in message


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda o: o.update(position=7), "expected position"),
        (lambda o: o.update(cost=0), "cost must be a positive integer"),
        (lambda o: o.update(embedding="AAAA"), "expected 256"),
        (lambda o: o.update(role=3), "'role': expected str"),
        (lambda o: o.pop("text"), "without 'text'"),
    ],
)
def test_bad_step_line_names_its_line(exported, tmp_path, edit, expected):
    def change(lines):
        obj = json.loads(lines[3])
        edit(obj)
        return [*lines[:3], json.dumps(obj) + "\n", *lines[4:]]

    message = _bad(exported, tmp_path, change)
    assert "line 4" in message and expected in message


def test_read_export_checks_counts():
    header = {
        "kind": "header",
        "format": "osumem-export",
        "version": 1,
        "encoder": "",
        "dim": 0,
        "embeddings": True,
        "namespaces": [],
    }
    ok = [json.dumps(header), json.dumps({"kind": "end", "namespaces": 0, "steps": 0})]
    assert read_export(ok).namespaces == ()
    with pytest.raises(ExportFormatError, match="line 2: end record counts"):
        read_export([ok[0], json.dumps({"kind": "end", "namespaces": 0, "steps": 4})])
    with pytest.raises(ExportFormatError, match="line 1: export format version 9"):
        read_export([json.dumps(header | {"version": 9}), ok[1]])
    with pytest.raises(ExportFormatError, match="line 3: content after the end record"):
        read_export([*ok, "{}"])
