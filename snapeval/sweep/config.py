"""Sweep configuration, public names in one place: the typed objects (:mod:`snapeval.sweep.spec`) and the YAML
loader that validates a file into them (:mod:`snapeval.sweep.parse`; its docstring documents the file format)."""
from __future__ import annotations

from snapeval.paths import default_data_dir
from snapeval.sweep.parse import load_config, parse_config, resolve_config_path
from snapeval.sweep.spec import *  # noqa: F403 (the typed objects, re-exported)
from snapeval.sweep.spec import __all__ as _SPEC_NAMES

__all__ = [*_SPEC_NAMES, "default_data_dir", "load_config", "parse_config", "resolve_config_path"]
