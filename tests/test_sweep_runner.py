"""The sweep runner: resumability (including a real kill -9), failures, progress, and the CLI's dry run."""
from __future__ import annotations

import io
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fixtures.sweep_fakes import fake_evaluate, fake_simulate, start_sweep_process
from snapeval.cli import main as cli
from snapeval.errors import SnapevalError
from snapeval.results import ResultsStore
from snapeval.sweep import expand_grid, parse_config, run_sweep
from snapeval.sweep.runner import Progress, check_tasks

RAW = {
    "name": "unit",
    "models": ["llama-3.1-8b-instruct"],
    "tasks": [{"name": "snapeval_passkey", "limit": 6}, {"name": "snapeval_kv_needle", "limit": 6}],
    "methods": ["full", {"method": "snapstream", "budgets": [128, 512]}, {"method": "streamingllm", "budgets": [128]}],
}
VOLATILE = ["wall_s"]  # the only columns that may differ between two runs of the same cells


def config(**changes):
    return parse_config({**RAW, **changes})


def sweep(out, **kw):
    return run_sweep(config(), out, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(), **kw)


def stable(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns=VOLATILE).reset_index(drop=True)


def test_sweep_writes_cells_table_and_report(tmp_path):
    summary = sweep(tmp_path, report=True)
    assert summary.ok and len(summary.ran) == 8 and summary.skipped == 0
    store = ResultsStore(tmp_path)
    assert sorted(p.stem for p in store.cells_dir.glob("*.json")) == sorted(c.cell_id for c in expand_grid(config()))
    table = pd.read_parquet(tmp_path / "results.parquet")
    csv = pd.read_csv(tmp_path / "results.csv")
    assert len(table) == len(csv) == 8 * 2  # two filters of exact_match per cell
    assert table["primary"].sum() == 8 and set(table.loc[table["primary"], "filter"]) == {"strict"}
    assert (summary.report.parent / "accuracy_vs_budget.png").is_file()
    assert "8 run, 0 already done, 0 failed" in summary.render()


def test_rerun_skips_finished_cells_and_reruns_missing_ones(tmp_path, monkeypatch):
    first = sweep(tmp_path, report=False)
    table = pd.read_parquet(tmp_path / "results.parquet")
    calls = []
    monkeypatch.setattr("fixtures.sweep_fakes.time.sleep", lambda s: None)

    def counting(**kw):
        calls.append(kw["model_args"].get("budget"))
        return fake_evaluate(**kw)

    again = run_sweep(config(), tmp_path, evaluate=counting, simulate=fake_simulate, stream=io.StringIO(),
                      report=False)
    assert calls == [] and again.skipped == 8 and not again.ran
    victim = first.ran[3]
    (tmp_path / "cells" / f"{victim}.json").unlink()
    third = run_sweep(config(), tmp_path, evaluate=counting, simulate=fake_simulate, stream=io.StringIO(),
                      report=False)
    assert third.ran == [victim] and len(calls) == 1
    pd.testing.assert_frame_equal(stable(pd.read_parquet(tmp_path / "results.parquet")), stable(table))


def test_changed_config_gets_new_cells_not_old_results(tmp_path):
    sweep(tmp_path, report=False)
    changed = run_sweep(config(tasks=[{"name": "snapeval_passkey", "limit": 5}]), tmp_path, evaluate=fake_evaluate,
                        simulate=fake_simulate, stream=io.StringIO(), report=False)
    assert len(changed.ran) == 4 and changed.skipped == 0
    table = pd.read_parquet(tmp_path / "results.parquet")
    assert set(table["n_samples"]) == {5} and set(table["task"]) == {"snapeval_passkey"}


def test_failed_cells_are_reported_and_retried(tmp_path, monkeypatch):
    monkeypatch.setenv("SNAPEVAL_FAKE_FAIL", "streamingllm")
    summary = sweep(tmp_path, report=False)
    assert len(summary.failed) == 2 and len(summary.ran) == 6 and not summary.ok
    label, path = summary.failed[0]
    assert "streamingllm@128" in label and "planted failure" in Path(path).read_text()
    assert "FAILED" in summary.render() and "re-run the same command" in summary.render()
    monkeypatch.delenv("SNAPEVAL_FAKE_FAIL")
    retry = sweep(tmp_path, report=False)
    assert retry.ok and len(retry.ran) == 2 and retry.skipped == 6
    assert not list((tmp_path / "cells").glob("*.error.txt"))


def test_corrupt_or_torn_cell_files_are_not_trusted(tmp_path):
    first = sweep(tmp_path, report=False)
    cells = tmp_path / "cells"
    (cells / f"{first.ran[0]}.json").write_text('{"schema": 1, "cell_id": ')  # torn by something else
    (cells / f".{first.ran[1]}.json.abc.tmp").write_text("partial")  # an interrupted atomic write
    again = sweep(tmp_path, report=False)
    assert again.ran == [first.ran[0]]
    assert not list(cells.glob(".*.tmp"))


def test_kill_minus_9_mid_sweep_resumes_to_the_same_table(tmp_path):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    proc = start_sweep_process(RAW, killed, tmp_path, delay=0.5)
    cells = killed / "cells"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(cells.glob("*.json"))) < 3:
        time.sleep(0.02)
    time.sleep(0.2)  # now inside the 4th cell's evaluation
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = list(cells.glob("*.json"))
    assert 3 <= len(done) < 8, "the kill should land mid-sweep"
    for path in done:  # every file that exists is complete
        json.loads(path.read_text())
    assert not (killed / "results.parquet").exists()

    resumed = run_sweep(config(), killed, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
                        report=False)
    assert resumed.skipped == len(done) and len(resumed.ran) == 8 - len(done)
    sweep(clean, report=False)
    pd.testing.assert_frame_equal(stable(pd.read_parquet(killed / "results.parquet")),
                                  stable(pd.read_parquet(clean / "results.parquet")))


def test_progress_bar_and_eta():
    now = [100.0]
    out = io.StringIO()
    cells = expand_grid(config())
    progress = Progress(total=8, skipped=2, stream=out, clock=lambda: now[0])
    assert progress.eta() is None
    from snapeval.sweep.runner import CellRunner, WorkUnit

    progress.started(WorkUnit((cells[0],), shared=False))
    now[0] += 30
    ((_, result, _),) = CellRunner(fake_evaluate, None)(WorkUnit((cells[0],), shared=False))
    progress.ended(cells[0], result, None)
    assert progress.eta() == pytest.approx(30 * 5)  # 30 s per cell, 5 left (skipped ones do not count)
    now[0] += 30
    progress.ended(cells[1], None, "Traceback ...\nRuntimeError: boom")
    assert progress.eta() == pytest.approx(30 * 4)
    text = out.getvalue()
    assert "4/8 cells  50%" in text and "ETA 2m00s" in text and "-> running" in text
    assert "exact_match=" in text and "FAILED" in text and "RuntimeError: boom" in text


def test_cli_dry_run_lists_cells_and_their_state(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(RAW))
    out = tmp_path / "out"
    sweep(out, report=False)
    (out / "cells" / f"{expand_grid(config())[0].cell_id}.json").unlink()
    monkeypatch.chdir(tmp_path)
    assert cli(["sweep", str(cfg), "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "8 cells, 7 done, 1 to run" in text
    assert text.count("  todo  ") == 1 and text.count("  done  ") == 7
    assert cli(["sweep", str(cfg), "--out", str(out), "--dry-run", "--limit", "3"]) == 0
    assert "8 cells, 0 done, 8 to run" in capsys.readouterr().out


def test_unknown_task_fails_before_any_model_loads(tmp_path):
    (tmp_path / "t.yaml").write_text("task: my_probe\ndataset_path: json\noutput_type: generate_until\n"
                                     "doc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n")
    check_tasks(["my_probe"], str(tmp_path))  # found in the include path: lm-eval's own tasks are not indexed
    with pytest.raises(SnapevalError, match="'my_prob' is not an lm-eval task.*did you mean my_probe"):
        check_tasks(["my_prob"], str(tmp_path), include_defaults=False)


def _task_folder(root: Path) -> Path:
    """An include_path whose two folders define the sweep's two tasks (the fake harness does not read them)."""
    for family, task in (("passkey", "snapeval_passkey"), ("needle", "snapeval_kv_needle")):
        (root / family).mkdir(parents=True)
        (root / family / f"{task}.yaml").write_text(f"task: {task}\ndoc_to_text: '{{{{prompt}}}}'\n")
        (root / family / "hooks.py").write_text("def score(doc, results):\n    return {'exact_match': 1.0}\n")
    return root


def test_task_source_hash_covers_the_task_folder_and_nothing_else(tmp_path):
    from snapeval.sweep.grid import task_source_sha256

    root = _task_folder(tmp_path / "tasks")
    passkey, needle = task_source_sha256("snapeval_passkey", root), task_source_sha256("snapeval_kv_needle", root)
    assert len(passkey) == 64 and passkey != needle and task_source_sha256("not_here", root) is None
    (root / "passkey" / "__pycache__").mkdir()
    (root / "passkey" / "__pycache__" / "hooks.cpython-312.pyc").write_bytes(b"\0")
    (root / "passkey" / ".notes.swp").write_text("editor state")
    assert task_source_sha256("snapeval_passkey", root) == passkey  # caches and hidden files are not the task
    (root / "passkey" / "hooks.py").write_text("def score(doc, results):\n    return {'exact_match': 0.0}\n")
    edited = task_source_sha256("snapeval_passkey", root)
    assert edited != passkey and task_source_sha256("snapeval_kv_needle", root) == needle
    (root / "passkey" / "template.yaml").write_text("generation_kwargs: {until: ['\\n']}\n")  # a new shared file
    assert task_source_sha256("snapeval_passkey", root) not in (passkey, edited)


def test_task_source_hash_follows_includes_out_of_the_task_folder(tmp_path):
    """A task YAML that includes a shared base config from another folder (lm-eval resolves it relative to the
    including YAML) is hashed with that base, the modules of the base's ``!function`` tags and the base's own
    includes; the rest of the shared folder and other tasks' folders do not move it."""
    from snapeval.sweep.grid import task_source_sha256

    root = _task_folder(tmp_path / "tasks")
    common = root / "common"
    common.mkdir()
    (common / "base.yaml").write_text("include: deeper.yaml\noutput_type: generate_until\n"
                                      "process_results: !function scoring.score\n")
    (common / "deeper.yaml").write_text("generation_kwargs: {until: ['\\n']}\n")
    (common / "scoring.py").write_text("def score(doc, results):\n    return {'exact_match': 1.0}\n")
    (common / "unrelated.py").write_text("x = 1\n")
    (root / "passkey" / "snapeval_passkey.yaml").write_text(
        "include: ../common/base.yaml\ntask: snapeval_passkey\ndoc_to_text: '{{prompt}}'\n")
    (root / "listed").mkdir()
    (root / "listed" / "t.yaml").write_text("include:\n  - ../common/deeper.yaml\ntask: listed_task\n")
    before = task_source_sha256("snapeval_passkey", root)
    listed = task_source_sha256("listed_task", root)
    needle = task_source_sha256("snapeval_kv_needle", root)

    (common / "unrelated.py").write_text("x = 2\n")  # in the shared folder but named by nothing
    assert task_source_sha256("snapeval_passkey", root) == before
    for edit in ((common / "scoring.py", "def score(doc, results):\n    return {'exact_match': 0.0}\n"),
                 (common / "base.yaml", "include: deeper.yaml\noutput_type: loglikelihood\n"
                                        "process_results: !function scoring.score\n")):
        edit[0].write_text(edit[1])
        after = task_source_sha256("snapeval_passkey", root)
        assert after != before and task_source_sha256("snapeval_kv_needle", root) == needle
        before = after
    assert task_source_sha256("listed_task", root) == listed  # its include is untouched so far
    (common / "deeper.yaml").write_text("generation_kwargs: {until: ['.']}\n")  # included by base and by listed
    assert task_source_sha256("snapeval_passkey", root) != before
    assert task_source_sha256("listed_task", root) != listed


def test_a_sweeps_task_hashes_read_each_yaml_once(tmp_path, monkeypatch):
    """The hashes of all of a sweep's tasks come from one pass over the include folder's YAMLs (not one per task),
    and equal each task's own hash."""
    from snapeval.sweep import grid

    root = _task_folder(tmp_path / "tasks")
    for i in range(5):  # a larger suite: tasks the sweep does not run
        (root / f"other{i}").mkdir()
        (root / f"other{i}" / "t.yaml").write_text(f"task: other_{i}\n")
    names = ["snapeval_passkey", "snapeval_kv_needle", "not_here"]
    single = {name: grid.task_source_sha256(name, root) for name in names}
    reads: list[Path] = []
    read_text = grid._read_text
    monkeypatch.setattr(grid, "_read_text", lambda path: reads.append(path) or read_text(path))
    assert grid.task_source_hashes(names, root) == single and single["not_here"] is None
    counts = Counter(reads)
    assert set(counts) == set(root.rglob("*.yaml"))
    assert all(counts[root / f"other{i}" / "t.yaml"] == 1 for i in range(5))  # once, to find the defining folders
    assert counts[root / "passkey" / "snapeval_passkey.yaml"] == 2  # and once more for its includes


def test_a_cell_finished_under_other_task_files_is_not_reused(tmp_path, capsys):
    root = _task_folder(tmp_path / "tasks")
    raw = {**RAW, "include_path": str(root)}
    out = tmp_path / "out"

    def run(**kw):
        return run_sweep(parse_config(raw), out, evaluate=fake_evaluate, simulate=fake_simulate,
                         stream=io.StringIO(), report=False, **kw)

    assert len(run().ran) == 8
    cells = expand_grid(parse_config(raw))
    stored = {ResultsStore(out).read(c.cell_id).task_source_sha256 for c in cells}
    assert stored == {c.task_source for c in cells} and None not in stored and len(stored) == 2
    (root / "passkey" / "snapeval_passkey.yaml").write_text("task: snapeval_passkey\ndoc_to_text: 'Q: {{prompt}}'\n")
    assert [c.cell_id for c in expand_grid(parse_config(raw))] == [c.cell_id for c in cells]  # same identities
    with pytest.raises(SnapevalError, match=r"4 finished cell\(s\) .* task\(s\) snapeval_passkey .*--rerun-stale"):
        run()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    assert cli(["sweep", str(cfg), "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "8 cells, 4 done, 4 to run (4 stale: --rerun-stale)" in text and text.count("  stale  ") == 4
    redone = run(rerun_stale=True)
    assert len(redone.ran) == 4 and redone.skipped == 4
    assert {c.task.name for c in cells if c.cell_id in redone.ran} == {"snapeval_passkey"}
    assert run().skipped == 8  # now current


def test_cells_written_before_task_sources_were_recorded_are_reused(tmp_path):
    first = sweep(tmp_path, report=False)
    store = ResultsStore(tmp_path)
    for cell_id in first.ran:  # as an older snapeval wrote them: no task_source_sha256
        data = json.loads(store.cell_path(cell_id).read_text())
        data.pop("task_source_sha256")
        store.cell_path(cell_id).write_text(json.dumps(data))
    assert sweep(tmp_path, report=False).skipped == 8
