"""Lexical view on Postgres: its own full-text search against the in-process index
(osumem.retrieve.lexical), on ``osumem bench scale``'s generated step texts.

    PYTHONPATH=src python benchmarks/postgres_lexical.py --sizes 10000,50000

Per size, in one run (a throwaway local Postgres unless ``--store``):

* query: wall and CPU (this process) of one ranked query, the top 64. Postgres: a
  ``tsvector`` column (``'simple'`` configuration: no stemming, as the in-process
  tokenizer) with a GIN index, ``@@`` the query terms joined by ``|``, ``ORDER BY
  ts_rank_cd`` (Postgres has no BM25); in-process: ``LexicalIndex.ranking`` (BM25);
* add: wall of indexing one step (Postgres: one INSERT of the text with its tsvector
  and the GIN update, committed; in-process: ``LexicalIndex.add`` of one text);
* agreement: the share of the in-process top 10 that Postgres's top 10 holds, mean
  over the queries (1.0 would be the same ranking head).

The memory keeps the in-process index on every backend when the agreement is not 1:
the rankings must equal SQLite's.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import ExitStack

import numpy as np

from osumem.bench.scale import generate
from osumem.retrieve.lexical import LexicalIndex, tokenize


def _pct(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values) * 1000.0
    return {"p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99))}


def measure(conn, n: int, queries: int) -> dict:
    data = generate(n, 8, 0, n_queries=queries)
    texts, qtexts = list(data.texts), list(data.query_texts)
    index = LexicalIndex()
    index.add(texts[:-200])
    conn.execute("DROP TABLE IF EXISTS lex")
    conn.execute("CREATE TABLE lex (pos integer PRIMARY KEY, text text, tsv tsvector)")
    with conn.cursor() as cur, cur.copy("COPY lex (pos, text) FROM STDIN") as copy:
        for p, t in enumerate(texts[:-200]):
            copy.write_row((p, t))
    conn.execute("UPDATE lex SET tsv = to_tsvector('simple', text)")
    conn.execute("CREATE INDEX lex_gin ON lex USING gin (tsv)")
    conn.execute("ANALYZE lex")
    add_pg, add_mem = [], []
    for p in range(n - 200, n):
        t0 = time.perf_counter()
        conn.execute(
            "INSERT INTO lex VALUES (%s, %s, to_tsvector('simple', %s))", (p, texts[p], texts[p])
        )
        add_pg.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        index.add([texts[p]])
        add_mem.append(time.perf_counter() - t0)
    q_pg, q_pg_cpu, q_mem, agree = [], [], [], []
    for q in qtexts:
        terms = " | ".join(dict.fromkeys(tokenize(q)))
        w, c = time.perf_counter(), time.process_time()
        rows = conn.execute(
            "SELECT pos FROM lex, to_tsquery('simple', %s) q WHERE tsv @@ q "
            "ORDER BY ts_rank_cd(tsv, q) DESC, pos LIMIT 64",
            (terms,),
        ).fetchall()
        q_pg.append(time.perf_counter() - w)
        q_pg_cpu.append(time.process_time() - c)
        t0 = time.perf_counter()
        docs, _ = index.ranking(q)
        top = docs[:64]
        q_mem.append(time.perf_counter() - t0)
        mine = set(top[:10].tolist())
        agree.append(len(mine & {r[0] for r in rows[:10]}) / max(1, len(mine)))
    conn.execute("DROP TABLE lex")
    return {
        "n": n,
        "postgres_query": _pct(q_pg),
        "postgres_query_client_cpu": _pct(q_pg_cpu),
        "inprocess_query": _pct(q_mem),
        "postgres_add": _pct(add_pg),
        "inprocess_add": _pct(add_mem),
        "top10_agreement": float(np.mean(agree)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,50000")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--store", default=None, help="a postgresql:// URL (default: a local one)")
    args = ap.parse_args()
    import psycopg

    from osumem.memory.backends.postgres.connection import parse_location

    with ExitStack() as stack:
        url = args.store
        if url is None:
            from osumem.memory.backends.postgres.local import LocalServer

            url = stack.enter_context(LocalServer.start()).url()
        conn = stack.enter_context(psycopg.connect(parse_location(url).conninfo, autocommit=True))
        rows = [measure(conn, int(n), args.queries) for n in args.sizes.split(",")]
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
