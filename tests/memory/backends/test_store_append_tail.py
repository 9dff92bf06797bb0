"""Conformance: an append takes the namespace's next position and a never-used id
after anything that moved the store in between: another writer's append, an append to
another namespace, a delete, a rolled-back transaction, a failed append (each backend of
``store_backends.BACKENDS``; SQLite keeps where its last append left the namespace and
must notice every one of these)."""

from __future__ import annotations

import pytest
from test_store_conformance import row, vectors

from osumem.errors import IncompatibleStoreError
from osumem.memory import open_store
from store_backends import (  # the two fixtures: registered by the import
    backend_fixture,  # noqa: F401
    location_fixture,  # noqa: F401
)

ENC_ID = "enc:d16"


def _add(store, namespace, k, **kw):
    return store.append(namespace, [row(k)], vectors(1, seed=k), encoder_id=ENC_ID, **kw)


def test_appends_after_every_kind_of_move_take_the_next_position_and_a_new_id(location):
    with open_store(location) as a, open_store(location) as b:
        given = a.append("ns", [row(0), row(1)], vectors(2), encoder_id=ENC_ID)
        given += _add(a, "ns", 2)  # nothing moved
        given += _add(b, "ns", 3)  # another writer
        given += _add(a, "ns", 4)
        given += _add(a, "other", 5)  # another namespace
        given += _add(a, "ns", 6)
        deleted = a.delete_steps("ns", [a.n_steps("ns") - 1])  # this store's own edit
        given += _add(a, "ns", 7)
        with pytest.raises(RuntimeError), a.transaction("ns"):
            _add(a, "ns", 8)
            raise RuntimeError("rolled back")
        given += _add(a, "ns", 9)
        with a.transaction("ns"):  # two appends in one transaction
            given += _add(a, "ns", 10)
            given += _add(a, "ns", 11)
        with pytest.raises(IncompatibleStoreError):
            a.append("ns", [row(12)], vectors(1), encoder_id="another:d16")
        given += _add(b, "ns", 13)
        given += _add(a, "ns", 14)
        kept = [0, 1, 2, 3, 4, 7, 9, 10, 11, 13, 14]
        for store in (a, b):
            data = store.load("ns")
            assert list(data.view.texts) == [row(k).text for k in kept]
            assert store.n_steps("ns") == len(kept)
        live = [i for i in given if i not in deleted]
        assert sorted(a.step_ids()) == sorted(live)  # every id given out is stored
        assert len(set(given)) == len(given)  # none given twice
        assert min(given[given.index(deleted[0]) + 1 :]) > deleted[0]  # nor a deleted one
        a.check()
