"""Power, the minimum detectable drop, and the number of items a non-inferiority margin needs.

"Not significant" says nothing without the size of drop the test could have seen. For 0/1 metrics power is computed
*exactly* for the test the report uses (the McNemar mid-p test, :func:`snapeval.stats.binary.mcnemar_midp`): the
number of discordant items ``D ~ Binomial(n, psi)`` and, given ``D``, the worse ones ``W ~ Binomial(D, p_worse /
psi)``; power is the probability of the test's rejection region (Miettinen, "Individually matched samples",
Biometrics 24:339-352, 1968; Connor's normal approximation, Biometrics 43:207-211, 1987, is what
``tests/test_stats.py`` checks it against at large n).

The sample size of Tango's non-inferiority test (and, with the gap's sign reversed, of the test that the drop is
beyond the margin: what settles a cell whose observed drop is beyond it) is the asymptotic formula of Nam (Biometrics 53:1422-1430, 1997)
and Liu, Hsueh, Hsieh & Chen (Stat. Med. 21:231-245, 2002)::

    n = [z_(1-alpha) sqrt(2 q + d0 (1 - d0)) + z_power sqrt(psi - theta^2)]^2 / (theta - d0)^2

with ``d0 = -margin``, ``theta`` the true difference, ``psi`` the discordance rate and ``q`` the restricted
maximum-likelihood P(worse) under ``d0`` at the true cell probabilities. With no discordance and no true difference
it is ``z^2 (1 - margin) / margin``: at a 2-point margin and alpha = 0.05, 133 items even when nothing changes.

For other metrics: the normal approximations ``(z_(1-alpha/2) + z_power) se`` (minimum detectable drop) and
``((z_(1-alpha) + z_power) sigma / margin)^2`` clusters (Chow, Shao & Wang, "Sample Size Calculations in Clinical
Research", 2nd ed., 2008, section 3.2, non-inferiority of a paired mean).
"""
from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from snapeval.stats.binary import midp_all, scipy_stats

POWER = 0.80
#: The drop `snapeval regress` reports its power against, and `configs/regression.yaml` is sized for.
REGRESSION_DROP = 0.10
_NORMAL = NormalDist()


@lru_cache(maxsize=256)
def _rejection_region(n: int, alpha: float, alternative: str) -> tuple[np.ndarray, np.ndarray]:
    """Per number of discordant items ``D = 0..n``: the smallest count of worse items that rejects (``D + 1``: none)
    and the largest count that rejects on the better side (two-sided only; ``-1``: none)."""
    worse_at = np.arange(n + 1) + 1
    better_at = np.full(n + 1, -1, dtype=np.int64)
    for d in range(1, n + 1):
        p = midp_all(d, alternative)
        rejects = np.flatnonzero(p < alpha)
        if alternative == "less":
            worse_at[d] = rejects.min() if rejects.size else d + 1
        else:  # two-sided: the rejection region is both tails of the symmetric null
            high = rejects[rejects > d / 2]
            low = rejects[rejects < d / 2]
            worse_at[d] = high.min() if high.size else d + 1
            better_at[d] = low.max() if low.size else -1
    return worse_at, better_at


def mcnemar_power(n: int, p_worse: float, p_better: float, alpha: float, alternative: str = "less") -> float:
    """Exact power of the mid-p McNemar test at ``n`` items when each item is worse with probability ``p_worse`` and
    better with ``p_better`` (``alternative``: ``less``, the one-sided test for a drop, or ``two-sided``, counting
    rejections on either side)."""
    psi = p_worse + p_better
    if n < 1 or psi <= 0:
        return 0.0
    worse_at, better_at = _rejection_region(int(n), float(alpha), alternative)
    d = np.arange(n + 1)
    binom = scipy_stats().binom
    p_d = binom.pmf(d, n, min(psi, 1.0))
    share = p_worse / psi
    reject = binom.sf(worse_at - 1, d, share)  # P(W >= worse_at)
    if alternative == "two-sided":
        reject = reject + np.where(better_at >= 0, binom.cdf(better_at, d, share), 0.0)
    return float(np.clip((p_d * reject).sum(), 0.0, 1.0))


def minimum_detectable_drop(n: int, better_rate: float, alpha: float, power: float = POWER,
                            alternative: str = "two-sided") -> float:
    """The smallest drop (in accuracy points as a fraction) the mid-p McNemar test catches with ``power`` at ``n``
    items, when the drop is made of worse items on top of the observed rate of better ones (``better_rate``);
    ``inf`` when no drop can reach that power (too few items)."""
    top = 1.0 - 2 * better_rate
    if n < 1 or top <= 0 or mcnemar_power(n, better_rate + top, better_rate, alpha, alternative) < power:
        return math.inf
    lo, hi = 0.0, top
    for _ in range(40):
        mid = (lo + hi) / 2
        if mcnemar_power(n, better_rate + mid, better_rate, alpha, alternative) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def noninferiority_items(margin: float, alpha: float, discordance: float, difference: float = 0.0,
                         power: float = POWER) -> int:
    """Items Tango's one-sided test at ``-margin`` needs for ``power`` (Nam 1997; Liu et al. 2002), when the true
    difference is ``difference`` and a share ``discordance`` of items is discordant: the test of non-inferiority
    (H1: difference > -margin) when the difference is above ``-margin``, the test of the reverse (H1: difference <
    -margin, the interval entirely beyond the margin) when it is below; ``inf`` exactly at the margin, where neither
    can be shown. The formula is the same for both sides, with ``|difference + margin|`` as the gap."""
    d0 = -margin
    psi = max(discordance, abs(difference))
    p_worse = (psi - difference) / 2
    p_better = (psi + difference) / 2
    a = 2.0
    b = -p_better - p_worse + (2 - p_better + p_worse) * d0
    c = -p_worse * d0 * (1 - d0)
    q = (math.sqrt(max(0.0, b * b - 4 * a * c)) - b) / (2 * a)
    null_sd = math.sqrt(max(0.0, 2 * q + d0 * (1 - d0)))
    alt_sd = math.sqrt(max(0.0, psi - difference ** 2))
    gap = abs(difference - d0)
    if gap <= 1e-12:
        return math.inf  # the true difference is the margin: no n settles it either way
    z_a, z_b = _NORMAL.inv_cdf(1 - alpha), _NORMAL.inv_cdf(power)
    return math.ceil(((z_a * null_sd + z_b * alt_sd) / gap) ** 2)


def normal_minimum_detectable_drop(se: float, alpha: float, power: float = POWER) -> float:
    """``(z_(1 - alpha/2) + z_power) * se``: the drop a two-sided test at ``alpha`` sees with ``power``."""
    return (_NORMAL.inv_cdf(1 - alpha / 2) + _NORMAL.inv_cdf(power)) * se


def normal_noninferiority_clusters(cluster_variance: float, margin: float, alpha: float, difference: float = 0.0,
                                   power: float = POWER) -> float:
    """Clusters a one-sided test at ``alpha`` needs to settle non-inferiority at ``margin`` with ``power`` when the
    true difference is ``difference`` (negative: worse) and one cluster's contribution to the mean has variance
    ``cluster_variance`` (``k * var(mean)``): ``((z_(1-alpha) + z_power) sigma / |margin + difference|)^2`` (to
    show non-inferiority above ``-margin``, to show the reverse below it); ``inf`` exactly at ``-margin``."""
    gap = abs(margin + difference)
    if gap <= 1e-12:
        return math.inf
    z = _NORMAL.inv_cdf(1 - alpha) + _NORMAL.inv_cdf(power)
    return math.ceil(z * z * cluster_variance / gap ** 2)
