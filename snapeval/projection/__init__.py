"""What the paper grids cost on a GPU, projected from measured rates: ``snapeval project``.

A model of the sweep's shared group's time, read from the routes of its memory plan (the same routes
:class:`~snapeval.branching.BranchSet` runs and the plan's byte phases count), priced at rates fitted to measured
groups, and every group of ``configs/paper_llama.yaml`` and ``configs/paper_r1_distill.yaml`` projected in GPU-hours
over the tasks' real prompt lengths. Pure arithmetic: the command runs on any machine, from rates measured on a GPU
(``snapeval project --rates-from results/bench/gpu.json``); the measurement itself (a calibration and a timed slice on
the GPU) is ``python -m benchmarks.paper_projection``, which fits its rates and projects through these names.

- :mod:`~snapeval.projection.schedule`: a group's decode schedule per route and its predicted seconds;
- :mod:`~snapeval.projection.rates`: :class:`Rates` and their fits (exact least squares);
- :mod:`~snapeval.projection.grids`: the paper configs' groups and their items;
- :mod:`~snapeval.projection.cli`: the ``snapeval project`` command (its flags, shared with the benchmark).
"""
from snapeval.projection.grids import (FAMILY, LENGTHS_FILE, MODEL, PAPER_CONFIGS, QWEN_FAMILY, device_sheet,
                                       hardware_sheet, longbench_documents, longbench_limit, paper_llama_configs,
                                       project_config, project_grids, task_defaults, task_items)
from snapeval.projection.rates import (H100_COMPRESSION_SHARE, Rates, fit_rates, least_squares, prefill_floor_s,
                                       rates_from_gpu_json, robust_least_squares)
from snapeval.projection.schedule import (Documents, chunks_schedule, decode_schedule, engine_count, engine_steps,
                                          group_chunks, group_plan, merged_schedule, project_group, step_bytes)

__all__ = ["FAMILY", "H100_COMPRESSION_SHARE", "LENGTHS_FILE", "MODEL", "PAPER_CONFIGS", "QWEN_FAMILY", "Documents",
           "Rates", "chunks_schedule", "decode_schedule", "device_sheet", "engine_count", "engine_steps",
           "fit_rates", "group_chunks", "group_plan", "hardware_sheet", "least_squares", "longbench_documents",
           "longbench_limit", "merged_schedule", "paper_llama_configs", "prefill_floor_s", "project_config",
           "project_grids", "project_group", "rates_from_gpu_json", "robust_least_squares", "step_bytes",
           "task_defaults", "task_items"]
