"""Every shell command of README.md and docs/*.md, run as written (or shrunk where the docs say so) on a CPU machine.

Each command of a ``bash`` block is matched by one rule of :data:`RULES`: ``run`` (as written, in a fresh process,
exit 0), ``shrunk`` (with the shrink the docs state), ``model`` (loads SmolLM2: run as written in the slow test),
``parse`` (only its arguments read by the command's own parser: it needs what the text names, a GPU, a path of yours
or a run of minutes), ``benchmark`` (a benchmark module's ``main`` reads it, its action replaced by a recorder) or
``setup`` (the README's set-up, which CI runs, or the GPU machine's). A command no rule matches fails the test: a
new command in the docs needs a rule here.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent


def doc_commands() -> list[tuple[str, str]]:
    """``(file, command)`` for every command line of every bash block (continuations joined, comments and optional
    ``[--flag ...]`` parts dropped)."""
    out = []
    for path in DOCS:
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"\s+#\s.*$", "", line).strip()
                line = re.sub(r"\s*\[--[^\]]*\]", "", line)
                if line and not line.startswith("#"):
                    out.append((path.relative_to(REPO).as_posix(), line))
    return out


#: (pattern, kind, shrink): the first rule whose pattern matches a command decides what the test does with it.
RULES = [
    (r"^python3 -m venv \.venv && \.venv/bin/pip install", "setup", None),
    (r"^\.venv/bin/python -m pytest", "setup", None),
    (r"^python3 -m pip install .* \.gpu/whl", "setup", None),  # docs/engine.md: the GPU machine's own set-up
    (r"(^|/)snapeval sweep configs/quickstart\.yaml( --out \S+)?$", "shrunk", "--dry-run"),  # docs/quickstart.md
    (r"(^|/)snapeval sweep .*--dry-run", "run", None),
    (r"(^|/)snapeval report ", "run", None),
    (r"(^|/)snapeval regress .*<results dir>", "parse", None),  # a run of configs/regression.yaml (minutes)
    (r"(^|/)snapeval simulate ", "run", None),
    (r"(^|/)snapeval run .*--limit \d", "model", None),
    (r"^snapeval-lm-eval .*--limit \d", "model", None),
    (r"^snapeval-lm-eval ", "parse", None),  # a whole task (no --limit)
    (r"^lm_eval --model hf --model_args pretrained=/path/to/model", "parse", None),  # a model of yours
    (r"^echo /\.gpu/ >> \.git/info/exclude$", "setup", None),  # docs/engine.md: preparing the GPU call
    (r"^\.venv/bin/python -m benchmarks\.\w+ ", "benchmark", None),  # minutes, or the network: its parser reads it
]

#: What a ``benchmark`` command's module would run once its arguments are read (replaced by a recorder in the test).
BENCHMARK_ACTIONS = ("run", "run_sections", "prepare", "project_from_rates")


def rule_of(command: str):
    return next(((kind, shrink) for pattern, kind, shrink in RULES if re.search(pattern, command)), (None, None))


def argv_of(command: str, tmp_path: Path) -> list[str]:
    """The command as a process argv: ``snapeval`` of this interpreter's environment, and every output redirected
    under ``tmp_path`` (the committed results are never rewritten)."""
    argv = shlex.split(command)
    tool = argv[0].rsplit("/", 1)[-1]
    argv[0] = str(BIN / tool)
    if tool == "snapeval" and argv[1] == "report":
        argv += ["--out", str(tmp_path / "report")]
    if tool == "snapeval" and argv[1] == "run":
        argv += ["--output", str(tmp_path / "run.json")]
    if tool == "snapeval-lm-eval":
        argv += ["--output_path", str(tmp_path / "lm_eval")]
    return argv


def _env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}


COMMANDS = doc_commands()


def test_every_command_of_the_docs_has_a_rule():
    assert len(COMMANDS) >= 15
    assert [(f, c) for f, c in COMMANDS if rule_of(c)[0] is None] == []


@pytest.mark.parametrize("where, command", [(f, c) for f, c in COMMANDS if rule_of(c)[0] in ("run", "shrunk")],
                         ids=lambda v: v[:60])
def test_a_documented_command_runs(where, command, tmp_path):
    kind, shrink = rule_of(command)
    argv = argv_of(command, tmp_path) + ([shrink] if shrink else [])
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=_env(), timeout=600)
    assert out.returncode == 0, f"{where}: {command}\n{out.stderr[-2000:]}"
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("where, command", [(f, c) for f, c in COMMANDS if rule_of(c)[0] == "parse"],
                         ids=lambda v: v[:60])
def test_a_command_that_needs_more_parses(where, command):
    """The command's own parser reads it (a flag it lacks would be an error), without running it: snapeval's, or
    lm-eval's for lm-eval's command line."""
    argv = shlex.split(command.replace("<results dir>", "results/quickstart"))
    if argv[0].endswith("snapeval"):
        from snapeval.cli import build_parser

        assert callable(build_parser().parse_args(argv[1:]).func)
        return
    code = ("import sys; from lm_eval._cli import HarnessCLI; cli = HarnessCLI(); "
            "sys.argv = ['lm_eval', *sys.argv[1:]]; print(cli.parse_args().model)")
    out = subprocess.run([sys.executable, "-c", code, *argv[1:]], capture_output=True, text=True, cwd=REPO,
                         env=_env(), timeout=300)
    assert out.returncode == 0 and out.stdout.split()[-1] in ("hf", "snapeval"), f"{where}: {out.stderr[-1500:]}"


@pytest.mark.parametrize("where, command", [(f, c) for f, c in COMMANDS if rule_of(c)[0] == "benchmark"],
                         ids=lambda v: v[:60])
def test_a_benchmark_command_is_read_by_its_own_parser(where, command, monkeypatch):
    """A documented benchmark command (the GPU call's preparation and smoke run: the network, or minutes) goes
    through its module's own ``main`` with what it would then run replaced by a recorder: every flag is read as
    written, and it reaches its action."""
    import importlib

    argv = shlex.split(command)
    module = importlib.import_module(argv[argv.index("-m") + 1])
    reached = []
    for name in BENCHMARK_ACTIONS:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, lambda *args, name=name, **kwargs: reached.append(name) or 0)
    module.main(argv[argv.index("-m") + 2:])
    assert reached, f"{where}: {command} reached none of {BENCHMARK_ACTIONS}"


@pytest.mark.slow
def test_the_model_lines_run_and_the_readmes_two_give_the_same_scores(tmp_path):
    """Every documented `snapeval run` / `snapeval-lm-eval` line with --limit, as written, on a CPU machine: each
    exits 0; the README's two (the same arguments; `--apply_chat_template` on the lm-eval side) score the same."""
    lines = [(f, c) for f, c in COMMANDS if rule_of(c)[0] == "model"]
    assert [f for f, _ in lines].count("README.md") == 2
    scores = {}
    for where, command in lines:
        for old in tmp_path.iterdir():
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        argv = argv_of(command, tmp_path)
        out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=_env(), timeout=600)
        assert out.returncode == 0, f"{where}: {command}\n{out.stderr[-2000:]}"
        if where == "README.md":
            path = (next((tmp_path / "lm_eval").rglob("results_*.json")) if argv[0].endswith("snapeval-lm-eval")
                    else tmp_path / "run.json")
            scores[argv[0]] = json.loads(path.read_text())["results"]["snapeval_passkey"]["score,none"]
    assert len(scores) == 2 and len(set(scores.values())) == 1, scores
