"""Paired comparisons of two cells (snapeval.stats.paired): which test and interval each kind of metric gets, the
orientation of lower-is-better metrics, clusters, unpaired items, and the regress drop check."""
from __future__ import annotations

import math

import numpy as np
import pytest

from snapeval.errors import SnapevalError
from snapeval.results.schema import CellResult, SampleRecord
from snapeval.stats import DecisionRule, compare_cells, drop_check
from snapeval.stats.binary import mcnemar_midp, tango_interval, tango_noninferiority
from snapeval.stats.power import noninferiority_items


def _cell(scores: dict[int, float], texts: dict[int, str] | None = None, clusters=None) -> CellResult:
    samples = [SampleRecord("t", d, "x", ((texts or {}).get(d, "ab"),), {"acc,none": float(v)}, True,
                            None if clusters is None else str(clusters[d])) for d, v in scores.items()]
    return CellResult("c", {}, [], samples)


def test_binary_single_items_use_mcnemar_midp_and_tango():
    ref = _cell({i: 1 for i in range(40)})
    cand = _cell({i: (0 if i < 2 else 1) for i in range(40)})
    cmp = compare_cells(ref, cand, "acc,none")
    assert (cmp.worse, cmp.better, cmp.n, cmp.clusters, cmp.unpaired) == (2, 0, 40, 40, 0)
    assert cmp.test == "McNemar mid-p" and cmp.p_value == pytest.approx(mcnemar_midp(2, 0))
    # the interval is two-sided 90% (1 - 2 alpha): its lower end is the decision's one-sided 95% bound
    assert (cmp.ci_low, cmp.ci_high) == pytest.approx(tango_interval(2, 0, 40, 0.90))
    assert cmp.ci_low == pytest.approx(-cmp.drop_bound)
    assert cmp.interval == "Tango score"
    assert (cmp.ni_p, cmp.drop_bound) == pytest.approx(tango_noninferiority(2, 0, 40, 0.02, 0.05))
    # the items that would settle it are computed at the observed difference: -0.05 is beyond the margin, so they are
    # the items that would show the whole interval beyond it (the gap reversed); none only exactly at the margin
    assert not cmp.non_inferior and not cmp.not_non_inferior and cmp.drop_low < 0.02
    assert cmp.n_for_margin == noninferiority_items(0.02, 0.05, 2 / 40, -2 / 40) < math.inf
    assert noninferiority_items(0.02, 0.05, 0.1, -0.02) == math.inf
    one = compare_cells(_cell({i: 1 for i in range(400)}), _cell({i: (0 if i < 2 else 1) for i in range(400)}),
                        "acc,none")
    assert one.non_inferior and one.n_for_margin == noninferiority_items(0.02, 0.05, 2 / 400, -2 / 400) == 373
    loose = compare_cells(ref, cand, "acc,none", rule=DecisionRule(margin=0.2))
    assert loose.non_inferior and loose.drop_bound < 0.2


def test_no_discordant_item_keeps_a_real_interval():
    ref = _cell({i: 1 for i in range(40)})
    cmp = compare_cells(ref, ref, "acc,none")
    assert cmp.ci_low < -0.06 and cmp.ci_high > 0.06  # issue #21: the old bootstrap gave [0, 0]
    assert cmp.p_value == 1.0 and cmp.drop_bound == pytest.approx(0.0634, abs=1e-3) == -cmp.ci_low
    # issue #39: no 40 items can show non-inferiority at 2 points, and that is an n to name, not "unreachable"
    assert not cmp.non_inferior and cmp.n_for_margin == 133


def test_lower_is_better_metrics_are_oriented():
    ref = _cell({i: 0 for i in range(30)})
    cand = _cell({i: (1 if i < 6 else 0) for i in range(30)})  # the error rate rose: worse
    up = compare_cells(ref, cand, "acc,none", higher_is_better=False)
    assert up.worse == 6 and up.better == 0 and up.mean_diff == pytest.approx(0.2)
    assert up.ci_low > 0 and up.drop_bound > 0.2 > 0.02
    assert drop_check(ref, cand, "acc,none", alpha=0.05, higher_is_better=False).p_value < 0.05
    assert drop_check(ref, cand, "acc,none", alpha=0.05).p_value > 0.95


def test_clusters_and_unpaired_items():
    clusters = [i // 5 for i in range(40)]
    ref = _cell({i: 1 for i in range(40)}, clusters=clusters)
    cand = _cell({i: (0 if i < 10 else 1) for i in range(40)}, clusters=clusters)  # two whole documents broke
    cmp = compare_cells(ref, cand, "acc,none")
    assert cmp.clusters == 8 and cmp.test.startswith("sign-flip over 8 clusters") and cmp.design_effect > 1
    singles = compare_cells(_cell({i: 1 for i in range(40)}), _cell({i: (0 if i < 10 else 1) for i in range(40)}),
                            "acc,none")
    assert cmp.p_value > singles.p_value and cmp.ci_low < singles.ci_low  # clustering removes information
    ref2 = _cell({0: 1, 1: 1, 2: 1, 3: 0, 4: 1, 5: 1})
    cand2 = _cell({0: 0, 1: 0, 2: 1, 3: 1, 4: 0, 6: 1}, texts={0: "abcd", 1: "abcd"})
    cmp2 = compare_cells(ref2, cand2, "acc,none")
    assert cmp2.n == 5 and cmp2.unpaired == 2 and (cmp2.worse, cmp2.better) == (3, 1)
    assert cmp2.length_change == pytest.approx((2 + 2) / 5)


def test_continuous_scores_use_the_sign_flip_test_and_the_bootstrap():
    rng = np.random.default_rng(0)
    ref = _cell({i: v for i, v in enumerate(rng.integers(0, 9, 30) / 8)})
    cand = _cell({i: v for i, v in enumerate(rng.integers(0, 9, 30) / 8)})
    cmp = compare_cells(ref, cand, "acc,none")
    assert not cmp.binary and cmp.test.startswith("sign-flip over 30 clusters")
    assert cmp.interval == "cluster bootstrap, expanded percentile" and cmp.ci_low < cmp.mean_diff < cmp.ci_high
    assert math.isfinite(cmp.mdd) and cmp.mdd > 0 and cmp.n_for_margin > 30
    few = compare_cells(_cell({i: i / 8 for i in range(4)}), _cell({i: (i + 1) / 8 for i in range(4)}), "acc,none")
    assert few.few_clusters and "only 4 clusters" in few.interval and few.drop_bound == pytest.approx(-0.125)
    three = compare_cells(_cell({i: i / 8 for i in range(3)}), _cell({i: (i + 1) / 8 for i in range(3)}), "acc,none")
    assert three.drop_bound == math.inf and not three.non_inferior  # 3 clusters can never show non-inferiority


def test_drop_check_and_the_smallest_p():
    ref = _cell({i: 1 for i in range(4)})
    cand = _cell({i: 0 for i in range(4)})
    check = drop_check(ref, cand, "acc,none", alpha=0.05)
    assert check.p_value == pytest.approx(0.5 / 16) and check.smallest_p == pytest.approx(0.5 / 16)
    three = drop_check(_cell({i: 1 for i in range(3)}), _cell({i: 0 for i in range(3)}), "acc,none", alpha=0.05)
    assert three.smallest_p == pytest.approx(0.0625) and three.p_value >= 0.05  # 3 items cannot reject at 5%
    big = drop_check(_cell({i: 1 for i in range(64)}), _cell({i: 1 for i in range(64)}), "acc,none", alpha=0.05)
    assert big.power == pytest.approx(0.894, abs=1e-3)  # 64 items


def test_no_shared_item_is_a_one_line_error():
    with pytest.raises(SnapevalError, match="share no scored item.*never paired") as err:
        compare_cells(_cell({0: 1}), _cell({1: 1}), "acc,none")
    assert "\n" not in str(err.value)


def test_missing_reference_cell_is_explained_in_the_table():
    from snapeval.report.results_table import paired_columns

    cols = paired_columns({"method": "snapstream"}, _cell({0: 1}), "acc,none", None, DecisionRule())
    assert cols == {"paired_note": "no full-cache reference cell answered the same items (same model, task, seed, limit)"}


def test_the_interval_shown_is_the_decisions():
    """Issue #39: 395 items, 3 worse: non-inferior at 2 points, and the interval shown must say so (the old 95%
    interval reached -0.022, below the margin line, next to a "yes")."""
    cmp = compare_cells(_cell({i: 1 for i in range(395)}), _cell({i: (0 if i < 3 else 1) for i in range(395)}),
                        "acc,none")
    assert cmp.non_inferior and cmp.ci_low > -0.02 and cmp.ci_low == pytest.approx(-cmp.drop_bound)
    assert tango_interval(3, 0, 395, 0.95)[0] < -0.02  # what the old table drew
