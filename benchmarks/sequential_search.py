"""The sequential budget search, simulated and replayed (issue #48): results/bench/sequential_search.json.

1. **Size and coverage on clustered data** (known truth). Each data set: a layout of clusters (each item its own
   cluster, 100 or 1,000 items; 400 items all in documents of 2-6 questions; LongBench-v2's real layout, 395 questions
   in 367 documents); every cluster draws its own P(worse) and P(better) from Beta distributions with intra-cluster
   correlation ``icc`` around the scenario's means (low discordance: P(better) 0.015, high: 0.14, worse only: 0, and
   P(worse) = P(better) + margin, so the true difference is exactly -margin); clusters come in a random order. The
   anytime-valid "non-inferior" side of :mod:`snapeval.stats.sequential` is looked at after **every** cluster (any
   batching looks less often, so this bounds it): its false "non-inferior" rate is the share of data sets where it
   ever reaches ``1/alpha``. Coverage: the share where neither side rejects the true difference at any cluster (the
   ``1 - 2 alpha`` confidence sequence covers it throughout), at the margin and at a true difference of 0. Also: at
   a true difference of 0, the share settled non-inferior by the last item (power) and at a true drop of 3 margins the
   share settled not non-inferior.
2. **The quickstart's grid replayed** (:func:`snapeval.report.search.replay` over results/quickstart's committed per-item
   results; no model runs): the search's method answers against the full grid's report, and the share of the grid's
   item-evaluations it used.

3. **The group-sequential design against the fixed-sample grid** (issue #61, known truth): the shipped layouts
   (400 independent items, LongBench-v2's documents, AIME's 30 problems x 8 samples), each candidate design of
   :data:`CANDIDATES` on the same data sets, and what equally spaced looks can do at all on the canonical Brownian
   model (:func:`brownian_limits`).

Run: ``python -m benchmarks.sequential_search`` (seeds fixed below; a few minutes of one core).
"""
from __future__ import annotations

import math
import os
import time

import numpy as np

from benchmarks.common import REPO, write_json
from snapeval.stats.groupseq import (DESIGN_SPENDING, LOOKS, OTHER_SPENDING, boundary_share_floor, look_statistics,
                                     simulate_design)
from snapeval.stats.sequential import sides

SEED = 20261128
DATASETS = 4000
ALPHA = 0.05
ICCS = (0.1, 0.3, 0.6)
MARGINS = (0.02, 0.05, 0.10)
SCENARIOS = {"low discordance": 0.015, "high discordance": 0.14, "worse only": 0.0}  # P(better); P(worse) = + margin


def layouts() -> dict[str, np.ndarray]:
    from snapeval.tasks.families import layout_cluster_sizes

    rng = np.random.default_rng(SEED)
    documents = []
    while sum(documents) < 400:
        documents.append(int(rng.integers(2, 7)))
    longbench = layout_cluster_sizes("longbench_v2")
    if longbench is None:
        raise SystemExit("benchmark: LongBench-v2's local data is needed for its real layout (set SNAPEVAL_DATA_DIR)")
    return {"independent 100": np.ones(100, dtype=np.int64), "independent 1000": np.ones(1000, dtype=np.int64),
            f"documents {sum(documents)} ({len(documents)} clusters of 2-6)": np.array(documents, dtype=np.int64),
            f"LongBench-v2's own {sum(longbench)} ({len(longbench)} clusters)": np.array(longbench, dtype=np.int64)}


def _beta(rng, mean: float, icc: float | None, shape) -> np.ndarray:
    if icc is None:  # single items: every item draws from the mean itself
        return np.full(shape, mean)
    if mean <= 0:
        return np.zeros(shape)
    concentration = (1 - icc) / icc
    return rng.beta(mean * concentration, (1 - mean) * concentration, size=shape)


def simulate(rng, sizes: np.ndarray, icc: float, p_worse: float, p_better: float, datasets: int):
    """``(D, m)``: per data set (rows) the clusters' summed differences and sizes, in a random order."""
    order = np.argsort(rng.random((datasets, sizes.size)), axis=1)
    m = sizes[order]
    pw = _beta(rng, p_worse, icc, m.shape)
    pb = np.minimum(_beta(rng, p_better, icc, m.shape), 1 - pw)
    worse = rng.binomial(m, pw)
    rest = m - worse
    better = rng.binomial(rest, np.where(pw < 1, pb / np.maximum(1 - pw, 1e-12), 0.0))
    return (better - worse).astype(np.float64), m.astype(np.float64)


def ever(log_k: np.ndarray) -> np.ndarray:
    return (log_k >= math.log(1 / ALPHA)).any(axis=1)


def row(rng, name, sizes, icc, margin, scenario, p_better, datasets: int = DATASETS) -> dict:
    top = float(sizes.max())
    d, m = simulate(rng, sizes, icc, p_better + margin, p_better, datasets)
    ni, bad = sides(d, m, margin, top)
    false_ni = float(ever(ni).mean())
    covered_margin = float((~ever(ni) & ~ever(bad)).mean())
    d0, m0 = simulate(rng, sizes, icc, p_better + margin / 2, p_better + margin / 2, datasets // 2)
    ni0, _ = sides(d0, m0, margin, top)
    low0, high0 = sides(d0, m0, 0.0, top)  # the two sides at theta0 = 0, the truth
    covered_zero = float((~ever(low0) & ~ever(high0)).mean())
    power = float(ever(ni0).mean())
    settled = np.where(ever(ni0), (ni0 >= math.log(1 / ALPHA)).argmax(axis=1), sizes.size - 1)
    items_to_settle = float(np.take_along_axis(np.cumsum(m0, axis=1), settled[:, None], axis=1).mean())
    d3, m3 = simulate(rng, sizes, icc, p_better + 3 * margin, p_better, datasets // 2)
    _, bad3 = sides(d3, m3, margin, top)
    return {"layout": name, "datasets": datasets, "icc": icc, "margin": margin, "scenario": scenario, "p_better": p_better,
            "false_non_inferior": false_ni, "coverage_at_margin": covered_margin, "coverage_at_zero": covered_zero,
            "power_at_zero": power, "mean_items_used_at_zero": items_to_settle,
            "settled_not_non_inferior_at_3_margins": float(ever(bad3).mean())}


# --------------------------------------------------------------------------------------------------------------------
# 3. The group-sequential design against the fixed-sample grid (issue #61)

GS_DATASETS = 2000
GS_MARGINS = (0.02, 0.05, 0.10)
GS_ICC = 0.3
#: Candidate designs (name, :func:`simulate_design` settings); the first is the default (5 equal looks, the
#: non-inferior side Hwang-Shih-DeCani -3, re-planned where a tied run would stop only after 60% of the items and a look
#: at or below 0.6 keeps a canonical worst power ratio >= 0.98: :func:`plan_bounds`; the not-non-inferior side
#: Hwang-Shih-DeCani -1). Then the other looks and spending pairs tried for it (5 or 6 equal looks, unequal looks, one
#: spending for both sides or each its own: -3 to -1 for non-inferior, -3 to 1 for not non-inferior; the re-plan from
#: 0.94, a futility stop). Then the 4-look designs of the
#: rounds before: the previous default (4 equal looks, Hwang-Shih-DeCani -3 on both sides, re-planned from 0.94), the
#: same without the re-plan and the other spending families, three that account for what changed since issue #61's
#: design (that design: O'Brien-Fleming-like, the non-inferior side at every look, the items left taken as tied for
#: reach; then each of the two changes alone), the re-plan at the target's own ratio, the out-of-reach stop turned
#: off, and the not-non-inferior side spending faster.
_SIX = (0.2, 0.35, 0.5, 0.65, 0.8, 1.0)
_FOUR = {"looks": 4, "other_spending": None, "tied_ratio": 0.0}
CANDIDATES = (
    (f"{LOOKS} looks, {DESIGN_SPENDING}, not-non-inferior side {OTHER_SPENDING}",  # the module's default, as it is
     {"looks": LOOKS, "spending": DESIGN_SPENDING, "other_spending": OTHER_SPENDING}),
    ("5 looks, hsd-3", {"looks": 5, "spending": "hsd-3", "other_spending": None}),
    ("5 looks, hsd-3, not-non-inferior side hsd-2", {"looks": 5, "spending": "hsd-3", "other_spending": "hsd-2"}),
    ("5 looks, hsd-3, not-non-inferior side hsd-1.5", {"looks": 5, "spending": "hsd-3", "other_spending": "hsd-1.5"}),
    ("5 looks, hsd-3, not-non-inferior side hsd0", {"looks": 5, "spending": "hsd-3", "other_spending": "hsd0"}),
    ("5 looks, hsd-2.5, not-non-inferior side hsd-1", {"looks": 5, "spending": "hsd-2.5", "other_spending": "hsd-1"}),
    ("5 looks, hsd-2, not-non-inferior side hsd-1", {"looks": 5, "spending": "hsd-2", "other_spending": "hsd-1"}),
    ("5 looks, hsd-3, not-non-inferior side hsd1", {"looks": 5, "spending": "hsd-3", "other_spending": "hsd1"}),
    ("5 looks, hsd-2", {"looks": 5, "spending": "hsd-2", "other_spending": None}),
    ("5 looks, hsd-1", {"looks": 5, "spending": "hsd-1", "other_spending": None}),
    ("5 looks, hsd-3, not-non-inferior side hsd-1, tied run re-planned from a canonical power ratio of 0.94",
     {"looks": 5, "spending": "hsd-3", "other_spending": "hsd-1", "tied_ratio": 0.94}),
    ("5 looks, hsd-3, not-non-inferior side hsd-1, futility 0.05",
     {"looks": 5, "spending": "hsd-3", "other_spending": "hsd-1", "futility": 0.05}),
    ("6 looks, hsd-3, not-non-inferior side hsd-1", {"looks": 6, "spending": "hsd-3", "other_spending": "hsd-1"}),
    ("looks at 20/35/50/65/80/100%, hsd-3, not-non-inferior side hsd-1",
     {"looks": _SIX, "spending": "hsd-3", "other_spending": "hsd-1"}),
    ("looks at 30/45/60/80/100%, hsd-3, not-non-inferior side hsd-1",
     {"looks": (0.3, 0.45, 0.6, 0.8, 1.0), "spending": "hsd-3", "other_spending": "hsd-1"}),
    ("4 looks, hsd-3, tied run re-planned (the previous default)", {**_FOUR, "spending": "hsd-3", "tied_ratio": 0.94}),
    ("hsd-3", {**_FOUR, "spending": "hsd-3"}),
    ("obrien-fleming", {**_FOUR, "spending": "obrien-fleming"}),
    ("hsd-4", {**_FOUR, "spending": "hsd-4"}),
    ("hsd-2", {**_FOUR, "spending": "hsd-2"}),
    ("hsd-1", {**_FOUR, "spending": "hsd-1"}),
    ("pocock", {**_FOUR, "spending": "pocock"}),
    ("hsd-3, futility 0.05", {**_FOUR, "spending": "hsd-3", "futility": 0.05}),
    ("issue #61: obrien-fleming, non-inferior side at every look, tied reach",
     {**_FOUR, "spending": "obrien-fleming", "reachable_looks": False, "tied_reach": True}),
    ("obrien-fleming, non-inferior side at every look",
     {**_FOUR, "spending": "obrien-fleming", "reachable_looks": False}),
    ("obrien-fleming, tied reach", {**_FOUR, "spending": "obrien-fleming", "tied_reach": True}),
    ("hsd-3, tied run re-planned at a canonical power ratio of 0.90",
     {**_FOUR, "spending": "hsd-3", "tied_ratio": 0.9}),
    ("hsd-3, no out-of-reach stop", {**_FOUR, "spending": "hsd-3", "reach_level": 0.0}),
    ("hsd-3, not-non-inferior side hsd-2", {**_FOUR, "spending": "hsd-3", "other_spending": "hsd-2"}),
    ("hsd-3, not-non-inferior side hsd-1", {**_FOUR, "spending": "hsd-3", "other_spending": "hsd-1"}),
    ("hsd-3, not-non-inferior side hsd0", {**_FOUR, "spending": "hsd-3", "other_spending": "hsd0"}),
)


def gs_layouts() -> dict[str, np.ndarray]:
    """The layouts shipped: independent items (400), LongBench-v2's documents (its local 395 questions), AIME's 30
    problems x 8 samples (``aime24_snapeval_sampled``: cons@8)."""
    from snapeval.tasks.families import layout_cluster_sizes

    longbench = layout_cluster_sizes("longbench_v2")
    if longbench is None:
        raise SystemExit("benchmark: LongBench-v2's local data is needed for its real layout (set SNAPEVAL_DATA_DIR)")
    return {"independent 400": np.ones(400, dtype=np.int64),
            f"LongBench-v2's own {sum(longbench)} ({len(longbench)} documents)": np.array(longbench, dtype=np.int64),
            "AIME 30 problems x 8 samples": np.full(30, 8, dtype=np.int64)}


def counts(rng, sizes: np.ndarray, icc: float | None, p_worse: float, p_better: float, datasets: int):
    """``(worse, better, m)`` per cluster (columns, in a random order per data set)."""
    order = np.argsort(rng.random((datasets, sizes.size)), axis=1)
    m = sizes[order]
    pw = _beta(rng, p_worse, icc, m.shape)
    pb = np.minimum(_beta(rng, p_better, icc, m.shape), 1 - pw)
    worse = rng.binomial(m, pw)
    better = rng.binomial(m - worse, np.where(pw < 1, pb / np.maximum(1 - pw, 1e-12), 0.0))
    return worse.astype(np.float64), better.astype(np.float64), m.astype(np.float64)


def tied_reach_share(sizes: np.ndarray, margin: float) -> float:
    """The least share of the items at which a tied run's statistic reaches ``z_(1 - alpha)`` (the layout's worst-case
    design effect): no valid level-alpha boundary is lower, so no design of any looks stops a tied run as
    non-inferior before it (at no change with no discordance, "worse only", every run is tied)."""
    from snapeval.stats.binary import worst_case_design_effect
    from snapeval.stats.groupseq import items_for_fixed_reach

    return min(1.0, items_for_fixed_reach(margin, ALPHA, worst_case_design_effect(sizes)) / float(sizes.sum()))


def gs_rows(rng, datasets: int = GS_DATASETS) -> list[dict]:
    out = []
    for name, sizes in gs_layouts().items():
        icc = None if (sizes == 1).all() else GS_ICC
        for margin in GS_MARGINS:
            for scenario, p_better in SCENARIOS.items():
                data = {}
                for truth_name, drop in (("at the margin", margin), ("no change", 0.0), ("3 margins", 3 * margin)):
                    data[truth_name] = (counts(rng, sizes, icc, p_better + drop, p_better, datasets), -drop)
                for design, options in CANDIDATES:
                    r = {"layout": name, "items": int(sizes.sum()), "clusters": int(sizes.size), "icc": icc,
                         "margin": margin, "scenario": scenario, "design": design, "datasets": datasets,
                         "tied_reach_share": tied_reach_share(sizes, margin)}
                    for truth_name, ((w, b, m), truth) in data.items():
                        label, used, covered, fixed, fixed_cov = simulate_design(w, b, m, margin, truth,
                                                                                 alpha=ALPHA, **options)
                        key = truth_name.replace(" ", "_")
                        r[f"{key}: non_inferior"] = float((label == 1).mean())
                        r[f"{key}: non_inferior_fixed"] = float((fixed == 1).mean())
                        r[f"{key}: not_non_inferior"] = float((label == -1).mean())
                        r[f"{key}: not_non_inferior_fixed"] = float((fixed == -1).mean())
                        r[f"{key}: mean_items_share"] = float(used.mean())
                        r[f"{key}: coverage"] = float(covered.mean())
                        r[f"{key}: coverage_fixed"] = float(fixed_cov.mean())
                        r[f"{key}: agreement"] = float((label == fixed).mean())
                        r[f"{key}: agreement_non_inferior"] = float(((label == 1) == (fixed == 1)).mean())
                    fixed_power = r["no_change: non_inferior_fixed"]
                    r["power_ratio"] = r["no_change: non_inferior"] / fixed_power if fixed_power > 0 else None
                    fixed_other = r["3_margins: not_non_inferior_fixed"]
                    r["power_ratio_not_non_inferior"] = (r["3_margins: not_non_inferior"] / fixed_other
                                                         if fixed_other > 0 else None)
                    if design == CANDIDATES[0][0]:  # the statistic's own noise, and what no boundary design can do
                        for truth_name, side in (("no change", 1.0), ("3 margins", -1.0)):
                            (w, b, m), _ = data[truth_name]
                            stat, shares = look_statistics(w, b, m, margin)
                            for k, v in boundary_share_floor(side * stat, shares, ALPHA).items():
                                r[f"{truth_name.replace(' ', '_')}: {k}"] = v
                    out.append(r)
                    if design == CANDIDATES[0][0]:
                        print(f"GS {name:<40} margin {margin:.2f} {scenario:<17} false NI "
                              f"{r['at_the_margin: non_inferior']:.4f} (fixed {r['at_the_margin: non_inferior_fixed']:.4f})"
                              f" cov {r['at_the_margin: coverage']:.3f}/{r['no_change: coverage']:.3f} power "
                              f"{r['no_change: non_inferior']:.3f} vs {fixed_power:.3f} items@0 "
                              f"{r['no_change: mean_items_share']:.2f} items@3m {r['3_margins: mean_items_share']:.2f} "
                              f"agree {r['no_change: agreement']:.2f}/{r['3_margins: agreement']:.2f}", flush=True)
    return out


def brownian_limits(looks=(3, 4, 5, 6, 8), families=("obrien-fleming", "hsd-4", "hsd-3", "hsd-2", "hsd-1", "pocock"),
                    powers_mid=(0.5, 0.6, 0.7, 0.8, 0.9), powers_clear=(0.9, 0.95, 0.99)) -> dict:
    """What equally spaced looks can do at all, on the canonical model (the statistic Brownian motion with unit
    variance, no clusters, no discreteness; exact by recursive integration): per spending family and number of looks,
    the worst power ratio against the fixed test over fixed-test powers 0.5-0.9 and the expected share of items at
    fixed-test powers 0.9 / 0.95 / 0.99 (the drift ``z_(1 - alpha) + z_power``); and the least expected share at
    each clear power among the designs that keep the power ratio at 0.9 or more."""
    from scipy.stats import norm

    from snapeval.stats.groupseq import efficacy_bounds, exit_probabilities

    z = norm.ppf(1 - ALPHA)
    table = []
    for k in looks:
        t = np.arange(1, k + 1) / k
        for family in families:
            bounds = efficacy_bounds(t, ALPHA, family)

            def run(power, bounds=bounds, t=t):
                p = exit_probabilities(bounds, t, drift=z + norm.ppf(power))
                return float(p.sum()), float((p * t).sum() + 1 - p.sum())

            ratio = min(run(p)[0] / p for p in powers_mid)
            table.append({"looks": k, "spending": family, "last_boundary": float(bounds[-1]),
                          "worst_power_ratio_fixed_power_0.5_to_0.9": ratio,
                          "items_share": {f"{p:g}": run(p)[1] for p in powers_clear}})
    best = {}
    for p in powers_clear:
        ok = [r for r in table if r["worst_power_ratio_fixed_power_0.5_to_0.9"] >= 0.9]
        top = min(ok, key=lambda r: r["items_share"][f"{p:g}"])
        best[f"{p:g}"] = {"items_share": top["items_share"][f"{p:g}"], "looks": top["looks"],
                          "spending": top["spending"]}
    return {"what": brownian_limits.__doc__.split("\n\n")[0].replace("\n   ", ""), "designs": table,
            "least_items_share_with_power_ratio_at_least_0.9": best}


def gs_summary(rows: list[dict]) -> dict:
    """Per candidate design and layout: the worst false non-inferior rate and coverage, the smallest power ratio
    where the fixed test's power is at least 0.5 (below it the ratio is of two small numbers; those rows are listed
    with their powers), and the largest mean share of items used where the effect is clear (no change, the fixed test's
    power at least 0.9; a drop of 3 margins, the fixed test shows it with at least 0.9), with the rows above 0.6."""
    out = {}
    for design, _ in CANDIDATES:
        per = {}
        for layout in dict.fromkeys(r["layout"] for r in rows):
            mine = [r for r in rows if r["layout"] == layout and r["design"] == design]
            powered = [r for r in mine if r["no_change: non_inferior_fixed"] >= 0.5]
            clear0 = [r for r in mine if r["no_change: non_inferior_fixed"] >= 0.9]
            clear3 = [r for r in mine if r["3_margins: not_non_inferior_fixed"] >= 0.9]
            per[layout] = {
                "rows": len(mine),
                "worst_false_non_inferior": max(r["at_the_margin: non_inferior"] for r in mine),
                "worst_false_non_inferior_fixed": max(r["at_the_margin: non_inferior_fixed"] for r in mine),
                "worst_coverage": min(min(r["at_the_margin: coverage"], r["no_change: coverage"],
                                          r["3_margins: coverage"]) for r in mine),
                "worst_coverage_fixed": min(min(r["at_the_margin: coverage_fixed"], r["no_change: coverage_fixed"],
                                                r["3_margins: coverage_fixed"]) for r in mine),
                "smallest_power_ratio_where_fixed_power_at_least_0.5": min(
                    (r["power_ratio"] for r in powered), default=None),
                "smallest_not_non_inferior_power_ratio_at_3_margins_where_fixed_at_least_0.5": min(
                    (r["power_ratio_not_non_inferior"] for r in mine if r["3_margins: not_non_inferior_fixed"] >= 0.5),
                    default=None),
                "rows_with_fixed_power_at_least_0.5": len(powered),
                "low_power_rows": [[r["margin"], r["scenario"], r["no_change: non_inferior"],
                                    r["no_change: non_inferior_fixed"]] for r in mine
                                   if 0 < r["no_change: non_inferior_fixed"] < 0.5],
                "largest_items_share_no_change_clear": max((r["no_change: mean_items_share"] for r in clear0),
                                                           default=None),
                "rows_clear_no_change": len(clear0),
                "rows_clear_no_change_above_0.6": [
                    {"margin": r["margin"], "scenario": r["scenario"], "items_share": r["no_change: mean_items_share"],
                     "fixed_power": r["no_change: non_inferior_fixed"], "tied_reach_share": r["tied_reach_share"]}
                    for r in clear0 if r["no_change: mean_items_share"] > 0.6],
                "largest_items_share_3_margins_clear": max((r["3_margins: mean_items_share"] for r in clear3),
                                                           default=None),
                "rows_clear_3_margins": len(clear3),
                "rows_clear_3_margins_above_0.6": [
                    {"margin": r["margin"], "scenario": r["scenario"], "items_share": r["3_margins: mean_items_share"],
                     "fixed_power": r["3_margins: not_non_inferior_fixed"]}
                    for r in clear3 if r["3_margins: mean_items_share"] > 0.6],
                "mean_items_share_no_change_all_rows": float(np.mean([r["no_change: mean_items_share"] for r in mine])),
                "agreement_with_fixed_grid": {
                    t: [min(r[f"{t}: agreement"] for r in mine), max(r[f"{t}: agreement"] for r in mine)]
                    for t in ("at_the_margin", "no_change", "3_margins")},
                "agreement_on_non_inferior": [min(min(r[f"{t}: agreement_non_inferior"] for r in mine)
                                                  for t in ("at_the_margin", "no_change", "3_margins")), 1.0],
            }
        out[design] = per
    return out


def choose(summary: dict) -> dict:
    """The default by issue #61's criteria, from the candidates' summary. Hard constraints on every layout: the false
    "non-inferior" rate at most alpha and coverage at least the nominal 1 - 2 alpha, each up to 3 Monte Carlo se; the
    power ratio at least 0.9 where the fixed test's power is at least 0.5; and the same for the not-non-inferior side
    at 3 margins on each layout where some candidate keeps it (none does on AIME's 30 clusters: it is reported, not
    required there). Then the fewest clear rows above 60% of the items, then the least mean share at no change."""
    se = math.sqrt(ALPHA * (1 - ALPHA) / GS_DATASETS)
    se_cov = math.sqrt(2 * ALPHA * (1 - 2 * ALPHA) / GS_DATASETS)
    other = "smallest_not_non_inferior_power_ratio_at_3_margins_where_fixed_at_least_0.5"
    layouts = list(next(iter(summary.values())))
    kept = {layout: any((per[layout][other] or 0) >= 0.9 for per in summary.values()) for layout in layouts}
    table = []
    for design, per in summary.items():
        failed = [f"{layout}: {what}" for layout, s in per.items() for what, bad in (
            ("false non-inferior", s["worst_false_non_inferior"] > ALPHA + 3 * se),
            ("coverage", s["worst_coverage"] < 1 - 2 * ALPHA - 3 * se_cov),
            ("power ratio", (s["smallest_power_ratio_where_fixed_power_at_least_0.5"] or 1) < 0.9),
            ("not-non-inferior power ratio", kept[layout] and (s[other] or 1) < 0.9)) if bad]
        above = sum(len(s["rows_clear_no_change_above_0.6"]) + len(s["rows_clear_3_margins_above_0.6"])
                    for s in per.values())
        mean = float(np.mean([s["mean_items_share_no_change_all_rows"] for s in per.values()]))
        table.append({"design": design, "fails": failed, "clear_rows_above_0.6": above, "mean_items_share": mean})
    table.sort(key=lambda r: (bool(r["fails"]), r["clear_rows_above_0.6"], r["mean_items_share"]))
    return {"what": choose.__doc__.replace("\n    ", " "), "not_non_inferior_ratio_required": kept,
            "chosen": table[0]["design"], "ranking": table}


def reach_bounds(rows: list[dict], powers=(0.9, 0.925, 0.95, 0.975, 0.99)) -> dict:
    """What no design can do, for the rows where the default design uses more than 60% of the items on a clear effect
    (no change with the fixed test's power >= 0.9, or a drop of 3 margins it shows with >= 0.9), on the canonical
    model (:mod:`snapeval.stats.groupseq`: :func:`tied_stop_ratio`, :func:`least_share_bound`), each row placed at the
    drift where the fixed test has the row's own power. A **tied run** (no change, worse only: no item discordant)
    stops by 60% only if some look at or below 0.6 rejects everything from its statistic up; the largest worst power
    ratio any design that does can keep is the Neyman-Pearson bound. **Other rows**: the least expected share of any
    design at the default design's looks keeping the power ratio >= 0.9 (Lagrangian dual of the optimal design
    problem), with stops for futility allowed, and without (the not-non-inferior side has none of its own); and, on
    the row's own data sets, the statistic's noise and the least share of any boundary design keeping 0.9 of the
    fixed test's power there (:func:`snapeval.stats.groupseq.boundary_share_floor`): the canonical bound assumes unit
    noise, so it is for a larger drift than a row whose statistic is less noisy."""
    from snapeval.stats.groupseq import LOOKS, RATIO, least_share_bound, look_shares, looks_text

    fractions = np.array(look_shares(CANDIDATES[0][1].get("looks", LOOKS)))
    looks = looks_text(CANDIDATES[0][1].get("looks", LOOKS))
    table = {}
    for power in powers:
        got = table[f"{power:g}"] = {"any_design": least_share_bound(fractions, power, ALPHA)[0],
                                     "no_futility_stops": least_share_bound(fractions, power, ALPHA, futility=False)[0]}
        print(f"bound at fixed power {power:g}, looks at {looks}: expected share >= {got['any_design']:.3f} (no "
              f"futility stops {got['no_futility_stops']:.3f})", flush=True)
    by_looks = {str(k): least_share_bound(np.arange(1, k + 1) / k, 0.9, ALPHA)[0] for k in (2, 3, 4, 5, 6, 8, 10)}
    print("bound at fixed power 0.9 by equal looks: " + ", ".join(f"{k}: {v:.3f}" for k, v in by_looks.items()),
          flush=True)
    chosen = CANDIDATES[0][0]
    out = []
    for r in rows:
        if r["design"] != chosen:
            continue
        for truth, key, fixed_key in (("no change", "no_change", "no_change: non_inferior_fixed"),
                                      ("3 margins", "3_margins", "3_margins: not_non_inferior_fixed")):
            fixed, share = r[fixed_key], r[f"{key}: mean_items_share"]
            if fixed < 0.9 or share <= 0.6:
                continue
            entry = {"layout": r["layout"], "margin": r["margin"], "scenario": r["scenario"], "truth": truth,
                     "items_share": share, "fixed_power": fixed}
            if truth == "no change" and r["scenario"] == "worse only":
                entry.update(_tied_verdict(r["tied_reach_share"], fractions, looks, r["margin"], r["clusters"]))
            else:
                entry.update(_share_verdict(least_share_bound(fractions, min(fixed, 0.999), ALPHA)[0],
                                            least_share_bound(fractions, min(fixed, 0.999), ALPHA, futility=False)[0],
                                            looks))
                entry.update(_noise_verdict({k: r[f"{key}: {k}"] for k in (
                    "statistic_mean_last_look", "statistic_sd_last_look", "least_share_boundary_designs",
                    "least_share_boundary_designs_no_futility_stops")}, fixed))
            print(f"bound: {entry['layout'][:24]} {entry['margin']:.2f} {entry['scenario']:<17} {truth:<9} items "
                  f"{share:.3f}: {entry['verdict']}" + (f"; {entry['noise']}" if "noise" in entry else ""),
                  flush=True)
            out.append(entry)
    return {"what": reach_bounds.__doc__.split("\n\n")[0].replace("\n   ", ""), "looks": [float(s) for s in fractions],
            "ratio": RATIO, "least_share_by_fixed_power": table,
            "least_share_at_fixed_power_0.9_by_equal_looks": by_looks, "rows": out}


def _tied_verdict(tied: float, fractions: np.ndarray, looks: str, margin: float, clusters: int) -> dict:
    """A tied run's row: the Neyman-Pearson bound at the default's looks at or below 0.6, and at the best of 1-10
    equal looks; and the floor of any valid test whatever the correlation inside clusters
    (:func:`snapeval.stats.groupseq.tied_run_least_clusters`, as a share of the layout's clusters)."""
    from snapeval.stats.groupseq import RATIO, TIED_STOP_RATIO, tied_run_least_clusters, tied_stop_ratio

    def best(shares):
        return max([(tied_stop_ratio(float(s), tied, ALPHA), float(s)) for s in shares
                    if tied - 1e-12 <= s <= 0.6 + 1e-12], default=(0.0, None))

    mine = best(fractions)
    equal = {k: best(np.arange(1, k + 1) / k) for k in range(1, 11)}
    top = max(equal, key=lambda k: equal[k][0])
    least = tied_run_least_clusters(margin, ALPHA)
    out = {"tied_reach_share": tied, "tied_stop_ratio_bound": mine[0], "tied_stop_look": mine[1],
           "best_equal_looks": top, "tied_stop_ratio_bound_best_looks": equal[top][0],
           "any_test_least_tied_clusters": least, "any_test_tied_share_floor": min(1.0, least / clusters)}
    if least / clusters > 0.6:
        out["verdict"] = (f"out of reach for any valid test: with each cluster losing all its items with probability "
                          f"{margin:g} (perfect correlation inside clusters, in the null) {least} tied clusters are "
                          f"needed ((1 - {margin:g})^{least} <= {ALPHA:g}), {least / clusters:.3f} of the "
                          f"{clusters}; on the design's statistic a tied run reaches z_(1-alpha) only at {tied:.2f}")
    elif tied > 0.6:
        out["verdict"] = (f"out of reach for any design: a tied run's statistic reaches z_(1-alpha), below which no "
                          f"valid boundary lies, only at {tied:.2f} of the items")
    elif mine[0] < RATIO:
        out["verdict"] = (f"out of reach with looks at {looks}: a design stopping a tied run by 60% keeps at most "
                          f"{mine[0]:.3f} of the fixed test's power (< {RATIO}); with {top} equal looks at most "
                          f"{equal[top][0]:.3f} (a look at {equal[top][1]:.2f})")
    else:
        out["verdict"] = (f"not out of reach on the canonical model: a design stopping a tied run at {mine[1]:.2f} "
                          f"can keep up to {mine[0]:.3f} of the fixed test's power; the design re-plans only from "
                          f"{TIED_STOP_RATIO} (the candidates re-planned from 0.94 measure the loss on this layout)")
    return out


def fixed_rule_size_worse_only(sizes=range(20, 1201), margins=(0.02, 0.05, 0.10)) -> dict:
    """The fixed rule's exact false "non-inferior" rate on independent items where the candidate only loses
    (P(worse) = margin, P(better) = 0; :func:`snapeval.stats.binary.tango_size_worse_only`), for every n in
    ``sizes``: Tango's test is asymptotic, and with few expected losses it exceeds alpha near the n where a tied run
    first reaches z_(1-alpha). The design inherits it at its last look."""
    from snapeval.stats.binary import tango_size_worse_only
    from snapeval.stats.groupseq import tied_run_least_clusters

    out = {"what": fixed_rule_size_worse_only.__doc__.replace("\n    ", " "), "n": [min(sizes), max(sizes)],
           "margins": {}}
    for margin in margins:
        rate = {n: tango_size_worse_only(n, margin, ALPHA) for n in sizes}
        worst = max(rate, key=rate.get)
        above = [n for n, v in rate.items() if v > ALPHA]
        out["margins"][f"{margin:g}"] = {
            "worst": rate[worst], "worst_n": worst, "n_above_alpha": len(above),
            "n_above_0.055": sum(v > 0.055 for v in rate.values()),
            "largest_n_above_alpha": max(above, default=None),
            "any_test_least_tied_items": tied_run_least_clusters(margin, ALPHA),
            "at": {str(n): rate[n] for n in (100, 200, 400, 1000) if n in rate}}
        print(f"fixed rule, worse only, margin {margin:g}: exact false NI up to {rate[worst]:.4f} (n = {worst}); "
              f"{len(above)} of {len(rate)} n above {ALPHA:g}, the largest {max(above, default=None)}", flush=True)
    return out


def _share_verdict(bound: float, plain: float, looks: str) -> dict:
    """Another row: the least expected share of any design at the default's looks, with and without futility stops."""
    out = {"least_share_any_design": bound, "least_share_no_futility_stops": plain}
    if bound > 0.6:
        out["verdict"] = f"out of reach for any design with looks at {looks}: expected share >= {bound:.3f}"
    elif plain > 0.6:
        out["verdict"] = (f"out of reach with looks at {looks} without stops for futility (>= {plain:.3f}); with "
                          f"them >= {bound:.3f}, not shown out of reach")
    else:
        out["verdict"] = f"not out of reach: the bound is {bound:.3f} ({plain:.3f} without stops for futility)"
    return out


def _noise_verdict(floor: dict, fixed: float) -> dict:
    """The row's own statistic against the canonical model (:func:`snapeval.stats.groupseq.boundary_share_floor` on
    the default's rows): its noise, the drift the canonical model would put at the row's fixed power, and the least
    share of any boundary design on the row's own data sets."""
    from scipy.stats import norm

    canonical = float(norm.ppf(1 - ALPHA) + norm.ppf(min(fixed, 0.999)))
    out = {**floor, "canonical_drift_at_fixed_power": canonical}
    sd, mean = floor["statistic_sd_last_look"], floor["statistic_mean_last_look"]
    low, plain = floor["least_share_boundary_designs"], floor["least_share_boundary_designs_no_futility_stops"]
    out["noise"] = (f"the statistic's sd at the last look is {sd:.2f} (the canonical model's 1), its mean {mean:.2f} "
                    f"(the canonical model puts {canonical:.2f} at this fixed power): the canonical bound is for a "
                    f"larger drift than the row has")
    if low > 0.6:
        out["noise"] += f"; out of reach for any boundary design on these data sets (>= {low:.3f})"
    elif plain > 0.6:
        out["noise"] += (f"; any boundary design keeping 0.9 of the fixed test's power on these data sets needs >= "
                         f"{plain:.3f} without stops for futility (>= {low:.3f} with them)")
    else:
        out["noise"] += f"; on these data sets any boundary design needs >= {low:.3f} ({plain:.3f} without futility)"
    return out


def analysis(choice: dict, bounds: dict, rows: list[dict]) -> str:
    """Why the default's clear rows above 60% stay there, in numbers from this run: what each candidate with fewer
    such rows failed, each row's noise and boundary-design floor (:func:`reach_bounds`), and the power ratio's
    weakest row (the row each failing candidate lost it on)."""
    ranking = {r["design"]: r for r in choice["ranking"]}
    mine = ranking[CANDIDATES[0][0]]["clear_rows_above_0.6"]
    fewer = [r for r in choice["ranking"] if r["clear_rows_above_0.6"] < mine]
    parts = [f"The default leaves {mine} clear rows above 60%. Every candidate with fewer fails a hard constraint: "
             + "; ".join(f"{r['design']} ({r['clear_rows_above_0.6']}): {', '.join(r['fails'])}" for r in fewer) + "."]
    required = choice["not_non_inferior_ratio_required"]
    for r in fewer:  # where each lost a power ratio: the row, its fixed power and the statistic's noise there
        for ratio_key, fixed_key, truth, side in (
                ("power_ratio", "no_change: non_inferior_fixed", "no_change", "non-inferior"),
                ("power_ratio_not_non_inferior", "3_margins: not_non_inferior_fixed", "3_margins", "not non-inferior")):
            worst = [(x[ratio_key], x) for x in rows if x["design"] == r["design"] and x[ratio_key] is not None
                     and x[fixed_key] >= 0.5 and (side == "non-inferior" or required[x["layout"]])]
            ratio, x = min(worst, key=lambda v: v[0])
            if ratio >= 0.9:
                continue
            noise = next(y[f"{truth}: statistic_sd_last_look"] for y in rows if y["design"] == CANDIDATES[0][0]
                         and (y["layout"], y["margin"], y["scenario"]) == (x["layout"], x["margin"], x["scenario"]))
            parts.append(f"{r['design']} kept {ratio:.3f} of the fixed test's '{side}' power at {x['layout']}, margin "
                         f"{x['margin']:g}, {x['scenario']} (fixed power {x[fixed_key]:.3f}, the statistic's sd "
                         f"{noise:.2f}).")
    parts.append("Mechanism: under the clear alternatives the statistic is less noisy than the canonical model's unit "
                 "variance (the worst-case design effect exceeds the true one; at low discordance the variance "
                 "restricted to the margin exceeds the truth's), so a row's fixed power sits at a smaller drift and "
                 "its mean path crosses the early boundaries later than the canonical bound assumes; and where the "
                 "noise is small the power ratio is the more sensitive to alpha spent early, which raises the last "
                 "boundary (a rise of d costs about phi(.) d / sd of the power near the fixed test's threshold). Per "
                 "row (used; the statistic's sd and mean at the last look against the canonical drift; the least "
                 "share of any boundary design on the row's own data sets, with / without futility stops): "
                 + "; ".join(f"{e['layout'].split(' (')[0]}, margin {e['margin']:g}, {e['scenario']}, {e['truth']}: "
                             f"{e['items_share']:.3f}; sd {e['statistic_sd_last_look']:.2f}, mean "
                             f"{e['statistic_mean_last_look']:.2f} against {e['canonical_drift_at_fixed_power']:.2f}; "
                             f">= {e['least_share_boundary_designs']:.3f} / "
                             f"{e['least_share_boundary_designs_no_futility_stops']:.3f}"
                             for e in bounds["rows"] if "noise" in e) + ".")
    return " ".join(parts)


def monotone_dips(rng, datasets: int = 400) -> list[dict]:
    """``--monotone`` on a curve that breaks it (issue #61): budgets 1024 and 256 unchanged (each item flipped with
    probability ``churn`` against a reference solving half of them), 512 dips by 3 margins, independent items. The share of data sets where the fine 256 is
    labelled not non-inferior by monotonicity, with the first-look check (now) and without it (before issue #61: every
    budget below a settled failure), and where the search warns."""
    from snapeval.report.search import IMPLIED, SearchSettings, search
    from snapeval.stats import DecisionRule

    out = []
    for items, margin, churn in ((40, 0.10, 0.0), (400, 0.05, 0.05), (400, 0.10, 0.10), (1000, 0.02, 0.01)):
        clusters = {i: [i] for i in range(items)}
        labelled = warned = reached = monotone_failed = monotone_labelled = 0
        for _ in range(datasets):
            reference = (rng.random(items) < 0.5).astype(float)
            flip = rng.random((3, items)) < churn  # symmetric churn: no true difference
            fine = np.where(flip, 1.0 - reference, reference)
            dipped = np.where(rng.random(items) < 6 * margin, 0.0, fine[1])  # half the items solved: a drop of 3 margins
            below = np.where(rng.random(items) < 9 * margin, 0.0, fine[2])  # a monotone curve: 256 drops further
            scores = {None: reference, ("m", 1024): fine[0], ("m", 512): dipped, ("m", 256): fine[2]}
            control = {**scores, ("m", 256): below}

            def evaluate(batch, cells, scores=scores):
                return {c: {i: float(scores[c][i]) for i in batch} for c in cells}

            result = search(clusters, [k for k in scores if k is not None], evaluate,
                            rule=DecisionRule(margin=margin),
                            settings=SearchSettings(monotone=True, seed=int(rng.integers(1 << 30))))
            failed = result.cells[("m", 512)].label == "not non-inferior"
            reached += failed
            labelled += failed and result.cells[("m", 256)].how == IMPLIED
            warned += bool(result.warnings)
            kept = search(clusters, [k for k in control if k is not None],
                          lambda batch, cells, control=control: {c: {i: float(control[c][i]) for i in batch}
                                                                 for c in cells},
                          rule=DecisionRule(margin=margin), settings=SearchSettings(monotone=True, seed=1))
            monotone_failed += kept.cells[("m", 512)].label == "not non-inferior"
            monotone_labelled += kept.cells[("m", 256)].how == IMPLIED
        out.append({"items": items, "margin": margin, "churn": churn, "dip": 3 * margin, "datasets": datasets,
                    "dip_settled_not_non_inferior": reached / datasets,
                    "fine_budget_labelled_by_monotonicity_with_check": labelled / datasets,
                    "fine_budget_labelled_by_monotonicity_before": reached / datasets,
                    "warned": warned / datasets,
                    "monotone_control_512_failed": monotone_failed / datasets,
                    "monotone_control_256_labelled": monotone_labelled / datasets})
        print(f"monotone dip: {items} items, margin {margin}: 512 failed in {reached / datasets:.3f}; the fine 256 "
              f"labelled by monotonicity {labelled / datasets:.3f} (before: {reached / datasets:.3f}); warned "
              f"{warned / datasets:.3f}; a monotone curve (256 dropping 4.5 margins): 256 labelled "
              f"{monotone_labelled / datasets:.3f} of {monotone_failed / datasets:.3f}", flush=True)
    return out


def replayed() -> dict:
    """The search over results/quickstart against the full grid's report, at the sweep's margin and at 0.1."""
    import pandas as pd

    from snapeval.report import tables
    from snapeval.report.results_table import rebuild_table
    from snapeval.stats import DecisionRule
    from snapeval.report.search import SearchSettings, render, replay

    out = {}
    for margin in (0.02, 0.10):
        rule = DecisionRule(margin=margin)
        grid = tables.decisions(tables.paired(rebuild_table(REPO / "results" / "quickstart", write=False,
                                                            decision=rule)))
        full = {(r.task, r.method): (r.decision, None if pd.isna(r.smallest_ni_budget) else int(r.smallest_ni_budget))
                for r in grid.itertuples()}
        for design, monotone in (("group-sequential", False), ("group-sequential", True), ("e-process", False)):
            settings = SearchSettings(batch=8, seed=0, monotone=monotone, design=design)
            groups = replay(REPO / "results" / "quickstart", rule=rule, settings=settings)
            answers, cells = {}, []
            for g in groups:
                for method, answer in g.result.method_decisions().items():
                    answers[(g.task, method)] = answer
                cells += [{"task": g.task, "method": m, "budget": b, "label": c.label, "how": c.how, "items": c.items,
                           "why": c.why, "of": g.result.total_items} for (m, b), c in g.result.cells.items()]
            used = sum(g.result.evaluations for g in groups)
            grid_evaluations = sum(g.result.full_grid_evaluations for g in groups)
            reference = sum(g.result.reference_items for g in groups)
            items = sum(g.result.total_items for g in groups)
            same = {f"{t} / {m}": {"search": list(answers[(t, m)]), "full grid": list(full[(t, m)]),
                                   "same": answers[(t, m)] == full[(t, m)]} for (t, m) in full}
            out[f"margin {margin:g}, {design}, monotone {monotone}"] = {
                "cells_run": sum(g.result.cells_run for g in groups),
                "cells_stopped_early": sum(g.result.stopped_early for g in groups),
                "monotone_warnings": [w for g in groups for w in g.result.warnings],
                "item_evaluations": used, "full_grid_item_evaluations": grid_evaluations,
                "fraction": used / grid_evaluations, "full_cache_items": reference, "items": items,
                "same_answers": sum(v["same"] for v in same.values()), "answers": len(same), "by_method": same,
                "cells": cells, "markdown": render(groups, rule, settings)}
    return out


def main() -> None:
    load_before = os.getloadavg()
    start = time.process_time()
    rng = np.random.default_rng(SEED)
    rows = []
    for name, sizes in layouts().items():
        single = bool((sizes == 1).all())  # each item its own cluster: the correlation has no effect
        for icc in ICCS[:1] if single else ICCS:
            for margin in MARGINS:
                for scenario, p_better in SCENARIOS.items():
                    datasets = DATASETS // 2 if sizes.sum() > 500 else DATASETS
                    rows.append(row(rng, name, sizes, None if single else icc, margin, scenario, p_better,
                                    datasets))
                    r = rows[-1]
                    print(f"{name:<42} icc {icc or 0:.1f} margin {margin:.2f} {scenario:<17} false NI "
                          f"{r['false_non_inferior']:.4f} coverage {r['coverage_at_margin']:.4f} / "
                          f"{r['coverage_at_zero']:.4f} power@0 {r['power_at_zero']:.3f} "
                          f"broken settled {r['settled_not_non_inferior_at_3_margins']:.3f}", flush=True)
    simulation_cpu = time.process_time() - start
    gs_start = time.process_time()
    group_rows = gs_rows(np.random.default_rng(SEED + 61))
    gs_cpu = time.process_time() - gs_start
    summary = gs_summary(group_rows)
    choice, bounds = choose(summary), reach_bounds(group_rows)
    choice["analysis"] = analysis(choice, bounds, group_rows)
    dips = monotone_dips(np.random.default_rng(SEED + 62))
    replay_results = replayed()
    payload = {
        "benchmark": "sequential_search", "seed": SEED, "datasets_per_row": f"{DATASETS} ({DATASETS // 2} for the "
        "1,000-item layout; half of that for the rows at 0 and at 3 margins)", "alpha": ALPHA,
        "looks": "after every cluster (the most looks any batching can make)",
        "monte_carlo_se_at_0.05": math.sqrt(0.05 * 0.95 / DATASETS),
        "monte_carlo_se_at_0.05_1000_items": math.sqrt(0.05 * 0.95 / (DATASETS // 2)),
        "worst_false_non_inferior": max(r["false_non_inferior"] for r in rows),
        "worst_coverage_at_margin": min(r["coverage_at_margin"] for r in rows),
        "worst_coverage_at_zero": min(r["coverage_at_zero"] for r in rows),
        "nominal_coverage": 1 - 2 * ALPHA, "rows": rows,
        "group_sequential": {
            "design": "5 looks at 20/40/60/80/100% of the items (whole clusters, realised shares rounded to 0.01), "
                      "Lan-DeMets boundaries on Tango's statistic at -margin on worst-case design-effect counts (each "
                      "side one-sided at alpha): the non-inferior side Hwang-Shih-DeCani -3, only at the looks whose "
                      "items, all tied, could reach z_(1-alpha) (plan time, the layout's worst-case design effect; the "
                      "last look always), re-planned where that design stops a tied run only after 60% of the items "
                      "and a look at or below 60% can stop it keeping a canonical worst power ratio >= 0.98 (that "
                      "look, at the tied run's own statistic, and the last with the rest of alpha); the other side "
                      "Hwang-Shih-DeCani -1 at every look; out-of-reach futility (non-binding: the last look reached "
                      "with probability < 0.05 if the items left show no change at the discordance seen so far, and "
                      "'not non-inferior' with conditional power < 0.10); the fixed-sample rule on the same data at "
                      "the last look",
            "datasets_per_row": GS_DATASETS, "icc_clustered": GS_ICC,
            "monte_carlo_se_at_0.05": math.sqrt(0.05 * 0.95 / GS_DATASETS),
            "truths": "at the margin: P(worse) = P(better) + margin; no change: P(worse) = P(better) (worse only: "
                      "no discordance at all); 3 margins: P(worse) = P(better) + 3 margins",
            "candidates": {name: options for name, options in CANDIDATES}, "chosen": CANDIDATES[0][0],
            "summary": summary, "choice": choice, "brownian_motion_limits": brownian_limits(),
            "reach_bounds": bounds, "fixed_rule_size_worse_only": fixed_rule_size_worse_only(), "rows": group_rows,
            "cpu_seconds": gs_cpu},
        "monotone_check": {"what": "budgets 1024 and 256 unchanged (each item flipped with probability 'churn' "
                                   "against a reference solving half), 512 dips by 3 margins; --monotone with the "
                                   "first-look check",
                           "rows": dips},
        "quickstart_replay": replay_results,
        "simulation_cpu_seconds": simulation_cpu,
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
    }
    path = write_json("sequential_search.json", payload)
    print(f"worst false non-inferior {payload['worst_false_non_inferior']:.4f}; worst coverage "
          f"{payload['worst_coverage_at_margin']:.4f} (margin) / {payload['worst_coverage_at_zero']:.4f} (zero); "
          f"{len(rows)} rows in {simulation_cpu:.0f} s of CPU")
    for key, value in replay_results.items():
        print(f"quickstart replay, {key}: {value['cells_stopped_early']} of {value['cells_run']} cells run stopped "
              f"early; {value['item_evaluations']} of {value['full_grid_item_evaluations']} "
              f"item-evaluations ({value['fraction']:.0%}); same answers {value['same_answers']} of {value['answers']}")
    print(f"chosen by the criteria: {payload['group_sequential']['choice']['chosen']} (the default: "
          f"{CANDIDATES[0][0]})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
