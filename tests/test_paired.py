"""Paired statistics against hand computations: McNemar exact, a paired bootstrap with a fixed seed, clusters."""
from __future__ import annotations


import numpy as np
import pytest

from snapeval.errors import SnapevalError
from snapeval.results.paired import compare_cells, mcnemar_exact, paired_bootstrap_ci
from snapeval.results.schema import CellResult, SampleRecord


def test_mcnemar_exact_on_known_tables():
    # b=1, c=9: 2 * P[X <= 1], X ~ Bin(10, 1/2) = 2 * 11/1024
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
    assert mcnemar_exact(9, 1) == pytest.approx(22 / 1024)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0  # capped at 1
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)


def test_bootstrap_matches_a_hand_rolled_resampler():
    diffs = np.array([-1, 0, 0, -1, 1, 0, -1, 0, 0, -1], dtype=float)
    low, high = paired_bootstrap_ci(diffs, iterations=4000, seed=7)
    rng = np.random.default_rng(7)  # the same draws, item by item
    counts = rng.multinomial(10, np.full(10, 0.1), size=4000)
    means = counts @ diffs / 10
    assert (low, high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))
    assert low < diffs.mean() < high


def test_clusters_resample_whole_documents():
    # two documents with 5 questions each, perfectly correlated inside a document: the cluster CI is wider
    diffs = np.array([-1] * 5 + [0] * 5, dtype=float)
    items = paired_bootstrap_ci(diffs, iterations=4000, seed=0)
    docs = paired_bootstrap_ci(diffs, ["a"] * 5 + ["b"] * 5, iterations=4000, seed=0)
    assert docs[1] - docs[0] > items[1] - items[0]
    assert docs == pytest.approx((-1.0, 0.0))  # resampling 2 documents: all of a, half, or none of it


def _cell(scores: dict[int, float], texts: dict[int, str] | None = None) -> CellResult:
    samples = [SampleRecord("t", d, "x", ((texts or {}).get(d, "ab"),), {"acc,none": v}, True) for d, v in scores.items()]
    return CellResult("c", {}, [], samples)


def test_compare_cells_flips_lengths_and_unpaired_items():
    ref = _cell({0: 1, 1: 1, 2: 1, 3: 0, 4: 1, 5: 1})
    cand = _cell({0: 0, 1: 0, 2: 1, 3: 1, 4: 0, 6: 1}, texts={0: "abcd", 1: "abcd"})
    cmp = compare_cells(ref, cand, "acc,none", iterations=2000)
    assert cmp.n == 5 and cmp.unpaired == 2  # docs 5 and 6 are never paired
    assert (cmp.broke, cmp.fixed) == (3, 1) and cmp.binary
    assert cmp.mcnemar_p == pytest.approx(mcnemar_exact(3, 1))
    assert cmp.mean_diff == pytest.approx((-1 - 1 + 0 + 1 - 1) / 5)
    assert cmp.length_change == pytest.approx((2 + 2) / 5)
    assert not cmp.significant  # 3 vs 1 discordant items prove nothing


def test_no_shared_item_is_a_one_line_error():
    with pytest.raises(SnapevalError, match="share no scored item.*never paired") as err:
        compare_cells(_cell({0: 1}), _cell({1: 1}), "acc,none")
    assert "\n" not in str(err.value)


def test_missing_reference_cell_is_explained_in_the_table():
    from snapeval.results.table import paired_columns

    cols = paired_columns({"method": "snapstream"}, _cell({0: 1}), "acc,none", None)
    assert cols == {"paired_note": "no full-cache reference cell answered the same items (same model, task, seed, limit)"}
