"""Peak memory of a shared-prefill group against the per-cell path and against the memory plan's prediction.

SmolLM2-135M-Instruct (float32), real LongBench-v2 documents middle-truncated to ``--lengths`` tokens (default 4k,
8k, 16k), ``--items`` prompts per length (default 8: one chunk of 8), greedy, ``--max-new`` new tokens; the grid is
the full cache plus SnapStream and SnapKV at ``--budgets`` (default 256, 512, 1024). Per length, each path runs in a
fresh process (peak resident memory is per process), the model loaded and warmed up before the measurement starts:

- ``per_cell``: every configuration alone, as ``snapeval sweep --per-cell`` runs it: the full cache and SnapKV
  through ``snapeval.generate`` one prompt at a time (lm-eval's padded batches of ``batch_size: 1``), SnapStream
  on the continuous-batching engine with 8 slots; the peak over all cells.
- ``shared``: :class:`snapeval.branching.BranchSet` with ``batch=8``: one prefill per item for every configuration,
  under its memory plan (``max_memory`` left to its default: the machine's available memory, so chunk 8);
- ``shared_budgeted``: the same with ``max_memory`` = the resident memory at its start plus 1.3x the per-cell
  path's peak: the plan picks the chunk that stays within it.

Peak = the process's resident high-water mark (``VmHWM``) above its resident memory when the path starts
(:class:`snapeval.memory_plan.PeakMeter`); the plan predicts the same quantity (``peak_bytes``). The child processes
run with glibc's ``MALLOC_MMAP_THRESHOLD_=131072``: every allocation of 128 KiB or more is its own mapping, returned
to the system when freed, so resident memory follows the live tensors (by default glibc keeps freed heap memory,
such as what loading the model left, and reuses it without the resident size moving). Targets: shared
within 1.3x of per-cell and within 15% of the plan. Also printed and stored: the plan's prediction for
Llama-3.1-8B-Instruct at 128k tokens on one 80 GB GPU (``--predict`` prints only that).

    python -m benchmarks.sweep_memory                 # hours on 2 cores: the per-cell path prefills 8 x 7 times
    python -m benchmarks.sweep_memory --lengths 4096  # one length (rows of other lengths in the file are kept): 43 min
    python -m benchmarks.sweep_memory --lengths 8192 --per-cell-items 2   # the committed 8k row: 26 min
    python -m benchmarks.sweep_memory --lengths 16384 --per-cell-items 2  # the committed 16k row: 64 min
    python -m benchmarks.sweep_memory --smoke         # 2 items of 512 tokens, 2 minutes: writes sweep_memory_smoke.json
    python -m benchmarks.sweep_memory --predict       # the Llama-3.1-8B 128k figure alone (no model loaded)

Writes results/bench/sweep_memory.json (``sweep_memory_smoke.json`` with ``--smoke``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from benchmarks.common import (BENCH_DIR, REPO, alone_token_ids, full_snapstream_snapkv, machine,
                               middle_truncate, write_json)

MODEL = "smollm2-135m-instruct"
DEFAULTS = {"lengths": [4096, 8192, 16384], "items": 8, "budgets": [256, 512, 1024], "max_new": 16}
SMOKE = {"lengths": [512], "items": 2, "budgets": [64, 128, 256], "max_new": 4}


def prompts(tokenizer, length: int, count: int) -> list[list[int]]:
    """``count`` LongBench-v2 documents of at least ``length`` tokens (the shortest such first; a document of
    ``5 * length`` characters or more is tokenized), middle-truncated to ``length`` tokens."""
    from benchmarks.common import data_dir

    rows = [json.loads(line) for line in open(data_dir() / "longbench_v2" / "longbench_v2.jsonl")]
    rows = sorted((r for r in rows if len(r["context"]) >= 5 * length), key=lambda r: len(r["context"]))
    out = []
    for row in rows:
        ids = tokenizer(row["context"]).input_ids
        if len(ids) >= length:
            out.append(middle_truncate(ids, length))
        if len(out) == count:
            return out
    sys.exit(f"benchmark: only {len(out)} LongBench-v2 documents have {length}+ tokens")


def measure(path: str, length: int, items: int, budgets, max_new: int, allowance: int | None = None) -> dict:
    """One path at one length, in this process (run by :func:`main` in a fresh process per path); ``allowance``:
    the shared group's budget above the memory in use when it starts (``shared_budgeted``); ``items``: prompts
    (the first ``items`` of the same documents on every path)."""
    import torch

    from snapeval.branching import BranchSet
    from snapeval.engine import SamplingParams
    from snapeval.errors import SnapevalError
    from snapeval.generation import generate
    from snapeval.harness.shared import load_once
    from snapeval.memory_plan import Item, PeakMeter, bytes_in_use, gib

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    model, tokenizer = load_once(MODEL, "float32")
    grid = full_snapstream_snapkv(budgets)
    batch = prompts(tokenizer, length, items)
    params = [SamplingParams(max_new_tokens=max_new)] * items
    generate(model, tokenizer, [batch[0][:32]], config=grid[0], max_new_tokens=2)  # warm-up: kernels, allocator
    start = time.perf_counter()
    if path.startswith("shared"):
        budget = None if allowance is None else bytes_in_use("cpu") + allowance
        branches = BranchSet(model, tokenizer, grid, batch=8, max_memory=budget)
        try:
            out = branches.generate(batch, params)
        except SnapevalError as exc:  # the budget is below what one item needs: the plan says so
            return {"path": path, "length": length, "does_not_fit": str(exc)}
        plan, peak = branches.plans[-1], branches.peaks[-1]
        texts = {c.label: [d.token_ids for d in out[k]] for k, c in enumerate(grid)}
        result = {"peak": peak, "plan": plan.to_dict(), "predicted_growth_bytes": plan.peak_bytes,
                  "predicted_growth_gib": gib(plan.peak_bytes)}
    else:
        cells, texts = {}, {}
        for config in grid:
            with PeakMeter("cpu") as meter:
                texts[config.label] = alone_token_ids(model, tokenizer, config, batch, max_new, slots=8)
            cells[config.label] = meter.to_dict()
        worst = max(cells.values(), key=lambda m: m["growth_bytes"])
        result = {"peak": worst, "cells": cells}
        plan = BranchSet(model, tokenizer, grid, batch=8).plan([Item(len(p), max_new) for p in batch])
        result["plan_of_the_shared_group"] = plan.to_dict()
    result.update(path=path, length=length, items=items, wall_s=round(time.perf_counter() - start, 1),
                  token_ids=texts)
    return result


def run_in_child(path: str, length: int, sizes: dict, allowance: int | None = None) -> dict:
    """:func:`measure` in a fresh interpreter (a clean resident high-water mark)."""
    items = sizes["per_cell_items"] if path == "per_cell" else sizes["items"]
    code = ("import json, sys; from benchmarks.sweep_memory import measure; "
            f"print('RESULT ' + json.dumps(measure({path!r}, {length}, {items}, {sizes['budgets']}, "
            f"{sizes['max_new']}, {allowance})))")
    env = {**os.environ, "PYTHONPATH": str(REPO), "MALLOC_MMAP_THRESHOLD_": "131072"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        sys.exit(f"benchmark: the {path} run at {length} tokens failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def paper_scale() -> dict:
    from snapeval.memory_plan import predict_paper_scale

    plan = predict_paper_scale()
    return {"text": plan.render(), "plan": plan.to_dict()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="2 items of 512 tokens (writes sweep_memory_smoke.json)")
    parser.add_argument("--predict", action="store_true", help="print the Llama-3.1-8B 128k prediction and exit")
    parser.add_argument("--lengths", type=int, nargs="+")
    parser.add_argument("--items", type=int)
    parser.add_argument("--budgets", type=int, nargs="+")
    parser.add_argument("--max-new", type=int)
    parser.add_argument("--per-cell-items", type=int,
                        help="prompts for the per-cell path (default: --items): its full-cache and SnapKV cells "
                             "hold one prompt at a time and SnapStream's engine allocates its 8 slots whatever the "
                             "count, so fewer prompts can only lower the per-cell reference (the shared/per-cell "
                             "ratio errs high)")
    parser.add_argument("--out", help="output file name under results/bench/")
    args = parser.parse_args(argv)
    predicted = paper_scale()
    print(predicted["text"], flush=True)
    if args.predict:
        return 0
    sizes = dict(SMOKE if args.smoke else DEFAULTS)
    sizes.update({k: v for k, v in (("lengths", args.lengths), ("items", args.items), ("budgets", args.budgets),
                                    ("max_new", args.max_new)) if v is not None})
    sizes["per_cell_items"] = min(args.per_cell_items or sizes["items"], sizes["items"])
    load = open("/proc/loadavg").read().split()[:3]
    out_name = args.out or ("sweep_memory_smoke.json" if args.smoke else "sweep_memory.json")
    rows = kept_rows(out_name, sizes["lengths"])
    for length in sizes["lengths"]:
        per_cell = run_in_child("per_cell", length, sizes)
        reference = per_cell["peak"]["growth_bytes"]
        shared = run_in_child("shared", length, sizes)
        budgeted = run_in_child("shared_budgeted", length, sizes, allowance=int(1.3 * reference))
        row = {"length": length, "items": sizes["items"], "per_cell_items": sizes["per_cell_items"],
               "budgets": sizes["budgets"], "max_new": sizes["max_new"], "load_average_before": load,
               "per_cell_peak_gib": per_cell["peak"]["growth_gib"],
               "per_cell_wall_s": per_cell["wall_s"], "per_cell": {k: v for k, v in per_cell.items() if k != "token_ids"}}
        for name, run in (("shared", shared), ("shared_budgeted", budgeted)):
            if "does_not_fit" in run:
                row[name] = run
                print(f"{length} tokens, {name}: {run['does_not_fit']}", flush=True)
                continue
            growth = run["peak"]["growth_bytes"]
            common = sizes["per_cell_items"]  # the per-cell path ran the first of the same prompts
            same = {label: run["token_ids"][label][:common] == per_cell["token_ids"][label]
                    for label in run["token_ids"]}
            row[name] = {"peak_gib": run["peak"]["growth_gib"], "predicted_gib": run["predicted_growth_gib"],
                         "over_per_cell": round(growth / reference, 3) if reference else None,
                         "measured_over_predicted": round(growth / run["predicted_growth_bytes"], 3),
                         "chunk": run["plan"]["chunk"], "budget_gib": run["plan"]["budget_gib"],
                         "decode": {c["label"]: c["decode"] for c in run["plan"]["configurations"]},
                         "identical_greedy_tokens": f"{sum(same.values())}/{len(same)}", "wall_s": run["wall_s"],
                         "run": {k: v for k, v in run.items() if k != "token_ids"}}
            print(f"{length} tokens, {name}: chunk {row[name]['chunk']}, peak {row[name]['peak_gib']} GiB vs "
                  f"per-cell {row['per_cell_peak_gib']} GiB ({row[name]['over_per_cell']}x), plan "
                  f"{row[name]['predicted_gib']} GiB (measured/predicted {row[name]['measured_over_predicted']}), "
                  f"greedy tokens identical to per-cell in {row[name]['identical_greedy_tokens']} configurations",
                  flush=True)
        row["load_average_after"] = open("/proc/loadavg").read().split()[:3]
        rows = sorted([r for r in rows if r["length"] != length] + [row], key=lambda r: r["length"])
        payload = {"benchmark": "sweep_memory", "model": MODEL, "dtype": "float32", "sizes": sizes,
                   "configurations": [c.label for c in full_snapstream_snapkv(sizes["budgets"])], "rows": rows,
                   "paper_scale_prediction": predicted, "load_average_before": load,
                   "load_average_after": row["load_average_after"], "machine": machine()}
        print(f"wrote {write_json(out_name, payload)}", flush=True)  # after every length: a kill keeps finished rows
    return 0


def kept_rows(name: str, lengths) -> list[dict]:
    """The rows of an earlier run in ``results/bench/name`` at lengths this run does not measure (a run of
    ``--lengths 8192`` adds its row next to the 4k one instead of replacing the file)."""
    path = BENCH_DIR / name
    if not path.exists():
        return []
    return [row for row in json.loads(path.read_text()).get("rows", []) if row["length"] not in lengths]


if __name__ == "__main__":
    raise SystemExit(main())
