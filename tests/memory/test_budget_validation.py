"""The token budget is validated once per call path: the outermost public entry point
checks it, the nested ones (service → Memory → Retriever → retrieve_unit) take it as
given; each entry point called on its own still checks it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import osumem.retrieve.budget as budget_mod
from osumem.embed import HashingEncoder
from osumem.errors import BudgetError, show_value
from osumem.memory import Memory
from osumem.retrieve import create, validated_budget


def chat_turns(n: int) -> list[dict]:
    """``n`` agent turns: a request, a tool call and its result."""
    out: list[dict] = []
    for k in range(n):
        call = {"id": f"c{k}", "function": {"name": "get_reservation", "arguments": "{}"}}
        out += [
            {"role": "user", "content": f"check reservation R{k}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": f"R{k} is paid by card"},
        ]
    return out


@pytest.fixture
def calls(monkeypatch):
    """The budgets the shared check validated, in call order (any thread)."""
    seen: list[object] = []
    lock = threading.Lock()
    real = budget_mod.check_budget

    def counting(budget):
        with lock:
            seen.append(budget)
        return real(budget)

    monkeypatch.setattr(budget_mod, "check_budget", counting)
    return seen


def _memory(path=None) -> Memory:
    mem = Memory.open(path, encoder=HashingEncoder(32), method="osumem")
    mem.add_messages(chat_turns(6), namespace="ns")
    return mem


def test_retriever_entry_points_check_once(calls):
    mem = _memory()
    retriever = mem.retriever("ns")
    view = retriever.fitted_view
    q = np.ones(view.dim, dtype=np.float32)
    retriever.retrieve(q, 64)
    assert calls == [64]
    calls.clear()
    retriever.retrieve_unit(view.check_query(q), 64)
    assert calls == [64]
    mem.close()


def test_memory_retrieve_checks_once(calls):
    with _memory() as mem:
        mem.retrieve("reservation", 64, namespace="ns")  # builds the retriever
        calls.clear()
        mem.retrieve("reservation", 64, namespace="ns")
        assert calls == [64]
        calls.clear()
        mem.retrieve("reservation", namespace="ns")  # the configured default
        assert calls == [mem.config.budget]


def test_nested_entry_points_check_a_different_budget_again(calls):
    retriever = create("flat").fit(_memory().view("ns"))
    q = np.ones(retriever.fitted_view.dim, dtype=np.float32)
    with validated_budget(64):
        retriever.retrieve(q, 64)
        assert calls == [64]
        with pytest.raises(BudgetError, match="positive integer"):
            retriever.retrieve(q, 0)
        with pytest.raises(BudgetError):
            retriever.retrieve(q, True)  # equal to 1, but not a budget
    assert calls == [64, 0, True]


@pytest.mark.parametrize("bad", [0, -3, 2.5, "64", None, True, 2**62 + 1, 10**5000], ids=show_value)
def test_every_entry_point_rejects_a_bad_budget(bad):
    mem = _memory()
    retriever = mem.retriever("ns")
    q = np.ones(retriever.fitted_view.dim, dtype=np.float32)
    if bad is not None:  # None is the memory's default budget
        with pytest.raises(BudgetError):
            mem.retrieve("reservation", bad, namespace="ns")
    with pytest.raises(BudgetError):
        retriever.retrieve(q, bad)
    with pytest.raises(BudgetError):
        retriever.retrieve_unit(q / np.linalg.norm(q), bad)
    mem.close()


def test_service_and_http_route_check_once(tmp_path, calls):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from osumem.serve.http_app import build_app
    from osumem.serve.service import MemoryService

    _memory(tmp_path / "mem.db").close()
    with MemoryService(tmp_path / "mem.db", encoder="hashing:d32") as svc:
        svc.retrieve("reservation", 64, namespace="ns")  # warms the namespace
        calls.clear()
        svc.retrieve("reservation", 64, namespace="ns")
        assert calls == [64]
        with TestClient(build_app(svc), base_url="http://127.0.0.1") as http:
            calls.clear()
            r = http.post("/v1/namespaces/ns/retrieve", json={"query": "reservation", "budget": 64})
            assert r.status_code == 200, r.text
            assert calls == [64]
            r = http.post("/v1/namespaces/ns/retrieve", json={"query": "reservation", "budget": 0})
            assert r.status_code == 422 and "budget" in r.json()["error"]["message"]
