"""Models loaded once per process, and the lm-eval models of one shared-prefill group.

A sweep evaluates many cells of the same model; :func:`load_once` keeps each (model, dtype, placement) loaded for the
life of the process (a Ray worker included). :func:`group_models` builds, for the cells of one group (same model,
task, seed and items), one ``snapeval`` lm-eval model per cell, all answered by one
:class:`~snapeval.branching.SharedBranches`: each item is prefilled once for every method and budget.
"""
from __future__ import annotations

import gc
import json
from typing import Any

_LOADED: dict[tuple[str, str | None, str, str], Any] = {}
_FROZEN = False  # whether this process has frozen what lives once its first group's model is loaded


def load_once(pretrained: str, dtype: str | None = None, device: str = "cpu", device_map=None):
    """``(model, tokenizer)`` of :func:`snapeval.load_model`, loaded on the first call for these arguments."""
    from snapeval.models.devices import usable_device
    from snapeval.models.loading import load_model

    dtype = None if dtype in (None, "auto") else dtype
    device = usable_device(device)
    key = (str(pretrained), dtype, str(device), json.dumps(device_map, sort_keys=True))
    if key not in _LOADED:
        _LOADED[key] = load_model(str(pretrained), dtype=dtype, device=device, device_map=device_map)
    return _LOADED[key]


def group_models(cells) -> list:
    """One :class:`~snapeval.harness.lm_eval_model.SnapStreamLM` per cell of a group, sharing one prefill per item,
    within the model's ``max_memory`` on the device its inputs go to (the memory plan's budget) and, on a GPU, its
    ``max_memory`` for ``cpu`` on the host (where held branches may wait)."""
    from snapeval.branching import BranchSet, SharedBranches
    from snapeval.harness.lm_eval_model import SnapStreamLM
    from snapeval.memory_plan import GPU_CHUNK
    from snapeval.models.devices import input_device

    spec = cells[0].model
    kwargs = cells[0].evaluate_kwargs()["model_args"]
    loaded = load_once(spec.pretrained, spec.dtype, **spec.placement())
    _freeze_once()
    device = input_device(loaded[0])
    # items in flight: on a GPU as many as the memory plan lets each configuration decode in rows; else the batch
    slots = max(spec.batch_size, GPU_CHUNK if device.type == "cuda" else 8)
    budget = spec.memory_for(device)
    shared = SharedBranches(BranchSet(*loaded, [cell.config for cell in cells], batch=slots, seed=cells[0].seed,
                                      max_memory=budget, max_host_memory=spec.memory_for("cpu"),
                                      run_args=spec.run_args))
    common = {k: v for k, v in kwargs.items() if k != "config"}
    return [SnapStreamLM(**common, config=cell.config, loaded=loaded, shared=shared) for cell in cells]


def _freeze_once() -> None:
    """Move every object alive now (imports, the loaded model and tokenizer: about 600k objects for SmolLM2 with
    lm-eval imported) out of the cyclic collector's reach, once per process, as vLLM does after start-up. A group
    collects after each engine (:mod:`snapeval.branching`) so that one configuration's rows are gone before the next
    are allocated; a full collection walked all of these each time (0.28 s, 8% of a quickstart group) and now walks
    only what came after. Frozen objects are still freed by reference counting; only cycles among them would wait.
    Freezing before the group's own objects exist keeps each group's garbage collectable."""
    global _FROZEN
    if not _FROZEN:
        gc.collect()
        gc.freeze()
        _FROZEN = True
