"""Paired 0/1 outcomes: the McNemar tests, Tango's score interval and non-inferiority test, clustered counts.

A compressed cell and its reference answered the same items; for a 0/1 metric only the discordant items carry
information: ``worse`` (the reference scored 1, the candidate 0, for a higher-is-better metric) and ``better`` (the
reverse). Differences are *candidate - reference*, oriented so that a negative difference is worse.

Sources (the reference values in ``tests/test_stats.py`` are the published ones):

- McNemar exact conditional and mid-p tests: Fagerland, Lydersen & Laake, "The McNemar test for binary matched-pairs
  data: mid-p and asymptotic are better than exact conditional", BMC Med. Res. Methodol. 13:91 (2013); their book
  "Statistical Analysis of Contingency Tables" (CRC, 2017), chapter 8 (Cavo et al. 2012 example: exact p = 0.052479,
  mid-p = 0.034690). The mid-p test never exceeded its nominal level in their 9,595 scenarios and has more power
  than the exact one at small n, so it is the test used here.
- Tango's asymptotic score interval and test for a difference of paired proportions: Tango, "Equivalence test and
  confidence interval for the difference in proportions for the paired-sample design", Stat. Med. 17:891-908 (1998)
  (the same book, chapter 8: Cavo example -0.0621 (95% CI -0.1240 to -0.0054)). Unlike a Wald or percentile-bootstrap
  interval it does not collapse to a point when no item is discordant: at n = 40 it is about +-0.09.
- Clustered items (several questions on one document): Rao & Scott, "A simple method for the analysis of clustered
  binary data", Biometrics 48:577-585 (1992): divide the counts by a design effect and use the unclustered method on
  the effective counts. The design effect is Kish's for clusters of unequal size at an intra-cluster correlation of 1,
  ``sum(m_k^2) / n`` (Kish, "Survey Sampling", Wiley 1965, section 5.4: ``1 + (m - 1) rho``; unequal sizes:
  Eldridge, Ashby & Kerry, Int. J. Epidemiol. 35:1292-1300, 2006, ``1 + ((cv^2 + 1) mean(m) - 1) rho``), not one
  estimated from the data: see :func:`worst_case_design_effect` for why.
"""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np


def scipy_stats():
    """scipy.stats, imported where a figure is computed (not when a command's parser is built: 1-3 s)."""
    from scipy import stats

    return stats


_NORMAL = NormalDist()


def _binom_pmf(n: int) -> np.ndarray:
    """P[X = k], k = 0..n, for X ~ Binomial(n, 1/2)."""
    return scipy_stats().binom.pmf(np.arange(n + 1), n, 0.5)


def midp_all(discordant: int, alternative: str) -> np.ndarray:
    """:func:`mcnemar_midp` for every split of ``discordant`` items, indexed by the number of worse items."""
    pmf = _binom_pmf(discordant)
    if discordant == 0:
        return np.ones(1)
    cdf = np.cumsum(pmf)
    if alternative == "less":
        return np.clip(1 - cdf + pmf / 2, 0.0, 1.0)
    if alternative == "greater":
        return np.clip(cdf - pmf / 2, 0.0, 1.0)
    w = np.arange(discordant + 1)
    low = np.minimum(w, discordant - w)
    p = np.minimum(1.0, 2 * cdf[low]) - pmf
    return np.where(w == discordant - w, 1 - pmf / 2, p)


def mcnemar_exact(worse: int, better: int) -> float:
    """Two-sided exact conditional McNemar p-value: ``min(1, 2 P[X <= min(worse, better)])``,
    ``X ~ Binomial(worse + better, 1/2)``; 1.0 with no discordant item."""
    n = worse + better
    if n == 0:
        return 1.0
    return float(min(1.0, 2 * _binom_pmf(n)[: min(worse, better) + 1].sum()))


def mcnemar_midp(worse: int, better: int, alternative: str = "two-sided") -> float:
    """McNemar mid-p value for ``worse`` and ``better`` discordant items.

    ``alternative``: ``"two-sided"`` (the exact p minus ``P[X = worse]``; ``1 - P[X = worse] / 2`` when the two counts
    are equal), ``"less"`` (the candidate is worse: ``P[W > worse] + P[W = worse] / 2`` with ``W ~ Binomial(worse +
    better, 1/2)`` the number of worse items under H0) or ``"greater"`` (the reverse).
    """
    n = worse + better
    if n == 0:
        return 1.0
    pmf = _binom_pmf(n)
    if alternative == "less":
        return float(pmf[worse + 1:].sum() + pmf[worse] / 2)
    if alternative == "greater":
        return float(pmf[:worse].sum() + pmf[worse] / 2)
    if alternative != "two-sided":
        raise ValueError(f"alternative={alternative!r} is not allowed; choose one of: two-sided, less, greater")
    if worse == better:
        return float(1 - pmf[worse] / 2)
    return float(min(1.0, 2 * pmf[: min(worse, better) + 1].sum()) - pmf[worse])


def tango_statistic(worse: float, better: float, n: float, delta: float) -> float:
    """Tango's score statistic for H0: difference = ``delta`` (candidate - reference, in (-1, 1)).

    ``T = (better - worse - n delta) / sqrt(n (2 q + delta (1 - delta)))`` with ``q`` the maximum-likelihood estimate
    of P(worse) under H0 (the root of Tango's quadratic). Large T: the data favour a difference above ``delta``.
    Counts may be fractional (effective counts of clustered data).
    """
    a = 2 * n
    b = -better - worse + (2 * n - better + worse) * delta
    c = -worse * delta * (1 - delta)
    q = (math.sqrt(max(0.0, b * b - 4 * a * c)) - b) / (2 * a)
    var = n * (2 * q + delta * (1 - delta))
    num = better - worse - n * delta
    if var <= 0:
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def _tango_root(worse: float, better: float, n: float, z: float) -> float:
    """The delta at which ``tango_statistic == z`` (decreasing in delta), by bisection on (-1, 1)."""
    lo, hi = -1.0 + 1e-12, 1.0 - 1e-12
    for _ in range(200):
        mid = (lo + hi) / 2
        if tango_statistic(worse, better, n, mid) > z:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


def tango_interval(worse: float, better: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Tango's two-sided score interval for the difference (candidate - reference): every delta whose score test
    does not reject, ``|T(delta)| <= z_(1 - (1 - confidence) / 2)``."""
    z = _NORMAL.inv_cdf(1 - (1 - confidence) / 2)
    estimate = (better - worse) / n  # T(estimate) = 0: inside; the clamp only absorbs bisection's last 1e-12
    return min(estimate, _tango_root(worse, better, n, z)), max(estimate, _tango_root(worse, better, n, -z))


def tango_noninferiority(worse: float, better: float, n: float, margin: float, alpha: float) -> tuple[float, float]:
    """Tango's one-sided non-inferiority test of H0: difference <= -margin against H1: difference > -margin.

    Returns ``(p, drop_bound)``: the p-value ``1 - Phi(T(-margin))`` and the one-sided ``1 - alpha`` upper confidence
    bound of the drop (reference - candidate), i.e. minus the lower end of Tango's two-sided ``1 - 2 alpha``
    interval. The two agree: ``p < alpha`` exactly when ``drop_bound < margin``.
    """
    p = 1 - _NORMAL.cdf(tango_statistic(worse, better, n, -margin))
    lower = _tango_root(worse, better, n, _NORMAL.inv_cdf(1 - alpha))
    return float(p), float(-lower)


def tango_size_worse_only(n: int, margin: float, alpha: float) -> float:
    """The exact false "non-inferior" rate of Tango's one-sided test (:func:`tango_noninferiority`) on ``n``
    independent items at the null point where the candidate only ever loses: P(worse) = ``margin``, P(better) = 0
    ("worse only", exactly at the margin). Its rejections are the counts ``worse <= w*`` whose statistic reaches
    ``z_(1 - alpha)``, so the rate is the binomial ``P(Bin(n, margin) <= w*)``: a lower bound on the test's size (the
    size is its largest rate over the null). Tango's test is asymptotic: with few expected losses (``n margin`` small)
    the binomial is skewed and the rate exceeds ``alpha`` near the ``n`` where a run with no loss first reaches
    ``z_(1 - alpha)`` (``docs/statistics.md``, the benchmark ``benchmarks/sequential_search.py``)."""
    if not (isinstance(n, int) and n >= 1) or not 0 < margin < 1 or not 0 < alpha < 0.5:
        raise ValueError(f"n={n!r}, margin={margin!r}, alpha={alpha!r}: need n >= 1, 0 < margin < 1, 0 < alpha < 0.5")
    z = _NORMAL.inv_cdf(1 - alpha)
    most = -1  # the statistic falls as the losses grow, so the rejections are 0..w*
    while most < n and tango_statistic(most + 1, 0, n, -margin) >= z:
        most += 1
    return float(scipy_stats().binom.cdf(most, n, margin)) if most >= 0 else 0.0


def worst_case_design_effect(sizes) -> float:
    """The design effect of a sum of per-item scores over clusters of ``sizes`` items when the items of a cluster are
    perfectly correlated: ``sum(m_k^2) / sum(m_k)`` (1 when every cluster holds one item).

    It bounds the variance of the sum at any intra-cluster correlation ``rho <= 1`` (``Var = sum m_k sigma^2 (1 +
    (m_k - 1) rho) <= sum m_k^2 sigma^2``), so Tango's score test on counts divided by it keeps its level whatever the
    correlation. An estimated design effect does not: the non-inferiority test rejects when few items are discordant,
    exactly where the data say nothing about the correlation (the Rao-Scott ratio estimated from the data, and the
    cluster-robust variance under the null referred to t on clusters - 1 df, both exceed the level on clustered data
    where the compressed cache only breaks items: ``docs/statistics.md`` gives the simulation). LongBench-v2's 395
    local items (357 single, 38 in 10 documents of 2-6) have a worst-case design effect of 523 / 395 = 1.32.
    """
    m = np.asarray(sizes, dtype=np.float64)
    if m.size == 0 or m.sum() <= 0:
        return 1.0
    return float(max(1.0, (m * m).sum() / m.sum()))


def clustered_tango(worse: int, better: int, sizes, margin: float, alpha: float,
                    confidence: float) -> tuple[float, float, float, float, float]:
    """Tango's non-inferiority test and score interval for ``worse`` and ``better`` discordant items among items in
    clusters of ``sizes`` (one entry per cluster; all 1: independent items, exactly Tango's), on Rao-Scott effective
    counts: every count divided by :func:`worst_case_design_effect`.

    Returns ``(ni_p, drop_bound, low, high, design_effect)``: the one-sided p of H0 "difference <= -margin", the
    one-sided ``1 - alpha`` upper bound of the drop, the two-sided ``confidence`` interval of the difference
    (candidate - reference) and the design effect used.
    """
    deff = worst_case_design_effect(sizes)
    n = float(np.sum(sizes))
    w, b, n_eff = worse / deff, better / deff, n / deff
    ni_p, drop_bound = tango_noninferiority(w, b, n_eff, margin, alpha)
    low, high = tango_interval(w, b, n_eff, confidence)
    return ni_p, drop_bound, low, high, deff
