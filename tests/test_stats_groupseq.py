"""The group-sequential design of the budget search (snapeval/stats/groupseq.py, issue #61): Lan-DeMets boundaries
against published tables, the exit probabilities against Jennison & Turnbull's constants, the level and coverage on
paired 0/1 data by simulation, the scalar decision against the vectorised one, and reach at plan time."""
from __future__ import annotations

import math

import numpy as np
import pytest

from snapeval.errors import SnapevalError
from snapeval.stats import DecisionRule
from snapeval.stats.groupseq import (
    INCONCLUSIVE,
    NON_INFERIOR,
    NOT_NON_INFERIOR,
    OPEN,
    OUT_OF_REACH,
    decide_look,
    efficacy_bounds,
    exit_probabilities,
    items_for_reach,
    obf_spending,
    simulate_design,
    tango_array,
)
from snapeval.stats.binary import tango_statistic


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


def test_the_scalar_decision_is_the_simulated_one():
    """decide_look (what the search runs) and simulate_design (what the benchmark runs) agree data set by data set,
    on clustered data with unequal looks."""
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 5, size=60).astype(float)
    worse, better, m = _data(rng, 40, sizes, 0.08, 0.04)
    label, used, *_ = simulate_design(worse, better, m, 0.05, -0.04)
    n = sizes.sum()
    cum = np.cumsum(sizes)
    at = [int(np.argmax(cum >= math.ceil(k * n / 4 - 1e-9))) for k in (1, 2, 3, 4)]
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
    """At a 2-point margin 40 items cannot show non-inferiority even if every item ties: the fixed grid needs 133,
    four looks 145 (their last boundary 1.72 > 1.645); a cell whose items tie stops at its first look."""
    from snapeval.report.search import SearchSettings, reach

    assert items_for_reach(0.02, 0.05, looks=1) == 133
    assert items_for_reach(0.02, 0.05, looks=4) == 145
    assert reach(40, None, DecisionRule(), SearchSettings()) == (False, 145)
    assert reach(400, None, DecisionRule(), SearchSettings()) == (True, 145)
    got = decide_look(0, 0, np.ones(10), 0, [0.25, 0.5, 0.75, 1.0], 0.02, 0.05, total_items=40)
    assert (got.label, got.why, got.items) == (INCONCLUSIVE, OUT_OF_REACH, 10)
    broken = decide_look(8, 0, np.ones(10), 0, [0.25, 0.5, 0.75, 1.0], 0.02, 0.05, total_items=40)
    assert broken.label == OPEN  # "not non-inferior" is still likely: it runs on
