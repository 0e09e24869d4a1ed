"""The sign-flip permutation test over clusters, and the confidence bound it implies.

Under H0 "the candidate and the reference are exchangeable on every item", swapping the two answers of a cluster
flips the sign of that cluster's total difference, and every one of the ``2^k`` sign patterns of ``k`` clusters is
equally likely (Fisher's randomization test for paired data; Good, "Permutation, Parametric and Bootstrap Tests of
Hypotheses", 3rd ed., Springer 2005, section 3.1). Whole clusters are flipped, never single items, so questions that
share a document (or the samples of one problem) count as one unit: the test stays exact whatever the correlation
inside a cluster. The statistic is the sum of the cluster totals, i.e. the mean per-item difference times ``n``.

p-values are mid-p (ties with the observed statistic count one half; Lancaster 1961), which for 0/1 scores in
clusters of one item is exactly the McNemar mid-p test (:func:`snapeval.stats.binary.mcnemar_midp`). The null
distribution is exact whenever it can be: by convolution when the cluster totals are integers (0/1 metrics), by
enumerating the ``2^k`` patterns for ``k <= 16`` clusters, otherwise from :data:`DRAWS` random patterns (seeded,
with the observed pattern counted among them: Phipson & Smyth, "Permutation p-values should never be zero",
Stat. Appl. Genet. Mol. Biol. 9(1):39, 2010).

A shifted null (``shift``) tests "the mean difference equals ``shift``": each cluster total is centred by
``shift * size`` first, which is how the non-inferiority test asks "is the drop smaller than the margin?".
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

EXACT_CLUSTERS = 16
DRAWS = 20_000
SEED = 0
_DP_SUPPORT = 400_000  # largest integer range convolved exactly
ALTERNATIVES = ("two-sided", "less", "greater")


def cluster_totals(differences, clusters=None) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums of the per-item differences and the cluster sizes (``clusters``: one label per item;
    default: every item its own cluster), in the order of the sorted labels."""
    d = np.asarray(differences, dtype=np.float64)
    if clusters is None:
        return d.copy(), np.ones_like(d)
    labels = np.unique(np.asarray(clusters, dtype=object), return_inverse=True)[1]
    k = int(labels.max()) + 1 if labels.size else 0
    return np.bincount(labels, weights=d, minlength=k), np.bincount(labels, minlength=k).astype(np.float64)


def _integer(values: np.ndarray) -> bool:
    return bool(np.all(np.abs(values - np.round(values)) < 1e-9)) and float(np.abs(values).sum()) <= _DP_SUPPORT


def _null_pmf(totals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact distribution of ``sum(s_k * t_k)`` for integer totals: ``(values, probabilities)``, by convolution."""
    ints = np.abs(np.round(totals).astype(np.int64))
    ints = ints[ints > 0]
    top = int(ints.sum())
    pmf = np.zeros(2 * top + 1)
    pmf[top] = 1.0
    for t in ints:
        shifted = np.zeros_like(pmf)
        shifted[t:] += pmf[:-t] / 2  # +t
        shifted[:-t] += pmf[t:] / 2  # -t
        pmf = shifted
    return np.arange(-top, top + 1, dtype=np.float64), pmf


@lru_cache(maxsize=8)
def _sign_patterns(k: int, draws: int, seed: int) -> tuple[np.ndarray, bool]:
    """``[patterns, k]`` signs: all ``2^k`` when ``k <= EXACT_CLUSTERS`` (exact), else ``draws`` random ones (the
    same ones for the same ``(k, draws, seed)``: drawn once, independent of any data)."""
    if k <= EXACT_CLUSTERS:
        codes = np.arange(2 ** k, dtype=np.int64)[:, None]
        patterns = np.where((codes >> np.arange(k)) & 1, 1.0, -1.0)
    else:
        patterns = np.random.default_rng(seed).choice(np.array([-1.0, 1.0]), size=(draws, k))
    patterns.setflags(write=False)
    return patterns, k <= EXACT_CLUSTERS


def _tail(null: np.ndarray, weights: np.ndarray | None, observed: float, alternative: str,
          exact: bool) -> float:
    """Mid-p tail probability of ``observed`` under the null values (each with ``weights``, or equally likely)."""
    tol = 1e-9 * (1.0 + abs(observed))
    if alternative == "two-sided":
        null, observed = np.abs(null), abs(observed)
    if alternative == "less":
        beyond = null < observed - tol
    else:
        beyond = null > observed + tol
    tie = np.abs(null - observed) <= tol
    if weights is not None:
        return float(min(1.0, weights[beyond].sum() + weights[tie].sum() / 2))
    if exact:
        return float(min(1.0, (beyond.sum() + tie.sum() / 2) / null.size))
    return float(min(1.0, (beyond.sum() + (tie.sum() + 1) / 2) / (null.size + 1)))  # the observed is one draw


def sign_flip_test(totals, sizes=None, *, alternative: str = "two-sided", shift: float = 0.0,
                   draws: int = DRAWS, seed: int = SEED) -> tuple[float, str]:
    """Mid-p value of the sign-flip test of H0 "mean difference = ``shift``" on per-cluster ``totals`` (with their
    ``sizes``, needed when ``shift`` is not 0). ``alternative``: ``less`` (mean below ``shift``), ``greater`` or
    ``two-sided``. Returns ``(p, how)``, ``how`` naming the null distribution (exact or the number of draws)."""
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative={alternative!r} is not allowed; choose one of: {', '.join(ALTERNATIVES)}")
    t = np.asarray(totals, dtype=np.float64)
    if shift:
        t = t - shift * np.asarray(sizes, dtype=np.float64)
    observed = float(t.sum())
    if t.size == 0 or not np.any(np.abs(t) > 1e-12):
        return 1.0, "exact"
    if _integer(t):
        values, pmf = _null_pmf(t)
        return _tail(values, pmf, observed, alternative, True), "exact"
    signs, exact = _sign_patterns(t.size, draws, seed)
    p = _tail(signs @ t, None, observed, alternative, exact)
    return p, "exact" if exact else f"{draws:,} random sign patterns"


def smallest_p(clusters: int, alternative: str = "less", draws: int = DRAWS) -> float:
    """The smallest mid-p value the sign-flip test can give with ``clusters`` clusters (every cluster pointing the
    same way): ``2^-k / 2`` one-sided, ``2^-k`` two-sided; below it no data can reject."""
    one_sided = 0.5 * 2.0 ** -clusters
    if clusters > EXACT_CLUSTERS:
        one_sided = max(one_sided, 0.5 / (draws + 1))
    return min(1.0, one_sided * (2 if alternative == "two-sided" else 1))


def sign_flip_lower_bound(totals, sizes, alpha: float, *, draws: int = DRAWS, seed: int = SEED) -> float:
    """One-sided ``1 - alpha`` lower confidence bound of the mean difference from inverting the sign-flip test:
    the smallest ``shift`` that the one-sided (``greater``) test does not reject at ``alpha``. The p-value is
    non-decreasing in ``shift`` for a fixed set of sign patterns, so bisection finds it; ``-inf`` when no shift can
    be rejected (too few clusters)."""
    t = np.asarray(totals, dtype=np.float64)
    s = np.asarray(sizes, dtype=np.float64)
    ratios = t / s
    lo, hi = float(ratios.min()), float(ratios.max())
    if hi - lo < 1e-12:
        lo, hi = lo - 1.0, hi + 1.0
    signs, exact = _sign_patterns(t.size, draws, seed)

    def p_at(shift: float) -> float:
        centred = t - shift * s
        return _tail(signs @ centred, None, float(centred.sum()), "greater", exact)

    if p_at(lo - 1e-9) >= alpha:
        return -math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        if p_at(mid) < alpha:
            lo = mid
        else:
            hi = mid
    return lo
