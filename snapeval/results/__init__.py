"""Results: typed per-cell results, the results directory, and the tidy table joined to SN40L simulation."""
from __future__ import annotations

from snapeval.results.schema import CellResult, MetricValue, SampleRecord, from_lm_eval
from snapeval.results.store import ResultsStore, atomic_write_text

__all__ = ["CellResult", "MetricValue", "ResultsStore", "SampleRecord", "atomic_write_text", "from_lm_eval",
           "load_table"]


def load_table(results_dir):
    """The tidy table (pandas DataFrame) of a results directory."""
    return ResultsStore(results_dir).load_table()
