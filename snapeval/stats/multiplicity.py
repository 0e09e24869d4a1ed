"""Multiplicity: Holm's step-down adjustment within a family, and the fixed-sequence walk down a budget grid.

- Holm, "A simple sequentially rejective multiple test procedure", Scand. J. Statist. 6:65-70 (1979). Adjusted
  p-values (Wright, "Adjusted p-values for simultaneous inference", Biometrics 48:1005-1013, 1992): sort the ``m``
  raw p-values, ``p_(i) * (m - i + 1)`` for the i-th smallest, made non-decreasing by a running maximum and capped
  at 1. Rejecting every hypothesis whose adjusted p is below ``alpha`` keeps the family-wise error rate <= alpha
  under any dependence between the tests. The report's family is every compressed cell of one (model, task).
- Fixed-sequence testing (Maurer, Hothorn & Lehmacher, "Multiple comparisons in drug clinical trials and preclinical
  assays: a-priori ordered hypotheses", 1995; Westfall & Krishen, J. Stat. Plan. Inference 99:25-40, 2001): a-priori
  ordered hypotheses are each tested at the full ``alpha``, in order, stopping at the first that is not rejected;
  the family-wise error rate stays <= alpha. The smallest non-inferior budget walks a method's budgets from the
  largest (most likely non-inferior) down.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping


def holm(pvalues: Iterable[float | None]) -> list[float | None]:
    """Holm-adjusted p-values in the input order; ``None`` / NaN entries are not tests and stay as they are."""
    values = list(pvalues)
    tests = [(p, i) for i, p in enumerate(values) if p is not None and not (isinstance(p, float) and math.isnan(p))]
    m = len(tests)
    out: list[float | None] = list(values)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(tests)):
        running = max(running, min(1.0, (m - rank) * float(p)))
        out[i] = running
    return out


def fixed_sequence(passed: Mapping[int, bool]) -> int | None:
    """The last hypothesis reached by walking ``{budget: passed}`` from the largest budget down and stopping at the
    first that did not pass: the smallest budget that passed in sequence, or None when the largest did not."""
    smallest = None
    for budget in sorted(passed, reverse=True):
        if not passed[budget]:
            break
        smallest = budget
    return smallest
