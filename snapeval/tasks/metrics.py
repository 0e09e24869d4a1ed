"""Metric helpers shared by the tasks: the unbiased pass@k estimator and "mean over applicable docs"."""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from snapeval.errors import SnapevalError


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem from ``n`` samples of which ``c`` are correct (Chen et al., 2021).

    ``1 - C(n-c, k) / C(n, k)``, computed as a stable product. Requires ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise SnapevalError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_present(values: Iterable[float | None]) -> float:
    """Mean of the values that are not ``None`` (docs a breakdown metric does not apply to); NaN when none."""
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else math.nan


def breakdown(correct: float, groups: dict[str, str], known: dict[str, Sequence[str]]) -> dict[str, float | None]:
    """Per-group metric values of one doc: ``acc_<value>`` is ``correct`` for the doc's own group, else ``None``.

    ``groups`` maps a facet (``difficulty``) to the doc's value (``hard``); ``known`` lists every facet's values,
    so that every doc reports the same metric names (lm-eval declares metrics statically).
    """
    out: dict[str, float | None] = {}
    for facet, values in known.items():
        for value in values:
            out[f"acc_{slug(value)}"] = correct if groups.get(facet) == value else None
    return out


def slug(text: str) -> str:
    """``"Single-Document QA"`` -> ``"single_document_qa"``."""
    return "".join(ch if ch.isalnum() else "_" for ch in text.lower()).strip("_").replace("__", "_")
