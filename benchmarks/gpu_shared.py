"""The shared-prefill group at real shape on a GPU: one prefill per item for every configuration, under the memory
plan, with a random-weight Llama-3.1-8B-Instruct in bfloat16.

Model: the preset's real architecture, random weights, built on the GPU (``benchmarks.gpu.build_model``). Prompts:
real LongBench-v2 documents in the real tokenizer, cut to ``--lengths`` tokens (default 32k, 64k, 128k;
``benchmarks.gpu.prompt_ids``). The grid is the full cache plus SnapStream and SnapKV at ``--budgets`` (default 4k,
8k, 16k), greedy, ``--max-new`` new tokens. Per length:

- ``shared``: :class:`snapeval.branching.BranchSet` with ``--chunk`` items in flight at most and ``max_memory`` left
  to its default (what is in use plus what the GPU has free, less the plan's margin): the plan the group ran under
  (chunk, tokens per prefill forward, whether the capture lives in host memory, which configurations decode alone,
  the predicted peak), the measured peak (torch's peak allocated bytes above what was in use when the group
  started, what the plan's ``peak_bytes`` predicts) and their ratio, the wall time and the prefill time;
  ``decode``: per configuration decoded in rows, the rows it ran (the plan's), its mean decode step time, the
  step's byte floor at those rows ((weights + rows x one row's KV bytes) / the measured copy bandwidth), their ratio
  ``x_floor``, the slots' occupancy and whether the step was captured (recorded once as a CUDA graph and replayed);
- ``per_cell`` (at the lengths in ``--per-cell-lengths``, default 32k): every configuration with its own prefill,
  as ``snapeval sweep --per-cell`` runs it (SnapStream on the continuous-batching engine, the others through
  ``snapeval.generate`` one prompt at a time): wall time, the largest peak, and how many greedy outputs equal the
  shared group's (bfloat16 reductions may depend on the batch shape: counted, not assumed).

``--smoke`` runs the same code on the CPU at tiny layer shapes and short prompts (the test suite runs it; its
numbers mean nothing). Without ``--smoke`` a CUDA device is required. Writes results/bench/gpu_shared.json after
every length (a crash or a kill keeps the finished ones).

    python -m benchmarks.gpu_shared                 # on a GPU machine (about 4 min on one H100)
    python -m benchmarks.gpu_shared --smoke --out /tmp/gpu_shared_smoke.json
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from benchmarks.common import (BENCH_DIR, alone_token_ids, fill_defaults, full_snapstream_snapkv, machine,
                               write_json_at)
from benchmarks.gpu import benchmark_device, build_model, copy_bandwidth, prompt_ids, release, sync

MODEL = "llama-3.1-8b-instruct"


def shared(model, tokenizer, configs, prompts, max_new: int, chunk: int,
           bandwidth: float | None = None, shared_step: str = "auto") -> tuple[dict, dict]:
    """One :class:`BranchSet` over ``prompts`` (with the run argument ``shared_step``): (the point's figures, each
    configuration's greedy token ids)."""
    from snapeval.branching import BranchSet
    from snapeval.engine import SamplingParams
    from snapeval.run_args import RunArgs

    branches = BranchSet(model, tokenizer, configs, batch=chunk, run_args=RunArgs(shared_step=shared_step))
    sync(branches.device)
    start = time.perf_counter()
    out = branches.generate(prompts, [SamplingParams(max_new_tokens=max_new)] * len(prompts))
    sync(branches.device)
    wall = time.perf_counter() - start
    # each chunk has its own plan on a GPU (longest prompts first): the measured peak is the call's largest plan's
    plan = max((chunk_plan for _, chunk_plan in branches.chunk_plans[-1]), key=lambda p: p.peak_bytes)
    peak = branches.peaks[-1]
    figures = {
        "wall_s": wall, "prefills": branches.stats.prefills, "prefill_s": branches.stats.prefill_seconds,
        "plan": plan.to_dict(), "plan_text": plan.render(), "peak": peak,
        "peak_measured_over_predicted": peak["growth_bytes"] / plan.peak_bytes if plan.peak_bytes else None,
        "within_budget": plan.budget_bytes is None or peak["peak_bytes"] <= plan.budget_bytes,
        "chunk_halvings": branches.stats.chunk_halvings,
        "one_step": branches.one_step(),  # its configurations in rows could share one step; the chunks that did:
        "shared_step_chunks": sum(1 for _, p in branches.chunk_plans[-1] if p.shared_step),
        "kv_gib_per_row": {k: v / 2**30 for k, v in branches.stats.kv_bytes_per_row.items()},
        "decode": decode_against_floor(branches, bandwidth),
    }
    return figures, {c.label: [d.token_ids for d in out[k]] for k, c in enumerate(configs)}


def decode_against_floor(branches, bandwidth: float | None) -> dict:
    """Per configuration decoded in rows: its engines' mean decode step time at the rows they ran, the step's byte
    floor there ((weights + rows x the largest one-row KV bytes) / ``bandwidth``, the copy bandwidth of
    ``benchmarks.gpu``), their ratio, and whether the step was captured (``captured``: recorded once per engine as a CUDA graph
    and replayed; False: eager). A configuration that shared its steps with others (``shared_with``, the plan's
    ``shared_step``) reports the whole step's time and its floor: the weights once and every sharing
    configuration's rows. ``bandwidth`` None (the CPU smoke run): no floor."""
    from snapeval.memory_plan import ModelShape

    weights = ModelShape.of(branches.model).weight_bytes
    decode, kv = branches.stats.decode, branches.stats.kv_bytes_per_row
    out = {}
    for label, totals in decode.items():
        together = totals.get("shared_with", [label])
        step_s = totals["step_seconds"] / totals["steps"] if totals["steps"] else None
        moved = weights + sum(decode[other]["rows"] * kv.get(other, 0) for other in together)
        floor_s = moved / bandwidth if bandwidth else None
        out[label] = {**totals, "step_s": step_s, "floor_bytes": moved, "floor_s": floor_s,
                      "x_floor": step_s / floor_s if step_s and floor_s else None,
                      "occupancy": totals["active_slot_steps"] / (totals["steps"] * totals["rows"])
                      if totals["steps"] else None}
    return out


def per_cell(model, tokenizer, configs, prompts, max_new: int, chunk: int) -> tuple[dict, dict]:
    """Every configuration alone, with its own prefill of every prompt: (figures, greedy token ids)."""
    from snapeval.memory_plan import PeakMeter

    device = next(model.parameters()).device
    cells, texts = {}, {}
    sync(device)
    start = time.perf_counter()
    for config in configs:
        with PeakMeter(device) as meter:
            texts[config.label] = alone_token_ids(model, tokenizer, config, prompts, max_new, slots=chunk)
        cells[config.label] = meter.to_dict()
        release(device)  # the next configuration sizes nothing from memory this one still holds
    sync(device)
    worst = max(cells.values(), key=lambda m: m["growth_bytes"])
    return {"wall_s": time.perf_counter() - start, "prefills": len(configs) * len(prompts), "peak": worst,
            "cells": cells}, texts


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first generated position where two greedy outputs differ (None: identical)."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def run(args, save=lambda payload: None) -> dict:
    """Every length of ``args``; ``save(payload)`` after each, so that a crash or a kill keeps the finished ones."""
    from snapeval.generation import generate
    from snapeval.models.loading import packaged_tokenizer

    smoke = args.smoke
    device = benchmark_device(smoke, "gpu_shared")
    started, load_start = time.perf_counter(), os.getloadavg()
    tokenizer = packaged_tokenizer(MODEL)
    model = build_model(MODEL, device, torch.float32 if smoke else torch.bfloat16, smoke)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    configs = full_snapstream_snapkv(args.budgets)
    warm = prompt_ids(tokenizer, 64, 1)
    generate(model, tokenizer, warm, config=configs[0], max_new_tokens=2)  # kernels, allocator
    bandwidth = None if smoke else copy_bandwidth(device, 2.0, 10)["bytes_per_s"]
    payload = {
        "benchmark": "gpu_shared", "smoke": smoke, "machine": machine(), "model": MODEL,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "load_average_start": load_start, "load_average_end": None, "wall_seconds": None,
        "configurations": [c.label for c in configs], "copy_bandwidth_bytes_per_s": bandwidth,
        "settings": {k: v for k, v in vars(args).items() if k != "out"}, "lengths": {},
    }
    for length in args.lengths:
        prompts = prompt_ids(tokenizer, length, args.items)
        point, texts = shared(model, tokenizer, configs, prompts, args.max_new, args.chunk, bandwidth,
                              args.shared_step)
        if length in args.per_cell_lengths:
            alone, alone_texts = per_cell(model, tokenizer, configs, prompts, args.max_new, args.chunk)
            alone["identical_outputs"] = {label: sum(a == b for a, b in zip(texts[label], alone_texts[label]))
                                          for label in texts}
            alone["first_divergence"] = {label: [first_difference(a, b) for a, b in zip(texts[label],
                                                                                       alone_texts[label])]
                                         for label in texts}
            alone["shared_speedup"] = alone["wall_s"] / point["wall_s"]
            alone["peak_shared_over_per_cell"] = (point["peak"]["growth_bytes"] / alone["peak"]["growth_bytes"]
                                                  if alone["peak"]["growth_bytes"] else None)
            point["per_cell"] = alone
        point.update(items=args.items, prompt_tokens=length, token_ids=texts)
        payload["lengths"][str(length)] = point
        payload.update(load_average_end=os.getloadavg(), wall_seconds=time.perf_counter() - started)
        save(payload)
        print(f"[{time.perf_counter() - started:7.0f}s] {MODEL} @ {length}: shared {point['wall_s']:.1f} s, chunk "
              f"{point['plan']['chunk']}, peak {point['peak']['growth_gib']:.2f} GiB "
              f"(plan {point['plan']['peak_gib']:.2f} GiB)"
              + (f"; per-cell {point['per_cell']['wall_s']:.1f} s" if "per_cell" in point else ""), flush=True)
        release(device)
    return payload


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes on the CPU: the same code, meaningless numbers")
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--items", type=int, default=None, help="prompts per length")
    parser.add_argument("--budgets", type=int, nargs="+", default=None)
    parser.add_argument("--max-new", type=int, default=None)
    parser.add_argument("--chunk", type=int, default=8, help="items in flight at most (the plan may take fewer)")
    parser.add_argument("--shared-step", choices=("auto", "false"), default="auto",
                        help="the sweep's run argument (false: an engine per configuration, as before it)")
    parser.add_argument("--per-cell-lengths", type=int, nargs="*", default=None,
                        help="lengths at which the per-cell path runs too (none: an empty list)")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "gpu_shared.json")
    args = parser.parse_args(argv)
    defaults = (dict(lengths=[256, 512], items=2, budgets=[64, 128], max_new=4, per_cell_lengths=[256])
                if args.smoke else
                dict(lengths=[32768, 65536, 131072], items=2, budgets=[4096, 8192, 16384], max_new=32,
                     per_cell_lengths=[32768]))
    fill_defaults(args, defaults)
    run(args, lambda payload: write_json_at(args.out, payload))
    print(f"wrote {args.out}")
    return args.out


if __name__ == "__main__":
    main()
