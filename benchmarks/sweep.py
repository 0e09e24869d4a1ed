"""A budget sweep as one paired experiment vs one lm-eval run per cell (issue: one prefill, many branches).

Part 1, generation. One grid on SmolLM2-135M-Instruct (float32, 2 threads): ``snapeval_kv_needle`` (``--items``
haystacks of ``--length`` tokens, greedy, ``--max-gen`` new tokens), full cache + SnapStream, StreamingLLM and
SnapKV at five budgets (16 cells), through

- ``per_cell``: every cell its own lm-eval run (``snapeval sweep --per-cell``: the reference path);
- ``shared``: one work unit for the whole grid: each item prefilled once, every configuration branched from it and
  decoded batched in its own static rows (``snapeval sweep``, the default).

Both in one process, the model loaded once before either is timed. Reports wall time, prefill tokens computed
(per-cell: every cell's prompts; shared: the group's prefills), decode tokens, and a cell-by-cell check that the
greedy texts are identical (the generations hash of each cell).

Part 3, item shards (``--sharded``, also in the full run): the same generation grid on a local Ray instance,
``shards: 2`` on 2 workers of 1 CPU (one torch thread) each against ``shards: 1`` on 1 worker of 1 CPU; each worker
loads the model itself (inside the measured wall time on both sides). Reports both walls, the speedup (target 1.8x)
and whether every cell is identical (generations hash and every metric value and stderr). Its default is
``SHARDED_ITEMS`` = 48 items, not 40: a shard decodes its items in chunks of 8 rows per configuration, and on a CPU a
decode step of 4 rows costs well over half of a step of 8 (the weights are streamed either way), so 40 items (5
chunks in one shard; 8 + 8 + 4 in each of two) keep the two-worker decode below 2x whatever the harness does; 48
items are 6 chunks, 3 whole ones per shard. ``--items 40`` measures that case (``sweep_sharded_custom.json``).

Part 2, loglikelihood. A 4-choice task built from real LongBench-v2 questions (document cut to ``--mc-length``
tokens, question, "Answer:"; the continuation is each choice's text), scored by :class:`snapeval.branching.BranchSet`
for the same 16 configurations two ways: one prefill per request (what the model did before: every choice
re-prefilled its context) and one prefill per unique context. Reports prefill tokens, wall time and the largest
difference between the two sets of log-likelihoods.

    python -m benchmarks.sweep            # about 30 min on 2 idle cores
    python -m benchmarks.sweep --quick    # 8 items, 2 minutes: a smoke run (writes sweep_quick.json)
    python -m benchmarks.sweep --sharded-only   # part 3 alone (writes sweep_sharded.json; about 10 min)
    python -m benchmarks.sweep --config configs/kvpress.yaml   # any sweep: shared vs per-cell (sweep_<name>.json)
    python -m benchmarks.sweep --config configs/kvpress.yaml --keep results/kvpress   # and keep the shared cells

Writes results/bench/sweep.json (``sweep_quick.json`` with ``--quick``; ``sweep_custom.json`` for other sizes).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import data_dir, machine, middle_truncate, write_json

MODEL = "smollm2-135m-instruct"
DEFAULTS = {"items": 40, "length": 512, "budgets": [32, 64, 128, 256, 384], "max_gen": 16, "mc_questions": 10,
            "mc_length": 768}
#: Part 3's items: 2 shards x 3 whole chunks of 8 (see the module docstring).
SHARDED_ITEMS = 48
QUICK = {"items": 8, "length": 256, "budgets": [32, 64, 128, 192, 224], "max_gen": 8, "mc_questions": 3,
         "mc_length": 256}


def sweep_config(items: int, length: int, budgets: list[int], max_gen: int):
    from snapeval.sweep import parse_config

    return parse_config({
        "name": "bench-sweep", "models": [{"pretrained": MODEL, "dtype": "float32"}],
        "tasks": [{"name": "snapeval_kv_needle", "metadata": {"max_seq_lengths": [length], "num_samples": items,
                                                              "seed": 0},
                   "generation": {"max_gen_toks": max_gen}}],
        "methods": ["full", "snapstream", "streamingllm", "snapkv"], "budgets": budgets,
        "simulate": {"enabled": False},
    })


def run_path(config, out: Path, label: str, executor=None) -> dict:
    from snapeval.results import ResultsStore
    from snapeval.sweep import run_sweep

    start = time.perf_counter()
    summary = run_sweep(config, out, report=False, simulate=None, stream=io.StringIO(), executor=executor)
    wall = time.perf_counter() - start
    if not summary.ok:
        raise SystemExit(f"benchmark: the {label} sweep failed: {summary.failed}")
    store = ResultsStore(out)
    cells = {p.stem: store.read(p.stem) for p in store.cells_dir.glob("*.json")}
    def group_totals(config: dict) -> dict | None:  # a sharded cell: its shards' groups together
        if config.get("shards"):
            parts = [s["shared_prefill"] for s in config["shards"] if s.get("shared_prefill")]
            return ({**{k: sum(p[k] for p in parts) for k in ("prefills", "prefill_tokens")},
                     "configurations": parts[0]["configurations"]} if parts else None)
        return config.get("shared_prefill")

    shared = [group_totals(c.harness_config) for c in cells.values() if group_totals(c.harness_config)]
    if shared:  # every cell of a group reports its group's prefills: a cell's share is 1/configurations of them
        prefill_tokens = round(sum(s["prefill_tokens"] / s["configurations"] for s in shared))
        prefills = round(sum(s["prefills"] / s["configurations"] for s in shared))
    else:
        prefill_tokens = sum(c.prompt_tokens or 0 for c in cells.values())
        prefills = sum(len(c.samples) for c in cells.values())
    return {"wall_s": round(wall, 1), "cells": len(cells), "prefills": prefills, "prefill_tokens": prefill_tokens,
            "decode_tokens": sum(c.generated_tokens or 0 for c in cells.values()),
            "generations": {cid: c.generations_sha256 for cid, c in cells.items()},
            "scores": {cid: c.metrics[0].value for cid, c in cells.items()},
            "metrics": {cid: [[m.key, m.value, m.stderr, m.n] for m in c.metrics] for cid, c in cells.items()}}


def sharded_part(config, tmp: Path, items: int) -> dict:
    """The grid on a local Ray instance: 2 shards on 2 one-CPU workers against 1 shard on 1 one-CPU worker."""
    import dataclasses

    import ray

    from snapeval.sweep.config import Resources
    from snapeval.sweep.executors import RayExecutor

    runs = {}
    for workers in (1, 2):
        one_cpu = tuple(dataclasses.replace(m, resources=Resources(num_cpus=1.0)) for m in config.models)
        sharded = dataclasses.replace(config, models=one_cpu, shards=workers)
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        try:
            runs[workers] = run_path(sharded, tmp / f"ray_{workers}", f"{workers}-worker", executor=RayExecutor())
        finally:
            ray.shutdown()
        print(f"ray, {workers} worker(s) of 1 CPU, {workers} shard(s): {runs[workers]['wall_s']} s", flush=True)
    one, two = runs[1], runs[2]
    identical = sum(one["generations"][c] == two["generations"][c] and one["metrics"][c] == two["metrics"][c]
                    for c in one["generations"])
    return {"items": items, "one_worker": {k: v for k, v in one.items() if k not in ("generations", "scores", "metrics")},
            "two_workers": {k: v for k, v in two.items() if k not in ("generations", "scores", "metrics")},
            "speedup": round(one["wall_s"] / two["wall_s"], 2),
            "identical_cells": f"{identical}/{len(one['generations'])}"}


def compare_config(path: str, load: list[str], keep: str | None = None) -> int:
    """A sweep config's grid, shared (default) then per cell (``--per-cell``), in this process: walls, prefills and
    whether every cell's greedy texts and metrics are identical. With ``keep``, the shared run's cells are written
    there instead of a scratch directory (the config's own ``out`` regenerates its committed results from the timed
    run; ``snapeval sweep CONFIG`` then finds every cell done and writes the table and report)."""
    from snapeval.sweep import load_config

    config = load_config(path)
    with tempfile.TemporaryDirectory() as tmp:
        shared = run_path(config, Path(keep) if keep else Path(tmp) / "shared", "shared")
        print(f"shared: {shared['wall_s']} s, {shared['prefills']} prefills", flush=True)
        per_cell = run_path(config.per_cell(), Path(tmp) / "per_cell", "per-cell")
        print(f"per-cell: {per_cell['wall_s']} s, {per_cell['prefills']} prefills", flush=True)
    same = [c for c in per_cell["generations"] if shared["generations"][c] == per_cell["generations"][c]
            and shared["metrics"][c] == per_cell["metrics"][c]]
    payload = {"benchmark": "sweep_config", "config": path, "cells": len(per_cell["generations"]),
               "shared": {k: v for k, v in shared.items() if k not in ("generations", "scores", "metrics")},
               "per_cell": {k: v for k, v in per_cell.items() if k not in ("generations", "scores", "metrics")},
               "speedup": round(per_cell["wall_s"] / shared["wall_s"], 2),
               "identical_cells": f"{len(same)}/{len(per_cell['generations'])}",
               "different_cells": sorted(set(per_cell["generations"]) - set(same)),
               "load_average_before": load, "load_average_after": open("/proc/loadavg").read().split()[:3],
               "machine": machine()}
    print(f"{config.name}: {payload['speedup']}x faster shared, identical cells {payload['identical_cells']}")
    print(f"wrote {write_json(f'sweep_{config.name}.json', payload)}")
    return 0


def mc_questions(tokenizer, count: int, length: int) -> list[tuple[list[int], list[list[int]]]]:
    """``count`` real LongBench-v2 questions as (context ids, [4 continuation ids])."""
    path = data_dir() / "longbench_v2" / "longbench_v2.jsonl"
    out = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            doc = middle_truncate(tokenizer(row["context"]).input_ids, length)
            tail = tokenizer(f"\n\nQuestion: {row['question']}\nAnswer:").input_ids
            choices = [tokenizer(" " + row[f"choice_{c}"]).input_ids for c in "ABCD"]
            out.append((doc + tail, choices))
            if len(out) == count:
                break
    return out


def loglikelihood_part(model, tokenizer, configs, questions) -> dict:
    from snapeval.branching import BranchSet

    contexts = [ctx for ctx, choices in questions for _ in choices]
    continuations = [c for _, choices in questions for c in choices]
    per_request = BranchSet(model, tokenizer, configs)
    start = time.perf_counter()
    alone = [per_request.score([ctx], [cont]) for ctx, cont in zip(contexts, continuations)]
    alone_s = time.perf_counter() - start
    per_context = BranchSet(model, tokenizer, configs)
    start = time.perf_counter()
    together = per_context.score(contexts, continuations)
    together_s = time.perf_counter() - start
    diff = max(abs(a[c][0][0] - together[c][i][0]) for i, a in enumerate(alone) for c in range(len(configs)))
    greedy_same = all(a[c][0][1] == together[c][i][1] for i, a in enumerate(alone) for c in range(len(configs)))
    return {"questions": len(questions), "requests": len(contexts), "configurations": len(configs),
            "per_request": {"prefills": per_request.stats.prefills, "prefill_tokens": per_request.stats.prefill_tokens,
                            "wall_s": round(alone_s, 1)},
            "per_context": {"prefills": per_context.stats.prefills, "prefill_tokens": per_context.stats.prefill_tokens,
                            "wall_s": round(together_s, 1)},
            "prefill_token_ratio": round(per_request.stats.prefill_tokens / per_context.stats.prefill_tokens, 3),
            "speedup": round(alone_s / together_s, 2), "max_abs_loglikelihood_diff": diff,
            "greedy_flags_identical": greedy_same}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 2-minute smoke run (writes sweep_quick.json)")
    parser.add_argument("--sharded-only", action="store_true", help="only part 3, shards on Ray (sweep_sharded.json)")
    parser.add_argument("--config", help="a sweep YAML: its grid shared vs per-cell only (writes sweep_<name>.json)")
    parser.add_argument("--keep", help="with --config: write the shared run's cells to this results directory")
    for key, value in DEFAULTS.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, list):
            parser.add_argument(flag, type=int, nargs="+")
        else:
            parser.add_argument(flag, type=int)
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else DEFAULTS)
    custom = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}
    sizes.update(custom)
    sharded_items = custom.get("items", sizes["items"] if args.quick else SHARDED_ITEMS)  # part 3's items
    if args.sharded_only:
        sizes["items"] = sharded_items
    name = "sweep_custom.json" if custom else ("sweep_quick.json" if args.quick else "sweep.json")
    if args.sharded_only:
        name = name.replace("sweep", "sweep_sharded", 1)

    import torch

    from snapeval.cache import resolve_method
    from snapeval.harness.shared import load_once

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    load = open("/proc/loadavg").read().split()[:3]
    model, tokenizer = load_once(MODEL, "float32")
    if args.config:
        return compare_config(args.config, load, args.keep)
    config = sweep_config(sizes["items"], sizes["length"], sizes["budgets"], sizes["max_gen"])
    if args.sharded_only:
        with tempfile.TemporaryDirectory() as tmp:
            part = sharded_part(config, Path(tmp), sizes["items"])
        payload = {"benchmark": "sweep_sharded", "model": MODEL, "dtype": "float32", "sizes": sizes,
                   "load_average_before": load, "load_average_after": open("/proc/loadavg").read().split()[:3],
                   "machine": machine(), "sharded": part}
        print(f"sharded: {part['speedup']}x with 2 workers, identical cells {part['identical_cells']}")
        print(f"wrote {write_json(name, payload)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        shared = run_path(config, Path(tmp) / "shared", "shared")
        print(f"shared: {shared['wall_s']} s, {shared['prefills']} prefills", flush=True)
        per_cell = run_path(config.per_cell(), Path(tmp) / "per_cell", "per-cell")
        print(f"per-cell: {per_cell['wall_s']} s, {per_cell['prefills']} prefills", flush=True)
        sharded = sharded_part(sweep_config(sharded_items, sizes["length"], sizes["budgets"], sizes["max_gen"]),
                               Path(tmp), sharded_items)
    identical = sum(shared["generations"][c] == per_cell["generations"][c] for c in per_cell["generations"])
    configs = [resolve_method("full")] + [resolve_method(m, b) for m in ("snapstream", "streamingllm", "snapkv")
                                           for b in sizes["budgets"]]
    mc = loglikelihood_part(model, tokenizer, configs, mc_questions(tokenizer, sizes["mc_questions"],
                                                                    sizes["mc_length"]))
    payload = {
        "benchmark": "sweep", "model": MODEL, "dtype": "float32", "sizes": sizes,
        "load_average_before": load, "load_average_after": open("/proc/loadavg").read().split()[:3],
        "machine": machine(),
        "generation": {
            "task": "snapeval_kv_needle", "cells": per_cell["cells"],
            "per_cell": {k: v for k, v in per_cell.items() if k not in ("generations", "scores", "metrics")},
            "shared": {k: v for k, v in shared.items() if k not in ("generations", "scores", "metrics")},
            "speedup": round(per_cell["wall_s"] / shared["wall_s"], 2),
            "prefill_token_ratio": round(per_cell["prefill_tokens"] / shared["prefill_tokens"], 2),
            "identical_greedy_cells": f"{identical}/{per_cell['cells']}",
            "scores": {cid: {"shared": shared["scores"][cid], "per_cell": per_cell["scores"][cid]}
                       for cid in per_cell["scores"]},
        },
        "loglikelihood": mc,
        "sharded": sharded,
    }
    path = write_json(name, payload)
    gen = payload["generation"]
    print(f"generation: {gen['speedup']}x faster shared ({shared['wall_s']} s vs {per_cell['wall_s']} s), prefill "
          f"tokens {per_cell['prefill_tokens']:,} -> {shared['prefill_tokens']:,}, identical greedy cells "
          f"{gen['identical_greedy_cells']}")
    print(f"sharded on Ray: {sharded['speedup']}x with 2 workers of 1 CPU vs 1, identical cells "
          f"{sharded['identical_cells']}")
    print(f"loglikelihood: prefill tokens {mc['per_request']['prefill_tokens']:,} -> "
          f"{mc['per_context']['prefill_tokens']:,} ({mc['prefill_token_ratio']}x), {mc['speedup']}x faster, max "
          f"|diff| {mc['max_abs_loglikelihood_diff']:.2e}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
