"""What the paper grids cost on a GPU: the sweep's shared group timed on the device, a model of it fitted to those
timings, checked against a measured slice, and the whole of ``configs/paper_llama.yaml`` and
``configs/paper_r1_distill.yaml`` projected in GPU-hours over the tasks' real prompt lengths.

Model: Llama-3.1-8B-Instruct's architecture with random weights in bfloat16 (``benchmarks.gpu.build_model``), the
configurations of ``configs/paper_llama.yaml`` (the full cache, SnapStream, StreamingLLM and SnapKV at 1k-16k: 16),
greedy with no stop token (every request decodes its ``max_new`` tokens: random weights have no answer to end).

1. **Calibration** (``calibration``): the group (:class:`snapeval.branching.BranchSet`, as ``snapeval sweep`` runs
   it on CUDA: captured decode, rows from the memory plan) over ``--calibration-items`` prompts at each of
   ``--calibration-lengths``, ``--calibration-new`` new tokens. Three rates are fitted (:class:`Rates`):
   - prefill of one prompt of ``n`` tokens: ``a + b n + c n^2``, ``a`` one forward's floor (the fitted step of one
     row without a cache: the weights read once), ``b`` and ``c`` by least squares over the items' measured prefills
     (a few long prompts cannot place an intercept: three lengths fitted three terms exactly and put 0.65 s on a
     prefill of one token);
   - a decode step: ``fixed + bytes / bandwidth``, ``bytes`` the step's weights and engine rows as the memory plan
     counts them (:func:`step_bytes`), over every configuration's measured mean step;
   - the rest of the group (building each configuration's cache from the capture, engines and their capture):
     ``engine`` seconds per engine plus ``g1 n`` per item and configuration.
2. **Slice** (``slice``): ``--slice-items`` LongBench-v2 items at their real lengths (``paper_lengths.json``, cut at
   pred.py's 120,000 tokens plus the chat template, drawn with ``--seed``) x the 16 configurations x 128 new tokens,
   timed, beside what :func:`project_group` predicts for the same items from the calibration's rates, and the
   predicted decode steps per configuration beside the engines' counted steps (these must be equal: the schedule
   is the sweep's own).
3. **Projection** (``grids``, :mod:`snapeval.projection`, also ``snapeval project`` from committed rates): every task x model group of the two paper configs (``expand_grid``), its items'
   real lengths (:mod:`benchmarks.paper_lengths`; synthetic tasks: their sequence lengths), each generation at its
   ``max_gen_toks`` (an upper bound: real answers stop earlier; ``--new-tokens TASK=N`` sets a mean instead), the
   memory plan of each group on ``--device-gib`` per GPU times the model's GPUs, and the rates scaled from the
   measured model to each model's shape (:meth:`Rates.for_shape`: prefill's linear term by weights, its quadratic
   term and the step's fixed time by the attention's size and depth). GPU-hours are wall hours times the model's
   GPUs (a model split layer by layer runs its layers one after another). ``--as-hardware h100`` restates a run
   made on another GPU with the simulator's hardware sheets (bandwidth for the step, peak FLOPs for prefill).
   Held branches may wait in ``--host-gib`` of host memory per GPU where the plan takes it
   (:mod:`snapeval.memory_plan`), their trip there and back priced at the host link's bandwidth (measured on the
   GPU by :func:`measure_host_link`; from ``--rates-from``, :data:`snapeval.memory_plan.HOST_LINK_BYTES_PER_S`).

``--smoke`` runs all of it on the CPU at tiny shapes and lengths (the test suite runs it; its numbers mean nothing,
but the predicted decode steps must still equal the counted ones). Writes ``results/bench/paper_projection.json``
after every section.

    python -m benchmarks.paper_projection                                # on a GPU machine (about 3 min on one H100)
    python -m benchmarks.paper_projection --smoke --out /tmp/paper_projection_smoke.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from dataclasses import asdict, replace
from pathlib import Path

from benchmarks.common import BENCH_DIR, fill_defaults, machine, write_json_at
from snapeval.projection import (MODEL, Documents, chunks_schedule, engine_count, fit_rates, paper_llama_configs,
                                 project_grids, project_group, rates_from_gpu_json)
from snapeval.projection.cli import add_projection_flags, check_projection_flags
from snapeval.projection.cli import project_from_rates as grids_from_rates

#: The smoke run's prompts are the real lengths scaled by this (tiny shapes, a CPU).
SMOKE_SCALE = 1 / 256


def measure_group(model, tokenizer, configs, prompts, max_new: int, chunk: int, budget: int | None,
                  shared_step: str = "auto") -> dict:
    """One timed group (:class:`~snapeval.branching.BranchSet` as the sweep runs it, with the run argument
    ``shared_step``) over ``prompts``: wall time, each item's prefill, each configuration's decode (steps, seconds,
    rows, bytes per step, captured) and the rest (wall less prefills and decode steps), with the plan it ran and
    whether its configurations in rows could share one step (``one_step``)."""
    from snapeval.branching import BranchSet
    from snapeval.engine import SamplingParams
    from snapeval.run_args import RunArgs

    from benchmarks.gpu import sync

    branches = BranchSet(model, tokenizer, configs, batch=chunk, max_memory=budget,
                         run_args=RunArgs(shared_step=shared_step))
    sync(branches.device)
    start = time.perf_counter()
    out = branches.generate(prompts, [SamplingParams(max_new_tokens=max_new)] * len(prompts))
    sync(branches.device)
    wall = time.perf_counter() - start
    plan, shape = branches.plans[-1], branches.shape
    schedule = chunks_schedule(shape, configs, [([(len(prompts[i]), max_new) for i in part], chunk_plan)
                                                for part, chunk_plan in branches.chunk_plans[-1]])
    decode, alone = {}, {}
    for config in configs:
        entries = schedule[config.label]
        predicted = {"bytes_per_step": sum(s * b for s, b, *_ in entries) / max(sum(s for s, *_ in entries), 1),
                     "predicted_steps": sum(s for s, *_ in entries)}
        if config.label in branches.stats.decode:
            totals = branches.stats.decode[config.label]
            steps = totals["steps"]
            decode[config.label] = {
                "rows": totals["rows"], "steps": steps, "seconds": totals["seconds"], "captured": totals["captured"],
                # an engine shared by k configurations: each holds 1/k of its seconds, and its step is the whole
                "step_s": totals["step_seconds"] / steps if steps else None, **predicted}
        if config.label in branches.stats.decode_alone:  # decoded alone: the eager loop, one row
            totals = branches.stats.decode_alone[config.label]
            alone[config.label] = {**totals, "step_s": totals["seconds"] / totals["steps"] if totals["steps"] else None,
                                   **predicted}
    prefills = [(len(p), out[0][i].prefill_seconds) for i, p in enumerate(prompts)]
    spent = (sum(s for _, s in prefills) + sum(d["seconds"] for d in decode.values())
             + sum(d["seconds"] for d in alone.values()))
    return {"wall_s": wall, "items": len(prompts), "max_new": max_new, "configurations": len(configs),
            "engines": engine_count(schedule), "one_step": branches.one_step(),
            "prefills": prefills, "decode": decode, "alone": alone,
            "rest_s": wall - spent, "plan": plan.to_dict(), "generated": [len(c.token_ids) for c in out[0]]}

def slice_lengths(lengths: dict, count: int, seed: int, scale: float) -> list[int]:
    """``count`` LongBench-v2 items drawn with ``seed``: their prompt lengths in Llama 3's tokenizer, cut at pred.py's
    120,000 tokens, plus the chat template (``scale``: the smoke run's shrinking)."""
    family = lengths["tokenizers"][MODEL]
    drawn = random.Random(seed).sample(family["longbench_v2"], count)
    return [max(8, int((min(n, 120_000) + family["template_tokens"]) * scale)) for n in drawn]

class WithoutEos:
    """A tokenizer without an eos token (its pad token: its own, else its eos): with the model's generation config
    cleared too, every request decodes its ``max_new`` tokens, as the projection counts them."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.eos_token_id = None
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

def run(args, save=lambda payload: None) -> dict:
    import torch

    from snapeval.memory_plan import document_families
    from snapeval.memory_plan import ModelShape, bytes_in_use, device_budget, longest_first, shares_documents
    from snapeval.models.loading import packaged_tokenizer

    from benchmarks.gpu import benchmark_device, build_model, prompts_of_lengths, release

    smoke = args.smoke
    device = benchmark_device(smoke, "paper_projection")
    started, load_start = time.perf_counter(), os.getloadavg()
    lengths = json.loads(Path(args.lengths).read_text())
    tokenizer = WithoutEos(packaged_tokenizer(MODEL))
    model = build_model(MODEL, device, torch.float32 if smoke else torch.bfloat16, smoke)
    model.generation_config.eos_token_id = None  # random weights: every request decodes its max_new tokens
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    configs = paper_llama_configs()
    if smoke:  # the same 16 configurations at budgets a tiny prompt can hold
        from snapeval.cache import resolve_method
        configs = [resolve_method(c.method, None if c.budget is None else max(16, c.budget // 64)) for c in configs]
    shape = ModelShape.of(model)
    device_name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    budget = args.max_memory or (device_budget(device) if device.type == "cuda" else None)
    payload = {"benchmark": "paper_projection", "smoke": smoke, "machine": machine(), "model": MODEL,
               "device": device_name, "torch": torch.__version__, "load_average_start": load_start,
               "configurations": [c.label for c in configs], "settings": {k: str(v) for k, v in vars(args).items()},
               "calibration": [], "rates": None, "slice": None, "grids": None}

    def record(**entries):
        payload.update(entries, load_average_end=os.getloadavg(), wall_seconds=time.perf_counter() - started)
        save(payload)

    from snapeval.memory_plan import GPU_CHUNK

    chunk = args.chunk or (GPU_CHUNK if device.type == "cuda" else 8)  # what the sweep asks on each device
    warm = prompts_of_lengths(tokenizer, [64])
    measure_group(model, tokenizer, configs, warm, 3, chunk, budget, args.shared_step)  # kernels, allocator, a capture
    for length in args.calibration_lengths:
        prompts = prompts_of_lengths(tokenizer, [length] * args.calibration_items)
        payload["calibration"].append(measure_group(model, tokenizer, configs, prompts, args.calibration_new,
                                                    chunk, budget, args.shared_step))
        release(device)
        record()
        print(f"[{time.perf_counter() - started:6.0f}s] calibration at {length}: "
              f"{payload['calibration'][-1]['wall_s']:.1f} s", flush=True)
    rates = fit_rates(payload["calibration"], device_name, shape)
    if device.type == "cuda":
        rates = replace(rates, host_bandwidth=measure_host_link(device), host_measured=True)
    record(rates=asdict(rates))

    slice_prompts = prompts_of_lengths(tokenizer, slice_lengths(lengths, args.slice_items, args.seed,
                                                                SMOKE_SCALE if smoke else 1.0))
    measured = measure_group(model, tokenizer, configs, slice_prompts, args.slice_new, chunk, budget, args.shared_step)
    group_budget = budget if budget is not None else 2**62
    # the host's room as the group's plan sees it (BranchSet.plan on CUDA; none on the CPU)
    host_room = device_budget("cpu") - bytes_in_use("cpu") if device.type == "cuda" else None
    # prompts that open with one document prefill it once where the group does so (a GPU)
    documents = Documents(*document_families(slice_prompts)) if shares_documents(str(device)) else None
    predicted = project_group(shape, configs, [(len(p), args.slice_new) for p in slice_prompts], rates,
                              budget=group_budget, chunk=chunk, host_budget=host_room,
                              by_length=longest_first(str(device)), documents=documents,
                              one_step=measured["one_step"])
    record(slice={"measured": measured, "predicted": predicted,
                  "predicted_over_measured": predicted["seconds"] / measured["wall_s"],
                  "steps_equal": all(d["steps"] == predicted["steps"][label]
                                     for part in ("decode", "alone") for label, d in measured[part].items())})
    print(f"[{time.perf_counter() - started:6.0f}s] slice: measured {measured['wall_s']:.1f} s, predicted "
          f"{predicted['seconds']:.1f} s ({predicted['seconds'] / measured['wall_s']:.2f}x)", flush=True)
    release(device)

    record(**project_grids(args, rates, lengths,
                           torch.cuda.get_device_properties(0).total_memory if device.type == "cuda" else 80e9))
    return payload

def measure_host_link(device, gib: int = 1, repeats: int = 3) -> float:
    """Bytes per second between ``device`` and host memory, as held branches cross it (pageable copies, each way):
    the slower direction's median over ``repeats`` copies of ``gib`` GiB."""
    import statistics

    import torch

    on_device = torch.empty(gib << 30, dtype=torch.uint8, device=device)
    seconds = {"to_host": [], "to_device": []}
    for _ in range(repeats):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        on_host = on_device.to("cpu")
        torch.cuda.synchronize(device)
        seconds["to_host"].append(time.perf_counter() - start)
        start = time.perf_counter()
        on_device.copy_(on_host)
        torch.cuda.synchronize(device)
        seconds["to_device"].append(time.perf_counter() - start)
    del on_device
    return (gib << 30) / max(statistics.median(v) for v in seconds.values())


def project_from_rates(args, rates) -> dict:
    """The grids from rates measured elsewhere (``--rates-from``; :func:`snapeval.projection.cli.project_from_rates`)
    with this machine's description."""
    return {"benchmark": "paper_projection", "smoke": False, "machine": machine(), **grids_from_rates(args, rates)}


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: the same code, meaningless numbers")
    parser.add_argument("--calibration-lengths", type=int, nargs="+", default=None)
    parser.add_argument("--calibration-items", type=int, default=2)
    parser.add_argument("--calibration-new", type=int, default=None)
    parser.add_argument("--slice-items", type=int, default=8)
    parser.add_argument("--slice-new", type=int, default=None, help="new tokens of the slice (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="which LongBench-v2 items the slice draws")
    parser.add_argument("--max-memory", type=int, default=None, help="bytes the group may use (default: the device's)")
    add_projection_flags(parser)  # --lengths, --chunk, --as-hardware, --host-gib, --new-tokens, --shared-step
    parser.add_argument("--rates-from", type=Path, default=None, metavar="GPU_JSON",
                        help="no measurement: project the grids from a committed benchmarks.gpu run's figures "
                             "(results/bench/gpu.json); runs on the CPU, without a slice")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "paper_projection.json")
    args = parser.parse_args(argv)
    defaults = (dict(calibration_lengths=[64, 128, 256], calibration_new=4, slice_new=6) if args.smoke else
                dict(calibration_lengths=[8192, 32768, 131008], calibration_new=32, slice_new=128))
    fill_defaults(args, defaults)
    check_projection_flags(parser, args)
    if args.rates_from:
        write_json_at(args.out, project_from_rates(args, rates_from_gpu_json(args.rates_from)))
    else:
        run(args, lambda payload: write_json_at(args.out, payload))
    print(f"wrote {args.out}")
    return args.out


if __name__ == "__main__":
    main()
