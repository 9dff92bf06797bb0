"""A bounded abuse campaign against the agent memory's store (rerunnable).

    PYTHONPATH=src python benchmarks/store_abuse.py --kills 60 --corruptions 300 --rounds 5

Parts: (1) writers killed with SIGKILL at random moments while three processes write
one namespace (adds with held tool calls included); after every kill the store is
reopened, checked, and every acknowledged add is looked up; (2) concurrent writers
without kills; (3) damaged copies of a store (byte flips, truncations, SQL damage),
each opened, queried, written and checked in a child process; (4) deleting the
``-wal`` file after a kill (what that loses is reported, it is not prevented). Prints
one table: inputs tried / crashes (untyped exceptions or dead processes) / lost
acknowledged adds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

WRITER = textwrap.dedent(
    """
    import json, sys
    from osumem.embed import HashingEncoder
    from osumem.errors import OSUMemError
    from osumem.memory import Memory

    path, w, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    def call(cid):
        return {"role": "assistant", "content": None, "tool_calls": [{"id": cid,
                "function": {"name": "lookup", "arguments": json.dumps({"key": cid})}}]}
    with Memory.open(path, encoder=HashingEncoder(32), method="flat") as mem:
        for j in range(start, start + 100000):
            tag = f"{w}-{j}"
            msgs = [{"role": "user", "content": f"user {tag}"}, call(f"c{tag}")]
            if j % 4:
                msgs.append({"role": "tool", "tool_call_id": f"c{tag}", "content": f"r {tag}"})
            try:
                ids = mem.add_messages(msgs, namespace="shared")
            except OSUMemError as exc:
                print(json.dumps({"tag": tag, "error": type(exc).__name__}), flush=True)
                continue
            print(json.dumps({"tag": tag, "ids": ids}), flush=True)
    """
)

USE = textwrap.dedent(
    """
    import json, sys
    from osumem.embed import HashingEncoder
    from osumem.errors import OSUMemError
    from osumem.memory import Memory, MemoryStore

    out = {"typed": 0, "ok": 0, "untyped": []}
    for path in sys.argv[1:]:
        for step in ("api", "check"):
            try:
                if step == "api":
                    with Memory.open(path, encoder=HashingEncoder(32), method="flat",
                                     timeout=0.5) as m:
                        for ns in m.namespaces():
                            m.retrieve("user 3", 64, namespace=ns)
                        m.add_messages([{"role": "user", "content": "after damage"}])
                else:
                    st = MemoryStore(path, read_only=True)
                    try:
                        st.check()
                    finally:
                        st.close()
                out["ok"] += 1
            except OSUMemError:
                out["typed"] += 1
            except BaseException as exc:
                out["untyped"].append(f"{path} {step}: {type(exc).__name__}: {exc}"[:300])
    print(json.dumps(out))
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _stored(path: Path) -> tuple[dict[int, str], str]:
    con = sqlite3.connect(path)
    rows = dict(con.execute("SELECT id, text FROM steps").fetchall())
    held = "".join(r[0] for r in con.execute("SELECT messages FROM pending"))
    con.close()
    return rows, held


def _verify(path: Path, acks: list[dict]) -> tuple[int, int]:
    """(acknowledged adds checked, acknowledged adds lost or wrong)."""
    from osumem.memory import Memory

    with Memory.open(path, method="flat") as m:
        m.check()
    rows, _ = _stored(path)
    lost = 0
    for a in acks:
        if "ids" not in a:
            continue
        texts = [rows.get(i) for i in a["ids"]]
        if any(t is None for t in texts) or f"user: user {a['tag']}" not in texts:
            lost += 1
    return sum("ids" in a for a in acks), lost


def kill_campaign(workdir: Path, kills: int, rng: random.Random) -> dict:
    path = workdir / "kill.db"
    acks: list[dict] = []
    crashes = 0
    start = {f"w{k}": 0 for k in range(3)}
    procs: dict[str, subprocess.Popen] = {}

    def spawn(w: str) -> None:
        procs[w] = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), w, str(start[w])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            text=True,
        )

    for w in start:
        spawn(w)
    for _ in range(kills):
        time.sleep(rng.uniform(0.3, 1.5))
        w = rng.choice(sorted(procs))
        p = procs[w]
        p.send_signal(signal.SIGKILL)
        out, err = p.communicate()
        lines = [json.loads(x) for x in out.splitlines() if x.strip()]
        acks.extend(lines)
        if p.returncode not in (-signal.SIGKILL, 0) or "Traceback" in err:
            crashes += 1
            print(err[-2000:], file=sys.stderr)
        start[w] += len(lines) + 1
        spawn(w)
    for p in procs.values():
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        acks.extend(json.loads(x) for x in out.splitlines() if x.strip())
    checked, lost = _verify(path, acks)
    errors = sum("error" in a for a in acks)
    return {
        "tried": checked + errors,
        "kills": kills + 3,
        "crashes": crashes,
        "lost": lost,
        "typed_rejections": errors,
    }


def corruption_campaign(workdir: Path, n: int, rng: random.Random) -> dict:
    from osumem.embed import HashingEncoder
    from osumem.memory import Memory

    base = workdir / "base.db"
    with Memory.open(base, encoder=HashingEncoder(32), method="flat") as m:
        for k in range(200):
            m.add_messages(
                [{"role": "user", "content": f"user {k} order {k}"}], namespace=f"n{k % 3}"
            )
    data = base.read_bytes()
    paths = []
    sql_damage = [
        "DROP TABLE steps",
        "DROP TABLE meta",
        "UPDATE meta SET value='x' WHERE key='dim'",
        "UPDATE steps SET embedding=x'00' WHERE id % 7 = 1",
        "INSERT INTO pending VALUES ('n0', '{bad')",
        "UPDATE steps SET entities='?' WHERE id=3",
        "UPDATE meta SET value='9' WHERE key='schema_version'",
        "DELETE FROM batches",
        "UPDATE steps SET pos = pos + 1000 WHERE id = 5",
        "ALTER TABLE pending RENAME TO p2",
    ]
    for i in range(n):
        p = workdir / f"c{i}.db"
        kind = i % 3
        if kind == 0:
            b = bytearray(data)
            for pos in (rng.randrange(len(b)) for _ in range(rng.randint(1, 40))):
                b[pos] = rng.randrange(256)
            p.write_bytes(bytes(b))
        elif kind == 1:
            p.write_bytes(data[: rng.randrange(len(data))])
        else:
            shutil.copy(base, p)
            con = sqlite3.connect(p)
            con.execute(rng.choice(sql_damage))
            con.commit()
            con.close()
        paths.append(str(p))
    typed = ok = crashes = 0
    untyped: list[str] = []
    for k in range(0, n, 50):
        r = subprocess.run(
            [sys.executable, "-c", USE, *paths[k : k + 50]],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=600,
        )
        if r.returncode != 0:
            crashes += 1
            untyped.append(r.stderr[-500:])
            continue
        res = json.loads(r.stdout.strip().splitlines()[-1])
        typed += res["typed"]
        ok += res["ok"]
        untyped += res["untyped"]
    for u in untyped[:10]:
        print("UNTYPED:", u, file=sys.stderr)
    return {"tried": 2 * n, "crashes": crashes + len(untyped), "lost": 0, "typed": typed, "ok": ok}


def concurrent_campaign(workdir: Path, rounds: int) -> dict:
    tried = lost = crashes = 0
    for r in range(rounds):
        path = workdir / f"conc{r}.db"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(path), f"w{k}", "0"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=_env(),
                text=True,
            )
            for k in range(3)
        ]
        time.sleep(4)
        acks: list[dict] = []
        for p in procs:
            p.send_signal(signal.SIGTERM)
            out, err = p.communicate()
            acks += [json.loads(x) for x in out.splitlines() if x.strip()]
            crashes += (
                "Traceback" in err and "KeyboardInterrupt" not in err and "SIGTERM" not in err
            )
        checked, bad = _verify(path, acks)
        tried += checked
        lost += bad
    return {"tried": tried, "crashes": crashes, "lost": lost}


def wal_loss(workdir: Path) -> dict:
    """Kill a writer, delete the -wal file, count acknowledged adds that vanish."""
    path = workdir / "wal.db"
    p = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "w0", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        text=True,
    )
    time.sleep(4)
    p.send_signal(signal.SIGKILL)
    out, _ = p.communicate()
    acks = [json.loads(x) for x in out.splitlines() if x.strip()]
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    checked, lost = _verify(path, acks)
    return {"tried": checked, "crashes": 0, "lost": lost}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=60)
    ap.add_argument("--corruptions", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = {
            "SIGKILL of 1 of 3 concurrent writers": kill_campaign(work, args.kills, rng),
            "3 concurrent writers (no kill)": concurrent_campaign(work, args.rounds),
            "damaged files (flips, truncations, SQL)": corruption_campaign(
                work, args.corruptions, rng
            ),
            "-wal deleted after a SIGKILL (not preventable)": wal_loss(work),
        }
    print("| campaign | inputs tried | crashes | lost acknowledged adds | notes |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        notes = {k: v for k, v in r.items() if k not in ("tried", "crashes", "lost")}
        print(f"| {name} | {r['tried']} | {r['crashes']} | {r['lost']} | {notes} |")


if __name__ == "__main__":
    main()
