"""Item shards: a sharded sweep gives exactly the unsharded cells (lm-eval's own aggregates and stderr recomputed
from the per-document scores), shards are written as they finish, and a killed sweep redoes only missing shards."""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pandas as pd
import pytest

from fixtures.sweep_fakes import fake_evaluate, fake_simulate, start_sweep_process
from snapeval.errors import SnapevalError
from snapeval.paths import tasks_dir
from snapeval.results import ResultsStore
from snapeval.sweep import expand_grid, parse_config, run_sweep
from snapeval.sweep.shards import Shard, finished_shards, merge_shards

#: Fields that may differ between two runs of the same cells (timings) or that describe how they ran.
VOLATILE = ("wall_s", "finished_at", "harness_config", "decode_tokens_per_s", "prefill_tokens_per_s")


def _cells(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}


def _stable(cell: dict) -> dict:
    return {k: v for k, v in cell.items() if k not in VOLATILE}


def test_sharded_and_unsharded_sweeps_give_identical_cells(tiny_dir, task_dir, tmp_path):
    """The real harness on a tiny model: a generative task, a multiple-choice one, a sampled task whose metric lm-eval
    bootstraps (median) and a synthetic one with its own aggregation and NaN breakdowns; 3 shards vs none."""
    (tmp_path / "tasks").mkdir()
    text = (task_dir / "tiny_gen.yaml").read_text().replace("task: tiny_gen", "task: tiny_median")
    text = text.replace("do_sample: false", "do_sample: true\n  temperature: 1.5")  # sampled: seeds by document
    (tmp_path / "tasks" / "tiny_median.yaml").write_text(text.replace("  - metric: exact_match\n",
                                                                      "  - metric: exact_match\n    aggregation: median\n"))
    for name in ("tiny_gen", "tiny_mc"):
        (tmp_path / "tasks" / f"{name}.yaml").write_text((task_dir / f"{name}.yaml").read_text())
    shutil.copytree(tasks_dir() / "synthetic", tmp_path / "tasks" / "synthetic", ignore=shutil.ignore_patterns("*.py"))
    raw = {"name": "shards", "models": [{"pretrained": str(tiny_dir)}], "include_path": str(tmp_path / "tasks"),
           "tasks": ["tiny_gen", "tiny_mc", "tiny_median",
                     {"name": "snapeval_kv_needle", "metadata": {"max_seq_lengths": [200], "num_samples": 5, "seed": 0},
                      "generation": {"max_gen_toks": 4}}],
           "methods": ["full", "snapstream", "snapkv"], "budgets": [24], "simulate": {"enabled": False}}
    whole = run_sweep(parse_config(raw), tmp_path / "whole", stream=io.StringIO(), report=False, simulate=None)
    stream = io.StringIO()
    sharded = run_sweep(parse_config({**raw, "shards": 3}), tmp_path / "sharded", stream=stream, report=False,
                        simulate=None)
    assert whole.ok and sharded.ok and len(sharded.ran) == len(whole.ran) == 12
    assert stream.getvalue().count("<- shard") == 4 * 3 * 3  # tasks x shards x configurations
    a, b = _cells(tmp_path / "whole"), _cells(tmp_path / "sharded")
    assert a.keys() == b.keys()  # the same cell ids
    for cell_id in a:
        assert _stable(a[cell_id]) == _stable(b[cell_id]), a[cell_id]["identity"]["task"]["name"]
    assert not list((tmp_path / "sharded" / "cells").glob("*.shards"))  # merged shards are removed
    merged = next(iter(b.values()))
    assert [s["shard"] for s in merged["harness_config"]["shards"]] == ["1-of-3", "2-of-3", "3-of-3"]
    median = next(c for c in b.values() if c["identity"]["task"]["name"] == "tiny_median")
    assert all(m["stderr"] is not None for m in median["metrics"])  # lm-eval's bootstrap, same draws on both sides


def _run(cell, shard: Shard | None = None):
    from snapeval.sweep.runner import CellRunner

    return CellRunner(fake_evaluate, None).run_cell(cell, None, shard)


def test_merge_is_lm_evals_aggregation_in_document_order_and_refuses_what_it_cannot_import():
    cell = expand_grid(parse_config({"models": ["llama-3.1-8b-instruct"], "tasks": [{"name": "snapeval_passkey",
                                                                                     "limit": 7}],
                                     "methods": ["full"]}))[0]
    shards = [_run(cell, Shard(k, 3)) for k in (2, 0, 1)]  # arriving in any order
    merged = merge_shards(cell.cell_id, cell.identity(), shards)
    whole = _run(cell)
    scores = [s.scores["exact_match,strict"] for s in sorted(whole.samples, key=lambda r: r.doc_id)]
    from lm_eval.api.metrics import mean, mean_stderr

    strict = next(m for m in merged.metrics if m.key == "exact_match,strict")
    assert strict.value == mean(scores) and strict.stderr == mean_stderr(scores) and strict.n == 7
    assert [r.doc_id for r in merged.samples] == list(range(7)) and merged.samples == whole.samples
    assert merged.prompt_tokens == whole.prompt_tokens and merged.kv_cache_bytes == whole.kv_cache_bytes
    for shard in shards:
        shard.aggregations["snapeval_passkey"]["exact_match"] = None
    with pytest.raises(SnapevalError, match="metric 'exact_match' aggregates with a function that cannot be imported"):
        merge_shards(cell.cell_id, cell.identity(), shards)
    with pytest.raises(SnapevalError, match=r"shards \['1-of-3', '3-of-3'\] are not one complete set"):
        merge_shards(cell.cell_id, cell.identity(), [shards[1], shards[0]])


RAW = {"name": "unit", "models": ["llama-3.1-8b-instruct"], "shards": 3,
       "tasks": [{"name": "snapeval_passkey", "limit": 7}, {"name": "snapeval_kv_needle", "limit": 5}],
       "methods": ["full", {"method": "snapstream", "budgets": [128, 512]}]}
def test_kill_minus_9_during_a_sharded_sweep_resumes_only_unfinished_shards(tmp_path):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    proc = start_sweep_process(RAW, killed, tmp_path, delay=0.4)
    store = ResultsStore(killed)
    cells = expand_grid(parse_config(RAW))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and sum(len(finished_shards(store, c.cell_id)) for c in cells) < 4:
        time.sleep(0.02)
    time.sleep(0.1)  # now inside a later shard's evaluation
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    on_disk = {(c.cell_id, s.index) for c in cells for s in finished_shards(store, c.cell_id)}
    merged = {c.cell_id for c in cells if store.has(c.cell_id)}
    assert 4 <= len(on_disk) + 3 * len(merged) < 3 * len(cells), "the kill should land mid-sweep"

    calls = []

    def counting(**kwargs):
        calls.append((kwargs["model_args"]["config"].label, kwargs["tasks"][0], kwargs["shard"][0]))
        return fake_evaluate(**kwargs)

    resumed = run_sweep(parse_config(RAW), killed, evaluate=counting, simulate=fake_simulate, stream=io.StringIO(),
                        report=False)
    label = {c.cell_id: (c.config.label, c.task.name) for c in cells}
    redone = {(label[cid][0], label[cid][1], index) for cid, index in on_disk}
    assert resumed.ok and len(calls) == 3 * (len(cells) - len(merged)) - len(on_disk)
    assert not redone & set(calls)  # no finished shard is computed again
    run_sweep(parse_config(RAW), clean, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
              report=False)
    drop = ["wall_s"]
    pd.testing.assert_frame_equal(pd.read_parquet(killed / "results.parquet").drop(columns=drop),
                                  pd.read_parquet(clean / "results.parquet").drop(columns=drop))


def test_a_failed_shard_fails_its_cell_once_and_keeps_the_other_shards(tmp_path, monkeypatch):
    def flaky(**kwargs):
        if kwargs["shard"][0] == 1 and kwargs["model_args"]["config"].method == "snapstream":
            raise RuntimeError("shard 2 exploded")
        return fake_evaluate(**kwargs)

    raw = {**RAW, "tasks": RAW["tasks"][:1]}
    summary = run_sweep(parse_config(raw), tmp_path, evaluate=flaky, simulate=fake_simulate, stream=io.StringIO(),
                        report=False)
    assert len(summary.ran) == 1 and len(summary.failed) == 2  # one line per failed cell
    cells = expand_grid(parse_config(raw))
    assert [len(finished_shards(ResultsStore(tmp_path), c.cell_id)) for c in cells] == [0, 2, 2]
    again = run_sweep(parse_config(raw), tmp_path, evaluate=fake_evaluate, simulate=fake_simulate,
                      stream=io.StringIO(), report=False)
    assert again.ok and len(again.ran) == 2


def test_more_shards_than_items(tmp_path):
    raw = {**RAW, "tasks": [{"name": "snapeval_passkey", "limit": 2}], "shards": 4}
    summary = run_sweep(parse_config(raw), tmp_path, evaluate=fake_evaluate, simulate=fake_simulate,
                        stream=io.StringIO(), report=False)
    assert summary.ok and len(summary.ran) == 3
    result = ResultsStore(tmp_path).read(expand_grid(parse_config(raw))[0].cell_id)
    assert [r.doc_id for r in result.samples] == [0, 1] and result.metrics[0].n == 2


def test_shard_count_from_shard_size_workers_and_the_partition_on_disk(monkeypatch):
    from snapeval.sweep.executors import InProcessExecutor
    from snapeval.sweep.runner import ShardPlanner

    class FourWorkers(InProcessExecutor):
        def workers(self, resources):
            return 4

    monkeypatch.setattr("snapeval.sweep.shards.count_items", lambda cell: 7)
    two_groups = {k: v for k, v in RAW.items() if k != "shards"}
    cells = expand_grid(parse_config(two_groups))
    group = cells[:3]
    assert ShardPlanner(parse_config({**two_groups, "shard_size": 3}), InProcessExecutor(), cells, {})(group) == 3
    assert ShardPlanner(parse_config(two_groups), InProcessExecutor(), cells, {})(group) == 1  # in process: one
    assert ShardPlanner(parse_config(two_groups), FourWorkers(), cells, {})(group) == 2  # 4 workers, 2 groups
    resumed = {group[1].cell_id: {0: _run(group[1], Shard(0, 5))}}
    assert ShardPlanner(parse_config({**two_groups, "shards": 2}), InProcessExecutor(), cells, resumed)(group) == 5


def test_count_items_indexes_lm_eval_s_builtin_tasks_only_for_a_task_the_folders_do_not_define(task_dir, monkeypatch):
    """shard_size counts a task of the include folders from a TaskManager over the folders alone (as evaluate builds
    it; lm-eval's ~14,000 built-in YAML take ~25 s to index), and a built-in task name with lm-eval's whole index."""
    import lm_eval.tasks

    from snapeval.sweep.shards import count_items

    stock, built = lm_eval.tasks.TaskManager, []

    class Recording(stock):
        def __init__(self, *args, include_defaults: bool = True, **kwargs):
            built.append(include_defaults)
            if include_defaults:  # the built-in index is what is checked here, not what it would count
                raise LookupError("built-in tasks indexed")
            super().__init__(*args, include_defaults=include_defaults, **kwargs)

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", Recording)
    raw = {"name": "count", "models": ["llama-3.1-8b-instruct"], "include_path": str(task_dir), "methods": ["full"],
           "tasks": ["tiny_gen", {"name": "tiny_mc", "limit": 1}, "hellaswag"]}
    gen, mc, builtin = expand_grid(parse_config(raw))
    assert [count_items(gen), count_items(mc)] == [3, 1]
    assert built == [False, False]
    with pytest.raises(LookupError, match="built-in tasks indexed"):
        count_items(builtin)
    assert built[-1] is True


def test_shards_finished_under_other_task_files_are_redone(tmp_path):
    root = tmp_path / "tasks" / "passkey"
    root.mkdir(parents=True)
    (root / "snapeval_passkey.yaml").write_text("task: snapeval_passkey\n")

    def flaky(**kwargs):
        if kwargs["shard"][0] == 1 and kwargs["model_args"]["config"].method == "snapstream":
            raise RuntimeError("shard 2 exploded")
        return fake_evaluate(**kwargs)

    raw = {**RAW, "tasks": RAW["tasks"][:1], "include_path": str(root.parent)}
    run_sweep(parse_config(raw), tmp_path / "out", evaluate=flaky, simulate=fake_simulate, stream=io.StringIO(),
              report=False)
    cells = expand_grid(parse_config(raw))
    kept = [finished_shards(ResultsStore(tmp_path / "out"), c.cell_id) for c in cells]
    assert [len(k) for k in kept] == [0, 2, 2]
    assert {s.run["task_source_sha256"] for k in kept for s in k} == {cells[0].task_source}
    (root / "snapeval_passkey.yaml").write_text("task: snapeval_passkey\n# edited\n")
    calls = []

    def counting(**kwargs):
        calls.append(kwargs["shard"][0])
        return fake_evaluate(**kwargs)

    again = run_sweep(parse_config(raw), tmp_path / "out", evaluate=counting, simulate=fake_simulate,
                      stream=io.StringIO(), report=False, rerun_stale=True)  # the finished full cell is stale too
    assert again.ok and len(again.ran) == 3 and sorted(calls) == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # no kept shard reused
