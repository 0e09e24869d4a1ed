"""Paired comparisons: a compressed cell against the cell it must be compared with, item by item.

Cells of one group (same model, task, seed and items) answered the same items, so their difference is measured on
each item and its uncertainty comes from the items' own discordance, not from two independent error bars: the
standard error of a paired difference is usually several times smaller ("Adding Error Bars to Evals", Miller 2024,
arXiv 2411.00640, section 4). Items are ``(subtask, doc_id)``; a sample's cluster is its ``cluster`` field when the
task sets one (questions on one document, the samples of one problem), else the item itself. Items present in only
one of the two cells are counted as unpaired and never paired.

What :func:`compare_cells` computes, by kind of metric (differences are candidate - reference; a "drop" is the
reference minus the candidate for a higher-is-better metric, the reverse for a lower-is-better one):

=====================  ==============================================  ============================================
                       0/1 scores                                      other scores (pass@1 over K samples, F1...)
=====================  ==============================================  ============================================
difference test        McNemar mid-p (one item per cluster), else the  sign-flip permutation test over clusters,
(two-sided)            sign-flip test over clusters (the same test:    mid-p (:mod:`snapeval.stats.permutation`)
                       :mod:`snapeval.stats.permutation`)
interval (two-sided,   Tango's score interval; clustered: on Rao-      cluster bootstrap, expanded percentile
``1 - 2 alpha``)       Scott effective counts (:mod:`.binary`)         (:mod:`snapeval.stats.bootstrap`)
non-inferiority        Tango's score test at ``-margin`` and its       sign-flip test of the shifted null and the
(one-sided ``alpha``)  one-sided bound (same effective counts)         bound that inverts it
power                  exact power of the mid-p test                   normal approximation with the cluster-robust
                       (:mod:`snapeval.stats.power`)                   standard error
=====================  ==============================================  ============================================

The interval is two-sided at ``1 - 2 alpha`` (90% at alpha = 0.05): its lower end is the one-sided ``1 - alpha``
bound the non-inferiority decision uses, so an interval drawn against the margin line shows the decision itself.
Significance needs the whole family (Holm, :mod:`snapeval.stats.multiplicity`), so a :class:`PairedComparison`
carries the raw p-value and the table adds the adjusted one; ``family`` sizes the minimum detectable drop at Holm's
most stringent level ``alpha / family``.

Clustered 0/1 scores: the test flips whole clusters (exact at any correlation). Tango's interval and test have no
clustered form, so their counts are divided by the worst-case design effect of the cluster sizes
(:func:`~snapeval.stats.binary.worst_case_design_effect`, ``sum(m^2) / n``; 1 for single items, where everything is
Tango's as for independent items): the interval keeps its score form (it does not collapse with zero discordant
items) and keeps its level at any correlation inside clusters, which an estimated design effect does not
(``tests/test_stats_simulation.py``, ``docs/statistics.md``).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from snapeval.errors import SnapevalError
from snapeval.stats.binary import clustered_tango, mcnemar_midp, worst_case_design_effect
from snapeval.stats.bootstrap import FEW_CLUSTERS, cluster_bootstrap_interval
from snapeval.stats.decision import DecisionRule
from snapeval.stats.permutation import cluster_totals, sign_flip_lower_bound, sign_flip_test, smallest_p
from snapeval.stats.power import (
    REGRESSION_DROP,
    mcnemar_power,
    minimum_detectable_drop,
    noninferiority_items,
    normal_minimum_detectable_drop,
    normal_noninferiority_clusters,
)

_NORMAL = NormalDist()


@dataclass(frozen=True)
class PairedComparison:
    """A candidate cell against its reference cell on one metric (``metric`` is lm-eval's ``name,filter``)."""

    metric: str
    n: int  # paired items
    clusters: int
    unpaired: int  # items present in only one of the two cells (never paired, only counted)
    higher_is_better: bool
    reference_mean: float
    candidate_mean: float
    mean_diff: float  # candidate - reference, in the metric's units
    ci_low: float  # two-sided 1 - 2 alpha interval of mean_diff (its lower end: the decision's one-sided bound)
    ci_high: float
    interval: str  # how the interval was computed
    binary: bool  # every score is 0 or 1
    test: str  # the two-sided test of "no difference"
    p_value: float
    worse: int  # items the candidate scored worse on (for 0/1: the reference solved them, the candidate did not)
    better: int  # the reverse
    length_change: float | None  # mean per-item change in generated characters (candidate - reference)
    margin: float
    alpha: float
    ni_p: float  # one-sided non-inferiority p: H0 drop >= margin
    drop_bound: float  # one-sided 1 - alpha upper confidence bound of the drop
    mdd: float  # smallest drop the two-sided test catches with 80% power at this n and alpha / family (inf: none)
    n_for_margin: float  # items that would settle the decision with 80% power if the true difference were the
    #                      observed one (non-inferior above the margin, beyond it below; inf: exactly at the margin),
    #                      under ``planning_design_effect``
    design_effect: float  # worst-case design effect dividing clustered 0/1 counts (1: single items)
    planning_design_effect: float  # the design effect n_for_margin is planned with: the task's whole layout's
    #                                when given (compare_cells' layout_design_effect), else design_effect
    few_clusters: bool  # a bootstrap interval over fewer than FEW_CLUSTERS clusters (coverage not reached)

    @property
    def non_inferior(self) -> bool:
        """The one-sided test rejects "drop >= margin" at alpha (equivalently: drop_bound < margin)."""
        return self.ni_p < self.alpha

    @property
    def drop_low(self) -> float:
        """The interval's other end as a drop: the smallest drop the ``1 - 2 alpha`` interval holds."""
        return -self.ci_high if self.higher_is_better else self.ci_low

    @property
    def not_non_inferior(self) -> bool:
        """The whole interval lies beyond the margin (its smallest drop exceeds it): shown not non-inferior."""
        return self.drop_low > self.margin

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "non_inferior": self.non_inferior}


@dataclass(frozen=True)
class DropCheck:
    """The one-sided paired test of "the candidate dropped" that ``snapeval regress`` runs on a sampled cell."""

    n: int
    clusters: int
    unpaired: int
    binary: bool
    mean_diff: float
    worse: int
    better: int
    test: str
    p_value: float  # one-sided: small when the candidate is worse
    smallest_p: float  # the smallest p this test can give at this n: >= alpha means it cannot reject at all
    churn: float  # share of items the candidate scored better on: the background churn of two sampled runs
    drop: float  # the drop the power is computed against
    power: float  # power against ``drop`` at the level the check was given, at the observed churn


class _Pairs:
    """Per-item oriented scores of two cells on one metric, paired on ``(subtask, doc_id)``."""

    def __init__(self, reference, candidate, metric: str, subtask: str | None, higher_is_better: bool):
        ref, cand = _items(reference, metric, subtask), _items(candidate, metric, subtask)
        common = sorted(set(ref) & set(cand))
        self.unpaired = len(set(ref) ^ set(cand))
        if not common:
            raise SnapevalError(f"paired comparison on {metric}: the two cells share no scored item "
                                f"({len(ref)} and {len(cand)} items; cells over different items are never paired)")
        self.sign = 1.0 if higher_is_better else -1.0
        self.ref = np.array([ref[k][0] for k in common], dtype=np.float64)
        self.cand = np.array([cand[k][0] for k in common], dtype=np.float64)
        self.labels = [repr(ref[k][1]) for k in common]
        self.lengths = [(cand[k][2] - ref[k][2]) for k in common if ref[k][2] is not None and cand[k][2] is not None]
        self.diff = self.sign * (self.cand - self.ref)  # oriented: negative = worse
        self.n = len(common)
        self.binary = bool(np.isin(self.ref, (0.0, 1.0)).all() and np.isin(self.cand, (0.0, 1.0)).all())
        self.totals, self.sizes = cluster_totals(self.diff, self.labels)
        self.k = int(self.totals.size)
        self.worse = int((self.diff < 0).sum())
        self.better = int((self.diff > 0).sum())

    @property
    def singletons(self) -> bool:
        return self.k == self.n

    def raw(self, low: float, high: float) -> tuple[float, float]:
        """An oriented interval back in the metric's units (candidate - reference)."""
        return (low, high) if self.sign > 0 else (-high, -low)

    def cluster_se(self) -> float:
        """Cluster-robust standard error of the mean oriented difference (0 with one cluster)."""
        if self.k < 2:
            return 0.0
        mean = self.diff.mean()
        centred = self.totals - mean * self.sizes
        return math.sqrt(self.k / (self.k - 1) * float((centred ** 2).sum())) / self.n


def _items(result, metric: str, subtask: str | None) -> dict[tuple[str, int], tuple[float, Any, float | None]]:
    """``{(subtask, doc_id): (score, cluster, generated characters)}`` of one cell for ``metric``."""
    out = {}
    for s in result.samples:
        if metric in s.scores and (subtask is None or s.subtask == subtask):
            length = sum(len(g) for g in s.generations) / len(s.generations) if s.generations else None
            cluster = getattr(s, "cluster", None)
            out[(s.subtask, s.doc_id)] = (s.scores[metric], (s.subtask, cluster if cluster is not None else s.doc_id),
                                          length)
    return out


def compare_cells(reference, candidate, metric: str, *, rule: DecisionRule = DecisionRule(),
                  higher_is_better: bool = True, subtask: str | None = None, family: int = 1,
                  layout_design_effect: float | None = None) -> PairedComparison:
    """Pair two :class:`~snapeval.results.schema.CellResult` s item by item on ``metric`` (see the module
    docstring for what is computed). ``subtask`` restricts the items to one subtask; ``family``: the number of tests
    this one is adjusted with (Holm), which sets the level of the minimum detectable drop;
    ``layout_design_effect``: the worst-case design effect of the task's whole item set
    (:func:`~snapeval.stats.binary.worst_case_design_effect` of its cluster sizes), which the items that would settle
    the decision are planned with (more items come from that layout); None: the paired items' own.

    Raises a one-line :class:`SnapevalError` when no item can be paired (different items, or no per-item scores).
    """
    if not (isinstance(family, int) and family >= 1):
        raise SnapevalError(f"family={family!r} is invalid; allowed: an integer >= 1 (the tests adjusted together)")
    pairs = _Pairs(reference, candidate, metric, subtask, higher_is_better)
    alpha, margin = rule.alpha, rule.margin
    observed = float(pairs.diff.mean())  # oriented: negative = worse
    deff, few = 1.0, False
    if pairs.binary:
        if pairs.singletons:
            p, test = mcnemar_midp(pairs.worse, pairs.better), "McNemar mid-p"
        else:
            p, how = sign_flip_test(pairs.totals)
            test = f"sign-flip over {pairs.k} clusters (mid-p, {how})"
        ni_p, drop_bound, low, high, deff = clustered_tango(pairs.worse, pairs.better, pairs.sizes, margin, alpha,
                                                            rule.confidence)
        n_eff = pairs.n / deff
        interval = "Tango score" + (f", worst-case design effect {deff:.2f}" if deff > 1 else "")
        mdd = minimum_detectable_drop(max(1, round(n_eff)), pairs.better / pairs.n, alpha / family)
        plan_deff = layout_design_effect if layout_design_effect is not None else deff
        needed = noninferiority_items(margin, alpha, (pairs.worse + pairs.better) / pairs.n, observed) * plan_deff \
            if margin > 0 else math.inf
    else:
        plan_deff = 1.0  # planned in clusters, from the cluster-robust variance
        p, how = sign_flip_test(pairs.totals)
        test = f"sign-flip over {pairs.k} clusters (mid-p, {how})"
        low, high = cluster_bootstrap_interval(pairs.totals, pairs.sizes, confidence=rule.confidence)
        few = pairs.k < FEW_CLUSTERS
        interval = "cluster bootstrap, expanded percentile" + (f" (only {pairs.k} clusters)" if few else "")
        ni_p, _ = sign_flip_test(pairs.totals, pairs.sizes, alternative="greater", shift=-margin)
        drop_bound = -sign_flip_lower_bound(pairs.totals, pairs.sizes, alpha)
        se = pairs.cluster_se()
        if se > 0:
            mdd = normal_minimum_detectable_drop(se, alpha / family)
            needed = normal_noninferiority_clusters(pairs.k * se ** 2, margin, alpha, observed) * pairs.n / pairs.k
        else:  # every cluster differs by the same amount: no variance to plan with
            mdd, needed = math.nan, math.nan
    low, high = pairs.raw(low, high)
    return PairedComparison(
        metric=metric, n=pairs.n, clusters=pairs.k, unpaired=pairs.unpaired, higher_is_better=higher_is_better,
        reference_mean=float(pairs.ref.mean()), candidate_mean=float(pairs.cand.mean()),
        mean_diff=float((pairs.cand - pairs.ref).mean()), ci_low=low, ci_high=high, interval=interval,
        binary=pairs.binary, test=test, p_value=float(p), worse=pairs.worse, better=pairs.better,
        length_change=float(np.mean(pairs.lengths)) if pairs.lengths else None, margin=margin, alpha=alpha,
        ni_p=float(ni_p), drop_bound=float(drop_bound), mdd=float(mdd),
        n_for_margin=float(math.ceil(needed) if math.isfinite(needed) else needed), design_effect=float(deff),
        planning_design_effect=float(plan_deff), few_clusters=few,
    )


def drop_check(reference, candidate, metric: str, *, alpha: float, drop: float = REGRESSION_DROP,
               higher_is_better: bool = True, subtask: str | None = None) -> DropCheck:
    """The one-sided paired test that ``candidate`` dropped below ``reference`` on ``metric`` (``snapeval
    regress``), with its power at level ``alpha`` against a ``drop`` (default
    :data:`~snapeval.stats.power.REGRESSION_DROP`) made of worse items on top of the observed churn (the rate of
    improved items, which two sampled runs with no change show in both directions), and the smallest p-value the
    test can reach at this n. ``alpha`` is the level the guard applies to this test (``alpha / m`` for the first of
    ``m`` Holm-adjusted tests)."""
    pairs = _Pairs(reference, candidate, metric, subtask, higher_is_better)
    churn = pairs.better / pairs.n
    if pairs.binary and pairs.singletons:
        p, test = mcnemar_midp(pairs.worse, pairs.better, "less"), "McNemar mid-p, one-sided"
        power = mcnemar_power(pairs.n, min(1.0 - churn, churn + drop), churn, alpha, "less")
    else:
        p, how = sign_flip_test(pairs.totals, alternative="less")
        test = f"sign-flip over {pairs.k} clusters, one-sided (mid-p, {how})"
        if pairs.binary:
            deff = worst_case_design_effect(pairs.sizes)
            power = mcnemar_power(max(1, round(pairs.n / deff)), min(1.0 - churn, churn + drop), churn, alpha, "less")
        else:
            se = pairs.cluster_se()
            power = 1.0 if se == 0 else 1 - _NORMAL.cdf(_NORMAL.inv_cdf(1 - alpha) - drop / se)
    floor = 0.5 * 2.0 ** -pairs.n if pairs.binary and pairs.singletons else smallest_p(pairs.k)
    return DropCheck(n=pairs.n, clusters=pairs.k, unpaired=pairs.unpaired, binary=pairs.binary,
                     mean_diff=float((pairs.cand - pairs.ref).mean()), worse=pairs.worse, better=pairs.better,
                     test=test, p_value=float(p), smallest_p=float(floor), churn=float(churn), drop=float(drop),
                     power=float(power))
