"""Results: typed per-cell results (validated when read) and the results directory that holds them. The tidy table
built from them lives above, in :mod:`snapeval.report.results_table`."""
from __future__ import annotations

from snapeval.results.schema import CellResult, MetricValue, SampleRecord, from_lm_eval
from snapeval.results.store import ResultsStore, atomic_write_text

__all__ = ["CellResult", "MetricValue", "ResultsStore", "SampleRecord", "atomic_write_text", "from_lm_eval"]
