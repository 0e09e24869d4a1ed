"""The live budget search against the full grid, in wall time (issue #61: a search that saves items for real).

The item-evaluations a search saves (``benchmarks.sequential_search``, replayed on finished sweeps) are not its
time: the full grid decodes every configuration of an item from one shared prefill, while the search runs each look
as its own work unit, re-prefills the items of every budget it opens later, and pays a unit's start-up per look.
This runs both on one machine, in one process, the model loaded once before either is timed:

- ``grid``: ``snapeval sweep`` of the config below (every cell on every item, one shared-prefill unit per group);
- ``search``: ``snapeval sweep --until-decided`` of the same config (the default group-sequential design, 5 looks;
  each look runs every budget the walk may still open from one prefill per item, ``SearchSettings.run_ahead``);
- ``search_no_run_ahead``: the same with ``--no-run-ahead`` (each look runs only the budgets the walk tests, so a
  budget opened later prefills the earlier looks' items again): the same decisions, by another schedule.

The config: SmolLM2-135M-Instruct (float32), ``snapeval_kv_needle`` and ``snapeval_passkey`` (``--items`` haystacks
of ``--length`` tokens, greedy, ``--max-gen`` new tokens), the full cache and SnapStream, StreamingLLM and SnapKV at
``--budgets``, decided at a margin of ``--margin`` (0.10: at 40 items non-inferiority at 0.02 is out of reach, and
both would stop at once). Reports both walls and their ratio, the search's item-evaluations against the grid's, the
cells it stopped early, and whether its answers (the smallest non-inferior budget per method) are the full grid's
report's, and the search replayed on the grid's own items (``snapeval report --search-replay``: greedy, so the same).

    python -m benchmarks.search_live            # about 30 min on 2 idle cores
    python -m benchmarks.search_live --smoke    # 8 items of 256 tokens: a check that it runs (search_live_smoke.json)

Writes results/bench/search_live.json.
"""
from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import machine, write_json

MODEL = "smollm2-135m-instruct"
TASKS = ("snapeval_kv_needle", "snapeval_passkey")
DEFAULTS = {"items": 40, "length": 512, "max_gen": 16, "budgets": [32, 64, 128, 256, 384], "margin": 0.10}
SMOKE = {"items": 8, "length": 256, "max_gen": 8, "budgets": [32, 128], "margin": 0.10}


def sweep_config(items: int, length: int, max_gen: int, budgets: list[int], margin: float):
    from snapeval.sweep import parse_config

    return parse_config({
        "name": "bench-search-live", "models": [{"pretrained": MODEL, "dtype": "float32"}],
        "tasks": [{"name": task, "metadata": {"max_seq_lengths": [length], "num_samples": items, "seed": 0},
                   "generation": {"max_gen_toks": max_gen}} for task in TASKS],
        "methods": ["full", "snapstream", "streamingllm", "snapkv"], "budgets": budgets,
        "decision": {"margin": margin}, "simulate": {"enabled": False},
    })


def grid_answers(out: Path, rule) -> dict[str, list]:
    """``{"task / method": [answer, smallest non-inferior budget]}`` of the full grid's report (fixed sequence)."""
    import pandas as pd

    from snapeval.report import tables
    from snapeval.report.results_table import rebuild_table

    grid = tables.decisions(tables.paired(rebuild_table(out, write=False, decision=rule)))
    return {f"{r.task} / {r.method}": [r.decision, None if pd.isna(r.smallest_ni_budget) else int(r.smallest_ni_budget)]
            for r in grid.itertuples()}


def search_account(groups) -> dict:
    """The search's answers and counts from its per-group records (live or replayed)."""
    return {"answers": {f"{g.task} / {m}": list(a) for g in groups for m, a in g.result.method_decisions().items()},
            "item_evaluations": sum(g.result.evaluations for g in groups),
            "full_grid_item_evaluations": sum(g.result.full_grid_evaluations for g in groups),
            "cells_run": sum(g.result.cells_run for g in groups),
            "cells_stopped_early": sum(g.result.stopped_early for g in groups),
            "full_cache_items": sum(g.result.reference_items for g in groups)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="8 items of 256 tokens (writes search_live_smoke.json)")
    parser.add_argument("--items", type=int)
    parser.add_argument("--length", type=int)
    parser.add_argument("--max-gen", type=int)
    parser.add_argument("--budgets", type=int, nargs="+")
    parser.add_argument("--margin", type=float)
    args = parser.parse_args(argv)
    sizes = dict(SMOKE if args.smoke else DEFAULTS)
    custom = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}
    sizes.update(custom)
    name = "search_live_smoke.json" if args.smoke else ("search_live_custom.json" if custom else "search_live.json")

    import torch

    import snapeval.sweep.search as live
    from snapeval.harness.shared import load_once
    from snapeval.report.search import SearchSettings, replay
    from snapeval.sweep import run_sweep

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    load = open("/proc/loadavg").read().split()[:3]
    load_once(MODEL, "float32")  # the model loaded before either run is timed
    config = sweep_config(**sizes)
    settings = SearchSettings()
    searched: dict[str, list] = {}
    label = None
    write_account = live.write_account

    def keep_account(path, groups, rule, how):  # the live search's per-group records, as it writes search.md
        searched[label] = list(groups)
        return write_account(path, groups, rule, how)

    live.write_account = keep_account
    walls = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, search in (("grid", None), ("search", settings),
                              ("search_no_run_ahead", SearchSettings(run_ahead=False))):
            start = time.perf_counter()
            summary = run_sweep(config, Path(tmp) / label, report=False, simulate=None, stream=io.StringIO(),
                                search=search)
            walls[label] = time.perf_counter() - start
            if not summary.ok:
                raise SystemExit(f"benchmark: the {label} run failed: {summary.failed}")
            print(f"{label}: {walls[label]:.1f} s", flush=True)
        grid = grid_answers(Path(tmp) / "grid", config.decision)
        replayed = search_account(replay(Path(tmp) / "grid", rule=config.decision, settings=settings))
    mine, plain = search_account(searched["search"]), search_account(searched["search_no_run_ahead"])
    ahead = sum(g.ahead_evaluations or 0 for g in searched["search"])
    same = sum(mine["answers"].get(k) == v for k, v in grid.items())
    payload = {
        "benchmark": "search_live", "model": MODEL, "dtype": "float32", "tasks": list(TASKS), "sizes": sizes,
        "design": "group-sequential, the defaults (SearchSettings())",
        "load_average_before": load, "load_average_after": open("/proc/loadavg").read().split()[:3],
        "machine": machine(),
        "grid_wall_s": round(walls["grid"], 1), "search_wall_s": round(walls["search"], 1),
        "search_no_run_ahead_wall_s": round(walls["search_no_run_ahead"], 1),
        "search_over_grid_wall": round(walls["search"] / walls["grid"], 3),
        "search_no_run_ahead_over_grid_wall": round(walls["search_no_run_ahead"] / walls["grid"], 3),
        "search": {k: v for k, v in mine.items() if k != "answers"},
        "item_evaluation_share": round(mine["item_evaluations"] / mine["full_grid_item_evaluations"], 3),
        "run_ahead_unread_item_evaluations": ahead,
        "item_evaluations_run_share": round((mine["item_evaluations"] + ahead) / mine["full_grid_item_evaluations"],
                                            3),
        "same_answers_as_the_grid": f"{same}/{len(grid)}",
        "no_run_ahead_same_account": plain == mine,
        "replay_on_the_grid_items": {k: v for k, v in replayed.items() if k != "answers"},
        "replay_same_answers": replayed["answers"] == mine["answers"],
        "answers": {k: {"search": mine["answers"].get(k), "grid": v} for k, v in grid.items()},
    }
    path = write_json(name, payload)
    print(f"search {walls['search']:.1f} s (without running ahead {walls['search_no_run_ahead']:.1f} s) vs grid "
          f"{walls['grid']:.1f} s ({payload['search_over_grid_wall']}x, "
          f"{payload['search_no_run_ahead_over_grid_wall']}x); item-evaluations {mine['item_evaluations']} of "
          f"{mine['full_grid_item_evaluations']} ({payload['item_evaluation_share']}; {ahead} more ran ahead unread); "
          f"{mine['cells_stopped_early']} of {mine['cells_run']} cells run stopped early; same answers "
          f"{same}/{len(grid)}; the same account without running ahead: {payload['no_run_ahead_same_account']}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
