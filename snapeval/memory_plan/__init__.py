"""The memory plan of a shared-prefill group: what it holds, per item and per row, before it runs.

A group (:class:`snapeval.branching.BranchSet`) prefills each item once and builds every configuration's cache from
that prefill. Items go through in *chunks* of ``chunk`` items:

1. **prefill** (one item at a time): the model's weights, the one-row :class:`~snapeval.cache.capture.PromptCapture`
   (every layer's prompt keys and values, the last window queries, the window attention sums), and the prefill's
   activations (the largest is a decoder layer's MLP: three ``[tokens, intermediate]`` tensors at once);
2. **branch**: right after the item's prefill, its one-row cache of every configuration that decodes in rows is
   built and *held* until the chunk decodes (fixed-size caches: ``budget`` slots; appending ones: the kept
   prompt); a configuration decoded *alone* (below) decodes this item now, from the capture, which is then freed;
3. **decode**: each configuration in turn decodes the chunk's held branches in the static rows of its own engine
   (``rows`` rows of :meth:`~snapeval.cache.config.MethodConfig.cache_slots` slots), which are freed after it.

A growing cache that holds the whole prompt (the full cache, or SnapKV with a budget of at least the prompt) decodes
in rows only while ``chunk`` of its rows hold fewer bytes than the weights (a decode step reads the weights once and
every row's keys and values once: below that point it reads more weight bytes than KV bytes, so batching pays);
beyond it, it decodes alone, item by item, straight from the capture, holding one row as the per-cell path does (the
capture's layers move into its cache one by one).
Fixed-size caches always decode in rows (``budget`` slots each, as their per-cell engine does).

Every method's memory is read from the method (:meth:`~snapeval.cache.config.MethodConfig.kept_tokens`,
:meth:`~snapeval.cache.config.MethodConfig.cache_slots`, ``FIXED_SIZE``) and the model's shape
(:class:`ModelShape`); the plan's byte counts of the capture, the branches, the rows and the weights equal the
tensors allocated (``tests/test_memory_plan.py``); activations are an estimate of the live tensors of one decoder
layer's forward.

:func:`plan_group` picks the largest chunk, at most the one asked for, whose predicted peak stays within the
device's budget (``max_memory``; default: the memory in use plus what is free, less a margin), then, if even one
item does not fit, prefills long prompts in token chunks (the capture's continuation: equal to one prefill up to
float rounding) and, on a GPU, keeps the capture in host memory (streamed back layer by layer when branches are
built). :class:`PeakMeter` measures the real peak for the cells' provenance.

On a GPU the held branches can wait in host memory instead (``branches_on_host``): each branch layer goes to the host
as soon as it is built, and each engine copies its rows back when it admits them. The device then holds no branch,
so each configuration's engine has the whole room for its rows and the chunk is bounded by the host's budget
(the model's ``max_memory`` entry for ``cpu``, else what the host has available less a margin). The plan takes it
where it leaves fewer bytes per decoded token, counting the branches' trip over the host link both ways
(:data:`HOST_LINK_BYTES_PER_S`): LongBench-v2 at 120k tokens holds 11.8 GiB of branches per item, so the device holds
2 items and each configuration decodes in rows of 2; from the host, in rows of up to the chunk.

A plan is sized for the largest item it is given. On a GPU a group therefore takes its items longest prompt first
and plans each chunk for the items left (:func:`longest_first`, :func:`chunk_order`): a chunk of shorter prompts
decodes in more rows than one plan for the whole call would give it.

The package, one module per concern: ``units`` (bytes, the plan's constants), ``shape`` (:class:`ModelShape`: the
model's sizes and the bytes of each tensor the plan counts), ``sizes`` (what each configuration holds), ``records``
(:class:`GroupPlan`, :class:`ConfigurationPlan` with its route, :data:`ROUTES`, :class:`Item`), ``chunk`` (one chunk in bytes: each
configuration's decode and the phases), ``cost`` (bytes per decoded token at the rates of the device's hardware
sheet), ``search`` (:func:`plan_group`: best first, by bounds), ``order`` (the order a group takes its items),
``device`` (the device's budget and the measured peak) and ``paper`` (the paper-scale prediction). Import from the
package.
"""
from __future__ import annotations

from snapeval.memory_plan.cost import (EAGER_STEP_FACTOR, HOST_LINK_BYTES_PER_S, CostModel, bytes_per_token,
                                       cost_model)
from snapeval.memory_plan.device import PeakMeter, bytes_in_use, device_budget, is_out_of_memory
from snapeval.memory_plan.order import (MIN_SHARED_DOCUMENT, chunk_order, common_prefix, document_families,
                                        longest_first, shared_prefix, shares_documents, whole_families)
from snapeval.memory_plan.paper import PAPER_BUDGETS, PAPER_NEW, PAPER_PROMPT, predict_paper_scale
from snapeval.memory_plan.records import (BRANCH_LOOP, ENGINE_ROWS, IN_ROWS, ONE_ROW_ENGINE, OWN_PREFILL, ROUTES,
                                          SHARED_STEP_ROWS, ConfigurationPlan, GroupPlan, Item)
from snapeval.memory_plan.search import plan_group
from snapeval.memory_plan.shape import ModelShape
from snapeval.memory_plan.sizes import (alone_cache_bytes, branch_bytes, captures_alone, engine_bytes, engine_slots,
                                        holds_whole_prompt, row_bytes, row_slots)
from snapeval.memory_plan.units import (GIB, GPU_CHUNK, INT64, MARGIN_BYTES, MARGIN_FRACTION, MIN_PREFILL_TOKENS,
                                        gib, parse_bytes)

__all__ = [
    "BRANCH_LOOP", "ENGINE_ROWS", "IN_ROWS", "ONE_ROW_ENGINE", "OWN_PREFILL", "ROUTES", "SHARED_STEP_ROWS",
    "EAGER_STEP_FACTOR", "GIB", "GPU_CHUNK", "HOST_LINK_BYTES_PER_S", "INT64", "MARGIN_BYTES", "MARGIN_FRACTION",
    "MIN_PREFILL_TOKENS", "MIN_SHARED_DOCUMENT", "common_prefix", "document_families", "shared_prefix",
    "whole_families", "PAPER_BUDGETS", "PAPER_NEW", "PAPER_PROMPT", "ConfigurationPlan", "CostModel",
    "GroupPlan", "Item", "ModelShape", "PeakMeter", "alone_cache_bytes", "branch_bytes", "bytes_in_use",
    "bytes_per_token", "captures_alone", "chunk_order", "cost_model", "device_budget", "engine_bytes",
    "engine_slots", "gib", "holds_whole_prompt", "is_out_of_memory", "longest_first", "parse_bytes",
    "plan_group", "predict_paper_scale", "row_bytes", "row_slots", "shares_documents",
]
