"""Property-based abuse of the agent memory: generated messages, steps, queries (run
against every backend by ``test_store_conformance.py``) and ingest files. Every input either succeeds or raises a typed project error; a rejected
input leaves the store's content hash unchanged; no accepted add makes a later valid
add (or a retrieve) fail.

Bounded to a few seconds by default; ``OSUMEM_FUZZ_PROFILE=long`` runs many more
examples (e.g. ``OSUMEM_FUZZ_PROFILE=long python -m pytest tests/memory/backends/test_store_fuzz.py``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osumem.cli import main
from osumem.embed import HashingEncoder
from osumem.memory import Memory, open_store
from osumem.types import Step

LONG = os.environ.get("OSUMEM_FUZZ_PROFILE", "") == "long"
#: With OSUMEM_FUZZ_TALLY=FILE, every generated input is counted into FILE (one line each).
TALLY = os.environ.get("OSUMEM_FUZZ_TALLY")
FUZZ = settings(
    max_examples=int(os.environ.get("OSUMEM_FUZZ_EXAMPLES", 1500)) if LONG else 25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=not LONG,
)
ENC = HashingEncoder(16)
PROBE = [{"role": "user", "content": "probe: where is order 42?"}]

weird_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", " ", "\ud800", "a\udfffb", "é" * 3, "x" * 700, "\x00", "😀"]),
)
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([4400, 30]).map(lambda k: 10**k),
    st.floats(allow_nan=True, allow_infinity=True),
    weird_text,
)
json_like = st.recursive(
    scalar,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.dictionaries(st.one_of(weird_text, st.integers()), kids, max_size=3),
    ),
    max_leaves=12,
)
call_id = st.one_of(st.sampled_from(["a", "b", "c"]), json_like)
arguments = st.one_of(
    st.sampled_from(
        [
            '{"x":1e999}',
            '{"x":NaN}',
            '{"k":"\\ud800"}',
            "{",
            "[1]",
            '{"x":' + "9" * 5000 + "}",
            "[" * 3000 + "]" * 3000,
            '{"order_id": "42"}',
            "",
        ]
    ),
    json_like.map(lambda v: _dumps(v, ensure_ascii=False) if _jsonable(v) else "{}"),
    json_like,
)


def _dumps(v: object, **kw: object) -> str:
    try:
        return json.dumps(v, default=repr, **kw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "[]"


def _jsonable(v: object) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


tool_call = st.fixed_dictionaries(
    {"id": call_id, "function": st.fixed_dictionaries({"name": weird_text, "arguments": arguments})}
)
message = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": st.one_of(weird_text, json_like)}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": st.one_of(st.none(), weird_text)},
        optional={"tool_calls": st.one_of(st.lists(tool_call, max_size=2), json_like)},
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("tool"),
            "tool_call_id": call_id,
            "content": st.one_of(weird_text, json_like),
        }
    ),
    st.dictionaries(weird_text, json_like, max_size=3).map(lambda d: {"role": "system", **d}),
    json_like,
)
messages = st.one_of(st.lists(message, max_size=5), json_like)
step = st.builds(
    Step,
    role=st.one_of(st.sampled_from(["user", "tool", ""]), weird_text),
    text=weird_text,
    tool_action=weird_text,
    arguments=st.one_of(st.dictionaries(weird_text, json_like, max_size=2), json_like),
    entities=st.one_of(st.frozensets(weird_text, max_size=3), json_like),
    cost=st.one_of(st.integers(min_value=-3, max_value=2**40), json_like),
)
query = st.one_of(
    weird_text,
    st.binary(max_size=8),
    json_like,
    st.lists(st.floats(allow_nan=True), min_size=16, max_size=16),
    st.just(np.ones(16)),
    st.just(np.full(16, np.inf)),
)
op = st.one_of(
    st.tuples(st.just("messages"), messages, st.booleans(), st.sampled_from(["default", "b"])),
    st.tuples(st.just("steps"), st.lists(step, max_size=3), st.booleans(), weird_text),
    st.tuples(st.just("retrieve"), query, st.integers(-2, 300), weird_text),
)


def _apply(mem: Memory, action: tuple) -> None:
    kind = action[0]
    if kind == "messages":
        _, msgs, hold, ns = action
        mem.add_messages(msgs, namespace=ns, hold_open_calls=hold)
    elif kind == "steps":
        _, steps, with_vectors, ns = action
        emb = (
            np.random.default_rng(len(steps)).normal(size=(len(steps), 16))
            if with_vectors
            else None
        )
        mem.add_steps(steps, namespace=ns or "s", embeddings=emb)
    else:
        _, q, budget, ns = action
        mem.retrieve(q, budget, namespace=ns)


def _tally(kind: str) -> None:
    if TALLY:
        with open(TALLY, "a") as fh:
            fh.write(kind + "\n")


class _Rollback(Exception):
    pass


def _probe(mem: Memory) -> None:
    """A valid add must still work in every namespace (tried inside a transaction that
    is rolled back, so the probe itself changes nothing), and so must a retrieve."""
    h = mem.store.content_hash()
    for ns in ["default", "b", *mem.namespaces()]:
        try:
            with mem.transaction():
                mem.add_messages(PROBE, namespace=ns)
                raise _Rollback
        except _Rollback:
            pass
        mem.retrieve("order 42", 64, namespace=ns)
    assert mem.store.content_hash() == h


# The generated actions above run against every store backend in
# test_store_conformance.py (test_generated_abuse_never_wedges_a_store).


ingest_bytes = st.one_of(
    st.binary(max_size=64),
    st.lists(message, max_size=4).map(lambda m: _dumps(m).encode()),
    st.lists(st.lists(message, max_size=3), max_size=3).map(
        lambda logs: _dumps([{"messages": m} for m in logs]).encode("utf-16")
    ),
    st.lists(message, max_size=3).map(
        lambda m: _dumps(m, ensure_ascii=False).encode("utf-8", "surrogatepass")
    ),
    st.just(b"[" * 100_000),
)


@settings(FUZZ, max_examples=FUZZ.max_examples // 5 if LONG else 12)
@given(ingest_bytes, st.sampled_from([".json", ".jsonl"]))
def test_ingest_files_never_end_in_a_traceback(data, suffix):
    _tally("ingest")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / f"log{suffix}"
        log.write_bytes(data)
        store = Path(tmp) / "mem.db"
        seed = Path(tmp) / "seed.json"
        seed.write_text(json.dumps(PROBE))
        run = CliRunner().invoke
        base = ["--store", str(store), "--encoder", "hashing:d16"]
        assert run(main, ["ingest", str(seed), *base]).exit_code == 0
        st_ = open_store(store)
        h = st_.content_hash()
        st_.close()
        r = run(main, ["ingest", str(log), *base])
        assert r.exit_code in (0, 2), (r.output, r.exception)
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
        if r.exit_code == 2:
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
            st_ = open_store(store)
            assert st_.content_hash() == h
            st_.close()
        assert run(main, ["ingest", str(seed), *base, "--on-duplicate", "append"]).exit_code == 0
        assert run(main, ["check", "--store", str(store)]).exit_code == 0
