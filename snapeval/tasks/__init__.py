"""Benchmark tasks, one folder per task family (:mod:`snapeval.tasks.families` finds them): each holds its lm-eval
task YAML, its code (data loading with validation, prompts, answer extraction, scoring) and its lm-eval hooks
(``hooks.py``), and declares its data and typical lengths in one place (``FAMILY`` in its ``__init__.py``). This
folder is also lm-eval's task folder (:func:`snapeval.paths.tasks_dir`).

Families: :mod:`~snapeval.tasks.longbench` (LongBench-v2), :mod:`~snapeval.tasks.aime` (AIME 2024),
:mod:`~snapeval.tasks.livecodebench` (its programs run in :mod:`snapeval.sandbox`), :mod:`~snapeval.tasks.synthetic`
(generated retrieval). Shared by them: :mod:`~snapeval.tasks.data`, :mod:`~snapeval.tasks.hooks`,
:mod:`~snapeval.tasks.followup` (two-pass requests), :mod:`~snapeval.tasks.reasoning`, :mod:`~snapeval.tasks.metrics`,
:mod:`~snapeval.tasks.tokens`.
"""
from __future__ import annotations

from snapeval.tasks.data import loaded_data_records
from snapeval.tasks.reasoning import split_thinking

__all__ = ["loaded_data_records", "split_thinking"]
