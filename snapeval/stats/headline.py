"""A cell's headline metric: the one number its decision, its report row and its regression guard lead with."""
from __future__ import annotations

from typing import Any


def headline_metric(view: dict[str, Any], result) -> tuple[str, str]:
    """``(subtask, "metric,filter")`` of a cell's headline number: the config's ``metric`` (a view's ``metric``
    key) among the metrics of the cell's own task, else the first one that task reports (the first subtask's when
    the task itself reports none). ``result``: a :class:`~snapeval.results.schema.CellResult` with metrics."""
    subtasks = [m.subtask for m in result.metrics]
    subtask = view["task"] if view["task"] in subtasks else subtasks[0]
    mine = [m for m in result.metrics if m.subtask == subtask]
    wanted = view.get("metric")
    if wanted:
        for m in mine:
            if wanted in (m.metric, m.key):
                return subtask, m.key
    return subtask, mine[0].key
