"""Anytime-valid paired non-inferiority: a decision that may be looked at after every batch of items.

The fixed-n rule (:mod:`snapeval.stats.paired`) holds its level only when it is looked at once. A budget search that
stops a cell as soon as it is settled looks after every batch, so it needs a test whose level holds at *any*
stopping time. This module gives one: the betting e-process (Waudby-Smith & Ramdas, "Estimating means of bounded
random variables by betting", JRSS-B 86:1-27, 2024; Ramdas, Grunwald, Vovk & Shafer, "Game-theoretic statistics and
safe anytime-valid inference", Statist. Sci. 38:576-601, 2023). For H0 "E[z] <= 0" on independent observations
bounded below by ``-a``, the capital ``K_t = prod_k (1 + lambda_k z_k)`` with bets ``lambda_k`` in ``[0, 1/a)`` chosen
from the observations before ``k`` is a non-negative supermartingale under H0, so by Ville's inequality
``P(sup_t K_t >= 1/alpha) <= alpha``: rejecting when the capital reaches ``1/alpha`` keeps the level at every look.

Paired and clustered like the fixed-n rule. The unit is a cluster (a document's questions, a problem's samples;
one item where the task sets none), taken in a fixed random order. For cluster ``k`` with ``m_k`` items and oriented
per-item differences summing to ``D_k`` (candidate - reference, negative = worse; per-item scores in [0, 1]), the
item-weighted difference is ``theta = E[D] / E[m]``, and

- **non-inferior** rejects H0 ``theta <= -margin`` with ``z_k = D_k + margin m_k`` (``>= -M (1 - margin)``);
- **not non-inferior** rejects H0 ``theta >= -margin`` with ``z_k = -(D_k + margin m_k)`` (``>= -M (1 + margin)``);

``M`` is the largest cluster of the task's layout (known before any item runs, so the bound is predictable). Each
side is one-sided at ``alpha``, as the two ends of the fixed-n rule's ``1 - 2 alpha`` interval are; the running
intersection of the values of ``theta`` neither side rejects is a ``1 - 2 alpha`` confidence sequence.

Bets: aGRAPA (the same paper, section B.3), ``lambda_k = clip(S1 / S2, 0, cap / a)`` with ``S1``, ``S2`` the sums of
``z`` and ``z^2`` before ``k`` (plus one pseudo-observation ``z^2 = a^2``, so the first bet is 0), ``cap`` = 0.9.
``benchmarks/sequential_search.py`` simulates size and coverage on clustered data (results/bench/sequential_search.json).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from snapeval.errors import SnapevalError

#: Largest share of the capital a bet may risk (``lambda <= CAP / a``): below 1, so one bad observation never ruins it.
CAP = 0.9
NON_INFERIOR, NOT_NON_INFERIOR, INCONCLUSIVE, OPEN = "non-inferior", "not non-inferior", "inconclusive", "open"


def log_capital(z, bound: float, cap: float = CAP) -> np.ndarray:
    """``log K_t`` after each observation of ``z`` (last axis: the observations in order; any leading axes are
    independent sequences), betting against H0 "E[z] <= 0" with aGRAPA bets; ``bound``: ``a > 0`` with ``z >= -a``.

    Returns an array of ``z``'s shape."""
    z = np.asarray(z, dtype=np.float64)
    if not bound > 0:
        raise ValueError(f"bound={bound!r} is invalid; allowed: a number > 0 (z >= -bound)")
    if z.size and z.min() < -bound - 1e-12:
        raise ValueError(f"an observation {z.min():g} is below -bound = {-bound:g}")
    s1 = np.cumsum(z, axis=-1) - z  # sums before each observation
    s2 = np.cumsum(z * z, axis=-1) - z * z + bound * bound
    bets = np.clip(s1 / s2, 0.0, cap / bound)
    return np.cumsum(np.log1p(bets * z), axis=-1)


@dataclass(frozen=True)
class SequentialDecision:
    """A cell's anytime-valid decision after the clusters seen so far.

    ``label``: :data:`NON_INFERIOR`, :data:`NOT_NON_INFERIOR`, :data:`OPEN` (not settled, items remain) or
    :data:`INCONCLUSIVE` (not settled when the items ran out); ``clusters`` and ``items``: what it used up to the
    look that settled it (all of them when it did not); ``log_e_ni`` / ``log_e_not``: the log capital of the two
    sides at that look (``log(1 / alpha)`` rejects)."""

    label: str
    clusters: int
    items: int
    look: int  # index of the look that settled it (the last look when none did)
    log_e_ni: float
    log_e_not: float


def _checked(differences, sizes, margin: float, alpha: float, max_size: float | None):
    d = np.asarray(differences, dtype=np.float64)
    m = np.asarray(sizes, dtype=np.float64)
    if d.shape != m.shape or d.ndim != 1:
        raise SnapevalError("sequential test: one cluster total and one cluster size per cluster are needed")
    if not (0 < margin < 1 and 0 < alpha < 0.5):
        raise SnapevalError(f"sequential test: margin={margin!r} and alpha={alpha!r}; allowed: 0 < margin < 1, "
                            "0 < alpha < 0.5")
    top = float(m.max()) if max_size is None and m.size else float(max_size or 1.0)
    if m.size and (np.abs(d) > m + 1e-9).any():
        raise SnapevalError("sequential test: a cluster's total difference exceeds its size (per-item scores must "
                            "lie in [0, 1])")
    if m.size and m.max() > top:
        raise SnapevalError(f"sequential test: a cluster of {m.max():g} items exceeds max_size={top:g}")
    return d, m, top


def sides(differences, sizes, margin: float, max_size: float) -> tuple[np.ndarray, np.ndarray]:
    """``(log K of "non-inferior", log K of "not non-inferior")`` after each cluster (see the module docstring)."""
    d = np.asarray(differences, dtype=np.float64)
    m = np.asarray(sizes, dtype=np.float64)
    z = d + margin * m
    return log_capital(z, max_size * (1 - margin)), log_capital(-z, max_size * (1 + margin))


def decide(differences, sizes, margin: float, alpha: float, looks, *, max_size: float | None = None,
           exhausted: bool = True) -> SequentialDecision:
    """The anytime-valid decision of one cell over clusters in their fixed order.

    ``differences``: each cluster's summed per-item difference (candidate - reference, oriented so negative is
    worse); ``sizes``: its items; ``looks``: the cumulative cluster counts after which the decision is looked at
    (batch ends, increasing; the last one is the clusters seen); ``max_size``: the largest cluster of the task's
    layout (default: the largest here); ``exhausted``: no item remains after the last look (an unsettled cell is
    then :data:`INCONCLUSIVE`, else :data:`OPEN`)."""
    d, m, top = _checked(differences, sizes, margin, alpha, max_size)
    looks = [int(k) for k in looks]
    if not looks or looks != sorted(looks) or looks[0] < 1 or looks[-1] > d.size:
        raise SnapevalError(f"sequential test: looks={looks!r}; allowed: increasing cluster counts in 1..{d.size}")
    ni, bad = sides(d, m, margin, top)
    threshold = math.log(1 / alpha)
    for i, k in enumerate(looks):
        if ni[k - 1] >= threshold or bad[k - 1] >= threshold:
            label = NON_INFERIOR if ni[k - 1] >= threshold else NOT_NON_INFERIOR
            return SequentialDecision(label, k, int(m[:k].sum()), i, float(ni[k - 1]), float(bad[k - 1]))
    k = looks[-1]
    return SequentialDecision(INCONCLUSIVE if exhausted else OPEN, k, int(m[:k].sum()), len(looks) - 1,
                              float(ni[k - 1]), float(bad[k - 1]))


def confidence_sequence(differences, sizes, alpha: float, looks, *, max_size: float | None = None,
                        tol: float = 1e-4) -> tuple[float, float]:
    """The ``1 - 2 alpha`` confidence sequence of ``theta`` at the last look: the values ``theta0`` that neither
    one-sided e-process (``z = D - theta0 m`` and its negation) rejected at any look, by bisection on each end
    (``(-1, 1)`` before any evidence)."""
    d, m, top = _checked(differences, sizes, 0.5, alpha, max_size)
    idx = np.asarray(looks, dtype=np.int64) - 1
    threshold = math.log(1 / alpha)

    def rejected_low(theta0: float) -> bool:  # H0 theta <= theta0 rejected
        return bool((log_capital(d - theta0 * m, top * (1 + theta0))[idx] >= threshold).any())

    def rejected_high(theta0: float) -> bool:  # H0 theta >= theta0 rejected
        return bool((log_capital(theta0 * m - d, top * (1 - theta0))[idx] >= threshold).any())

    def edge(rejected, inside: float, outside: float) -> float:
        if not rejected(outside):
            return outside
        while abs(outside - inside) > tol:
            mid = (inside + outside) / 2
            if rejected(mid):
                outside = mid
            else:
                inside = mid
        return inside

    centre = float(d.sum() / m.sum()) if m.sum() else 0.0
    centre = min(max(centre, -1 + 1e-6), 1 - 1e-6)
    return edge(rejected_low, centre, -1 + 1e-6), edge(rejected_high, centre, 1 - 1e-6)
