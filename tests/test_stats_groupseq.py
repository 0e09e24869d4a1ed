"""The group-sequential design of the budget search (snapeval/stats/groupseq.py, issue #61): Lan-DeMets boundaries
against published tables, the exit probabilities against Jennison & Turnbull's constants, the level and coverage on
paired 0/1 data by simulation, the scalar decision against the vectorised one, and reach at plan time."""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from snapeval.errors import SnapevalError
from snapeval.stats import DecisionRule
from snapeval.stats.groupseq import (
    DESIGN_SPENDING,
    INCONCLUSIVE,
    LOOKS,
    NON_INFERIOR,
    NOT_NON_INFERIOR,
    OPEN,
    OTHER_SPENDING,
    OUT_OF_REACH,
    REACH,
    active_looks,
    decide_look,
    efficacy_bounds,
    exit_probabilities,
    items_for_reach,
    least_share_bound,
    look_shares,
    obf_spending,
    plan_bounds,
    reach_probability,
    side_bounds,
    simulate_design,
    spending_function,
    tango_array,
    tied_run_least_clusters,
    tied_stop_ratio,
)
from snapeval.stats.binary import tango_size_worse_only, tango_statistic


@pytest.mark.parametrize("looks, published", [
    # gsDesign(k, test.type = 1, alpha = 0.025, sfu = sfLDOF)$upper$bound (equal looks)
    (4, [4.3326, 2.9631, 2.3590, 2.0141]),
    (5, [4.8769, 3.3569, 2.6803, 2.2898, 2.0310]),
])
def test_lan_demets_obrien_fleming_boundaries_match_the_published_ones(looks, published):
    bounds = efficacy_bounds(np.arange(1, looks + 1) / looks, 0.025)
    assert bounds == pytest.approx(published, abs=5e-4)
    assert obf_spending(1.0, 0.025) == pytest.approx(0.025)


@pytest.mark.parametrize("looks, pocock, obrien_fleming", [
    # Jennison & Turnbull (2000), Tables 2.1 and 2.3: C_P(K, 0.05) and C_B(K, 0.05), two-sided 0.05, equal looks
    (2, 2.178, 1.977), (3, 2.289, 2.004), (4, 2.361, 2.024), (5, 2.413, 2.040)])
def test_exit_probabilities_give_jennison_and_turnbulls_constants(looks, pocock, obrien_fleming):
    """One side of J&T's two-sided tests at 0.05 spends 0.025 (crossing both sides has probability < 1e-5)."""
    t = np.arange(1, looks + 1) / looks
    assert exit_probabilities([pocock] * looks, t).sum() == pytest.approx(0.025, abs=2e-4)
    assert exit_probabilities(obrien_fleming * np.sqrt(1 / t), t).sum() == pytest.approx(0.025, abs=2e-4)


def test_unequal_looks_spend_exactly_the_spending_function():
    t = [0.27, 0.5, 0.77, 1.0]
    bounds = efficacy_bounds(t, 0.05)
    assert np.cumsum(exit_probabilities(bounds, t)) == pytest.approx(obf_spending(t, 0.05), abs=1e-5)
    rng = np.random.default_rng(61)  # Brownian motion at those looks: the crossing rate is alpha
    steps = rng.standard_normal((200_000, 4)) * np.sqrt(np.diff([0.0, *t]))
    z = np.cumsum(steps, axis=1) / np.sqrt(t)
    assert (z >= bounds).any(axis=1).mean() == pytest.approx(0.05, abs=3 * math.sqrt(0.05 * 0.95 / 200_000))
    with pytest.raises(SnapevalError, match="fractions"):
        efficacy_bounds([0.5, 0.4, 1.0], 0.05)


def test_tango_array_is_tango_statistic():
    for w, b, n, d in [(3, 1, 40, -0.02), (0, 0, 40, -0.02), (10, 12, 395, -0.1), (5.5, 0.3, 30.2, 0.0)]:
        assert float(tango_array(w, b, n, d)) == pytest.approx(tango_statistic(w, b, n, d))


def _data(rng, sets, sizes, p_worse, p_better):
    m = np.broadcast_to(np.asarray(sizes, dtype=float), (sets, len(sizes)))
    worse = rng.binomial(m.astype(int), p_worse).astype(float)
    better = rng.binomial((m - worse).astype(int), p_better / (1 - p_worse)).astype(float)
    return worse, better, np.array(m)


def test_false_non_inferior_rate_and_coverage_hold_at_the_margin():
    """400 independent items, true drop exactly the margin (0.05): the false "non-inferior" rate is at most alpha and
    the repeated interval at the stopping look covers the truth at least as often as the fixed-sample interval
    (2,000 data sets, seeded; bounds: alpha + 3 Monte Carlo se)."""
    rng = np.random.default_rng(7)
    worse, better, m = _data(rng, 2000, np.ones(400), 0.06, 0.01)
    label, used, covered, fixed, fixed_covered = simulate_design(worse, better, m, 0.05, -0.05)
    se = math.sqrt(0.05 * 0.95 / 2000)
    assert (label == 1).mean() <= 0.05 + 3 * se, (label == 1).mean()
    assert covered.mean() >= fixed_covered.mean() - 2 * se and covered.mean() >= 0.90 - 3 * se
    # no change, same discordance: power at least 0.9 of the fixed-sample test's, with fewer items
    worse, better, m = _data(rng, 2000, np.ones(400), 0.035, 0.035)
    label, used, _, fixed, _ = simulate_design(worse, better, m, 0.05, 0.0)
    assert (label == 1).mean() >= 0.9 * (fixed == 1).mean() and used.mean() < 0.75


@pytest.mark.parametrize("looks", [LOOKS, 4, (0.3, 0.6, 0.8, 1.0)])
def test_the_scalar_decision_is_the_simulated_one(looks):
    """decide_look (what the search runs) and simulate_design (what the benchmark runs) agree data set by data set,
    on clustered data (realised looks unequal), at the default looks, 4 equal ones and shares given."""
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 5, size=60).astype(float)
    worse, better, m = _data(rng, 40, sizes, 0.08, 0.04)
    label, used, *_ = simulate_design(worse, better, m, 0.05, -0.04, looks=looks)
    n = sizes.sum()
    cum = np.cumsum(sizes)
    at = [int(np.argmax(cum >= math.ceil(share * n - 1e-9))) for share in look_shares(looks)]
    fractions = [round(cum[i] / n, 2) for i in at]
    fractions[-1] = 1.0
    for row in range(40):
        for look, i in enumerate(at):
            got = decide_look(int(worse[row, :i + 1].sum()), int(better[row, :i + 1].sum()), sizes[:i + 1], look,
                              fractions, 0.05, 0.05, layout_sizes=sizes, total_items=int(n))
            if got.label != OPEN:
                break
        expected = {1: NON_INFERIOR, -1: NOT_NON_INFERIOR, 0: INCONCLUSIVE}[int(label[row])]
        assert (got.label, got.items / n) == (expected, pytest.approx(used[row])), row


def test_non_inferiority_out_of_reach_is_said_at_plan_time_and_stops_the_cell():
    """At a 2-point margin 40 items cannot show non-inferiority even if every item ties: the fixed grid needs 133, and
    so does the design (its non-inferior side leaves out the looks a tied run cannot reach, so at 133 items only the
    last look tests, at z_0.95 itself); a cell whose items tie stops at its first look, one that has seen the compressed
    cache win items runs on (more wins could still reach)."""
    from snapeval.report.search import SearchSettings, reach

    assert items_for_reach(0.02, 0.05, looks=1) == 133
    assert items_for_reach(0.02, 0.05, looks=4) == 133
    assert items_for_reach(0.02, 0.05, design_effect=523 / 395) == 176
    assert reach(40, None, DecisionRule(), SearchSettings()) == (False, 133)
    assert reach(400, None, DecisionRule(), SearchSettings()) == (True, 133)
    got = decide_look(0, 0, np.ones(10), 0, [0.25, 0.5, 0.75, 1.0], 0.02, 0.05, total_items=40)
    assert (got.label, got.why, got.items) == (INCONCLUSIVE, OUT_OF_REACH, 10)
    broken = decide_look(4, 0, np.ones(10), 0, [0.25, 0.5, 0.75, 1.0], 0.02, 0.05, total_items=40)
    assert broken.label == OPEN  # "not non-inferior" is still likely: it runs on
    winning = decide_look(0, 2, np.ones(10), 0, [0.25, 0.5, 0.75, 1.0], 0.02, 0.05, total_items=40)
    assert winning.label == OPEN and reach_probability(0, 2, 10, 40, 1.0, 0.02, 1.645) > REACH


def test_reach_with_no_discordance_is_the_tied_run():
    """With no discordant item so far the items left are taken as tied: reach is 1 exactly where Tango's statistic of
    the tied run meets the boundary, else 0; with discordance it is a probability that grows with the wins."""
    for n, total, c in [(10, 40, 1.645), (100, 400, 1.70), (100, 133, 1.645), (100, 132, 1.645)]:
        tied = tango_statistic(0.0, 0.0, total, -0.02) >= c
        assert float(reach_probability(0, 0, n, total, 1.0, 0.02, c)) == (1.0 if tied else 0.0), (n, total)
    p = [float(reach_probability(2, b, 100, 400, 1.0, 0.02, 1.70)) for b in (0, 2, 4, 6)]
    assert 0 < p[0] < p[1] < p[2] < p[3] < 1


def test_the_non_inferior_side_tests_only_where_a_tied_run_can_reach_and_spends_alpha_there():
    """Looks below the fixed grid's reach (z_0.95 on a tied run) are left out of the non-inferior side, which spends
    its whole alpha at the looks kept (Brownian motion at those looks crosses at rate alpha); the other side keeps
    every look. 400 items at 2 points: the first look (100 items < 133) is left out."""
    t = [0.25, 0.5, 0.75, 1.0]
    active = active_looks(t, 400, 0.02, 0.05)
    assert active.tolist() == [False, True, True, True]
    assert active_looks(t, 240, 0.10, 0.05, design_effect=8.0).tolist() == [False, False, False, True]
    ni, every = side_bounds(t, active, 0.05)
    assert ni[0] == math.inf and np.all(np.isfinite(every)) and ni[-1] < every[-1]
    assert side_bounds(t, [False, False, False, True], 0.05)[0][-1] == pytest.approx(1.6449, abs=1e-3)
    rng = np.random.default_rng(62)
    steps = rng.standard_normal((200_000, 4)) * np.sqrt(np.diff([0.0, *t]))
    z = np.cumsum(steps, axis=1) / np.sqrt(t)
    se = math.sqrt(0.05 * 0.95 / 200_000)
    assert (z >= ni).any(axis=1).mean() == pytest.approx(0.05, abs=3 * se)
    assert (z >= every).any(axis=1).mean() == pytest.approx(0.05, abs=3 * se)


def _clustered(rng, sets, sizes, p_worse, p_better, icc):
    """Each cluster draws its P(worse) and P(better) from Betas with intra-cluster correlation ``icc``."""
    m = np.broadcast_to(np.asarray(sizes, dtype=float), (sets, len(sizes)))
    k = (1 - icc) / icc
    pw = rng.beta(p_worse * k, (1 - p_worse) * k, size=m.shape) if p_worse > 0 else np.zeros(m.shape)
    pb = np.minimum(rng.beta(p_better * k, (1 - p_better) * k, size=m.shape), 1 - pw)
    worse = rng.binomial(m.astype(int), pw)
    better = rng.binomial((m - worse).astype(int), np.where(pw < 1, pb / np.maximum(1 - pw, 1e-12), 0.0))
    return worse.astype(float), better.astype(float), np.array(m)


@pytest.mark.parametrize("sizes, margin, p_better, icc", [
    (np.ones(400), 0.10, 0.14, None),  # independent items, high discordance: the fixed test is near its level here
    (np.r_[np.ones(357), [2, 2, 3, 3, 4, 4, 5, 5, 5, 5]], 0.05, 0.015, 0.3),  # LongBench-v2-like documents
    (np.full(30, 8.0), 0.10, 0.015, 0.3),  # AIME: 30 problems x 8 samples
])
def test_false_non_inferior_rate_holds_on_the_shipped_layouts(sizes, margin, p_better, icc):
    """A true drop of exactly the margin (1,500 data sets, seeded): the design's false "non-inferior" rate is at most
    alpha + 3 Monte Carlo se, and at most the fixed-sample test's + 2 se on the same data (a boundary of z_0.95 at
    all four looks, the naive repeated test, gives 0.11 on the independent row's data, the fixed test 0.04)."""
    rng = np.random.default_rng(20261207)
    sets = 1500
    if icc is None:
        worse, better, m = _data(rng, sets, sizes, p_better + margin, p_better)
    else:
        worse, better, m = _clustered(rng, sets, sizes, p_better + margin, p_better, icc)
    label, _, covered, fixed, fixed_covered = simulate_design(worse, better, m, margin, -margin)
    se = math.sqrt(0.05 * 0.95 / sets)
    assert (label == 1).mean() <= 0.05 + 3 * se, (label == 1).mean()
    assert (label == 1).mean() <= (fixed == 1).mean() + 2 * se
    assert covered.mean() >= min(0.90, fixed_covered.mean()) - 3 * se


def test_power_on_aimes_layout_is_the_fixed_tests():
    """AIME's 30 problems x 8 samples at a 10-point margin: a tied run reaches z_0.95 only with all 240 items, so the
    non-inferior side tests at the last look alone, at the fixed test's own boundary, and loses no power to the
    looks (the 4-look design of issue #61 had 0.72 of the fixed test's); no change, 1,000 data sets."""
    rng = np.random.default_rng(5)
    worse, better, m = _clustered(rng, 1000, np.full(30, 8.0), 0.015, 0.015, 0.3)
    label, *_, fixed, _ = simulate_design(worse, better, m, 0.10, 0.0)
    assert (fixed == 1).mean() > 0.5
    assert (label == 1).mean() >= (fixed == 1).mean()


def test_each_side_spends_its_own_function():
    """``hsd<gamma>`` names any Hwang-Shih-DeCani member (``hsd0``: alpha t); the not-non-inferior side can spend with
    another function than the non-inferior side, each one-sided at alpha (Brownian motion crosses each at rate
    alpha), and the vectorised decision uses it as the scalar one does."""
    t = [0.25, 0.5, 0.75, 1.0]
    assert spending_function("hsd0")(np.array(t), 0.05) == pytest.approx(0.05 * np.array(t))
    assert spending_function("hsd-2.5")(1.0, 0.05) == pytest.approx(0.05)
    for bad in ("hsd", "hsd9", "linear"):
        with pytest.raises(SnapevalError, match="spending"):
            efficacy_bounds(t, 0.05, bad)
    ni, other = side_bounds(t, [True] * 4, 0.05, "hsd-3", "hsd0")
    assert ni == pytest.approx(efficacy_bounds(t, 0.05, "hsd-3")) and other == pytest.approx(efficacy_bounds(t, 0.05,
                                                                                                           "hsd0"))
    assert other[0] < ni[0] and other[-1] > ni[-1]
    rng = np.random.default_rng(63)
    z = np.cumsum(rng.standard_normal((200_000, 4)) * math.sqrt(0.25), axis=1) / np.sqrt(t)
    assert (-z >= other).any(axis=1).mean() == pytest.approx(0.05, abs=3 * math.sqrt(0.05 * 0.95 / 200_000))
    worse, better, m = _data(rng, 400, np.ones(400), 0.20, 0.02)  # a drop of 3.6 margins of 0.05
    label, used, *_ = simulate_design(worse, better, m, 0.05, -0.18, looks=4, other_spending="hsd0")
    for row in range(0, 400, 40):
        for look, k in enumerate((100, 200, 300, 400)):
            got = decide_look(int(worse[row, :k].sum()), int(better[row, :k].sum()), np.ones(k), look, t, 0.05, 0.05,
                              total_items=400, other_spending="hsd0")
            if got.label != OPEN:
                break
        assert (got.label, got.items / 400) == ({1: NON_INFERIOR, -1: NOT_NON_INFERIOR, 0: INCONCLUSIVE}[
            int(label[row])], pytest.approx(used[row])), row


def test_stopping_a_tied_run_costs_power_by_neyman_pearson():
    """Stopping a tied run at look t rejects everything from its statistic up there; with the best use of the rest of
    alpha (at the last look) the design is level alpha (Brownian motion, 200,000 paths) and its worst power ratio is the
    bound: 400 independent items at 2 points (a tied run reaches z_0.95 at 0.33 of them) keep 0.949 stopping at half
    the items, LongBench-v2's layout (0.44) 0.832 at half and 0.943 at 0.6; below the tied share nothing can stop."""
    assert tied_stop_ratio(0.5, 0.33142907312668773) == pytest.approx(0.9494, abs=2e-3)
    assert tied_stop_ratio(0.5, 0.4443836699125337) == pytest.approx(0.832, abs=2e-3)
    assert tied_stop_ratio(0.6, 0.4443836699125337) == pytest.approx(0.943, abs=2e-3)
    assert tied_stop_ratio(0.25, 0.33142907312668773) == 0.0  # before the tied share no boundary is low enough
    # at the tied share the region spends all of alpha; later it spends less
    assert tied_stop_ratio(0.2, 0.2) == 0.0 < tied_stop_ratio(0.3, 0.2) < tied_stop_ratio(0.4, 0.2)
    from scipy.optimize import brentq
    from scipy.stats import multivariate_normal, norm

    c = 1.6449 * math.sqrt(0.5 / 0.33142907312668773)
    joint = multivariate_normal(mean=[0, 0], cov=[[1, math.sqrt(0.5)], [math.sqrt(0.5), 1]])
    k = brentq(lambda k: norm.sf(c) + norm.sf(k) - joint.cdf([-c, -k]) - 0.05, 0, 5)
    rng = np.random.default_rng(64)
    half = rng.standard_normal((200_000, 2)) * math.sqrt(0.5)
    b = np.cumsum(half, axis=1)
    rejected = (b[:, 0] / math.sqrt(0.5) >= c) | (b[:, 1] >= k)
    assert rejected.mean() == pytest.approx(0.05, abs=3 * math.sqrt(0.05 * 0.95 / 200_000))


def test_no_test_declares_a_tied_run_non_inferior_before_its_clusters_allow():
    """Any test, not only this design: on the null where each cluster loses all its items with probability margin
    and ties otherwise, k tied clusters have probability (1 - margin)^k, so a rule declaring non-inferiority on them
    has level alpha only from the least such k (29 of AIME's 30 problems at 10 points, 149 documents at 2 points).
    Simulated (400,000 runs, seeded): the rule one cluster sooner exceeds alpha, the rule at k keeps it."""
    for margin in (0.005, 0.02, 0.05, 0.1, 0.3):
        for alpha in (0.01, 0.025, 0.05, 0.1):
            k = tied_run_least_clusters(margin, alpha)
            assert (1 - margin) ** k <= alpha < (1 - margin) ** (k - 1), (margin, alpha)
    assert (tied_run_least_clusters(0.10), tied_run_least_clusters(0.02), tied_run_least_clusters(0.05)) == (29, 149,
                                                                                                            59)
    rng = np.random.default_rng(66)
    runs = 400_000
    first_loss = rng.geometric(0.10, runs)  # the first cluster that loses all its items
    se = math.sqrt(0.05 * 0.95 / runs)
    assert (first_loss > 28).mean() > 0.05 + 4 * se  # declaring after 28 tied clusters: 0.9^28 = 0.052
    assert (first_loss > 29).mean() <= 0.05 + 2 * se  # after 29: 0.047
    with pytest.raises(ValueError, match="margin"):
        tied_run_least_clusters(0.0)


@pytest.mark.parametrize("sizes", [np.ones(400), np.r_[np.ones(357), [2, 2, 3, 3, 4, 4, 5, 5, 5, 5]],
                                   np.full(30, 8.0)], ids=["independent 400", "LongBench-v2-like", "AIME 30x8"])
def test_the_design_stops_a_tied_run_no_sooner_than_any_valid_test(sizes):
    """On the shipped layouts, at every margin, the default design declares a tied run non-inferior only after at
    least :func:`tied_run_least_clusters` clusters (200 seeded shuffles of the clusters), and declares it wherever the
    layout has that many."""
    rng = np.random.default_rng(67)
    m = np.stack([rng.permutation(sizes) for _ in range(200)])
    zero = np.zeros_like(m)
    for margin in (0.02, 0.05, 0.10):
        label, used, *_ = simulate_design(zero, zero, m, margin, 0.0)
        seen = (np.cumsum(m, axis=1) <= used[:, None] * m.sum(axis=1)[:, None] + 1e-9).sum(axis=1)
        floor = tied_run_least_clusters(margin)
        assert (seen[label == 1] >= floor).all(), (margin, seen[label == 1].min(), floor)
        if sizes.size >= floor:  # and it declares every tied run non-inferior that some valid test could
            assert (label == 1).all(), margin


def test_tangos_exact_size_when_the_candidate_only_loses():
    """Tango's fixed-n test on independent items at P(worse) = margin, P(better) = 0: the exact binomial rate equals a
    simulation of the test itself (200,000 runs), stays at alpha on the shipped 400 items at 2 points (0.041), and
    exceeds it near the n where a tied run first reaches z_0.95 (133 items at 2 points: 0.068; a known limit of the
    asymptotic test, stated in docs/statistics.md)."""
    from snapeval.stats.binary import tango_noninferiority

    assert tango_size_worse_only(400, 0.02, 0.05) == pytest.approx(0.04095, abs=1e-4)
    assert tango_size_worse_only(133, 0.02, 0.05) == pytest.approx(0.06809, abs=1e-4)
    assert tango_size_worse_only(132, 0.02, 0.05) == 0.0  # not even a tied run reaches z_0.95
    rng = np.random.default_rng(68)
    for n, margin in ((133, 0.02), (100, 0.10)):
        worse = rng.binomial(n, margin, 200_000)
        rejects = {w: tango_noninferiority(int(w), 0, n, margin, 0.05)[0] < 0.05 for w in np.unique(worse)}
        rate = float(np.mean([rejects[w] for w in worse]))
        exact = tango_size_worse_only(n, margin, 0.05)
        assert rate == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 200_000)), (n, margin)


def test_no_design_beats_the_least_share_bound():
    """The Lagrangian bound: one look needs every item; at 4 equal looks and a fixed-test power of 0.9 it is 0.60 (at
    the 60% target), below what every spending family that keeps the power ratio gives on the same model (Hwang-Shih-
    DeCani gamma -1, worst ratio 0.93: 0.66; ``brownian_motion_limits`` in the benchmark), above Wald's bound for any
    sequential test (0.46), and the same on a grid twice as fine."""
    assert least_share_bound([1.0], 0.9)[0] == pytest.approx(1.0, abs=1e-3)
    t = np.arange(1, 5) / 4
    bound, multipliers = least_share_bound(t, 0.9)
    assert 0.598 <= bound <= 0.61 and multipliers[0] > 0
    bounds = efficacy_bounds(t, 0.05, "hsd-1")
    from scipy.stats import norm

    p = exit_probabilities(bounds, t, drift=norm.ppf(0.95) + norm.ppf(0.9))
    assert bound < float((p * t).sum() + 1 - p.sum()) == pytest.approx(0.66, abs=5e-3)
    mu = norm.ppf(0.95) + norm.ppf(0.9)  # Wald: E[t] >= (b log(b / a) + (1 - b) log((1 - b) / (1 - a))) / (mu^2 / 2)
    assert bound > 2 * (0.81 * math.log(0.81 / 0.05) + 0.19 * math.log(0.19 / 0.95)) / mu ** 2
    assert least_share_bound(t, 0.9, step=0.02)[0] == pytest.approx(bound, abs=2e-3)
    assert least_share_bound(t, 0.9, futility=False)[0] > bound


def test_a_tied_run_is_stopped_by_60_percent_where_the_power_allows():
    """400 independent items at 2 points, the default 5 equal looks: Hwang-Shih-DeCani -3 at the looks a tied run can
    reach (0.4 to 1) puts 2.322 at 0.6, above the tied run's 2.213 there, so it would stop only at 0.8;
    stopping it at 0.6 keeps 0.985 of the fixed test's power (canonical, >= 0.98), so the non-inferior side is
    re-planned to 0.6 (the tied run's statistic) and the last look (1.690); level alpha by recursive integration and
    by simulation (2,000 data sets at the margin, worse only and low discordance), the scalar decision the simulated
    one. LongBench-v2's documents at 2 points (0.943 at 0.6: below 0.98, where its simulated ratio fell to 0.87) and
    400 items at 5 points (the spending stops it by 0.6 already) keep their boundaries; 4 equal looks re-planned from
    0.94 (the previous default) stop it at half (2.02, then 1.77)."""
    t = look_shares(LOOKS)
    ni, other, look = plan_bounds(t, 400, 0.02, 0.05)
    assert t == (0.2, 0.4, 0.6, 0.8, 1.0) and look == 2 and ni[0] == ni[1] == ni[3] == math.inf
    assert ni[2] == pytest.approx(tango_statistic(0, 0, 240, -0.02), abs=1e-6) and ni[4] == pytest.approx(1.6901,
                                                                                                           abs=2e-3)
    assert exit_probabilities(ni, t).sum() == pytest.approx(0.05, abs=1e-5)
    assert exit_probabilities(other, t).sum() == pytest.approx(0.05, abs=1e-5)
    assert plan_bounds(t, 400, 0.02, 0.05, tied_ratio=0)[0][2] == pytest.approx(2.3223, abs=2e-3)
    assert plan_bounds(t, 395, 0.02, 0.05, design_effect=523 / 395)[2] == -1
    assert plan_bounds(t, 395, 0.02, 0.05, design_effect=523 / 395, tied_ratio=0.94)[2] == 2
    assert plan_bounds(t, 400, 0.05, 0.05)[2] == -1
    four, _, at = plan_bounds([0.25, 0.5, 0.75, 1.0], 400, 0.02, 0.05, tied_ratio=0.94)
    assert at == 1 and four[1] == pytest.approx(2.0203, abs=2e-3) and four[3] == pytest.approx(1.7726, abs=2e-3)
    rng = np.random.default_rng(65)
    se = math.sqrt(0.05 * 0.95 / 2000)
    for p_better in (0.0, 0.015):
        worse, better, m = _data(rng, 2000, np.ones(400), p_better + 0.02, p_better)
        label, used, covered, fixed, _ = simulate_design(worse, better, m, 0.02, -0.02)
        assert (label == 1).mean() <= 0.05 + 3 * se and covered.mean() >= 0.90 - 3 * se, p_better
    worse, better, m = _data(rng, 50, np.ones(400), 0.0, 0.0)
    label, used, *_ = simulate_design(worse, better, m, 0.02, 0.0)
    assert (label == 1).all() and used == pytest.approx(0.6)
    got = decide_look(0, 0, np.ones(240), 2, t, 0.02, 0.05, total_items=400)
    assert got.label == NON_INFERIOR and got.items == 240


def test_look_shares_are_a_design_parameter():
    """Equal looks by count, or the shares themselves; anything else refused in one line naming the field."""
    from snapeval.report.search import SearchSettings, look_batches

    assert LOOKS == 5 and look_shares(4) == (0.25, 0.5, 0.75, 1.0) and look_shares(1) == (1.0,)
    assert look_shares([0.3, 0.6, 1]) == (0.3, 0.6, 1.0)
    for bad in (0, 11, True, 2.5, (0.5, 0.4, 1.0), (0.3, 0.9), (0.0, 1.0), ()):
        with pytest.raises(SnapevalError, match=r"^looks=.* is invalid; allowed: an integer in 1\.\.10"):
            look_shares(bad)
    with pytest.raises(SnapevalError, match=r"^search\.looks=\(0\.3, 0\.9\) is invalid"):
        SearchSettings(looks=(0.3, 0.9))
    clusters = {i: [i] for i in range(40)}
    assert [len(b) for b in look_batches(clusters, (0.3, 0.6, 1.0), 0)] == [12, 12, 16]
    assert [len(b) for b in look_batches(clusters, SearchSettings().looks, 0)] == [8] * 5
    assert items_for_reach(0.02, 0.05, looks=(0.3, 0.6, 1.0)) == items_for_reach(0.02, 0.05) == 133
    from snapeval.sweep.search import _equal_looks  # the live search's batches are equal item shards

    assert _equal_looks(SearchSettings()) == 5
    with pytest.raises(SnapevalError, match=r"^--until-decided: looks=\(0\.3, 0\.6, 1\.0\); allowed: a number"):
        _equal_looks(SearchSettings(looks=(0.3, 0.6, 1.0)))


def _plans():
    """The default design's boundaries over the plans the shipped layouts and margins give (independent 400,
    LongBench-v2's design effect, AIME's 8), re-planned or not, and 4 equal looks."""
    for looks in (LOOKS, 4, (0.3, 0.45, 0.6, 0.8, 1.0)):
        for total, deff in ((400, 1.0), (395, 523 / 395), (240, 8.0), (1000, 1.0)):
            for margin in (0.02, 0.05, 0.10):
                t = look_shares(looks)
                yield t, plan_bounds(t, total, margin, 0.05, deff)


def test_the_default_design_spends_alpha_exactly_by_recursive_integration():
    """Each side of every plan the default design makes on the shipped layouts spends exactly alpha (recursive
    integration: a plan that overspent by 1e-4 fails), the non-inferior side Hwang-Shih-DeCani -3 at the looks it
    keeps (or the re-plan), the other Hwang-Shih-DeCani -1 at every look; and the crossing rate of Brownian motion
    at the default's looks is alpha on each side (200,000 paths)."""
    assert (DESIGN_SPENDING, OTHER_SPENDING) == ("hsd-3", "hsd-1")
    plans = list(_plans())
    # each distinct boundary set integrated once (36 plans give 11 non-inferior sides and 3 others)
    sides = {(tuple(t), tuple(bounds)) for t, (ni, other, _) in plans for bounds in (ni, other)}
    for t, bounds in sorted(sides):
        assert exit_probabilities(bounds, t).sum() == pytest.approx(0.05, abs=1e-5), (t, bounds)
    for t, (_, other, _) in plans:
        assert other == pytest.approx(efficacy_bounds(t, 0.05, OTHER_SPENDING))
    assert sum(look >= 0 for _, (_, _, look) in plans) >= 2  # the re-plan is among them
    t = np.array(look_shares(LOOKS))
    ni, other, _ = plan_bounds(t, 400, 0.02, 0.05)
    lowered = ni.copy()
    lowered[-1] -= 0.002
    assert exit_probabilities(lowered, t).sum() > 0.05 + 1e-4  # the check would see an overspent boundary
    rng = np.random.default_rng(66)
    z = np.cumsum(rng.standard_normal((200_000, t.size)) * np.sqrt(np.diff([0.0, *t])), axis=1) / np.sqrt(t)
    se = math.sqrt(0.05 * 0.95 / 200_000)
    for bounds in (ni, other, plan_bounds(t, 1000, 0.10, 0.05)[0]):
        assert (z >= bounds).any(axis=1).mean() == pytest.approx(0.05, abs=3 * se)


def test_no_boundary_design_stops_sooner_than_its_data_reach_z():
    """``boundary_share_floor``: every level-alpha boundary is at least z_(1-alpha), so a rejected data set stops no
    sooner than its first look at z; keeping 0.9 of the fixed test's power, the least mean share takes the data sets
    that get there first (the others at the first look, or at the last without futility stops). By hand on four data
    sets; then on AIME-like data (30 problems x 8 samples, a drop of 3 margins at 10 points) ``look_statistics`` is the
    design's own statistic (its last look labels exactly the fixed rule's "not non-inferior"), the statistic is far
    less noisy than the canonical model's unit variance (the worst-case design effect 8 against a true one near 3), and
    the default design, at its own power ratio, uses no less than the floor, which is above 60% without futility
    stops (the not-non-inferior side has none): why that row of the benchmark stays above 60%."""
    from snapeval.stats.groupseq import boundary_share_floor, look_statistics

    stat = np.array([[2.0, 3.0], [0.0, 2.0], [0.0, 0.0], [1.0, 1.0]])
    got = boundary_share_floor(stat, np.full((4, 2), [0.5, 1.0]), 0.05, 0.9)
    assert got["least_share_boundary_designs"] == pytest.approx((0.5 + 1.0 + 2 * 0.5) / 4)
    assert got["least_share_boundary_designs_no_futility_stops"] == pytest.approx((0.5 + 1.0 + 2) / 4)

    rng = np.random.default_rng(61)
    rows, m = 600, np.full((600, 30), 8.0)
    p_worse = rng.beta(0.3 * 7 / 3, 0.7 * 7 / 3, size=m.shape)  # intra-cluster correlation 0.3 around 0.3
    worse, better = rng.binomial(8, p_worse).astype(float), np.zeros_like(m)
    stat, shares = look_statistics(worse, better, m, 0.10)
    label, used, _, fixed, _ = simulate_design(worse, better, m, 0.10, -0.30)
    z = NormalDist().inv_cdf(0.95)
    assert np.array_equal(-stat[:, -1] >= z, fixed == -1)
    floor = boundary_share_floor(-stat, shares, 0.05, 0.9)
    assert floor["statistic_sd_last_look"] < 0.45
    ratio = (label == -1).mean() / (fixed == -1).mean()
    own = boundary_share_floor(-stat, shares, 0.05, ratio)
    assert used.mean() >= own["least_share_boundary_designs"] - 1e-12
    assert floor["least_share_boundary_designs_no_futility_stops"] > 0.6
