"""The task families' YAML lives in the top-level ``tasks/`` (where lm-eval users look): lm-eval lists and validates
them from there, snapeval reads them from there, their source hashes are those recorded before the move, and a
wheel built from the repository installs them and runs every task (issue #40)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snapeval.paths import shipped_tasks_dir, tasks_dir
from snapeval.sweep.grid import task_source_hashes
from snapeval.tasks.families import families
from tests.conftest import DATA_DIR

REPO = Path(__file__).resolve().parents[1]
TASK_NAMES = sorted({name for family in families() for name in family.task_names()})
LM_EVAL = Path(sys.executable).with_name("lm_eval")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SNAPEVAL_TASKS_DIR", "PYTHONPATH")}
    return {**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "SNAPEVAL_DATA_DIR": str(DATA_DIR), **extra}


def test_the_task_yaml_is_in_the_top_level_tasks_folder():
    assert shipped_tasks_dir() == REPO / "tasks" and tasks_dir() == REPO / "tasks"
    assert not list((REPO / "snapeval" / "tasks").rglob("*.yaml"))  # the code folders hold code only
    for family in families():
        assert family.yaml_folder == REPO / "tasks" / family.folder.name and family.task_names()


def test_task_source_hashes_are_those_of_the_layout_before_the_move(tmp_path):
    """Before the move each family's YAML sat in its code folder (``snapeval/tasks/<family>/``) and a task's source
    hash covered that one folder; a cell recorded then must not turn stale. Rebuild that layout and compare."""
    old = tmp_path / "tasks"
    for family in families():
        shutil.copytree(family.folder, old / family.folder.name, ignore=shutil.ignore_patterns("__pycache__"))
        for yaml_file in family.yaml_folder.glob("*.yaml"):
            shutil.copy(yaml_file, old / family.folder.name / yaml_file.name)
    names = TASK_NAMES + ["snapeval_synthetic"]
    before = task_source_hashes(names, old)
    assert all(before.values()) and task_source_hashes(names, tasks_dir()) == before


# lm-eval's own command line (``lm_eval ls tasks --include_path tasks/``, then ``lm_eval validate --tasks ...
# --include_path tasks/``), both in one process: each of lm-eval's ~14,000 built-in task YAML files, which ``ls``
# reads for its index and again for its table and ``validate`` reads for the same index, is parsed once (read whole,
# as lm-eval reads it, kept pickled, a fresh copy to each caller): ~67 s of a core -> ~42 s. What each command prints
# and returns is lm-eval's own (the table byte for byte as ``lm_eval ls`` prints it).
LS_THEN_VALIDATE = r"""
import pickle, sys
from pathlib import Path
from lm_eval.__main__ import cli_evaluate
from lm_eval.tasks import _index, _yaml_loader, manager

read, parsed = _yaml_loader.load_yaml, {}
def read_once(path, *, resolve_func=True, recursive=True, _seen=None):
    if _seen is not None or resolve_func:  # an include inside a file being read; a config whose functions load
        return read(path, resolve_func=resolve_func, recursive=recursive, _seen=_seen)
    key = (Path(path).expanduser().resolve(), recursive)
    if key not in parsed:
        parsed[key] = pickle.dumps(read(path, resolve_func=False, recursive=recursive))
    return pickle.loads(parsed[key])  # a fresh copy for every caller
_index.load_yaml = manager.load_yaml = read_once
for command in sys.argv[1:]:
    sys.argv = ["lm_eval", *command.split()]
    cli_evaluate()
    print("--- lm_eval: done ---", flush=True)
"""


@pytest.mark.skipif(not LM_EVAL.exists(), reason="lm_eval's command is not installed beside this interpreter")
def test_lm_eval_lists_and_validates_the_tasks_folder():
    done = subprocess.run([sys.executable, "-c", LS_THEN_VALIDATE, "ls tasks --include_path tasks/",
                           f"validate --tasks {','.join(TASK_NAMES)} --include_path tasks/"], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    listed, valid, rest = done.stdout.split("--- lm_eval: done ---\n")
    for name in TASK_NAMES + ["snapeval_synthetic"]:
        assert any(line.startswith(f"|{name} ") and "tasks/" in line for line in listed.splitlines()), name
    assert "All tasks found and valid" in valid and not rest, (valid, done.stderr[-2000:])


WHEEL_SCRIPT = r"""
import json, sys
import snapeval
from snapeval.paths import tasks_dir
from snapeval.sweep.grid import task_source_hashes
from snapeval.tasks.families import families
from snapeval.results.schema import from_lm_eval
from snapeval.harness.evaluate import _environment_info_once_per_process
import lm_eval
from lm_eval.tasks import TaskManager
from fixtures.stub_lm import StubLM

data_dir = sys.argv[1]
out = {"snapeval": snapeval.__file__, "tasks_dir": str(tasks_dir()), "scores": {}}
names = [n for f in families() for n in f.task_names()]
_environment_info_once_per_process()  # lm-eval's add_env_info (torch's collect_env: pip and other subprocesses) once
out["hashes"] = task_source_hashes(names, tasks_dir())
for family in families():
    metadata = {"data_dir": data_dir}
    if family.data is None:
        metadata.update(pretrained="smollm2-135m-instruct", max_seq_lengths=[256], num_samples=2)
    reply = family.reference_reply or (lambda doc: "")
    for task in family.task_names():
        manager = TaskManager(include_path=str(tasks_dir()), include_defaults=False, metadata=metadata)
        result = lm_eval.simple_evaluate(model=StubLM(lambda doc, sample, context, kwargs: reply(doc)), tasks=[task],
                                         task_manager=manager, limit=2, log_samples=True, bootstrap_iters=0)
        cell = from_lm_eval("cell", {}, result)
        out["scores"][task] = [len(cell.samples), cell.metrics[0].value, family.reference_reply is not None]
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.runs_programs  # livecodebench's programs run: never during the red-team checks of leftovers
def test_a_wheel_installs_the_tasks_and_runs_every_task(tmp_path):
    """Build a wheel from the repository's files, install it into an empty target, and run every task from there (a
    stub model answering each family's reference reply: right where the family declares one)."""
    missing = [rel for family in families() for rel in family.data_files if not (DATA_DIR / rel).is_file()]
    if missing:
        pytest.skip(f"real data not available: {DATA_DIR / missing[0]} is absent (set SNAPEVAL_DATA_DIR)")
    source = tmp_path / "source"
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name if source.exists() else _mkdir(source) / name)
    for folder in ("snapeval", "tasks"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    built = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", str(source), "-w",
                            str(tmp_path / "dist")], capture_output=True, text=True, timeout=600, env=_env())
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("snapeval-*.whl")
    target = tmp_path / "site"
    installed = subprocess.run([*pip, "install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel)],
                               capture_output=True, text=True, timeout=600, env=_env())
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert sorted(p.relative_to(target / "snapeval" / "task_yaml").as_posix()
                  for p in (target / "snapeval" / "task_yaml").rglob("*.yaml")) == \
        sorted(p.relative_to(REPO / "tasks").as_posix() for p in (REPO / "tasks").rglob("*.yaml"))
    run = subprocess.run([sys.executable, "-c", WHEEL_SCRIPT, str(DATA_DIR)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=900,
                         env=_env(PYTHONPATH=os.pathsep.join([str(target), str(REPO / "tests")])))
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["snapeval"].startswith(str(target)) and out["tasks_dir"] == str(target / "snapeval" / "task_yaml")
    assert out["hashes"] == task_source_hashes(TASK_NAMES, REPO / "tasks")  # the same sources, installed
    assert sorted(out["scores"]) == TASK_NAMES
    for task, (samples, value, has_reference) in out["scores"].items():
        assert samples == 2, task
        assert value == (1.0 if has_reference else 0.0), task


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path
