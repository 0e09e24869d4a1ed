"""Statistics: paired comparisons, intervals and tests, multiplicity, power, the deployment decision and ``regress``.

One module per concern, each naming its textbook source:

- :mod:`.binary`: McNemar exact and mid-p tests, Tango's score interval and non-inferiority test, on Rao-Scott
  effective counts with the worst-case design effect for clustered 0/1 scores;
- :mod:`.permutation`: the sign-flip permutation test over clusters and its confidence bound;
- :mod:`.bootstrap`: the cluster bootstrap interval (expanded percentile);
- :mod:`.multiplicity`: Holm's adjustment within a family, fixed-sequence testing down a budget grid;
- :mod:`.power`: exact McNemar power, the minimum detectable drop, the items a non-inferiority margin needs;
- :mod:`.decision`: :class:`DecisionRule` (margin, alpha) of the non-inferiority decision;
- :mod:`.headline`: a cell's headline metric (what the decision, the report and ``regress`` lead with);
- :mod:`.paired`: :func:`compare_cells` (everything above, for two cells of one group) and :func:`drop_check`;
- :mod:`.groupseq`: the group-sequential design of the budget search (Lan-DeMets boundaries on Tango's statistic,
  non-binding futility, reach at plan time);
- :mod:`.sequential`: the anytime-valid paired decision (betting e-processes over clusters), the search's other design;
- :mod:`.consistency`: a results folder's own consistency, checked by ``regress`` before it compares;
- :mod:`.regress`: the ``snapeval regress`` command.

``docs/statistics.md`` gives the levels, the simulations that chose the clustered method, and the decisions.
"""
from __future__ import annotations

import importlib

from snapeval.stats.decision import DecisionRule
from snapeval.stats.multiplicity import fixed_sequence, holm

__all__ = ["DecisionRule", "DropCheck", "PairedComparison", "compare_cells", "drop_check", "fixed_sequence", "holm"]
_LAZY = {"DropCheck", "PairedComparison", "compare_cells", "drop_check"}  # numpy/scipy: loaded on first use


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module("snapeval.stats.paired"), name)
    raise AttributeError(f"module 'snapeval.stats' has no attribute {name!r}")
