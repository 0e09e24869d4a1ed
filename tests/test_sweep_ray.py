"""The Ray executor: cells run as Ray tasks on a local Ray instance, with the resources the config declares."""
from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'snapeval[ray]')")

from fixtures.sweep_fakes import fake_evaluate, fake_simulate  # noqa: E402
from snapeval.sweep import parse_config, run_sweep  # noqa: E402
from snapeval.sweep.executors import RayExecutor  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RAW = {
    "name": "ray",
    "models": ["llama-3.1-8b-instruct"],
    "tasks": [{"name": "snapeval_passkey", "limit": 4}],
    "methods": ["full", {"method": "snapstream", "budgets": [128, 256, 512]}],
}


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    log = tmp_path_factory.mktemp("raylog") / "calls.jsonl"
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]), "SNAPEVAL_FAKE_LOG": str(log),
           "SNAPEVAL_FAKE_DELAY": "1.0", "SNAPEVAL_FAKE_MEET": str(log.parent / "meet")}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env},
             _temp_dir=str(tmp_path_factory.mktemp("ray")))
    # Start both workers and import what a unit imports before any test measures overlap: on a loaded machine a
    # worker that starts late would otherwise find every task already done by the first (no overlap to see).
    ray.get([_warm_worker.remote() for _ in range(2)])
    yield log
    ray.shutdown()


@ray.remote(num_cpus=1)
def _warm_worker() -> int:
    import fixtures.sweep_fakes  # noqa: F401
    import snapeval.sweep.executors  # noqa: F401

    time.sleep(1.0)  # both warm-up tasks hold their worker at once, so two workers exist
    return os.getpid()


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def overlaps(rows: list[dict]) -> bool:
    rows = sorted(rows, key=lambda r: r["start"])
    return any(b["start"] < a["end"] - 0.05 for a, b in zip(rows, rows[1:]))


@pytest.mark.parametrize("num_cpus, concurrent", [(1, True), (2, False)])
def test_ray_executor_runs_cells_as_ray_tasks(local_ray, tmp_path, num_cpus, concurrent):
    local_ray.unlink(missing_ok=True)
    config = parse_config({**RAW, "resources": {"num_cpus": num_cpus}}).per_cell()  # every cell its own Ray task
    executor = RayExecutor()
    summary = run_sweep(config, tmp_path / "ray", executor=executor, evaluate=fake_evaluate, simulate=fake_simulate,
                        stream=io.StringIO(), report=False)
    assert summary.ok and len(summary.ran) == 4
    rows = calls(local_ray)
    assert len(rows) == 4
    assert os.getpid() not in {r["pid"] for r in rows}  # ran in Ray workers, not here
    assert set(executor.worker_pids.values()) == {r["pid"] for r in rows}
    # 2 CPUs: one-CPU cells run two at a time; two-CPU cells one at a time
    assert overlaps(rows) is concurrent

    # the same table as the in-process executor
    local = run_sweep(config, tmp_path / "local", evaluate=fake_evaluate, simulate=fake_simulate,
                      stream=io.StringIO(), report=False)
    assert len(local.ran) == 4
    a = pd.read_parquet(tmp_path / "ray" / "results.parquet").drop(columns=["wall_s"])
    b = pd.read_parquet(tmp_path / "local" / "results.parquet").drop(columns=["wall_s"])
    pd.testing.assert_frame_equal(a, b)


def test_ray_runs_a_shared_group_as_one_task(local_ray, tmp_path):
    """Cells of one (model, task, seed) group share one prefill per item: one Ray task runs all of them."""
    local_ray.unlink(missing_ok=True)
    executor = RayExecutor()
    summary = run_sweep(parse_config({**RAW, "shards": 1}), tmp_path, executor=executor, evaluate=fake_evaluate,
                        simulate=fake_simulate, stream=io.StringIO(), report=False)
    assert summary.ok and len(summary.ran) == 4
    rows = calls(local_ray)
    assert len({r["pid"] for r in rows}) == 1 and os.getpid() not in {r["pid"] for r in rows}
    assert not overlaps(rows)


def test_ray_failure_is_reported_not_fatal(local_ray, tmp_path):
    config = parse_config(RAW)

    def broken(**kw):
        if kw["model_args"]["config"].budget == 256:
            raise ValueError("budget 256 exploded")
        return fake_evaluate(**kw)

    summary = run_sweep(config, tmp_path, executor=RayExecutor(), evaluate=broken, simulate=fake_simulate,
                        stream=io.StringIO(), report=False)
    assert len(summary.ran) == 3 and len(summary.failed) == 1
    assert "budget 256 exploded" in Path(summary.failed[0][1]).read_text()


def test_ray_runs_a_groups_item_shards_in_parallel_with_the_models_resources(local_ray, tmp_path):
    """Default shards on Ray: one per worker the cluster has for the model's resources; each shard a Ray task (every
    configuration of its items); the merged cells equal the same shards run in process."""
    local_ray.unlink(missing_ok=True)
    executor = RayExecutor()
    meet = local_ray.parent / "meet"  # each worker's calls wait until the other's have begun: run one after the
    meet.mkdir()                      # other, the first waits out its 120 s and the windows do not overlap
    try:
        summary = run_sweep(parse_config(RAW), tmp_path / "ray", executor=executor, evaluate=fake_evaluate,
                            simulate=fake_simulate, stream=io.StringIO(), report=False)
    finally:
        shutil.rmtree(meet)
    assert summary.ok and len(summary.ran) == 4
    rows = calls(local_ray)
    assert len(rows) == 8 and len({r["pid"] for r in rows}) == 2  # 2 shards x 4 configurations, two workers
    assert overlaps(rows)
    local = run_sweep(parse_config({**RAW, "shards": 2}), tmp_path / "local", evaluate=fake_evaluate,
                      simulate=fake_simulate, stream=io.StringIO(), report=False)
    assert len(local.ran) == 4
    a = pd.read_parquet(tmp_path / "ray" / "results.parquet").drop(columns=["wall_s"])
    b = pd.read_parquet(tmp_path / "local" / "results.parquet").drop(columns=["wall_s"])
    pd.testing.assert_frame_equal(a, b)

    local_ray.unlink(missing_ok=True)
    two_cpus = parse_config({**RAW, "resources": {"num_cpus": 2}})  # one such worker fits: one shard
    run_sweep(two_cpus, tmp_path / "big", executor=RayExecutor(), evaluate=fake_evaluate, simulate=fake_simulate,
              stream=io.StringIO(), report=False)
    assert len(calls(local_ray)) == 4 and not overlaps(calls(local_ray))
