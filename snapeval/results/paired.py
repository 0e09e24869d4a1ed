"""Paired statistics: a compressed cell against the cell it must be compared with, item by item.

Cells of one group (same model, task, seed and items) answered the same items, so their difference is measured on
each item and its uncertainty comes from resampling items jointly (a paired bootstrap), not from two independent
error bars: the standard error of a paired difference is usually several times smaller (see "Adding Error Bars to
Evals", arXiv 2411.00640, and lm-eval's open significance work).

- :func:`paired_bootstrap_ci`: percentile CI of the mean paired difference, resampling *clusters* of items (items
  that share one document, or the samples of one problem) with replacement;
- :func:`mcnemar_exact`: the exact two-sided McNemar test on the discordant pairs of a 0/1 metric;
- :func:`compare_cells`: both, plus the flips (items the reference solved and the candidate broke, and the reverse),
  the per-item change in generated length and the items that could not be paired (reported, never paired).

Items are ``(subtask, doc_id)``; a sample's cluster is its ``cluster`` field when the task sets one, else the item.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from snapeval.errors import SnapevalError

BOOTSTRAP_ITERATIONS = 10_000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95


def mcnemar_exact(broke: int, fixed: int) -> float:
    """Two-sided exact McNemar p-value for ``broke`` (1 -> 0) and ``fixed`` (0 -> 1) discordant pairs:
    ``min(1, 2 * P[X <= min(b, c)])`` for ``X ~ Binomial(b + c, 1/2)``; 1.0 with no discordant pair."""
    n = broke + fixed
    if n == 0:
        return 1.0
    k = min(broke, fixed)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_bootstrap_ci(differences, clusters=None, *, iterations: int = BOOTSTRAP_ITERATIONS,
                        seed: int = BOOTSTRAP_SEED, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of per-item ``differences`` (candidate - reference).

    Each replicate draws as many clusters as there are, with replacement (every item of a drawn cluster comes along:
    items of one cluster are not independent), and takes the mean difference over the drawn items. ``clusters``:
    one label per item (default: every item its own cluster). Deterministic for a given ``seed``.
    """
    diffs = np.asarray(differences, dtype=np.float64)
    if diffs.size == 0:
        raise SnapevalError("paired bootstrap: no paired items")
    labels = np.arange(diffs.size) if clusters is None else np.unique(np.asarray(clusters, dtype=object), return_inverse=True)[1]
    count = int(labels.max()) + 1
    sums = np.bincount(labels, weights=diffs, minlength=count)  # per-cluster sum of differences
    sizes = np.bincount(labels, minlength=count).astype(np.float64)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(count, np.full(count, 1.0 / count), size=iterations)  # [iterations, clusters]
    means = (draws @ sums) / (draws @ sizes)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(low), float(high)


@dataclass(frozen=True)
class PairedComparison:
    """A candidate cell against its reference cell on one metric (``metric`` is lm-eval's ``name,filter``)."""

    metric: str
    n: int  # paired items
    clusters: int
    reference_mean: float
    candidate_mean: float
    mean_diff: float  # candidate - reference (in the metric's units; negative = worse for higher-is-better)
    ci_low: float
    ci_high: float
    binary: bool  # every score is 0 or 1 (then McNemar and the flips apply)
    mcnemar_p: float | None
    broke: int  # reference solved (1), candidate did not (0)
    fixed: int  # the reverse
    length_change: float | None  # mean per-item change in generated characters (candidate - reference)
    unpaired: int  # items present in only one of the two cells (never paired, only counted)

    @property
    def significant(self) -> bool:
        """The bootstrap CI excludes zero and, for a 0/1 metric, the exact McNemar test agrees (p < 0.05): the
        percentile bootstrap alone is optimistic with few discordant items."""
        excludes_zero = self.ci_low > 0 or self.ci_high < 0
        return excludes_zero and (self.mcnemar_p is None or self.mcnemar_p < 1 - CONFIDENCE)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "significant": self.significant}


def _items(result, metric: str) -> dict[tuple[str, int], tuple[float, Any, int | None]]:
    """``{(subtask, doc_id): (score, cluster, generated characters)}`` of one cell for ``metric``."""
    out = {}
    for s in result.samples:
        if metric in s.scores:
            length = sum(len(g) for g in s.generations) / len(s.generations) if s.generations else None
            cluster = getattr(s, "cluster", None)
            out[(s.subtask, s.doc_id)] = (s.scores[metric], (s.subtask, cluster if cluster is not None else s.doc_id), length)
    return out


def compare_cells(reference, candidate, metric: str, *, iterations: int = BOOTSTRAP_ITERATIONS,
                  seed: int = BOOTSTRAP_SEED) -> PairedComparison:
    """Pair two :class:`~snapeval.results.schema.CellResult` s item by item on ``metric``.

    Raises a one-line :class:`SnapevalError` when no item can be paired (different items, or no per-item scores).
    """
    ref, cand = _items(reference, metric), _items(candidate, metric)
    common = sorted(set(ref) & set(cand))
    unpaired = len(set(ref) ^ set(cand))
    if not common:
        raise SnapevalError(f"paired comparison on {metric}: the two cells share no scored item "
                            f"({len(ref)} and {len(cand)} items; cells over different items are never paired)")
    r = np.array([ref[k][0] for k in common])
    c = np.array([cand[k][0] for k in common])
    clusters = [ref[k][1] for k in common]
    low, high = paired_bootstrap_ci(c - r, [repr(x) for x in clusters], iterations=iterations, seed=seed)
    binary = bool(np.isin(r, (0.0, 1.0)).all() and np.isin(c, (0.0, 1.0)).all())
    broke = int(((r == 1) & (c == 0)).sum()) if binary else 0
    fixed = int(((r == 0) & (c == 1)).sum()) if binary else 0
    lengths = [(cand[k][2] - ref[k][2]) for k in common if ref[k][2] is not None and cand[k][2] is not None]
    return PairedComparison(
        metric=metric, n=len(common), clusters=len(set(map(repr, clusters))), reference_mean=float(r.mean()),
        candidate_mean=float(c.mean()), mean_diff=float((c - r).mean()), ci_low=low, ci_high=high, binary=binary,
        mcnemar_p=mcnemar_exact(broke, fixed) if binary else None, broke=broke, fixed=fixed,
        length_change=float(np.mean(lengths)) if lengths else None, unpaired=unpaired,
    )
