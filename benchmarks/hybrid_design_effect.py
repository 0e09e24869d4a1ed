"""Issue #48, item 4: would a data-driven design effect buy power where it is sound? results/bench/hybrid_design_effect.json.

The fixed-n rule divides clustered 0/1 counts by the worst-case design effect ``sum(m^2) / n`` (its size holds at any
correlation, its power is low where every item shares a document). The candidate here is the hybrid one audit
proposed: the Rao-Scott design effect **estimated** from the data (cluster-robust over independent variance of the
paired difference, floored at 1; the rule of main e0309bf) once at least ``MIN_CLUSTERS`` clusters hold a discordant
item, else the worst case. It would be adopted only if its non-inferiority size stays at most 0.055 on every row of
the grid: layouts of 100, 400 and 1,000 items in documents of 2-6 questions and LongBench-v2's own 395 in 367
documents; intra-cluster correlation 0.1 / 0.3 / 0.45 / 0.6; margins 0.02 / 0.05 / 0.10; low discordance (P(better)
0.015), high (0.14) and worse only (0), P(worse) = P(better) + margin (the true difference exactly at the margin).
Tango's statistic is computed in closed form on the effective counts (:func:`snapeval.stats.binary.tango_statistic`,
vectorised here and checked against it). Power: the share declared non-inferior at a true difference of 0 (same
discordance), next to the worst case's.

Run: ``python -m benchmarks.hybrid_design_effect`` (seeded; under a minute of one core).
"""
from __future__ import annotations

import math
import os
import time
from statistics import NormalDist

import numpy as np

from benchmarks.common import write_json
from benchmarks.sequential_search import _beta
from snapeval.stats.binary import tango_statistic, worst_case_design_effect

SEED = 4804
DATASETS = 4000
ALPHA = 0.05
MIN_CLUSTERS = 30
ICCS = (0.1, 0.3, 0.45, 0.6)
MARGINS = (0.02, 0.05, 0.10)
SCENARIOS = {"low discordance": 0.015, "high discordance": 0.14, "worse only": 0.0}


def documents(rng, n: int) -> np.ndarray:
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(2, 7)))
    return np.array(sizes, dtype=np.int64)


def tango(w, b, n, delta):
    """:func:`tango_statistic` over arrays (``w``, ``b``, ``n`` effective counts)."""
    a = 2 * n
    bb = -b - w + (2 * n - b + w) * delta
    c = -w * delta * (1 - delta)
    q = (np.sqrt(np.maximum(0.0, bb * bb - 4 * a * c)) - bb) / (2 * a)
    var = n * (2 * q + delta * (1 - delta))
    num = b - w - n * delta
    return np.where(var > 0, num / np.sqrt(np.where(var > 0, var, 1.0)), np.sign(num) * np.inf)


def counts(rng, sizes, icc, p_worse, p_better, datasets):
    """Per data set and cluster: (worse, better) counts."""
    m = np.broadcast_to(sizes, (datasets, sizes.size))
    pw = _beta(rng, p_worse, icc, m.shape)
    pb = np.minimum(_beta(rng, p_better, icc, m.shape), 1 - pw)
    worse = rng.binomial(m, pw)
    better = rng.binomial(m - worse, np.where(pw < 1, pb / np.maximum(1 - pw, 1e-12), 0.0))
    return worse, better


def rejections(worse, better, sizes, margin):
    """(worst case rejects, hybrid rejects, share of data sets where the hybrid estimated) per data set."""
    n, k = float(sizes.sum()), sizes.size
    w, b = worse.sum(1).astype(float), better.sum(1).astype(float)
    mean = (b - w) / n
    robust = k / (k - 1) * (((better - worse) - mean[:, None] * sizes) ** 2).sum(1) / n ** 2
    independent = (w * (1 + mean) ** 2 + b * (1 - mean) ** 2 + (n - w - b) * mean ** 2) / (n * (n - 1))
    estimated = np.where(independent > 0, np.maximum(1.0, robust / np.where(independent > 0, independent, 1.0)), 1.0)
    worst = worst_case_design_effect(sizes)
    enough = ((worse + better) > 0).sum(1) >= MIN_CLUSTERS
    hybrid = np.where(enough, estimated, worst)
    z = NormalDist().inv_cdf(1 - ALPHA)
    rejects_worst = tango(w / worst, b / worst, n / worst, -margin) > z
    rejects_hybrid = tango(w / hybrid, b / hybrid, n / hybrid, -margin) > z
    return rejects_worst, rejects_hybrid, enough


def main() -> None:
    from snapeval.tasks.families import layout_cluster_sizes

    load_before = os.getloadavg()
    start = time.process_time()
    # the vectorised statistic is snapeval's own
    assert abs(float(tango(np.array(3.0), np.array(1.0), np.array(40.0), -0.02)) - tango_statistic(3, 1, 40, -0.02)) \
        < 1e-12
    rng = np.random.default_rng(SEED)
    longbench = layout_cluster_sizes("longbench_v2")
    if longbench is None:
        raise SystemExit("benchmark: LongBench-v2's local data is needed for its real layout (set SNAPEVAL_DATA_DIR)")
    layouts = {f"documents {n}": documents(rng, n) for n in (100, 400, 1000)}
    layouts[f"LongBench-v2's own {sum(longbench)}"] = np.array(longbench, dtype=np.int64)
    rows = []
    for name, sizes in layouts.items():
        for icc in ICCS:
            for margin in MARGINS:
                for scenario, p_better in SCENARIOS.items():
                    worse, better = counts(rng, sizes, icc, p_better + margin, p_better, DATASETS)
                    size_worst, size_hybrid, enough = rejections(worse, better, sizes, margin)
                    worse0, better0 = counts(rng, sizes, icc, p_better + margin / 2, p_better + margin / 2,
                                             DATASETS // 2)
                    power_worst, power_hybrid, _ = rejections(worse0, better0, sizes, margin)
                    rows.append({"layout": name, "items": int(sizes.sum()), "clusters": int(sizes.size),
                                 "worst_case_design_effect": worst_case_design_effect(sizes), "icc": icc,
                                 "margin": margin, "scenario": scenario, "size_worst_case": float(size_worst.mean()),
                                 "size_hybrid": float(size_hybrid.mean()), "estimated_share": float(enough.mean()),
                                 "power_worst_case": float(power_worst.mean()),
                                 "power_hybrid": float(power_hybrid.mean())})
                    r = rows[-1]
                    print(f"{name:<24} icc {icc:.2f} margin {margin:.2f} {scenario:<17} size worst "
                          f"{r['size_worst_case']:.4f} hybrid {r['size_hybrid']:.4f} (estimated in "
                          f"{r['estimated_share']:.2f}); power {r['power_worst_case']:.3f} -> {r['power_hybrid']:.3f}",
                          flush=True)
    worst_hybrid = max(rows, key=lambda r: r["size_hybrid"])
    payload = {"benchmark": "hybrid_design_effect", "seed": SEED, "datasets_per_row": DATASETS, "alpha": ALPHA,
               "min_clusters": MIN_CLUSTERS, "monte_carlo_se_at_0.05": math.sqrt(0.05 * 0.95 / DATASETS),
               "rows_over_0.055": sum(r["size_hybrid"] > 0.055 for r in rows), "rows": rows,
               "worst_hybrid": worst_hybrid, "max_size_worst_case": max(r["size_worst_case"] for r in rows),
               "adopt": all(r["size_hybrid"] <= 0.055 for r in rows),
               "cpu_seconds": time.process_time() - start, "load_average_before": load_before,
               "load_average_after": os.getloadavg()}
    path = write_json("hybrid_design_effect.json", payload)
    print(f"hybrid: {payload['rows_over_0.055']} of {len(rows)} rows over 0.055 (worst {worst_hybrid['size_hybrid']:.4f}"
          f": {worst_hybrid['layout']}, icc {worst_hybrid['icc']}, margin {worst_hybrid['margin']}, "
          f"{worst_hybrid['scenario']}); worst case at most {payload['max_size_worst_case']:.4f}; wrote {path}")


if __name__ == "__main__":
    main()
