"""Benchmark tasks: data loading with validation, prompts, answer extraction and scoring, and the
synthetic long-context generators. The lm-eval task YAML in ``tasks/`` calls these through
:mod:`snapeval.tasks.lm_eval_hooks`.

Modules: :mod:`~snapeval.tasks.data`, :mod:`~snapeval.tasks.longbench`, :mod:`~snapeval.tasks.aime`,
:mod:`~snapeval.tasks.livecodebench` (its programs run in :mod:`snapeval.sandbox`), :mod:`~snapeval.tasks.synthetic`,
:mod:`~snapeval.tasks.reasoning`, :mod:`~snapeval.tasks.metrics`.
"""
from __future__ import annotations

from snapeval.tasks.data import loaded_data_records
from snapeval.tasks.reasoning import split_thinking

__all__ = ["loaded_data_records", "split_thinking"]
