"""Sweeps: a YAML grid of models x tasks x methods x budgets x seeds, run resumably, cell by cell."""
from __future__ import annotations

from snapeval.sweep.config import ModelSpec, SweepConfig, TaskSpec, load_config, parse_config
from snapeval.sweep.grid import Cell, expand_grid
from snapeval.sweep.runner import CellRunner, SweepSummary, plan, run_sweep

__all__ = ["Cell", "CellRunner", "ModelSpec", "SweepConfig", "SweepSummary", "TaskSpec",
           "expand_grid", "load_config", "parse_config", "plan", "run_sweep"]
