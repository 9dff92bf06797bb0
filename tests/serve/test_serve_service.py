"""The memory service without a network: concurrent readers and one writer give the
answers a serial memory gives; tokens, grants and the start-up security checks."""

from __future__ import annotations

import subprocess
import threading

import pytest

from osumem.errors import BudgetError, ConfigError, DataFileError, InvalidInputError
from osumem.memory import Memory
from osumem.serve.auth import Grant, TokenTable, is_loopback, load_tokens
from osumem.serve.run import check_http_security
from osumem.serve.service import MemoryService, ServiceLimits
from osumem.serve.threads import ReadWriteLock
from serve_helpers import OSUMEM, serve_env, turn

QUERIES = ["how was R3 paid?", "passenger P2 flight", "reservation R11 voucher", "HAT005"]


def test_concurrent_reads_during_writes_equal_serial_answers(tmp_path):
    store = tmp_path / "svc.db"
    with MemoryService(store, encoder="hashing:d64", readers=4) as svc:
        for k in range(10):
            svc.add_messages("main", turn(k))
        errors: list[BaseException] = []
        seen: dict[tuple[str, int], set[tuple[int, ...]]] = {}
        lock = threading.Lock()

        def reader(j: int) -> None:
            try:
                for i in range(25):
                    q = QUERIES[(i + j) % len(QUERIES)]
                    r = svc.retrieve(q, 80, namespace="main")
                    with lock:
                        seen.setdefault((q, len(r.steps)), set()).add(tuple(r.positions))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def writer() -> None:
            try:
                for k in range(10, 20):
                    svc.add_messages("side", turn(k))  # other namespace: main unchanged
                    svc.add_messages("main2", turn(k))
            except BaseException as exc:  # pragma: no cover
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(j,)) for j in range(4)]
        threads.append(threading.Thread(target=writer))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        # one answer per query while "main" did not change, equal to a fresh memory's
        with Memory.open(store, encoder="hashing:d64") as mem:
            for q in QUERIES:
                expected = tuple(mem.retrieve(q, 80, namespace="main").positions)
                answers = {a for (qq, _), s in seen.items() if qq == q for a in s}
                assert answers == {expected}
        assert svc.n_steps("side") == 20 and svc.n_steps("main2") == 20


def test_reads_follow_writes_to_the_same_namespace(tmp_path):
    store = tmp_path / "follow.db"
    with MemoryService(store, encoder="hashing:d64", readers=2) as svc:
        for k in range(8):
            svc.add_messages("ns", turn(k))
            for method in (None, "flat"):
                got = svc.retrieve(f"reservation R{k}", 30, namespace="ns", method=method)
                with Memory.open(store, encoder="hashing:d64", method=method or "osumem") as m:
                    want = m.retrieve(f"reservation R{k}", 30, namespace="ns")
                assert got.to_dict() == want.to_dict()
                assert f"R{k}" in got.render()


def test_only_the_writes_take_background_work(tmp_path, monkeypatch):
    """Taking a built similarity refresh changes a namespace's structure in place, so
    the service's retrieves (several threads at once) never take it: its writes do,
    under the exclusive lock, for every method it answers with."""
    from osumem.retrieve.osumem import OSUMem

    taken_in: set[str] = set()
    real = OSUMem.apply_ready

    def apply_ready(self: OSUMem) -> None:
        taken_in.add(threading.current_thread().name)
        real(self)

    monkeypatch.setattr(OSUMem, "apply_ready", apply_ready)
    with MemoryService(tmp_path / "bg.db", encoder="hashing:d64", readers=2) as svc:
        for k in range(6):
            svc.add_messages("ns", turn(k))
            for method in (None, "osumem_adaptive"):
                threads = [
                    threading.Thread(
                        target=svc.retrieve, args=(f"reservation R{k}", 40),
                        kwargs={"namespace": "ns", "method": method},
                    )
                    for _ in range(3)
                ]  # fmt: skip
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
    assert taken_in and {name.split("_")[0] for name in taken_in} == {"osumem-store"}


def test_limits_and_typed_errors(tmp_path):
    limits = ServiceLimits(max_budget=100, max_messages=3, max_query_chars=20, max_methods=0)
    with MemoryService(tmp_path / "l.db", encoder="hashing:d64", limits=limits) as svc:
        with pytest.raises(BudgetError, match="at most 100"):
            svc.retrieve("q", 101, namespace="a")
        with pytest.raises(InvalidInputError, match="query"):
            svc.retrieve("q" * 21, 10, namespace="a")
        with pytest.raises(InvalidInputError, match="at most 3"):
            svc.add_messages("a", turn(1) + turn(2))
        with pytest.raises(InvalidInputError, match="'osumem' only"):
            svc.retrieve("q", 10, namespace="a", method="flat")
        assert svc.namespaces() == []
    with pytest.raises(InvalidInputError):
        ServiceLimits(max_budget=0)
    with pytest.raises(InvalidInputError):
        MemoryService(tmp_path / "r.db", encoder="hashing", readers=0)
    with pytest.raises(InvalidInputError, match="torch_threads"):
        MemoryService(tmp_path / "r.db", encoder="hashing", torch_threads=0)


def test_read_write_lock_excludes_writers():
    lock, log = ReadWriteLock(), []
    lock.acquire_read()
    lock.acquire_read()
    t = threading.Thread(
        target=lambda: (lock.acquire_write(), log.append("w"), lock.release_write())
    )
    t.start()
    t.join(timeout=0.2)
    assert log == []  # readers inside: the writer waits
    lock.release_read()
    lock.release_read()
    t.join(timeout=10)
    assert log == ["w"]


def test_token_file_and_grants(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("# comment\naaaaaaaaaaaaaaaaaaaa  team-*, shared\nbbbbbbbbbbbbbbbbbbbb\n")
    table = load_tokens(path, environ={"OSUMEM_TOKEN": "cccccccccccccccccccc"})
    assert table.enabled and len(table.grants) == 3
    team = table.grant_for_header("Bearer aaaaaaaaaaaaaaaaaaaa")
    assert team == Grant(("team-*", "shared"))
    assert team.allows("team-7") and team.allows("shared") and not team.allows("other")
    assert table.grant_for_header("bearer bbbbbbbbbbbbbbbbbbbb") == Grant()
    assert table.grant_for_header("Bearer cccccccccccccccccccc").allows("anything")
    assert table.grant_for_header("Basic aaaaaaaaaaaaaaaaaaaa") is None
    assert table.grant_for_header("Bearer nope") is None
    assert table.grant_for_header(None) is None
    assert not load_tokens(None, environ={}).enabled
    path.write_text("short\n")
    with pytest.raises(ConfigError, match=r"line 1.*16 characters"):
        load_tokens(path, environ={})
    path.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no token"):
        load_tokens(path, environ={})
    with pytest.raises(DataFileError):
        load_tokens(tmp_path / "missing", environ={})
    with pytest.raises(ConfigError, match="OSUMEM_TOKEN"):
        load_tokens(None, environ={"OSUMEM_TOKEN": "short"})


def test_http_security_checks():
    on = TokenTable({"x" * 20: Grant()})
    off = TokenTable()
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    check_http_security("0.0.0.0", on, no_auth=False)  # a token: any address
    check_http_security("127.0.0.1", off, no_auth=True)  # explicit, loopback
    with pytest.raises(ConfigError, match="needs a bearer token"):
        check_http_security("127.0.0.1", off, no_auth=False)
    with pytest.raises(ConfigError, match="not a loopback"):
        check_http_security("0.0.0.0", off, no_auth=True)
    with pytest.raises(ConfigError, match="drop one"):
        check_http_security("127.0.0.1", on, no_auth=True)


def test_serve_refuses_a_public_address_without_a_token(tmp_path):
    env = serve_env()
    env.pop("OSUMEM_TOKEN", None)
    out = subprocess.run(
        [*OSUMEM, "serve", "--store", str(tmp_path / "m.db"), "--transport", "http",
         "--host", "0.0.0.0", "--no-auth", "--encoder", "hashing"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert "not a loopback address" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "m.db").exists()  # refused before opening anything


def test_encoder_calls_never_overlap(tmp_path):
    import time

    from osumem.embed import HashingEncoder
    from osumem.serve.threads import SerializedEncoder

    inner = HashingEncoder(16)
    active, overlaps = [0], []

    class Probe:
        encoder_id, dim = inner.encoder_id, inner.dim

        def encode(self, texts):
            active[0] += 1
            overlaps.append(active[0])
            time.sleep(0.002)
            active[0] -= 1
            return inner.encode(texts)

        count_tokens = encode

    enc = SerializedEncoder(Probe())  # type: ignore[arg-type]
    threads = [
        threading.Thread(target=lambda: [enc.encode(["a b"]) for _ in range(10)]) for _ in range(4)
    ] + [threading.Thread(target=lambda: [enc.count_tokens(["a"]) for _ in range(10)])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(overlaps) == 50 and max(overlaps) == 1
    assert enc.encoder_id == inner.encoder_id and enc.dim == 16


def test_warm_up_after_a_write_runs_under_the_memorys_blas_limit(tmp_path, monkeypatch):
    """The retriever's warm-up is called by the service, not through a memory call:
    it still runs with the memory's BLAS thread count, not the process's."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from osumem.retrieve.osumem import OSUMem

    def counts():
        return {int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"}

    if not counts():
        pytest.skip("no BLAS library loaded")
    seen = []
    real = OSUMem.warm_up

    def recording(self):
        seen.append(counts())
        real(self)

    monkeypatch.setattr(OSUMem, "warm_up", recording)
    with (
        threadpool_limits(limits=3, user_api="blas"),
        MemoryService(tmp_path / "b.db", encoder="hashing:d64") as svc,
    ):
        svc.add("book the aisle seat on flight HAT001", namespace="a")
        svc.retrieve("which seat?", 64, namespace="a")
    assert seen and all(s == {1} for s in seen)
