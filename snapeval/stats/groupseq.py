"""Group-sequential non-inferiority: a few planned looks per cell, Lan-DeMets alpha spending on the fixed rule's own
statistic, a non-binding futility rule, and what is out of reach before anything runs.

The fixed-n rule (:mod:`snapeval.stats.paired`) shows a compressed cell non-inferior when Tango's score statistic at
``-margin`` on Rao-Scott effective counts (:func:`snapeval.stats.binary.clustered_tango`: counts divided by the
worst-case design effect of the cluster sizes) exceeds ``z_(1 - alpha)``, and not non-inferior when its negation does
(the whole ``1 - 2 alpha`` interval beyond the margin). This module looks at that same statistic ``T_k`` after each of
``K`` planned looks (by default at 25/50/75/100% of the items, whole clusters) and compares it with group-sequential
boundaries, each side one-sided at ``alpha``:

- **Boundaries**: Lan & DeMets, "Discrete sequential boundaries for clinical trials", Biometrika 70:659-663 (1983),
  with the O'Brien-Fleming-like spending function ``alpha(t) = 2 - 2 Phi(z_(1 - alpha/2) / sqrt(t))`` (one-sided
  level ``alpha``; :func:`obf_spending`) at the information fractions ``t_k`` (items at look ``k`` over the cell's
  items). Boundary ``c_k`` solves ``P(T_1 < c_1, ..., T_(k-1) < c_(k-1), T_k >= c_k) = alpha(t_k) - alpha(t_(k-1))``
  under the canonical joint distribution of score statistics (Jennison & Turnbull, "Group Sequential Methods with
  Applications to Clinical Trials", Chapman & Hall 2000, section 3.1 and chapter 19: the recursive numerical
  integration, :func:`efficacy_bounds`). The same boundaries serve both sides (non-inferior: ``T_k >= c_k``; not
  non-inferior: ``-T_k >= c_k``). ``tests/test_stats_groupseq.py`` matches published tables (gsDesign's sfLDOF
  boundaries; Jennison & Turnbull's Tables 2.1 and 2.3 for Pocock's and O'Brien & Fleming's constants).
- **Futility** (non-binding: the boundaries above ignore it, so stopping for it can only lower the false
  "non-inferior" rate). A cell stops at an interim look when non-inferiority is **out of reach** (even if every
  remaining item tied, no later look could reach its boundary: :func:`reachable`) and "not non-inferior" has
  conditional power under the current trend below :data:`REACH_OTHER` (Lan, Simon & Halperin, Commun. Statist. C
  1:207-219, 1982; Jennison & Turnbull section 10.2: ``1 - Phi((c_K - B_k / t_k) / sqrt(1 - t_k))`` with ``B_k = T_k
  sqrt(t_k)``): a clearly broken cell runs on until it is shown not non-inferior. Optionally (``futility`` > 0, off
  by default: ``benchmarks/sequential_search.py`` measured its cost in power) it also stops when both sides'
  conditional power is below ``futility``. A cell stopped either way is inconclusive, never "not non-inferior".
- **Repeated confidence interval** (Jennison & Turnbull chapter 9): at the look a cell stops, the differences whose
  Tango statistic lies within ``+-c_k``; its ends are the decision (the interval holds every look's data at
  ``1 - 2 alpha`` jointly).

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
#: Default futility threshold on conditional power under the current trend (0: off; the simulation in
#: ``benchmarks/sequential_search.py`` found every positive threshold tried cost more than a tenth of the power).
FUTILITY = 0.0
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


SPENDING = {"obrien-fleming": obf_spending, "pocock": pocock_spending, "hsd-2": hsd_spending(-2.0),
            "hsd-1": hsd_spending(-1.0)}


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


@lru_cache(maxsize=512)
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
    the Lan-DeMets ``spending`` function (``obrien-fleming`` or ``pocock``); ``inf`` where nothing is spent."""
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


def tango_array(w, b, n, delta) -> np.ndarray:
    """:func:`snapeval.stats.binary.tango_statistic` over arrays (``delta`` broadcasts)."""
    w, b, n, delta = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (w, b, n, delta)))
    with np.errstate(invalid="ignore", divide="ignore"):
        a = 2 * n
        bb = -b - w + (2 * n - b + w) * delta
        c = -w * delta * (1 - delta)
        q = (np.sqrt(np.maximum(0.0, bb * bb - 4 * a * c)) - bb) / (2 * a)
        var = n * (2 * q + delta * (1 - delta))
        num = b - w - n * delta
        out = num / np.sqrt(var)
        return np.where(var > 0, out, np.where(num == 0, 0.0, np.copysign(np.inf, num)))


def conditional_power(statistic, fraction, final_bound: float):
    """Conditional power of reaching ``final_bound`` at ``t = 1`` under the current trend from ``statistic`` at
    information ``fraction`` < 1 (Lan, Simon & Halperin 1982): ``1 - Phi((c_K - B / t) / sqrt(1 - t))``."""
    t = np.asarray(fraction, dtype=np.float64)
    b = np.asarray(statistic, dtype=np.float64) * np.sqrt(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _scipy_stats.norm.sf((final_bound - b / t) / np.sqrt(np.maximum(1 - t, 1e-12)))


def reachable(worse: float, better: float, items: float, deff_sums: tuple[float, float], margin: float,
              look_items, bounds) -> bool:
    """Can the non-inferior side still reach a boundary at a later look if every item left ties? ``(worse, better,
    items)``: the counts so far; ``deff_sums``: ``(sum m^2, sum m)`` of the clusters so far; ``look_items``: the items
    at each later look and ``bounds`` their boundaries. Ties add items and, in clusters, design effect: the later
    design effect is taken as the layout's (the worst case for the remaining clusters, passed in by the caller as
    ``deff_sums`` of the whole layout when known)."""
    sq, total = deff_sums
    for n_j, c_j in zip(look_items, bounds):
        if not math.isfinite(c_j) or n_j <= 0:
            continue
        deff = max(1.0, sq / total) if total else 1.0
        if tango_statistic(worse / deff, better / deff, n_j / deff, -margin) >= c_j:
            return True
    return False


def items_for_reach(margin: float, alpha: float, design_effect: float = 1.0, looks: int = LOOKS) -> int:
    """The fewest items at which non-inferiority is reachable at all (every item tied, final look's boundary with
    ``looks`` equal looks), under ``design_effect``: the smallest ``n`` with Tango's ``sqrt(n' margin / (1 -
    margin))`` >= ``c_K``, ``n' = n / design_effect``."""
    c = float(efficacy_bounds(np.arange(1, looks + 1) / looks, alpha)[-1])
    return int(math.ceil(c * c * (1 - margin) / margin * design_effect))


@dataclass(frozen=True)
class Look:
    """One cell's group-sequential state after a look.

    ``label``: :data:`NON_INFERIOR`, :data:`NOT_NON_INFERIOR`, :data:`OPEN` (items remain) or :data:`INCONCLUSIVE`;
    ``why``: for an inconclusive cell stopped early, :data:`FUTILE` or :data:`OUT_OF_REACH` ("" otherwise);
    ``statistic``: Tango's ``T_k`` at ``-margin``; ``bound``: ``c_k``; ``low``/``high``: the repeated confidence
    interval of the difference (candidate - reference) at this look."""

    label: str
    why: str
    look: int
    items: int
    statistic: float
    bound: float
    low: float
    high: float


def decide_look(worse: int, better: int, sizes, look: int, fractions, margin: float, alpha: float, *,
                layout_sizes=None, futility: float = FUTILITY, total_items: int | None = None) -> Look:
    """The group-sequential decision at look ``look`` (0-based) of ``fractions`` for 0/1 paired scores: ``worse`` and
    ``better`` discordant items so far among clusters of ``sizes`` (cumulative). ``layout_sizes``: the cluster sizes
    of all the cell's items (the design effect for reachability; default: ``sizes``); ``total_items``: the items at
    the last look (default: from the fraction)."""
    from snapeval.stats.binary import _tango_root

    bounds = efficacy_bounds(fractions, alpha)
    m = np.asarray(sizes, dtype=np.float64)
    n = float(m.sum())
    deff = worst_case_design_effect(m)
    t = float(fractions[look])
    last = look == len(fractions) - 1
    stat = tango_statistic(worse / deff, better / deff, n / deff, -margin)
    c = float(bounds[look])
    cc = c if math.isfinite(c) else 40.0
    low = _tango_root(worse / deff, better / deff, n / deff, cc)
    high = _tango_root(worse / deff, better / deff, n / deff, -cc)
    estimate = (better - worse) / n
    low, high = min(low, estimate), max(high, estimate)

    def out(label, why=""):
        return Look(label, why, look, int(n), float(stat), c, float(low), float(high))

    if stat >= c:
        return out(NON_INFERIOR)
    if -stat >= c:
        return out(NOT_NON_INFERIOR)
    if last:
        return out(INCONCLUSIVE)
    total = total_items if total_items is not None else n / t
    layout = np.asarray(layout_sizes if layout_sizes is not None else m, dtype=np.float64)
    later = [total * f for f in fractions[look + 1:]]
    in_reach = reachable(worse, better, n, (float((layout * layout).sum()), float(layout.sum())), margin,
                         [max(x, n) for x in later], bounds[look + 1:])
    final = float(bounds[-1])
    other = float(conditional_power(-stat, t, final))  # of "not non-inferior", under the current trend
    if not in_reach and other < REACH_OTHER:
        return out(INCONCLUSIVE, OUT_OF_REACH)
    if futility > 0 and float(conditional_power(stat, t, final)) < futility and other < futility:
        return out(INCONCLUSIVE, FUTILE)
    return out(OPEN)


def simulate_design(worse, better, m, margin: float, truth: float, *, looks: int = LOOKS, alpha: float = 0.05,
                    spending: str = "obrien-fleming", futility: float = FUTILITY):
    """:func:`decide_look` over many data sets at once (rows; columns: clusters in their order, 0/1 scores as each
    cluster's ``worse`` and ``better`` counts among ``m`` items), for simulation: per data set the label (0
    inconclusive, 1 non-inferior, -1 not non-inferior), the share of items used, whether the repeated confidence
    interval at the stopping look covers ``truth`` (the true difference), and the fixed-sample rule's label and
    coverage (its ``1 - 2 alpha`` interval) on all the items."""
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
    keys, inverse = np.unique(frac, axis=0, return_inverse=True)
    bounds = np.stack([efficacy_bounds(k, alpha, spending) for k in keys])[inverse.ravel()]
    for k in range(looks):
        c = bounds[:, k]
        ni, bad = open_ & (stat[:, k] >= c), open_ & (-stat[:, k] >= c)
        stop = ni | bad
        if k == looks - 1:
            stop = open_.copy()
        else:
            later = []
            for j in range(k + 1, looks):  # ties only: counts fixed, items grow to look j's share of the layout
                nj = np.maximum(n * frac[:, j], nk[:, k])
                later.append(tango_array(wk[:, k] / layout_deff, bk[:, k] / layout_deff, nj / layout_deff, -margin)
                             >= bounds[:, j])
            reach = np.any(later, axis=0)
            t = frac[:, k]
            other = conditional_power(-stat[:, k], t, bounds[:, -1])
            futile = (futility > 0) & (conditional_power(stat[:, k], t, bounds[:, -1]) < futility) & (other < futility)
            stop = stop | (open_ & ((~reach & (other < REACH_OTHER)) | futile))
        label = np.where(ni, 1, np.where(bad, -1, label))
        used = np.where(stop, nk[:, k], used)
        covered = np.where(stop, np.abs(at_truth[:, k]) <= np.where(np.isfinite(c), c, 40.0), covered)
        open_ &= ~stop
    z = _NORMAL.inv_cdf(1 - alpha)
    fixed = np.where(stat[:, -1] >= z, 1, np.where(-stat[:, -1] >= z, -1, 0))
    fixed_covered = np.abs(at_truth[:, -1]) <= z
    return label, used / n, covered, fixed, fixed_covered
