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

Run: ``python -m benchmarks.sequential_search`` (seeds fixed below; about a minute of one core).
"""
from __future__ import annotations

import math
import os
import time

import numpy as np

from benchmarks.common import REPO, write_json
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
        for monotone in (False, True):
            settings = SearchSettings(batch=8, seed=0, monotone=monotone)
            groups = replay(REPO / "results" / "quickstart", rule=rule, settings=settings)
            answers, cells = {}, []
            for g in groups:
                for method, answer in g.result.method_decisions().items():
                    answers[(g.task, method)] = answer
                cells += [{"task": g.task, "method": m, "budget": b, "label": c.label, "how": c.how, "items": c.items,
                           "of": g.result.total_items} for (m, b), c in g.result.cells.items()]
            used = sum(g.result.evaluations for g in groups)
            grid_evaluations = sum(g.result.full_grid_evaluations for g in groups)
            reference = sum(g.result.reference_items for g in groups)
            items = sum(g.result.total_items for g in groups)
            same = {f"{t} / {m}": {"search": list(answers[(t, m)]), "full grid": list(full[(t, m)]),
                                   "same": answers[(t, m)] == full[(t, m)]} for (t, m) in full}
            out[f"margin {margin:g}, monotone {monotone}"] = {
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
        "nominal_coverage": 1 - 2 * ALPHA, "rows": rows, "quickstart_replay": replay_results,
        "simulation_cpu_seconds": simulation_cpu,
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
    }
    path = write_json("sequential_search.json", payload)
    print(f"worst false non-inferior {payload['worst_false_non_inferior']:.4f}; worst coverage "
          f"{payload['worst_coverage_at_margin']:.4f} (margin) / {payload['worst_coverage_at_zero']:.4f} (zero); "
          f"{len(rows)} rows in {simulation_cpu:.0f} s of CPU")
    for key, value in replay_results.items():
        print(f"quickstart replay, {key}: {value['item_evaluations']} of {value['full_grid_item_evaluations']} "
              f"item-evaluations ({value['fraction']:.0%}); same answers {value['same_answers']} of {value['answers']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
