"""Extending snapeval from outside: a separate package (built here in a temporary folder, with its own dist-info and
``entry_points.txt``, put on ``sys.path``) adds a method (``tests/fixtures/random_method/``, the worked example of
CONTRIBUTING.md), a task family and a hardware target, without a line of snapeval changed; each is found, listed and
used by ``snapeval run``, a sweep, lm-eval and the simulator. Also: a setting named as something snapeval reads is
refused in one line, the CLI parsers import neither torch nor transformers, and the results table and ``regress``
read each method's own settings only."""
from __future__ import annotations

import importlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from snapeval.cache import METHOD_TABLE
from snapeval.errors import SnapevalError

REPO = Path(__file__).resolve().parents[1]
PLUGIN_MODULES = ("snapeval_random", "snapeval_toytask", "snapeval_b200", "snapeval_seedy")

TOY_YAML = """task: toytask_qa
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: !function hooks.doc_to_text
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n\\n"]
  max_gen_toks: 4
  do_sample: false
metric_list:
  - metric: exact_match
"""

SEEDY = '''from dataclasses import dataclass
from typing import ClassVar

from snapeval.cache.config import SelectionConfig, setting
from snapeval.cache.methods import MethodInfo


@dataclass(frozen=True)
class SeedyConfig(SelectionConfig):
    method: ClassVar[str] = "seedy"
    seed: int = setting(0, "a setting named as the run's seed", minimum=0)


ENTRY = MethodInfo("seedy", "snapeval_seedy:SeedyConfig", "snapeval_seedy:SeedyConfig", branches=False, summary="x")
'''


def build_dist(root: Path, *, seedy: bool = False) -> Path:
    """A package installed in ``root/site``: its modules and a dist-info whose entry points name a method, a task
    family and a hardware target (and, with ``seedy``, a method with a setting named ``seed``)."""
    site = root / "site"
    shutil.copytree(REPO / "tests" / "fixtures" / "random_method", site / "snapeval_random",
                    ignore=shutil.ignore_patterns("__pycache__"))
    toy = site / "snapeval_toytask"
    toy.mkdir()
    rows = [{"question": f"Question {i}: the secret city is Lisbon. Name it.", "answer": "Lisbon"} for i in range(3)]
    (toy / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (toy / "toytask.yaml").write_text(TOY_YAML.format(data=toy / "toy.jsonl"))
    (toy / "hooks.py").write_text("def doc_to_text(doc):\n    return doc['question'] + '\\nAnswer:'\n")
    (toy / "__init__.py").write_text(
        "from snapeval.tasks.families import TaskFamily\n\n"
        "FAMILY = TaskFamily('toytask', data=None, typical_lengths=(120, 8), hooks='snapeval_toytask.hooks',\n"
        "                    reference_reply=lambda doc: doc['answer'])\n")
    hardware = site / "snapeval_b200"
    hardware.mkdir()
    spec = (REPO / "snapeval" / "simulator" / "hardware" / "h100.yaml").read_text()
    spec = spec.replace("name: h100", "name: b200").replace("description: One NVIDIA H100 SXM 80GB",
                                                             "description: A B200-like target (a test's)")
    (hardware / "b200.yaml").write_text(spec)
    (hardware / "__init__.py").write_text("from pathlib import Path\n\nSPEC = Path(__file__).parent / 'b200.yaml'\n")
    points = {"snapeval.methods": ["random = snapeval_random:ENTRY"],
              "snapeval.tasks": ["toytask = snapeval_toytask:FAMILY"],
              "snapeval.hardware": ["b200 = snapeval_b200:SPEC"]}
    if seedy:
        (site / "snapeval_seedy").mkdir()
        (site / "snapeval_seedy" / "__init__.py").write_text(SEEDY)
        points["snapeval.methods"].append("seedy = snapeval_seedy:ENTRY")
    info = site / "snapeval_extras-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: snapeval-extras\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(f"[{group}]\n" + "\n".join(lines) + "\n\n"
                                                   for group, lines in points.items()))
    return site


def forget_plugins() -> None:
    """Every registry looks again: the method table, the task families, the hardware specs."""
    from snapeval.simulator import hardware
    from snapeval.tasks import families

    METHOD_TABLE.rediscover()
    families.families.cache_clear()
    families.plugin_families.cache_clear()
    hardware._CACHE.pop("b200", None)
    for name in [m for m in sys.modules if m.split(".")[0] in PLUGIN_MODULES]:
        del sys.modules[name]
    importlib.invalidate_caches()


def _installed(tmp_path, seedy: bool = False):
    site = str(build_dist(tmp_path, seedy=seedy))
    sys.path.insert(0, site)
    forget_plugins()
    try:
        yield Path(site)
    finally:
        sys.path.remove(site)
        forget_plugins()


@pytest.fixture
def installed(tmp_path):
    yield from _installed(tmp_path)


@pytest.fixture
def installed_seedy(tmp_path):
    yield from _installed(tmp_path, seedy=True)


def _one_line(err: str, *words) -> None:
    assert err.startswith("snapeval: error:") and err.count("\n") == 1 and all(w in err for w in words), err


# ---------------------------------------------------------------------------------------------------------- methods
def test_an_installed_method_is_listed_and_runs_in_snapeval_run(installed, tiny_dir, task_dir, tmp_path,
                                                                 monkeypatch, capsys):
    from snapeval.cli import main as cli

    assert "random" in METHOD_TABLE.allowed().split(", ")
    assert cli(["methods"]) == 0
    listing = capsys.readouterr().out
    assert "random: the last window tokens and a random draw" in listing and "[snapeval_random]" in listing
    assert "  draw: which random draw" in listing and "default: 0" in listing and "  window:" in listing
    monkeypatch.setenv("SNAPEVAL_TASKS_DIR", str(task_dir))
    argv = ["run", "--task", "tiny_gen", "--model", str(tiny_dir), "--dtype", "float64", "--method", "random",
            "--budget", "24", "--limit", "2"]
    assert cli([*argv, "--method-arg", "draw=-1"]) == 2
    _one_line(capsys.readouterr().err, "draw=-1", "allowed: an integer >= 0")
    assert cli([*argv, "--method-arg", "seed=1"]) == 2
    _one_line(capsys.readouterr().err, "'seed'", "allowed settings: window, draw")
    out = tmp_path / "run.json"
    assert cli([*argv, "--method-arg", "draw=3", "--method-arg", "window=4", "--output", str(out)]) == 0
    config = json.loads(out.read_text())["snapeval"]["config"]
    assert config["method"] == "random" and config["settings"] == {"budget": 24, "window": 4, "draw": 3}


def test_an_installed_method_runs_in_a_sweep_and_in_lm_eval(installed, tiny_dir, task_dir, tmp_path):
    import lm_eval
    from lm_eval.tasks import TaskManager

    from snapeval.report.results_table import columns, load_table
    from snapeval.sweep import parse_config, run_sweep

    config = parse_config({"name": "plugin", "models": [{"pretrained": str(tiny_dir)}],
                           "tasks": [{"name": "toytask_qa", "limit": 2}],
                           "methods": ["full", {"method": "random", "budgets": [24], "draw": 1}],
                           "simulate": {"enabled": False}})
    summary = run_sweep(config, tmp_path / "sweep", stream=io.StringIO(), report=False, simulate=None)
    assert summary.ok and len(summary.ran) == 2
    table = load_table(tmp_path / "sweep")
    random_rows = table[table["method"] == "random"]
    assert list(random_rows["draw"]) == [1] and list(random_rows["window"]) == [8]
    assert list(table.columns) == columns(["full", "random"])
    assert "draw" not in columns(["full", "snapkv"])  # a table that did not run it has no column of its settings

    results = lm_eval.simple_evaluate(
        model="snapeval", model_args=f"pretrained={tiny_dir},dtype=float64,method=random,budget=24,draw=2",
        tasks=["tiny_gen"], task_manager=TaskManager(include_path=str(task_dir), include_defaults=False), limit=2)
    assert "tiny_gen" in results["results"]


def test_a_setting_named_as_what_snapeval_reads_is_refused_in_one_line(installed_seedy, capsys):
    from snapeval.cache.methods import MethodInfo
    from snapeval.cli import main as cli

    with pytest.raises(ValueError) as err:
        METHOD_TABLE.register(MethodInfo("seedy2", "snapeval_seedy:SeedyConfig", "snapeval_seedy:SeedyConfig",
                                         branches=False, summary="x"))
    assert "\n" not in str(err.value) and "setting name 'seed' is reserved" in str(err.value)
    assert "seedy2" not in METHOD_TABLE
    with pytest.raises(SystemExit) as done:  # every other command still builds its parser
        cli(["--help"])
    assert done.value.code == 0
    capsys.readouterr()
    assert cli(["methods"]) == 0  # the broken plugin named in one warning and skipped; the others listed
    captured = capsys.readouterr()
    assert captured.err.startswith("snapeval: warning: method 'seedy'") and captured.err.count("\n") == 1
    assert "'seed' is reserved" in captured.err and "snapkv" in captured.out and "random:" in captured.out
    assert cli(["run", "--tasks", "snapeval_passkey", "--method", "seedy", "--budget", "64"]) == 2  # asked for
    _one_line(capsys.readouterr().err, "method 'seedy'", "'seed' is reserved")


def test_reserved_names_cover_everything_snapeval_reads_beside_settings():
    import inspect

    from snapeval.cache.methods import RESERVED_SETTING_NAMES, RESERVED_SETTING_PREFIXES
    from snapeval.cli import build_parser
    from snapeval.harness.lm_eval_model import SnapStreamLM
    from snapeval.report.results_table import columns
    from snapeval.sweep.grid import CellView

    def reserved(name: str) -> bool:
        return name in RESERVED_SETTING_NAMES or name.startswith(RESERVED_SETTING_PREFIXES)

    settings = set(METHOD_TABLE.column_settings())
    read = [c for c in columns() if c not in settings]
    read += [f for f in CellView.__dataclass_fields__ if f != "settings"]
    read += [p for p in inspect.signature(SnapStreamLM.__init__).parameters if p not in ("self", "kwargs")]
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    read += [a.dest for a in run._actions if a.dest != "help" and a.dest not in settings]
    assert [name for name in read if not reserved(name)] == []


def test_building_any_parser_imports_neither_torch_nor_transformers(installed):
    """Every command's parser and help, with a plugin whose module imports torch installed: the plugin is named in
    ``--method``'s help (found by its entry point) but not loaded."""
    code = ("import sys; from snapeval.cli import build_parser; p = build_parser(); "
            "helps = {c: a.choices[c].format_help() for a in p._subparsers._group_actions for c in a.choices}; "
            "print(sorted(m for m in ('torch', 'transformers', 'lm_eval', 'snapeval_random') if m in sys.modules), "
            "'random' in helps['run'], 'b200' in helps['simulate'])")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[] True True", out.stderr


# ----------------------------------------------------------------------------------------------- tasks and hardware
def test_an_installed_task_family_and_the_tasks_path_add_to_the_shipped_tasks(installed, tiny_dir, task_dir,
                                                                              tmp_path, monkeypatch, capsys):
    from snapeval.cli import main as cli
    from snapeval.paths import tasks_dir
    from snapeval.tasks.folders import task_folders
    from snapeval.tasks.families import families, typical_lengths

    monkeypatch.delenv("SNAPEVAL_TASKS_DIR", raising=False)
    monkeypatch.setenv("SNAPEVAL_TASKS_PATH", str(task_dir))
    assert task_folders() == [tasks_dir(), installed / "snapeval_toytask", task_dir]
    assert "toytask" in [f.name for f in families()] and typical_lengths("toytask_qa") == (120, 8)
    assert cli(["tasks"]) == 0
    listing = capsys.readouterr().out
    assert "toytask [snapeval_toytask]: toytask_qa (data: generated)" in listing and "snapeval_passkey" in listing
    out = tmp_path / "run.json"
    assert cli(["run", "--task", "toytask_qa,tiny_gen", "--model", str(tiny_dir), "--dtype", "float64", "--method",
                "snapkv", "--budget", "24", "--limit", "2", "--output", str(out)]) == 0
    assert set(json.loads(out.read_text())["results"]) == {"toytask_qa", "tiny_gen"}


def test_an_installed_hardware_target_is_listed_and_simulated(installed, capsys):
    from snapeval.cli import main as cli
    from snapeval.simulator.cli import hardware_help
    from snapeval.sweep import parse_config

    assert "b200" in hardware_help()
    assert cli(["hardware"]) == 0
    assert "b200 [snapeval_b200]: gpu, 1 socket(s). A B200-like target (a test's)" in capsys.readouterr().out
    assert cli(["simulate", "--hardware", "b200", "--model", "llama-3.1-8b-instruct", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hardware"] == "b200"
    config = parse_config({"models": ["smollm2-135m-instruct"], "tasks": ["snapeval_passkey"], "methods": ["full"],
                           "simulate": {"hardware": "b200"}})
    assert config.simulate.hardware == "b200"


# --------------------------------------------------------------------------------------------------------- regress
def test_regress_matches_cells_on_their_methods_identity(installed):
    from snapeval.stats.regress import Entry

    def entry(**policy):
        view = {"model": "m", "task": "t", "method": "random", "budget": 24, "seed": 0}
        return Entry(view, SimpleNamespace(identity={"policy": {"method": "random", "budget": 24, **policy}}))

    assert entry(window=8, draw=1).key == entry(draw=1, window=8).key
    assert entry(window=8, draw=1).key != entry(window=8, draw=2).key


def test_an_unknown_method_argument_and_deprecated_spellings(tiny_dir, capsys):
    from snapeval.cli import main as cli

    argv = ["run", "--task", "x", "--model", str(tiny_dir), "--method", "snapkv", "--budget", "64"]
    assert cli([*argv, "--method-arg", "sink=4"]) == 2
    _one_line(capsys.readouterr().err, "'sink'", "allowed settings: observation, pool_kernel, pooling")
    assert cli([*argv, "--method-arg", "kernel"]) == 2
    _one_line(capsys.readouterr().err, "--method-arg='kernel'", "NAME=VALUE")
    assert cli([*argv, "--method-arg", "kernel=3", "--method-arg", "kernel=5"]) == 2
    _one_line(capsys.readouterr().err, "kernel is given twice")
    with pytest.warns(DeprecationWarning, match="--method-arg pool_kernel=4") as warned:
        assert cli([*argv, "--kernel", "4"]) == 2  # the old flag still reaches the method's check
    assert len(warned) == 1  # one line: the flag's, which names the setting as it is typed now
    _one_line(capsys.readouterr().err, "pool_kernel=4", "a positive odd integer")
    with pytest.warns(DeprecationWarning, match="--split"):
        assert cli(["simulate", "--budget", "64", "--split", "pool_kernel=4"]) == 2
    _one_line(capsys.readouterr().err, "pool_kernel=4")


def test_the_lm_eval_model_is_registered_as_snapeval_and_snapstream_is_a_deprecated_alias(tiny_dir):
    import tomllib

    from lm_eval.api.registry import get_model

    from snapeval.harness import lm_eval_model

    assert get_model("snapeval") is lm_eval_model.SnapStreamLM
    with pytest.warns(DeprecationWarning, match="use --model snapeval"):
        old = get_model("snapstream")(pretrained=str(tiny_dir), dtype="float64", method="full")
    assert isinstance(old, lm_eval_model.SnapStreamLM)
    points = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["lm_eval.models"]
    assert points == {"snapeval": "snapeval.harness.lm_eval_model:SnapStreamLM",
                      "snapstream": "snapeval.harness.lm_eval_model:DeprecatedSnapStreamLM"}


def test_a_press_takes_its_arguments_as_method_args(tiny_dir, capsys):
    pytest.importorskip("kvpress")
    from argparse import Namespace

    from snapeval.cli import main as cli
    from snapeval.harness.cli import DEPRECATED_SETTING_FLAGS, method_args

    def parsed(method, method_arg=(), press_arg=()):
        return method_args(Namespace(method=method, method_arg=list(method_arg), press_arg=list(press_arg),
                                     **dict.fromkeys(DEPRECATED_SETTING_FLAGS)))

    assert parsed("kvpress:SnapKVPress", ["window_size=8"]) == ({}, {"window_size": "8"})  # checked by its config
    with pytest.warns(DeprecationWarning, match="--press-arg"):
        assert parsed("kvpress:SnapKVPress", press_arg=["window_size=8"]) == ({}, {"window_size": "8"})
    from snapeval.cache import resolve_method

    assert dict(resolve_method("kvpress:SnapKVPress", 16, window_size="8").press_args) == {"window_size": 8}
    assert parsed("snapstream", ["recent=0.5", "pooling=max"]) == ({"recent": 0.5, "pooling": "max"}, {})
    assert cli(["run", "--task", "x", "--model", str(tiny_dir), "--method", "kvpress:SnapKVPress", "--budget", "16",
                "--method-arg", "no_such_argument=1"]) == 2
    _one_line(capsys.readouterr().err, "no_such_argument", "allowed")


@pytest.mark.parametrize("results", ["quickstart", "kvpress"])
def test_the_committed_tables_rebuild_byte_identical_with_another_method_registered(results, tmp_path):
    """A method's settings are columns only of the tables that ran it: with another method registered, rebuilding a
    committed results directory's table (its cells, the simulator, the statistics: no model runs) gives its
    committed ``results.csv`` byte for byte."""
    from snapeval.report.results_table import rebuild_table
    from tests.fixtures.strided_method import ENTRY

    copy = tmp_path / results
    shutil.copytree(REPO / "results" / results, copy)
    (copy / "results.csv").unlink()
    with METHOD_TABLE.registered(ENTRY):
        rebuild_table(copy)
    assert (copy / "results.csv").read_bytes() == (REPO / "results" / results / "results.csv").read_bytes()


def test_contributing_shows_the_worked_example_as_the_fixture_has_it():
    """Every line of CONTRIBUTING.md's method example (its comments aside) is a line of the fixture, which is under
    50 lines: the guide cannot drift from the code the tests install."""
    block = (REPO / "CONTRIBUTING.md").read_text().split("```python\n", 1)[1].split("```", 1)[0]
    folder = REPO / "tests" / "fixtures" / "random_method"
    fixture = (folder / "__init__.py").read_text() + (folder / "cache.py").read_text()
    lines = [line.split("  # ")[0].rstrip() for line in block.splitlines() if not line.startswith("# ")]
    assert len(fixture.splitlines()) < 60 and len([line for line in lines if line]) >= 20
    assert [line for line in lines if line and line not in fixture.splitlines()] == []


# ------------------------------------------------------------------------------------------- cheap and visible plugins
def _snapeval_in(site: Path, argv: list[str]) -> tuple[int, str, str, list[str]]:
    """``snapeval ARGV`` in a fresh interpreter with ``site`` installed: exit code, stdout, stderr and which of torch,
    transformers and lm_eval it imported."""
    probe = ("import json, sys\nfrom snapeval.cli import main\nrc = main(sys.argv[1:])\n"
             "print(json.dumps([m for m in ('torch', 'transformers', 'lm_eval') if m in sys.modules]))\nsys.exit(rc)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    lines = out.stdout.strip().splitlines()
    return out.returncode, "\n".join(lines[:-1]), out.stderr, json.loads(lines[-1])


def test_listing_and_parsing_with_the_guides_plugin_import_no_torch(installed, tmp_path):
    """The worked example keeps its settings and entry in a torch-free module: `snapeval methods` (which loads every
    entry) and a sweep's YAML naming the plugin (parsed, planned, listed) never import torch."""
    code, out, err, heavy = _snapeval_in(installed, ["methods"])
    assert code == 0 and "random: the last window tokens" in out and "[snapeval_random]" in out, err
    assert heavy == [], heavy
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"name": "p", "models": ["smollm2-135m-instruct"],
                                      "tasks": [{"name": "snapeval_passkey", "limit": 2}],
                                      "methods": ["full", {"method": "random", "budgets": [64], "draw": 3}]}))
    code, out, err, heavy = _snapeval_in(installed, ["sweep", str(config), "--dry-run", "--out", str(tmp_path / "o")])
    assert code == 0 and "random@64" in out, err
    assert heavy == [], heavy
    config.write_text(config.read_text().replace("draw: 3", "draw: -1"))
    code, out, err, heavy = _snapeval_in(installed, ["sweep", str(config), "--dry-run"])
    assert code == 2 and "draw" in err and len(err.strip().splitlines()) == 1 and heavy == [], err


def test_a_plugin_named_as_a_builtin_is_warned_about_and_the_builtin_kept(tmp_path):
    site = build_dist(tmp_path)
    points = site / "snapeval_extras-0.1.dist-info" / "entry_points.txt"
    points.write_text("[snapeval.methods]\nsnapkv = snapeval_random:ENTRY\n\n[snapeval.hardware]\n"
                      "h200 = snapeval_b200:SPEC\n")
    code, out, err, _ = _snapeval_in(site, ["methods"])
    assert code == 0, err
    warning = [line for line in err.splitlines() if "warning" in line]  # every command also warns of the h200
    assert warning[:1] == ["snapeval: warning: method 'snapkv' of package snapeval-extras (entry point snapeval_random:"
                       "ENTRY) is ignored: package snapeval has a built-in method 'snapkv', which is used; rename the "
                       "entry point"], err
    assert any(line.startswith("snapkv: ") and line.endswith("[snapeval]") for line in out.splitlines()), out
    code, out, err, _ = _snapeval_in(site, ["hardware"])
    assert code == 0 and err.count("hardware target 'h200' of package snapeval-extras") == 1, err
    assert any(line.startswith("h200 [snapeval]:") for line in out.splitlines()), out


# -------------------------------------------------------------------------------------------- issue #62: isolation
def _broken_dist(root: Path) -> Path:
    """A package whose entry points name a method that raises on import, one that calls ``SystemExit(0)``, a task
    family and a hardware target that raise, beside the worked example's good method."""
    site = build_dist(root)
    (site / "snapeval_boom").mkdir()
    (site / "snapeval_boom" / "__init__.py").write_text("raise RuntimeError('the plugin is broken')\n")
    (site / "snapeval_quit").mkdir()
    (site / "snapeval_quit" / "__init__.py").write_text("raise SystemExit(0)\n")
    points = {"snapeval.methods": ["random = snapeval_random:ENTRY", "boom = snapeval_boom:ENTRY",
                                   "quitter = snapeval_quit:ENTRY"],
              "snapeval.tasks": ["toytask = snapeval_toytask:FAMILY", "badtask = snapeval_boom:FAMILY"],
              "snapeval.hardware": ["b200 = snapeval_b200:SPEC", "x9 = snapeval_quit:SPEC"]}
    (site / "snapeval_extras-0.1.dist-info" / "entry_points.txt").write_text(
        "".join(f"[{group}]\n" + "\n".join(lines) + "\n\n" for group, lines in points.items()))
    return site


def test_a_plugin_that_raises_or_exits_is_named_and_skipped(tmp_path):
    """`methods`, `tasks`, `hardware` and a sweep keep working with the built-ins and the good plugin; each broken
    entry point is one warning line naming it; asked for by name, it is a one-line error."""
    site = _broken_dist(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "CUDA_VISIBLE_DEVICES": ""}

    def snapeval(*argv):
        return subprocess.run([sys.executable, "-m", "snapeval", *argv], capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=300)

    out = snapeval("methods")
    assert out.returncode == 0 and "snapkv" in out.stdout and "random:" in out.stdout, out
    warnings = [line for line in out.stderr.splitlines() if line.startswith("snapeval: warning:")]
    assert len(warnings) == 2 and "'boom'" in warnings[0] and "RuntimeError: the plugin is broken" in warnings[0]
    assert "'quitter'" in warnings[1] and "SystemExit" in warnings[1] and "Traceback" not in out.stderr
    out = snapeval("tasks")
    assert out.returncode == 0 and "toytask" in out.stdout and "'badtask'" in out.stderr, out
    out = snapeval("hardware")
    assert out.returncode == 0 and "b200" in out.stdout and "h100" in out.stdout and "'x9'" in out.stderr, out
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"name": "iso", "models": ["smollm2-135m-instruct"], "tasks": ["snapeval_kv_needle"],
                                      "methods": ["full", {"method": "snapkv", "budgets": [64]}]}))
    out = snapeval("sweep", str(config), "--dry-run", "--out", str(tmp_path / "out"))
    assert out.returncode == 0 and "2 cells" in out.stdout and "Traceback" not in out.stderr, out
    out = snapeval("run", "--tasks", "snapeval_passkey", "--method", "quitter", "--budget", "64")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out
    assert out.stderr.startswith("snapeval: error: method 'quitter'") and "SystemExit" in out.stderr


def test_the_task_family_contract_runs_over_an_installed_plugins_task(installed):
    """tests/test_task_families.py's contract (the reference reply scores 1, an empty reply 0) over the plugin's
    task, found through the task folders every run reads (it once searched only the shipped folder)."""
    from snapeval.tasks.families import families
    from tests.test_task_families import score

    family = next(f for f in families() if f.name == "toytask")
    assert family.task_names() == ("toytask_qa",)
    assert score("toytask_qa", family, family.reference_reply)[0] == 1.0
    assert score("toytask_qa", family, lambda doc: "")[0] == 0.0


def test_a_listing_imports_a_plugin_only_when_it_is_new_or_changed(tmp_path):
    """`snapeval methods` reads an unchanged plugin's record from the snapeval cache (the same listing, the plugin not
    imported again); a changed module is loaded again and listed as it is now."""
    site = build_dist(tmp_path)
    module = site / "snapeval_random" / "__init__.py"
    marker = tmp_path / "imports.txt"
    module.write_text(module.read_text() + f"\nopen({str(marker)!r}, 'a').write('imported\\n')\n")
    env_cache = {"SNAPEVAL_CACHE_DIR": str(tmp_path / "cache")}

    def listing():
        old = {k: os.environ.get(k) for k in env_cache}
        os.environ.update(env_cache)
        try:
            return _snapeval_in(site, ["methods"])
        finally:
            for k, v in old.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)

    first, second = listing(), listing()
    assert first[0] == second[0] == 0 and first[1] == second[1], (first, second)
    assert "random: the last window tokens" in first[1] and "  draw: which random draw" in first[1]
    assert marker.read_text().count("imported") == 1  # the second listing read the cache
    module.write_text(module.read_text().replace("the last window tokens and a random draw",
                                                 "the last window tokens and a fresh draw"))
    third = listing()
    assert third[0] == 0 and "random: the last window tokens and a fresh draw" in third[1], third
    assert marker.read_text().count("imported") == 2
