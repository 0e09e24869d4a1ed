"""Group-sequential non-inferiority: a few planned looks per cell, Lan-DeMets alpha spending on the fixed rule's own
statistic, a non-binding futility rule, and what is out of reach before anything runs.

The fixed-n rule (:mod:`snapeval.stats.paired`) shows a compressed cell non-inferior when Tango's score statistic at
``-margin`` on Rao-Scott effective counts (:func:`snapeval.stats.binary.clustered_tango`: counts divided by the
worst-case design effect of the cluster sizes) exceeds ``z_(1 - alpha)``, and not non-inferior when its negation does
(the whole ``1 - 2 alpha`` interval beyond the margin). This module looks at that same statistic ``T_k`` after each of
``K`` planned looks (by default at 25/50/75/100% of the items, whole clusters) and compares it with group-sequential
boundaries, each side one-sided at ``alpha``:

- **Boundaries**: Lan & DeMets, "Discrete sequential boundaries for clinical trials", Biometrika 70:659-663 (1983):
  boundary ``c_k`` solves ``P(T_1 < c_1, ..., T_(k-1) < c_(k-1), T_k >= c_k) = alpha(t_k) - alpha(t_(k-1))`` under
  the canonical joint distribution of score statistics (Jennison & Turnbull, "Group Sequential Methods with
  Applications to Clinical Trials", Chapman & Hall 2000, section 3.1 and chapter 19: the recursive numerical
  integration, :func:`efficacy_bounds`) at the information fractions ``t_k`` (items at look ``k`` over the cell's
  items). The design spends with Hwang, Shih & DeCani's family at ``gamma = -3`` (:data:`DESIGN_SPENDING`; chosen by
  simulation over O'Brien-Fleming-like, ``gamma`` -4 to -1 and Pocock-like spending: about O'Brien-Fleming's power on
  the shipped layouts, with fewer items). ``tests/test_stats_groupseq.py``
  matches published tables (gsDesign's sfLDOF boundaries; Jennison & Turnbull's Tables 2.1 and 2.3 for Pocock's and
  O'Brien & Fleming's constants).
- **Each side its own looks** (each one-sided at ``alpha``). The not-non-inferior side (``-T_k >= c_k``) tests at
  every look. The non-inferior side (``T_k >= c_k``) tests only at the looks whose items, every one tied, could reach
  ``z_(1 - alpha)`` under the layout's worst-case design effect (:func:`active_looks`, fixed at plan time from the
  layout and the margin, never from the data): no valid boundary is lower than ``z_(1 - alpha)``, so a look below
  that could only spend alpha a tied run cannot use, and on few clusters (AIME's 30 problems at a 10-point margin:
  only the last look) it raised the last boundary above the fixed test's for nothing. Its alpha moves to the looks
  kept (:func:`side_bounds`), so non-inferiority needs no more items than the fixed grid (:func:`items_for_reach`).
- **Futility** (non-binding: the boundaries above ignore it, so stopping for it can only lower the false
  "non-inferior" rate). A cell stops at an interim look when non-inferiority is **out of reach**: if the items left
  showed no change at the discordance seen so far, the last look would reach its boundary with probability below
  :data:`REACH` (:func:`reach_probability`; with no discordant item so far, the items left tie and it is 0 or 1),
  and "not non-inferior" has conditional power under the current trend below :data:`REACH_OTHER` (Lan, Simon &
  Halperin, Commun. Statist. C 1:207-219, 1982; Jennison & Turnbull section 10.2: ``1 - Phi((c_K - B_k / t_k) /
  sqrt(1 - t_k))`` with ``B_k = T_k sqrt(t_k)``): a clearly broken cell runs on until it is shown not non-inferior.
  (Issue #61's rule took the items left as tied even when items were discordant, a median-like forecast that
  stopped cells with a fair chance: with it the power ratio against the fixed test was 0.81 on LongBench-v2's layout,
  0.94 with this forecast; ``benchmarks/sequential_search.py``.) Optionally (``futility`` > 0, off
  by default) it also stops when both sides' conditional power is below ``futility``. A cell stopped either way is
  inconclusive, never "not non-inferior".
- **Repeated confidence interval** (Jennison & Turnbull chapter 9): at the look a cell stops, the differences ``d``
  with ``T_k(d) < c_k`` of the non-inferior side (its low end; -1 at a look that side skips) and ``-T_k(d) < c_k`` of
  the other (its high end); each end holds every look's data at ``1 - alpha``, the interval at ``1 - 2 alpha``.

Only 0/1 scores have this statistic; other scores (pass@1 over samples as one score, F1) use the anytime-valid
e-process of :mod:`snapeval.stats.sequential` looked at at the same points.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np
from scipy import stats as _scipy_stats

from snapeval.errors import SnapevalError
from snapeval.stats.binary import tango_statistic, worst_case_design_effect

_NORMAL = NormalDist()
#: Default planned looks: 25/50/75/100% of a cell's items.
LOOKS = 4
#: The design's spending function (chosen by simulation, ``benchmarks/sequential_search.py``): Hwang-Shih-DeCani
#: with gamma -3, between O'Brien-Fleming's and Pocock's.
DESIGN_SPENDING = "hsd-3"
#: Default futility threshold on conditional power under the current trend (0: off; the simulation in
#: ``benchmarks/sequential_search.py`` found every positive threshold tried cost more than a tenth of the power).
FUTILITY = 0.0
#: Non-inferiority is out of reach when, if the items left showed no change at the discordance seen so far, the last
#: look would reach its boundary with probability below this (:func:`reach_probability`; 0 or 1 when no item so far
#: was discordant: every item left tied).
REACH = 0.05
#: A cell whose non-inferiority is out of reach stops once "not non-inferior" has less conditional power than this.
REACH_OTHER = 0.10
NON_INFERIOR, NOT_NON_INFERIOR, INCONCLUSIVE, OPEN = "non-inferior", "not non-inferior", "inconclusive", "open"
#: Why an inconclusive cell stopped before its last look.
FUTILE, OUT_OF_REACH = "futility", "out of reach"


def obf_spending(t, alpha: float) -> np.ndarray:
    """Lan-DeMets O'Brien-Fleming-like spending, one-sided level ``alpha``: ``2 - 2 Phi(z_(1 - alpha / 2) /
    sqrt(t))`` (0 at ``t = 0``, ``alpha`` at ``t = 1``)."""
    t = np.asarray(t, dtype=np.float64)
    z = _NORMAL.inv_cdf(1 - alpha / 2)
    with np.errstate(divide="ignore"):
        return np.where(t > 0, 2 - 2 * _scipy_stats.norm.cdf(z / np.sqrt(np.maximum(t, 1e-300))), 0.0)


def pocock_spending(t, alpha: float) -> np.ndarray:
    """Lan-DeMets Pocock-like spending: ``alpha ln(1 + (e - 1) t)``."""
    t = np.asarray(t, dtype=np.float64)
    return alpha * np.log1p((math.e - 1) * t)


def hsd_spending(gamma: float):
    """Hwang, Shih & DeCani (Stat. Med. 9:1439-1445, 1990) spending ``alpha (1 - e^(-gamma t)) / (1 - e^(-gamma))``
    (gamma -4: close to O'Brien-Fleming's; 1: close to Pocock's)."""
    def spend(t, alpha: float) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        return alpha * np.expm1(-gamma * t) / np.expm1(-gamma)
    return spend


SPENDING = {"obrien-fleming": obf_spending, "pocock": pocock_spending, "hsd-4": hsd_spending(-4.0),
            "hsd-3": hsd_spending(-3.0), "hsd-2": hsd_spending(-2.0), "hsd-1": hsd_spending(-1.0)}


def _grid(lo: float, hi: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Simpson's rule nodes and weights on ``[lo, hi]`` (an even number of intervals of at most ``step``)."""
    n = max(2, int(math.ceil((hi - lo) / step)))
    n += n % 2
    x = np.linspace(lo, hi, n + 1)
    w = np.ones(n + 1)
    w[1:-1:2], w[2:-1:2] = 4, 2
    return x, w * (hi - lo) / (3 * n)


class _Recursion:
    """The sub-density of ``B(t_k)`` on the continuation region ``B < c_k sqrt(t_k)`` of the looks so far, for
    Brownian motion ``B`` with ``drift`` (recursive numerical integration, Simpson's rule: Jennison & Turnbull
    chapter 19)."""

    def __init__(self, drift: float = 0.0, step: float = 0.01):
        self.drift, self.step = drift, step
        self.t = 0.0
        self.x: np.ndarray | None = None  # nodes (B values) and their mass (density x weight)
        self.mass: np.ndarray | None = None

    def exit(self, c: float, t: float) -> float:
        """``P(no earlier exit, T(t) >= c)``."""
        hi = c * math.sqrt(t)
        if self.x is None:
            return float(_scipy_stats.norm.sf((hi - self.drift * t) / math.sqrt(t)))
        dt = t - self.t
        return float((self.mass * _scipy_stats.norm.sf((hi - self.x - self.drift * dt) / math.sqrt(dt))).sum())

    def advance(self, c: float, t: float) -> None:
        """Move on to look ``t`` with boundary ``c`` (the cell continues below it)."""
        hi = min(c, 40.0) * math.sqrt(t)
        if self.x is None:
            x, w = _grid(min(hi, self.drift * t) - 8 * math.sqrt(t), hi, self.step)
            density = _scipy_stats.norm.pdf(x, self.drift * t, math.sqrt(t))
        else:
            dt = t - self.t
            sd, shift = math.sqrt(dt), self.drift * dt
            x, w = _grid(min(self.x[0] + shift - 8 * sd, hi - 1.0), hi, self.step)
            density = (self.mass[None, :] * _scipy_stats.norm.pdf(x[:, None], self.x[None, :] + shift, sd)).sum(1)
        self.x, self.mass, self.t = x, density * w, t


def exit_probabilities(bounds, fractions, drift: float = 0.0, step: float = 0.01) -> np.ndarray:
    """``P(T_1 < c_1, ..., T_(k-1) < c_(k-1), T_k >= c_k)`` for each look ``k`` (one-sided upper boundaries) when
    ``T_k = B(t_k) / sqrt(t_k)`` and ``B`` is Brownian motion with ``drift`` per unit of information (``drift`` is the
    mean of the statistic at ``t = 1``); recursive numerical integration (Jennison & Turnbull chapter 19)."""
    walk, out = _Recursion(drift, step), []
    for c, t in zip(bounds, fractions):
        out.append(walk.exit(float(c), float(t)))
        walk.advance(float(c), float(t))
    return np.array(out)


@lru_cache(maxsize=65536)
def _bounds(fractions: tuple[float, ...], alpha: float, spending: str) -> tuple[float, ...]:
    cumulative = SPENDING[spending](np.array(fractions), alpha)
    bounds: list[float] = []
    walk = _Recursion()
    for k, t in enumerate(fractions):
        target = float(cumulative[k] - (cumulative[k - 1] if k else 0.0))
        if target <= 1e-15:
            bounds.append(math.inf)
        else:
            lo, hi = -1.0, 40.0
            for _ in range(50):  # the exit probability falls as c_k grows
                mid = (lo + hi) / 2
                if walk.exit(mid, t) > target:
                    lo = mid
                else:
                    hi = mid
            bounds.append((lo + hi) / 2)
        if k < len(fractions) - 1:
            walk.advance(bounds[-1], t)
    return tuple(bounds)


def efficacy_bounds(fractions, alpha: float, spending: str = "obrien-fleming") -> np.ndarray:
    """The one-sided boundaries ``c_k`` at information ``fractions`` (increasing, the last 1) spending ``alpha`` with
    the Lan-DeMets ``spending`` function (a key of :data:`SPENDING`); ``inf`` where nothing is spent."""
    f = tuple(round(float(x), 10) for x in fractions)
    if not f or any(b <= a for a, b in zip(f, f[1:])) or f[0] <= 0 or abs(f[-1] - 1) > 1e-9:
        raise SnapevalError(f"group-sequential looks: fractions={list(f)!r}; allowed: increasing, in (0, 1], the "
                            "last 1")
    if not 0 < alpha < 0.5:
        raise SnapevalError(f"group-sequential looks: alpha={alpha!r}; allowed: 0 < alpha < 0.5")
    if spending not in SPENDING:
        raise SnapevalError(f"spending={spending!r} is invalid; allowed: {', '.join(SPENDING)}")
    return np.array(_bounds(f, float(alpha), spending))


def tango_at_looks(worse, better, n, deff, margin: float) -> np.ndarray:
    """Tango's statistic at ``-margin`` on effective counts ``(worse, better, n) / deff``, vectorised over any shape
    (the same as :func:`snapeval.stats.binary.tango_statistic`)."""
    w, b, m = (np.asarray(x, dtype=np.float64) / np.asarray(deff, dtype=np.float64) for x in (worse, better, n))
    return tango_array(w, b, m, -margin)


def _tango_parts(w, b, n, delta):
    """Tango's numerator and variance (:func:`snapeval.stats.binary.tango_statistic`) over arrays."""
    w, b, n, delta = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (w, b, n, delta)))
    with np.errstate(invalid="ignore", divide="ignore"):
        a = 2 * n
        bb = -b - w + (2 * n - b + w) * delta
        c = -w * delta * (1 - delta)
        q = (np.sqrt(np.maximum(0.0, bb * bb - 4 * a * c)) - bb) / (2 * a)
        return b - w - n * delta, n * (2 * q + delta * (1 - delta))


def tango_array(w, b, n, delta) -> np.ndarray:
    """:func:`snapeval.stats.binary.tango_statistic` over arrays (``delta`` broadcasts)."""
    num, var = _tango_parts(w, b, n, delta)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / np.sqrt(var)
        return np.where(var > 0, out, np.where(num == 0, 0.0, np.copysign(np.inf, num)))


def conditional_power(statistic, fraction, final_bound: float):
    """Conditional power of reaching ``final_bound`` at ``t = 1`` under the current trend from ``statistic`` at
    information ``fraction`` < 1 (Lan, Simon & Halperin 1982): ``1 - Phi((c_K - B / t) / sqrt(1 - t))``."""
    t = np.asarray(fraction, dtype=np.float64)
    b = np.asarray(statistic, dtype=np.float64) * np.sqrt(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _scipy_stats.norm.sf((final_bound - b / t) / np.sqrt(np.maximum(1 - t, 1e-12)))


def items_for_fixed_reach(margin: float, alpha: float, design_effect: float = 1.0) -> float:
    """The items (real-valued) from which Tango's statistic of ``n`` tied items, ``sqrt(n' margin / (1 - margin))``
    with ``n' = n / design_effect``, reaches ``z_(1 - alpha)``: no valid one-sided level-``alpha`` boundary is lower
    (``P(T_k >= c_k) <= alpha`` at every look), so below it no look can stop a tied run as non-inferior."""
    z = _NORMAL.inv_cdf(1 - alpha)
    return z * z * (1 - margin) / margin * design_effect


def active_looks(fractions, total_items: float, margin: float, alpha: float, design_effect: float = 1.0) -> np.ndarray:
    """The looks at which the non-inferior side tests (a plan-time choice, from the layout alone): those whose items,
    all tied, could reach ``z_(1 - alpha)`` (:func:`items_for_fixed_reach`, ``design_effect``: the layout's worst-case
    one), and the last look always. A look below that could only spend alpha that no tied run can use; leaving it out
    moves its alpha to the later looks (Lan-DeMets spending at the looks kept)."""
    f = np.asarray(fractions, dtype=np.float64)
    need = items_for_fixed_reach(margin, alpha, design_effect) if margin > 0 else math.inf
    out = f * float(total_items) >= need - 1e-9
    out[-1] = True
    return out


def side_bounds(fractions, active, alpha: float, spending: str = DESIGN_SPENDING) -> tuple[np.ndarray, np.ndarray]:
    """``(non-inferior side, not-non-inferior side)`` boundaries: the non-inferior side's at its ``active`` looks
    (``inf`` elsewhere: nothing spent there), the other side's at every look; each one-sided at ``alpha``."""
    f = np.asarray(fractions, dtype=np.float64)
    active = np.asarray(active, dtype=bool)
    every = efficacy_bounds(f, alpha, spending)
    if active.all():
        return every, every
    ni = np.full(f.size, math.inf)
    ni[active] = efficacy_bounds(f[active], alpha, spending)
    return ni, every


def reach_probability(worse, better, items, total, design_effect, margin: float, final_bound, tied: bool = False):
    """The probability that the last look reaches ``final_bound`` (non-inferior side) if the ``total - items`` items
    left show **no change** at the discordance seen so far ``p = (worse + better) / items``: their summed difference
    ``D`` has mean 0 and, at the worst-case ``design_effect`` of the layout, variance ``(total - items) p
    design_effect``; the final statistic is Tango's on the expected final counts, linear in ``D`` (its variance term at
    ``D = 0``). With no discordant item so far ``D = 0`` (every item left tied): 1 if a tied run reaches the boundary,
    else 0 (``tied``: so whatever was seen). Vectorised; a futility rule only (non-binding), so its approximations
    cannot touch the level."""
    w, b, n, total, deff = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64)
                                                  for x in (worse, better, items, total, design_effect)))
    left = np.maximum(total - n, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where((n > 0) & (not tied), (w + b) / np.maximum(n, 1e-300), 0.0)
        half = left * p / 2
        _, var = _tango_parts((w + half) / deff, (b + half) / deff, total / deff, -margin)
        need = np.asarray(final_bound, dtype=np.float64) * np.sqrt(var) * deff - (b - w) - total * margin
        sd = np.sqrt(left * p * deff)
        return np.where(sd > 0, _scipy_stats.norm.sf(need / np.where(sd > 0, sd, 1.0)), (need <= 1e-9) * 1.0)


def items_for_reach(margin: float, alpha: float, design_effect: float = 1.0, looks: int = LOOKS,
                    spending: str = DESIGN_SPENDING) -> int:
    """The fewest items at which non-inferiority is reachable at all with every item tied, under ``design_effect``,
    for ``looks`` equal looks with the non-inferior side's looks chosen by :func:`active_looks`: the fixed grid's
    ``ceil(z_(1 - alpha)^2 (1 - margin) / margin x design_effect)`` (the design drops the looks below it, so the last
    boundary there is ``z_(1 - alpha)`` itself; checked, and counted up, against the design's own boundary)."""
    n = int(math.ceil(items_for_fixed_reach(margin, alpha, design_effect) - 1e-9))
    fractions = np.arange(1, looks + 1) / looks
    while True:
        ni, _ = side_bounds(fractions, active_looks(fractions, n, margin, alpha, design_effect), alpha, spending)
        if tango_statistic(0.0, 0.0, n / design_effect, -margin) >= ni[-1] - 1e-12:
            return n
        n += 1


@dataclass(frozen=True)
class Look:
    """One cell's group-sequential state after a look.

    ``label``: :data:`NON_INFERIOR`, :data:`NOT_NON_INFERIOR`, :data:`OPEN` (items remain) or :data:`INCONCLUSIVE`;
    ``why``: for an inconclusive cell stopped early, :data:`FUTILE` or :data:`OUT_OF_REACH` ("" otherwise);
    ``statistic``: Tango's ``T_k`` at ``-margin``; ``bound``: the non-inferior side's ``c_k`` (``inf`` at a look it
    skips); ``low``/``high``: the repeated confidence interval of the difference (candidate - reference) at this look
    (the low end from the non-inferior side's boundary, -1 at a look it skips; the high end from the other side's)."""

    label: str
    why: str
    look: int
    items: int
    statistic: float
    bound: float
    low: float
    high: float


def decide_look(worse: int, better: int, sizes, look: int, fractions, margin: float, alpha: float, *,
                layout_sizes=None, futility: float = FUTILITY, total_items: int | None = None,
                spending: str = DESIGN_SPENDING) -> Look:
    """The group-sequential decision at look ``look`` (0-based) of ``fractions`` for 0/1 paired scores: ``worse`` and
    ``better`` discordant items so far among clusters of ``sizes`` (cumulative). ``layout_sizes``: the cluster sizes
    of all the cell's items (their worst-case design effect chooses the non-inferior side's looks and prices the items
    left for reach; default: ``sizes``); ``total_items``: the items at the last look (default: from the fraction)."""
    from snapeval.stats.binary import _tango_root

    m = np.asarray(sizes, dtype=np.float64)
    n = float(m.sum())
    deff = worst_case_design_effect(m)
    t = float(fractions[look])
    last = look == len(fractions) - 1
    total = float(total_items) if total_items is not None else n / t
    layout_deff = worst_case_design_effect(layout_sizes if layout_sizes is not None else m)
    ni_bounds, bounds = side_bounds(fractions, active_looks(fractions, total, margin, alpha, layout_deff), alpha,
                                    spending)
    stat = tango_statistic(worse / deff, better / deff, n / deff, -margin)
    c, c_other = float(ni_bounds[look]), float(bounds[look])
    low = _tango_root(worse / deff, better / deff, n / deff, min(c, 40.0))
    high = _tango_root(worse / deff, better / deff, n / deff, -min(c_other, 40.0))
    estimate = (better - worse) / n
    low, high = min(low, estimate), max(high, estimate)

    def out(label, why=""):
        return Look(label, why, look, int(n), float(stat), c, float(low), float(high))

    if stat >= c:
        return out(NON_INFERIOR)
    if -stat >= c_other:
        return out(NOT_NON_INFERIOR)
    if last:
        return out(INCONCLUSIVE)
    in_reach = float(reach_probability(worse, better, n, total, layout_deff, margin, ni_bounds[-1])) >= REACH
    other = float(conditional_power(-stat, t, float(bounds[-1])))  # of "not non-inferior", under the current trend
    if not in_reach and other < REACH_OTHER:
        return out(INCONCLUSIVE, OUT_OF_REACH)
    if futility > 0 and float(conditional_power(stat, t, float(ni_bounds[-1]))) < futility and other < futility:
        return out(INCONCLUSIVE, FUTILE)
    return out(OPEN)


def simulate_design(worse, better, m, margin: float, truth: float, *, looks: int = LOOKS, alpha: float = 0.05,
                    spending: str = DESIGN_SPENDING, futility: float = FUTILITY, reachable_looks: bool = True,
                    tied_reach: bool = False):
    """:func:`decide_look` over many data sets at once (rows; columns: clusters in their order, 0/1 scores as each
    cluster's ``worse`` and ``better`` counts among ``m`` items), for simulation: per data set the label (0
    inconclusive, 1 non-inferior, -1 not non-inferior), the share of items used, whether the repeated confidence
    interval at the stopping look covers ``truth`` (the true difference), and the fixed-sample rule's label and
    coverage (its ``1 - 2 alpha`` interval) on all the items. Two switches undo this design's changes for the
    benchmark's account of them (the search runs neither): ``reachable_looks=False`` lets the non-inferior side test
    at every look; ``tied_reach=True`` takes the items left as tied even where items were discordant (issue #61's
    out-of-reach rule)."""
    rows, _ = m.shape
    n = m.sum(axis=1)
    cum_m, cum_w, cum_b, cum_sq = (np.cumsum(x, axis=1) for x in (m, worse, better, m * m))
    targets = [np.ceil(k * n / looks - 1e-9) for k in range(1, looks + 1)]
    at = np.stack([(cum_m >= t[:, None]).argmax(axis=1) for t in targets], axis=1)  # cluster index of each look
    take = lambda a: np.take_along_axis(a, at, axis=1)  # noqa: E731
    nk, wk, bk, deff = take(cum_m), take(cum_w), take(cum_b), np.maximum(1.0, take(cum_sq) / take(cum_m))
    frac = np.round(nk / n[:, None], 2)
    frac[:, -1] = 1.0
    layout_deff = np.maximum(1.0, cum_sq[:, -1] / n)
    stat = tango_array(wk / deff, bk / deff, nk / deff, -margin)
    at_truth = tango_array(wk / deff, bk / deff, nk / deff, truth)
    label = np.zeros(rows, dtype=np.int64)
    used = n.copy()
    covered = np.ones(rows, dtype=bool)
    open_ = np.ones(rows, dtype=bool)
    active = np.stack([active_looks(f, t, margin, alpha, d) if reachable_looks else np.ones(looks, dtype=bool)
                       for f, t, d in zip(frac, n, layout_deff)])
    keys, inverse = np.unique(np.concatenate([frac, active], axis=1), axis=0, return_inverse=True)
    pairs = [side_bounds(k[:looks], k[looks:].astype(bool), alpha, spending) for k in keys]
    ni_bounds = np.stack([p[0] for p in pairs])[inverse.ravel()]
    bounds = np.stack([p[1] for p in pairs])[inverse.ravel()]
    for k in range(looks):
        c, c_other = ni_bounds[:, k], bounds[:, k]
        ni, bad = open_ & (stat[:, k] >= c), open_ & (-stat[:, k] >= c_other)
        stop = ni | bad
        if k == looks - 1:
            stop = open_.copy()
        else:
            reach = reach_probability(wk[:, k], bk[:, k], nk[:, k], n, layout_deff, margin, ni_bounds[:, -1],
                                      tied=tied_reach) >= REACH
            t = frac[:, k]
            other = conditional_power(-stat[:, k], t, bounds[:, -1])
            futile = ((futility > 0) & (conditional_power(stat[:, k], t, ni_bounds[:, -1]) < futility)
                      & (other < futility))
            stop = stop | (open_ & ((~reach & (other < REACH_OTHER)) | futile))
        label = np.where(ni, 1, np.where(bad, -1, label))
        used = np.where(stop, nk[:, k], used)
        inside = (at_truth[:, k] <= np.minimum(c, 40.0)) & (-at_truth[:, k] <= np.minimum(c_other, 40.0))
        covered = np.where(stop, inside, covered)
        open_ &= ~stop
    z = _NORMAL.inv_cdf(1 - alpha)
    fixed = np.where(stat[:, -1] >= z, 1, np.where(-stat[:, -1] >= z, -1, 0))
    fixed_covered = np.abs(at_truth[:, -1]) <= z
    return label, used / n, covered, fixed, fixed_covered
