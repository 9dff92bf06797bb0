"""The conformance suite, part two: changing stored steps. What every backend of
:class:`osumem.memory.MemoryStore` must do with step metadata and times, and with
``delete_steps``, ``replace_steps`` and ``set_metadata`` (run against each backend of
``store_backends.BACKENDS``, as ``test_store_conformance.py``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_store_conformance import row, vectors

from osumem.errors import IncompatibleStoreError, StoreError
from osumem.memory import open_store
from osumem.memory.backends.base import position_after_delete
from osumem.memory.rows import SnapshotRow
from store_backends import (  # the two fixtures: registered by the import
    backend_fixture,  # noqa: F401
    location_fixture,  # noqa: F401
)

ENC_ID = "enc:d16"


def meta_row(k: int, **changes):
    values = {"metadata_json": json.dumps({"k": k, "even": k % 2 == 0}), "time": 1000.0 + k}
    return row(k, **{**values, **changes})


def filled(store, sizes=(3, 2, 4), namespace="ns"):
    """Add batches of ``sizes`` steps; return their ids and embeddings."""
    ids, embs, k = [], [], 0
    for size in sizes:
        emb = vectors(size, seed=k)
        ids += store.append(
            namespace, [meta_row(k + i) for i in range(size)], emb, encoder_id=ENC_ID
        )
        embs.append(emb)
        k += size
    return ids, np.concatenate(embs)


def test_metadata_and_times_are_stored_and_loaded_back(location):
    with open_store(location) as store:
        _ids, _ = filled(store)
        store.append("ns", [row(99)], vectors(1), encoder_id=ENC_ID)  # none given
    with open_store(location, read_only=True) as store:
        data = store.load("ns")
        assert [json.loads(m) for m in data.metadata[:9]] == [
            {"k": k, "even": k % 2 == 0} for k in range(9)
        ]
        assert data.metadata[9] == "{}"
        assert data.times[:9].tolist() == [1000.0 + k for k in range(9)]
        assert np.isnan(data.times[9]) and np.isnan(data.updated).all()
        assert store.load("ns", start=8).metadata == (data.metadata[8], "{}")


def test_position_after_delete():
    assert [position_after_delete(p, [1, 3]) for p in range(6)] == [0, 1, 1, 2, 2, 3]


def test_delete_steps_moves_later_steps_down_and_keeps_their_ids(location):
    with open_store(location) as store:
        ids, emb = filled(store)  # batches end at 3, 5, 9
        store.append("other", [row(50)], vectors(1), encoder_id=ENC_ID)
        other = store.content_hash()
        deleted = store.delete_steps("ns", [4, 1, 3])
        assert deleted == [ids[1], ids[3], ids[4]]
        assert store.n_steps("ns") == 6
        data = store.load("ns")
        keep = [0, 2, 5, 6, 7, 8]
        assert data.step_ids.tolist() == [ids[k] for k in keep] == store.step_ids("ns")
        assert data.view.texts.tolist() == [meta_row(k).text for k in keep]
        assert data.view.embeddings.tobytes() == emb[keep].astype("<f4").tobytes()
        assert [json.loads(m)["k"] for m in data.metadata] == keep
        # batch ends 3, 5, 9 -> 2, (3: the second batch lost both steps: dropped), 6
        assert data.batch_ends == (2, 6)
        assert store.integrity_problems() == []
        assert store.load("other").view.n == 1 and other != store.content_hash()


def test_delete_steps_moves_digest_ends_and_drops_a_covering_snapshot(location):
    snap = SnapshotRow(3, "key", "fp", "sum", b"payload")
    with open_store(location) as store:
        store.append("ns", [row(0), row(1), row(2)], vectors(3), encoder_id=ENC_ID, digest="a")
        store.append("ns", [row(3), row(4)], vectors(2, 1), encoder_id=ENC_ID, digest="b")
        assert store.save_snapshot("ns", snap)
        store.delete_steps("ns", [4])  # after what the snapshot covers: kept
        assert store.snapshot("ns") == snap
        assert store.digests("ns") == [("a", 3), ("b", 4)]
        store.delete_steps("ns", [0])  # inside it: dropped
        assert store.snapshot("ns") is None
        assert store.digests("ns") == [("a", 2), ("b", 3)]
        assert store.has_digest("ns", "a")


def test_deleting_every_step_of_a_namespace_keeps_its_held_messages(location):
    held = [{"role": "assistant", "content": None, "tool_calls": [{"id": "h"}]}]
    with open_store(location) as store:
        store.append("ns", [row(0), row(1)], vectors(2), encoder_id=ENC_ID, pending=held)
        store.delete_steps("ns", [0, 1])
        assert store.n_steps("ns") == 0 and store.load("ns").batch_ends == ()
        assert store.pending("ns") == held and store.namespaces() == ["ns"]
        assert store.integrity_problems() == []


def test_ids_of_deleted_steps_are_never_given_again(location):
    with open_store(location) as store:
        ids, _ = filled(store, sizes=(3,))
        store.delete_steps("ns", [2])  # the largest id
        (new,) = store.append("ns", [row(7)], vectors(1), encoder_id=ENC_ID)
        assert new > max(ids)
        store.delete_namespace("ns")
    with open_store(location) as store:  # across a reopen too
        (again,) = store.append("ns", [row(8)], vectors(1), encoder_id=ENC_ID)
        assert again > new


@pytest.mark.parametrize("positions", [[9], [-1], [0, 0], [2, 100]])
def test_delete_steps_refuses_positions_not_held_and_changes_nothing(location, positions):
    with open_store(location) as store:
        filled(store)
        before = store.content_hash()
        with pytest.raises(StoreError, match="position"):
            store.delete_steps("ns", positions)
        with pytest.raises(StoreError, match="position"):
            store.set_metadata("ns", positions, ["{}"] * len(positions), 1.0)
        assert store.content_hash() == before and store.n_steps("ns") == 9


def test_replace_steps_replaces_content_and_keeps_ids_positions_batches(location):
    snap = SnapshotRow(3, "key", "fp", "sum", b"payload")
    with open_store(location) as store:
        ids, _emb = filled(store)
        assert store.save_snapshot("ns", snap)
        new = row(5, text="user: a corrected text", metadata_json='{"fixed":true}', time=7.0)
        new = type(new)(**{**new.__dict__, "updated": 9.0, "cost": 3})
        v = vectors(1, seed=42)
        store.replace_steps("ns", [5], [new], v)
        assert store.snapshot("ns") == snap  # it covers positions 0..2 only
        data = store.load("ns")
        assert data.step_ids.tolist() == ids and data.batch_ends == (3, 5, 9)
        assert data.view.texts[5] == "user: a corrected text" and data.view.costs[5] == 3
        assert data.view.embeddings[5].tobytes() == v[0].astype("<f4").tobytes()
        assert (data.metadata[5], data.times[5], data.updated[5]) == ('{"fixed":true}', 7.0, 9.0)
        assert data.view.texts[4] == meta_row(4).text
        store.replace_steps("ns", [1], [new], v)
        assert store.snapshot("ns") is None
        before = store.content_hash()
        with pytest.raises(IncompatibleStoreError):
            store.replace_steps("ns", [2], [new], np.ones((1, 8), np.float32))
        with pytest.raises(StoreError):
            store.replace_steps("ns", [9], [new], v)
        assert store.content_hash() == before
        assert store.integrity_problems() == []


def test_set_metadata_changes_only_metadata_and_keeps_the_snapshot(location):
    snap = SnapshotRow(9, "key", "fp", "sum", b"payload")
    with open_store(location) as store:
        filled(store)
        store.append("ns", [row(9)], vectors(1), encoder_id=ENC_ID)  # no metadata yet
        assert store.save_snapshot("ns", snap)
        before = store.load("ns")
        store.set_metadata("ns", [9, 2], ['{"b":2}', '{"a":1}'], 55.0)
        data = store.load("ns")
        assert data.metadata[2] == '{"a":1}' and data.metadata[9] == '{"b":2}'
        assert data.updated[2] == 55.0 and data.updated[9] == 55.0
        assert data.times[2] == before.times[2] and np.isnan(data.times[9])
        assert data.view.texts.tolist() == before.view.texts.tolist()
        assert store.snapshot("ns") == snap
        ids, updated = store.step_versions("ns")
        assert ids.tolist() == data.step_ids.tolist() and updated.dtype == np.float64
        assert (
            updated[[2, 9]].tolist() == [55.0, 55.0] and np.isnan(np.delete(updated, [2, 9])).all()
        )
        assert [a.size for a in store.step_versions("nothing here")] == [0, 0]


def test_every_change_moves_the_changed_steps_change_time(location):
    """What another memory reads to tell which steps an edit changed: a replaced step
    given no change time, or the one it has, and a step given the metadata time it
    has, get a new one; a time given that differs is kept."""
    with open_store(location) as store:
        filled(store)
        store.set_metadata("ns", [2], ['{"a":1}'], 55.0)
        store.set_metadata("ns", [2, 4], ['{"a":2}', '{"b":1}'], 55.0)
        _ids, updated = store.step_versions("ns")
        assert updated[4] == 55.0 and updated[2] not in (55.0,) and updated[2] > 55.0
        store.replace_steps("ns", [4, 6], [row(4), row(6, updated=70.0)], vectors(2))
        _ids, again = store.step_versions("ns")
        assert again[4] not in (55.0,) and not np.isnan(again[4]) and again[6] == 70.0
        store.replace_steps("ns", [6], [row(6, updated=70.0)], vectors(1))
        _ids, third = store.step_versions("ns")
        assert third[6] > 70.0
        assert np.isnan(np.delete(third, [2, 4, 6])).all()


def test_a_load_between_two_positions_equals_that_part_of_the_whole(location):
    with open_store(location) as store:
        filled(store)  # batches end at 3, 5, 9
        whole = store.load("ns")
        for start, stop in ((0, 9), (2, 5), (4, 5), (5, 8), (3, 3), (7, None)):
            part = store.load("ns", start, stop)
            end = 9 if stop is None else stop
            assert part.step_ids.tolist() == whole.step_ids[start:end].tolist()
            assert part.view.texts.tolist() == whole.view.texts[start:end].tolist()
            assert part.view.embeddings.tobytes() == whole.view.embeddings[start:end].tobytes()
            assert list(part.metadata) == list(whole.metadata[start:end])
            assert list(part.batch_ends) == [e for e in (3, 5, 9) if start < e <= end]


def test_deleted_and_replaced_text_leaves_no_trace_in_the_store(backend, location):
    if "erased_files" not in backend.capabilities:
        # Postgres keeps a deleted row's bytes in its table files until VACUUM reuses
        # the space (VACUUM FULL rewrites the table under an exclusive lock), and in its
        # write-ahead log and backups; no query reads them after the commit
        # (test_store_postgres.py checks that), which is what the store can promise
        pytest.skip(f"{backend.name} does not erase deleted rows from its files")
    secret, replaced, dropped = "SECRET-7f3a9", "OLDTEXT-c41d", "GONE-NS-88e2"
    long = "LONGSECRET-" + "x" * 40_000  # stored in overflow pages
    with open_store(location) as store:
        rows = [row(0), row(1, text=f"user: {secret}"), row(2, text=f"user: {replaced}")]
        rows.append(row(3, text=long, metadata_json=json.dumps({"note": secret})))
        store.append("ns", rows, vectors(4), encoder_id=ENC_ID)
        store.append("gone", [row(0, text=dropped)], vectors(1), encoder_id=ENC_ID)
        for needle in (secret, replaced, dropped, "LONGSECRET"):
            assert backend.residue(location, needle.encode()), needle  # the probe works
        store.delete_steps("ns", [1, 3])
        store.replace_steps("ns", [1], [row(2, text="user: new text")], vectors(1, 3))
        store.delete_namespace("gone")
        for needle in (secret, replaced, dropped, "LONGSECRET"):
            assert not backend.residue(location, needle.encode()), needle
    for needle in (secret, replaced, dropped, "LONGSECRET"):
        assert not backend.residue(location, needle.encode()), needle


def test_a_store_of_the_previous_schema_gets_the_metadata_table(backend, location):
    with open_store(location) as store:
        store.append("ns", [row(0)], vectors(1), encoder_id=ENC_ID)
    backend.drop_metadata_table(location)
    with open_store(location, read_only=True) as store:  # read as it is
        data = store.load("ns")
        assert data.metadata == ("{}",) and np.isnan(data.times[0])
    with open_store(location) as store:  # migrated
        store.set_metadata("ns", [0], ['{"late":true}'], 3.0)
        assert store.load("ns").metadata == ('{"late":true}',)
        assert store.integrity_problems() == []


def test_every_edit_is_counted_and_the_count_survives_a_namespace_delete(location):
    with open_store(location) as store:
        filled(store)
        assert store.edits("ns") == 0
        store.append("ns", [row(9)], vectors(1), encoder_id=ENC_ID)
        assert store.edits("ns") == 0  # adds are not edits
        store.delete_steps("ns", [0])
        store.replace_steps("ns", [0], [row(1)], vectors(1))
        store.set_metadata("ns", [1], ['{"a":1}'], 1.0)
        assert store.edits("ns") == 3 and store.edits("other") == 0
        store.delete_namespace("ns")
        assert store.edits("ns") == 4 and store.namespaces() == []
        with pytest.raises(StoreError):
            store.delete_steps("ns", [0])
        assert store.edits("ns") == 4


def test_a_rolled_back_first_add_fixes_no_encoder(location):
    """The encoder id and dimension are cached once committed, never from inside a
    transaction: a first add that is rolled back leaves the store open to another."""
    with open_store(location) as store:
        with pytest.raises(RuntimeError, match="undo"), store.transaction():
            store.append("ns", [row(0)], vectors(1), encoder_id=ENC_ID)
            assert (store.encoder_id, store.dim) == (ENC_ID, 16)  # its own write
            raise RuntimeError("undo")
        assert (store.encoder_id, store.dim) == ("", 0)
        emb = np.ones((1, 8), dtype=np.float32) / np.sqrt(8)
        store.append("ns", [row(1)], emb, encoder_id="other:d8")
        assert (store.encoder_id, store.dim) == ("other:d8", 8)
        with pytest.raises(IncompatibleStoreError, match="other:d8"):
            store.append("ns", [row(2)], vectors(1), encoder_id=ENC_ID)
        assert store.n_steps("ns") == 1


def test_last_append_names_where_the_rows_went(location):
    with open_store(location) as store:
        assert store.last_append is None
        filled(store, sizes=(3, 2))
        assert store.last_append == ("ns", 3)
        store.append("other", [row(7)], vectors(1), encoder_id=ENC_ID)
        assert store.last_append == ("other", 0)


def test_ids_stay_past_deleted_ones_after_a_reopen(location):
    with open_store(location) as store:
        ids, _ = filled(store, sizes=(3,))
        store.delete_steps("ns", [2])
    with open_store(location) as store:
        (new,) = store.append("ns", [row(5)], vectors(1), encoder_id=ENC_ID)
        assert new > max(ids)
