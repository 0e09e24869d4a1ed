"""Sweep configuration, public names in one place: the typed objects (:mod:`snapeval.sweep.spec`) and the YAML
loader that validates a file into them (:mod:`snapeval.sweep.parse`; its docstring documents the file format)."""
from __future__ import annotations

from snapeval.paths import default_data_dir
from snapeval.sweep.parse import load_config, parse_config, resolve_config_path
from snapeval.sweep.spec import (
    DTYPES,
    EXECUTORS,
    MethodSpec,
    ModelSpec,
    Resources,
    SimLengths,
    SimulateSpec,
    SweepConfig,
    TaskSpec,
    data_files_for,
)

__all__ = ["DTYPES", "EXECUTORS", "MethodSpec", "ModelSpec", "Resources", "SimLengths", "SimulateSpec", "SweepConfig",
           "TaskSpec", "data_files_for", "default_data_dir", "load_config", "parse_config", "resolve_config_path"]
