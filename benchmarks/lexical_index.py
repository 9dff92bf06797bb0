"""Lexical view: SQLite FTS5 against the in-process index (osumem.retrieve.lexical).

Measures, in one process so the two are compared like for like:

* add cost: CPU time to index one step at a time (FTS5: one INSERT per step inside an
  open transaction, no commit, so only indexing is timed, not the fsync the memory's
  own transaction pays anyway);
* query cost: CPU time of one ranked query (FTS5: ``MATCH`` of the query's terms
  joined by OR, ``ORDER BY bm25``, the top 64; in-process: every score, then the top 64);
* size: the index's bytes (FTS5: the pages of its shadow tables from ``dbstat``;
  in-process: the compressed ``.npz`` of ``state()``, as a snapshot stores it) over the
  raw UTF-8 bytes of the texts;
* quality: turn recall of the lexical ranking alone at top 5 / 10 / 25 turns on LoCoMo
  development conversations (conv-26, conv-30, conv-41), the same texts and questions.

Usage: ``python benchmarks/lexical_index.py --locomo ../shared/data/locomo/locomo-dev.json
[--sizes 10000,100000]`` (the sizes use ``osumem bench scale``'s generated step texts).
Times are CPU seconds (``time.process_time``); on a shared machine compare the ratios.
"""

from __future__ import annotations

import argparse
import io
import json
import sqlite3
import time
from pathlib import Path

import numpy as np

from osumem.bench.locomo import LoCoMoConfig, parse_evidence, render_turn, sessions, turn_texts
from osumem.bench.scale import generate
from osumem.retrieve.lexical import LexicalIndex, tokenize

DEV = ("conv-26", "conv-30", "conv-41")


def fts_query(text: str) -> str:
    """The FTS5 MATCH expression of a query: its index terms, quoted, joined by OR."""
    terms = dict.fromkeys(tokenize(text))
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


class FTS:
    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.execute("CREATE VIRTUAL TABLE f USING fts5(text, tokenize='unicode61')")
        self.db.execute("BEGIN")

    def add(self, text: str) -> None:
        self.db.execute("INSERT INTO f(text) VALUES (?)", (text,))

    def top(self, text: str, k: int) -> list[int]:
        q = fts_query(text)
        if not q:
            return []
        rows = self.db.execute(
            "SELECT rowid FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (q, k)
        ).fetchall()
        return [r[0] - 1 for r in rows]

    def size(self) -> int:
        self.db.execute("COMMIT")
        try:
            rows = self.db.execute(
                "SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'f\\_%' ESCAPE '\\'"
            ).fetchone()
            return int(rows[0] or 0)
        finally:
            self.db.execute("BEGIN")


def npz_bytes(index: LexicalIndex) -> int:
    buf = io.BytesIO()
    np.savez_compressed(buf, **index.state())
    return len(buf.getvalue())


def measure(texts: list[str], queries: list[str]) -> dict:
    raw = sum(len(t.encode("utf-8")) for t in texts)
    out: dict = {"steps": len(texts), "raw_bytes": raw}
    index = LexicalIndex()
    t0 = time.process_time()
    for t in texts:
        index.add([t])
    out["inprocess_add_ms"] = 1000 * (time.process_time() - t0) / len(texts)
    fts = FTS()
    t0 = time.process_time()
    for t in texts:
        fts.add(t)
    out["fts5_add_ms"] = 1000 * (time.process_time() - t0) / len(texts)
    t0 = time.process_time()
    for q in queries:
        docs, _ = index.ranking(q)
        docs[:64]
    out["inprocess_query_ms"] = 1000 * (time.process_time() - t0) / len(queries)
    t0 = time.process_time()
    for q in queries:
        fts.top(q, 64)
    out["fts5_query_ms"] = 1000 * (time.process_time() - t0) / len(queries)
    out["inprocess_bytes"] = npz_bytes(index)
    out["inprocess_x_raw"] = out["inprocess_bytes"] / raw
    out["inprocess_array_bytes"] = int(sum(v.nbytes for v in index.state().values()))
    out["fts5_bytes"] = fts.size()
    out["fts5_x_raw"] = out["fts5_bytes"] / raw
    return out


def locomo_quality(path: Path) -> dict:
    """Turn recall at top 5/10/25 of each lexical ranking, LoCoMo development data."""
    data = [s for s in json.loads(path.read_text()) if s["sample_id"] in DEV]
    cfg = LoCoMoConfig()
    rec: dict[str, dict[int, list[float]]] = {"inprocess": {}, "fts5": {}}
    all_texts: list[str] = []
    all_q: list[str] = []
    for s in data:
        texts = turn_texts(s)
        all_texts += texts
        pos = {}
        n = 0
        for _, _, turns in sessions(s["conversation"]):
            for turn in turns:
                role_user = turn.get("speaker") == s["conversation"].get("speaker_a")
                if role_user or render_turn(turn).strip():
                    found, _ = parse_evidence(turn.get("dia_id", ""))
                    if found:
                        pos.setdefault(found[0], n)
                    n += 1
        index = LexicalIndex()
        index.add(texts)
        fts = FTS()
        for t in texts:
            fts.add(t)
        for qa in s["qa"]:
            if int(qa.get("category", 0)) not in cfg.categories:
                continue
            pairs, _ = parse_evidence(qa.get("evidence", []))
            ev = {pos[p] for p in pairs if p in pos}
            if not ev:
                continue
            all_q.append(str(qa["question"]))
            ours = index.ranking(str(qa["question"]))[0].tolist()
            theirs = fts.top(str(qa["question"]), 25)
            for k in (5, 10, 25):
                rec["inprocess"].setdefault(k, []).append(len(ev & set(ours[:k])) / len(ev))
                rec["fts5"].setdefault(k, []).append(len(ev & set(theirs[:k])) / len(ev))
    return {
        "questions": len(all_q),
        "recall_at": {m: {k: float(np.mean(v)) for k, v in r.items()} for m, r in rec.items()},
        "timing": measure(all_texts, all_q),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--locomo", type=Path, required=True)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    result = {"locomo_dev": locomo_quality(args.locomo), "scale": []}
    for n in (int(x) for x in args.sizes.split(",") if x):
        data = generate(n, 8, 0, args.queries)
        result["scale"].append(measure(list(data.texts), list(data.query_texts)))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
