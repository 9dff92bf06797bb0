"""tau-bench for ``osumem reproduce taubench``: building the episodes
(:func:`build_taubench`) and the summary that puts the paper's numbers beside ours
(:func:`summary_markdown`). The runs are declared in the shipped experiment files
``taubench_*.toml`` (one row file each, ``<name>.parquet``):

* ``taubench``: the main construction (prefix on, noisy-mean queries), all methods;
* ``taubench_weak``: the weaker single-step query construction;
* ``taubench_noisenorm``: query noise of expected norm σ instead of σ per coordinate
  (a calibration check: Flat's Hit@2 under both readings);
* ``taubench_stage_d``: Stage D augmentation;
* ``taubench_noprefix``: namespace prefixing off (the paper's pitfall);
* ``taubench_obs200``: tool responses kept up to 200 characters (the default is the
  call alone), the sensitivity of the cross-tab to the observation cut.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

from osumem.evaluate.crosstab import crosstab, interaction
from osumem.evaluate.defaults import BUDGETS as PAPER_BUDGETS
from osumem.evaluate.defaults import N_PERMUTATIONS, primary_budget
from osumem.evaluate.stats import format_p, paired_test
from osumem.report.paper import paper_cell, paper_value

BUDGETS: tuple[int, ...] = PAPER_BUDGETS["taubench"]
PRIMARY = primary_budget("taubench")


def _signed(v: float) -> str:
    """A signed difference in the paper's style: ``+.161``, ``-.023``, ``+1.000``."""
    return re.sub(r"^([+-])0\.", r"\1.", f"{v:+.3f}")


def _paper(key: str, item: str, budget: int | None, metric: str, fmt: str = ".3f") -> str:
    """The paper's number (:mod:`osumem.report.paper`) as these tables write it:
    ``.171``, ``125``, ``3.5``; ``?`` when the paper has none."""
    v = paper_value(key, item, budget, metric)
    if v is None:
        return "?"
    return re.sub(r"^(-?)0\.", r"\1.", format(v, fmt))


def _mean(rows: pd.DataFrame, method: str, budget: int, metric: str) -> float:
    sub = rows[(rows["method"] == method) & (rows["budget"] == budget)]
    return float(sub[metric].mean()) if len(sub) else float("nan")


def summary_markdown(results: Path, *, n_permutations: int = N_PERMUTATIONS) -> str:
    """The tau-bench summary (ours beside the paper's) from the row files in
    ``results``; a section is left out when its rows are missing."""
    results = Path(results)
    data = {f.stem: pd.read_parquet(f) for f in sorted(results.glob("taubench*.parquet"))}
    md = ["## tau-bench: ours beside the paper", ""]
    main = data.get("taubench")
    if main is not None:
        c = _construction(results, "taubench")
        cells = c.get("cells", {})
        con = ("taubench", "construction", None)
        md += [
            "| count | ours | paper |",
            "|---|---|---|",
            f"| episodes | {c.get('episodes', '?')} | {_paper(*con, 'episodes', '.0f')} |",
            f"| queries | {c.get('queries', '?')} | {_paper(*con, 'queries', '.0f')} |",
            f"| mean evidence / query | {c.get('mean_evidence', float('nan')):.2f} | "
            f"{_paper(*con, 'mean_evidence', 'g')} |",
            f"| T+E+ queries | {cells.get('T+E+', '?')} | "
            f"{_paper('taubench', 'T+E+', None, 'n', '.0f')} |",
            f"| T-E+ queries | {cells.get('T-E+', '?')} | "
            f"{_paper('taubench', 'T-E+', None, 'n', '.0f')} |",
            f"| T+E- / T-E- queries | {cells.get('T+E-', '?')} / {cells.get('T-E-', '?')} | – |",
            f"| share T+E+ | {c.get('share_T+E+', float('nan')):.3f} | "
            f"{_paper(*con, 'share_T+E+')} |",
            f"| GT actions matched exact / relaxed | {c.get('matched_exact', '?')} / "
            f"{c.get('matched_relaxed', '?')} of {c.get('gt_actions', '?')} | – |",
            "",
        ]
        md += _crosstab_md(main, "taubench", n_permutations)
    obs200 = data.get("taubench_obs200")
    if obs200 is not None:
        md += [
            "**Sensitivity: tool responses kept up to 200 characters** "
            "(`max_observation_chars = 200`; the default is the call alone); "
            f"Flat Hit@2 at B = {PRIMARY}: {_mean(obs200, 'flat', PRIMARY, 'hit2'):.3f} "
            f"(paper {_paper('taubench', 'flat', PRIMARY, 'hit2')}).",
            "",
            *_crosstab_md(obs200, "taubench", n_permutations),
        ]
    weak = data.get("taubench_weak")
    if weak is not None and main is not None:
        md += [
            "**Weaker query construction** (single random evidence step + noise), "
            f"T+E+ Hit@2 osumem − flat at B = {PRIMARY}:",
            "",
        ]
        for name, rows, paper in (
            ("noisy mean", main, _paper("taubench", "T+E+", PRIMARY, "hit2_gap")),
            ("single step", weak, _paper("taubench_weak", "T+E+", PRIMARY, "hit2_gap")),
        ):
            ct = crosstab(rows, metrics=("hit2",), n_permutations=n_permutations)
            r = ct[(ct["cell"] == "T+E+") & (ct["budget"] == PRIMARY)]
            ours = (
                f"{_signed(r['diff'].iloc[0])} (p {format_p(r['p'].iloc[0])}, n {r['n'].iloc[0]})"
                if len(r)
                else "–"
            )
            md.append(f"- {name}: ours {ours}; paper +{paper}")
        md.append("")
    norm = data.get("taubench_noisenorm")
    if norm is not None and main is not None:
        md += [
            f"**Query-noise scaling**, Flat Hit@2 at B = {PRIMARY} "
            f"(paper {_paper('taubench', 'flat', PRIMARY, 'hit2')}): σ per "
            f"coordinate {_mean(main, 'flat', PRIMARY, 'hit2'):.3f}; σ as the noise norm "
            f"{_mean(norm, 'flat', PRIMARY, 'hit2'):.3f}. OSU-Mem under the norm reading: "
            f"{_mean(norm, 'osumem', PRIMARY, 'hit2'):.3f}.",
            "",
        ]
    staged = data.get("taubench_stage_d")
    if staged is not None:
        md += _stage_d_md(staged, main, n_permutations)
    nop = data.get("taubench_noprefix")
    if nop is not None and main is not None:
        sharing = {
            label: _construction(results, name).get("cross_source_sharing", {})
            for label, name in (("on", "taubench"), ("off", "taubench_noprefix"))
        }
        md += _prefix_md(main, nop, n_permutations, sharing)
    return "\n".join(md).rstrip() + "\n"


def _construction(results: Path, name: str) -> dict[str, Any]:
    """The construction statistics recorded in ``<name>.json`` ({} when absent)."""
    path = results / f"{name}.json"
    return json.loads(path.read_text()).get("construction", {}) if path.exists() else {}


def _crosstab_md(rows: pd.DataFrame, key: str, n_permutations: int) -> list[str]:
    ct = crosstab(rows, n_permutations=n_permutations)
    it = interaction(rows, n_permutations=n_permutations)
    out = [
        "**Cross-tab**, osumem − flat per cell, ours (p) [paper]:",
        "",
        "| cell | metric | n | " + " | ".join(f"B={b}" for b in BUDGETS) + " |",
        "|---|---|---|" + "---|" * len(BUDGETS),
    ]
    for (cell, metric), g in ct.groupby(["cell", "metric"], sort=False):
        by_b = g.set_index("budget")
        vals = []
        for b in BUDGETS:
            text = (
                f"{_signed(by_b.loc[b, 'diff'])} ({format_p(by_b.loc[b, 'p'])})"
                if b in by_b.index
                else "–"
            )
            paper = paper_cell(key, cell, b, f"{metric}_gap", "+.3f")
            paper = _signed(float(paper)) if paper != "–" else paper
            vals.append(text + (f" [{paper}]" if paper != "–" else ""))
        out.append(f"| {cell} | {metric} | {int(g['n'].iloc[0])} | " + " | ".join(vals) + " |")
    out += [
        "",
        "**Interaction test** p, ours [paper]:",
        "",
        "| metric | " + " | ".join(f"B={b}" for b in BUDGETS) + " |",
        "|---|" + "---|" * len(BUDGETS),
    ]
    for metric, g in it.groupby("metric", sort=False):
        by_b = g.set_index("budget")
        vals = []
        for b in BUDGETS:
            text = format_p(by_b.loc[b, "p"]) if b in by_b.index else "–"
            paper = paper_cell(key, "interaction", b, f"p_{metric}")
            paper = format_p(float(paper)) if paper != "–" else paper
            vals.append(text + (f" [{paper}]" if paper != "–" else ""))
        out.append(f"| {metric} | " + " | ".join(vals) + " |")
    return [*out, ""]


def _stage_d_md(staged: pd.DataFrame, main: pd.DataFrame | None, n_perm: int) -> list[str]:
    key = "taubench_staged"
    out = [
        f"**Stage D** at B = {PRIMARY}: Hit@2 ours [paper]; osumem − method, query level "
        "and episode level (p):",
        "",
        "| method | Hit@2 | unaugmented | Δ query (p) | Δ episode (p) |",
        "|---|---|---|---|---|",
    ]
    for m in dict.fromkeys(staged["method"]):
        h = _mean(staged, m, PRIMARY, "hit2")
        paper = paper_cell(key, m, PRIMARY, "hit2").lstrip("0")
        before = _mean(main, m, PRIMARY, "hit2") if main is not None else float("nan")
        if m == "osumem":
            dq = de = "ref"
        else:
            d1, p1, _ = paired_test(
                staged, "osumem", m, "hit2", budget=PRIMARY, n_permutations=n_perm
            )
            d2, p2, _ = paired_test(
                staged, "osumem", m, "hit2", budget=PRIMARY, level="episode", n_permutations=n_perm
            )
            dq, de = f"{_signed(d1)} ({format_p(p1)})", f"{_signed(d2)} ({format_p(p2)})"
        pp = f" [{paper}]" if paper != "–" else ""
        out.append(f"| {m} | {h:.3f}{pp} | {before:.3f} | {dq} | {de} |")
    key_p, gap = "taubench_staged", (key, "osumem-flat", PRIMARY)
    out += [
        "",
        f"Paper: osumem − flat +{_paper(*gap, 'hit2_gap')} query level, "
        f"+{_paper(*gap, 'hit2_gap_episode')} episode level "
        f"(p = {_paper(*gap, 'p_hit2_episode')}); osumem − disjoint episode level "
        f"p = {_paper(key_p, 'osumem-osumem_disjoint', PRIMARY, 'p_hit2_episode')}; "
        f"flat {_paper('taubench', 'flat', PRIMARY, 'hit2')} → "
        f"{_paper(key, 'flat', PRIMARY, 'hit2')} with Stage D.",
        "",
    ]
    return out


def _prefix_md(
    on: pd.DataFrame,
    off: pd.DataFrame,
    n_perm: int,
    sharing: dict[str, dict[str, float]] | None = None,
) -> list[str]:
    out = [
        "**Namespace prefixing on vs off**, Hit@2 / Recall per budget and "
        "osumem − osumem_disjoint Hit@2 (p). Paper: without prefixing the "
        "overlap-vs-disjoint ordering reversed.",
        "",
    ]
    if sharing and all(sharing.values()):
        out += [
            "Cross-source step pairs sharing an entity / a tool signature / either:",
            "",
            "| prefix | entity | signature | either |",
            "|---|---|---|---|",
            *(
                f"| {label} | {r['entity']:.4f} | {r['signature']:.4f} | {r['either']:.4f} |"
                for label, r in sharing.items()
            ),
            "",
        ]
    out += [
        "| prefix | B | osumem | osumem_disjoint | flat | osumem − disjoint Hit@2 (p) |",
        "|---|---|---|---|---|---|",
    ]
    for label, rows in (("on", on), ("off", off)):
        for b in BUDGETS:
            if "osumem_disjoint" not in set(rows["method"]) or b not in set(rows["budget"]):
                continue
            d, p, _ = paired_test(
                rows, "osumem", "osumem_disjoint", "hit2", budget=b, n_permutations=n_perm
            )
            cells = [
                f"{_mean(rows, m, b, 'hit2'):.3f} / {_mean(rows, m, b, 'recall'):.3f}"
                for m in ("osumem", "osumem_disjoint", "flat")
            ]
            out.append(
                f"| {label} | {b} | " + " | ".join(cells) + f" | {_signed(d)} ({format_p(p)}) |"
            )
    return [*out, ""]


def build_taubench(
    data: Path,
    cfg: Any,
    seeds: list[int],
    *,
    stage_d: bool = False,
    encoder: str = "sbert",
    cache: Path | None = None,
) -> tuple[list[tuple[int, Any]], dict[str, Any]]:
    """Load, embed (cached) and build the episodes for every seed; returns
    ``[(seed, episode)]`` and the construction statistics."""
    from osumem.bench.augment import StageDConfig
    from osumem.bench.augment import stage_d as augment
    from osumem.bench.taubench import construction_stats, generate, source_views
    from osumem.embed import CachedEncoder, HashingEncoder, load_encoder
    from osumem.ingest.taubench import load_taubench, match_stats

    sources = load_taubench(
        data,
        prefix_namespace=cfg.prefix_namespace,
        match=cfg.match,
        max_observation_chars=cfg.max_observation_chars,
    )
    if encoder == "hashing":
        enc: Any = CachedEncoder(HashingEncoder(384), cache) if cache else HashingEncoder(384)
    else:
        enc = load_encoder(cache=cache if cache else True)
    views = source_views(sources, enc)
    eps = []
    for s in seeds:
        for ep in generate(sources, views, cfg, s):
            if stage_d:
                dcfg = StageDConfig(
                    min_query_distance=cfg.min_query_distance,
                    query_mode=cfg.query_mode,
                    query_noise=cfg.query_noise,
                    query_noise_mode=cfg.query_noise_mode,
                )
                ep = augment(ep, dcfg, s)
            eps.append((s, ep))
    stats = {
        **match_stats(sources, min_evidence=cfg.min_evidence),
        **construction_stats([e for _, e in eps]),
    }
    return eps, stats
