"""Every shell command of README.md, CONTRIBUTING.md, docs/*.md and the notebook's text, run as written on a CPU
machine: each line of a ``bash`` block, and each command written inline (a code span such as ``snapeval methods``).

Each command is matched by one rule of :data:`RULES`: ``run`` (as written, in a fresh process, exit 0; a report on a
copy of its results folder), ``quickstart`` (the documented quickstart sweep, as written, into a copy of the
committed ``results/quickstart``: it must find every cell done and run none), ``model`` (loads SmolLM2: run as
written, once per session, in the slow tests), ``parse`` (only its arguments read by the command's own parser: a
GPU, the network, a path of yours, a whole task or minutes of work), ``benchmark`` (a benchmark module's ``main``
reads it with its own parser, then stops), ``pytest`` (a test selection: collected, it must select tests),
``fragment`` (flags shown in prose, ``snapeval run --engine``: parsed with the required ``--tasks`` added), ``name``
(a command named in prose, ``snapeval run``, not a command line), ``setup`` (the README's set-up, which CI runs, or
the GPU machine's) or ``server`` (an interactive server, JupyterLab: not started). An optional part ``[--flag ...]``
gives two commands, with and without it. A command no rule matches fails the test: a new command in the docs needs a
rule here. Stubs: only ``parse`` (a GPU or network) and ``benchmark`` (minutes, or a GPU).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import skip_if_it_needed_the_shared_data

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
NOTEBOOK = REPO / "notebooks" / "analysis.ipynb"
BIN = Path(sys.executable).parent
#: An inline code span that is a command: a snapeval command, a benchmark or test module, jupyter, pip.
INLINE = re.compile(r"^(?:\.venv/bin/)?(?:snapeval(?:-lm-eval)?|python -m \S+|jupyter|pip)(?: .*)?$")
#: What makes an inline span a pattern rather than a command: a placeholder (``<dir>``, ``CONFIG``, ``N``), a choice
#: (``a | b``) or an ellipsis.
PLACEHOLDER = re.compile(r"<[^>]*>|\||\.\.\.|\b[A-Z][A-Z_]*\b")


def _variants(line: str) -> list[str]:
    """The line without its optional ``[--flag ...]`` parts and, where it has some, with them (brackets dropped)."""
    without = re.sub(r"\s*\[--[^\]]*\]", "", line)
    with_them = re.sub(r"\[(--[^\]]*)\]", r"\1", line)
    return [without] if with_them == without else [without, with_them]


def _texts() -> list[tuple[str, str]]:
    """``(where, markdown)`` of every documentation page and of the notebook's markdown cells."""
    texts = [(path.relative_to(REPO).as_posix(), path.read_text(encoding="utf-8")) for path in DOCS]
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    texts.append((NOTEBOOK.relative_to(REPO).as_posix(), "\n".join("".join(c["source"]) for c in cells
                                                                  if c["cell_type"] == "markdown")))
    return texts


def doc_commands() -> list[tuple[str, str]]:
    """``(file, command)`` for every command line of every bash block (continuations joined, comments dropped) and
    every inline command without a placeholder, each optional ``[--flag ...]`` part giving a second command."""
    out = []
    for where, text in _texts():
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"\s+#\s.*$", "", line).strip()
                if line and not line.startswith("#"):
                    out += [(where, variant) for variant in _variants(line)]
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for span in re.findall(r"`([^`]+)`", prose):  # code spans, paired from the left (they may wrap lines)
            span = " ".join(span.split())
            if INLINE.match(span) and not PLACEHOLDER.search(re.sub(r"\[--[^\]]*\]", "", span)):
                out += [(where, variant) for variant in _variants(span)]
    return list(dict.fromkeys(out))


#: (pattern, kind, shrink): the first rule whose pattern matches a command decides what the test does with it.
RULES = [
    (r"^python3 -m venv \.venv && \.venv/bin/pip install", "setup", None),
    (r"^\.venv/bin/python -m pytest", "setup", None),
    (r"^python -m pytest ", "pytest", None),
    (r"^python3 -m pip install .* \.gpu/whl", "setup", None),  # docs/engine.md: the GPU machine's own set-up
    (r"^(\.venv/bin/)?pip install jupyterlab$", "setup", None),  # the network
    (r"^(\.venv/bin/)?jupyter lab ", "server", None),
    (r"^(\.venv/bin/)?jupyter execute notebooks/analysis\.ipynb$", "run", None),
    (r"(^|/)snapeval sweep configs/quickstart\.yaml( --out \S+)?( --executor ray)?$", "quickstart", None),
    (r"(^|/)snapeval(-lm-eval)?( (run|sweep|report|regress|simulate|project))?$", "name", None),
    (r"^snapeval run --[\w-]+$", "name", None),  # a flag named in prose (`snapeval run --engine`)
    (r"(^|/)snapeval (methods|tasks|hardware|models)$", "run", None),
    (r"(^|/)snapeval( \w+)? --help$", "run", None),
    (r"(^|/)snapeval demo$", "model", None),
    (r"^python -m cProfile -m snapeval sweep", "parse", None),
    (r"snapeval sweep configs/regression\.yaml --out \S+ && snapeval regress ", "parse", None),  # minutes of runs  # docs/performance.md: a profile of a whole sweep
    (r"(^|/)snapeval sweep configs/\w+\.yaml$", "parse", None),  # a whole sweep: minutes to GPU-days
    (r"(^|/)snapeval sweep .*--dry-run", "run", None),
    (r"(^|/)snapeval report ", "run", None),
    (r"(^|/)snapeval regress .*<results dir>", "parse", None),  # a run of configs/regression.yaml (minutes)
    (r"(^|/)snapeval simulate ", "run", None),
    (r"(^|/)snapeval run .*--limit \d", "model", None),
    (r"^snapeval-lm-eval .*--limit \d", "model", None),
    (r"^snapeval-lm-eval ", "parse", None),  # a whole task (no --limit)
    (r"^lm_eval --model hf --model_args pretrained=/path/to/model", "parse", None),  # a model of yours
    (r"^echo /\.gpu/ >> \.git/info/exclude$", "setup", None),  # docs/engine.md: preparing the GPU call
    (r"^(\.venv/bin/)?python -m benchmarks(\.\w+)+( |$)", "benchmark", None),  # minutes, a GPU or the network
    # minutes of arithmetic over every paper group (tests/test_paper_projection.py runs it and compares)
    (r"(^|/)snapeval project ", "parse", None),
    (r"^snapeval run --(dtype|method|engine|max-gen-toks)", "fragment", None),  # flags shown, without --tasks
]

def rule_of(command: str):
    return next(((kind, shrink) for pattern, kind, shrink in RULES if re.search(pattern, command)), (None, None))


def argv_of(command: str, tmp_path: Path) -> list[str]:
    """The command as a process argv: ``snapeval`` of this interpreter's environment, and every output redirected
    under ``tmp_path`` (the committed results are never rewritten)."""
    argv = shlex.split(command)
    tool = argv[0].rsplit("/", 1)[-1]
    argv[0] = str(BIN / tool)
    if tool == "snapeval" and argv[1] == "report":
        # a copy of the results folder: a report rebuilds its table (results.parquet / .csv) in that folder
        where = next((i for i, a in enumerate(argv) if i > 1 and not a.startswith("-")), None)
        if where is not None:
            shutil.copytree(REPO / argv[where], tmp_path / "results")
            argv[where] = str(tmp_path / "results")
        argv += ["--out", str(tmp_path / "report")]
    if tool == "snapeval" and argv[1] == "run":
        argv += ["--output", str(tmp_path / "run.json")]
    if tool == "snapeval-lm-eval":
        argv += ["--output_path", str(tmp_path / "lm_eval")]
    return argv


def _env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}


COMMANDS = doc_commands()


def distinct(rule: str) -> list[tuple[str, str]]:
    """The documented commands of ``rule``, each distinct command once (where it first appears; ``.venv/bin/snapeval``
    is ``snapeval``): the same command in three files runs once."""
    seen: set[str] = set()
    return [(f, c) for f, c in COMMANDS if rule_of(c)[0] == rule
            and not (c.removeprefix(".venv/bin/") in seen or seen.add(c.removeprefix(".venv/bin/")))]


def test_every_command_of_the_docs_has_a_rule():
    assert len(COMMANDS) >= 15
    assert [(f, c) for f, c in COMMANDS if rule_of(c)[0] is None] == []


@pytest.mark.parametrize("where, command", distinct("run"),
                         ids=lambda v: v[:60])
def test_a_documented_command_runs(where, command, tmp_path):
    argv = argv_of(command, tmp_path)
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=_env(), timeout=600)
    if out.returncode:
        skip_if_it_needed_the_shared_data(out.stderr)
    assert out.returncode == 0, f"{where}: {command}\n{out.stderr[-2000:]}"
    assert "Traceback" not in out.stderr


QUICKSTART = REPO / "results" / "quickstart"


@pytest.mark.parametrize("where, command", distinct("quickstart"),
                         ids=lambda v: v[:60])
def test_the_quickstart_command_finds_every_committed_cell_done(where, command, tmp_path):
    """The documented quickstart sweep, as written (``--executor ray`` too), into a copy of the committed
    ``results/quickstart``: the docs say the committed folder is that config's run, so every cell is done, none
    runs, and the command only rebuilds the table and the report (in the copy: the committed files are not
    touched). A task file changed since the cells ran makes them stale (exit 2): regenerate results/quickstart."""
    copy = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, copy)
    argv = [a for a in argv_of(command, tmp_path)]
    if "--out" in argv:
        argv[argv.index("--out") + 1] = str(copy)
    else:
        argv += ["--out", str(copy)]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=_env(), timeout=600)
    if out.returncode:
        skip_if_it_needed_the_shared_data(out.stderr)
    assert out.returncode == 0, f"{where}: {command}\n{out.stderr[-2000:]}"
    manifest = json.loads((copy / "manifest.json").read_text())
    assert len(manifest["cells"]) == 48 and all((copy / "cells" / f"{c['cell_id']}.json").is_file()
                                                for c in manifest["cells"])
    assert "48 cells, 0 run, 48 already done" in out.stdout, out.stdout


@pytest.mark.parametrize("where, command", [(f, c) for f, c in COMMANDS if rule_of(c)[0] == "pytest"],
                         ids=lambda v: v[:60])
def test_a_documented_test_selection_selects_tests(where, command):
    argv = [sys.executable, *shlex.split(command)[1:], "--collect-only", "-q", "-p", "no:xdist"]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=_env(), timeout=300)
    assert out.returncode == 0 and re.search(r"(\d+)/\d+ tests collected|(\d+) tests? collected", out.stdout), out


@pytest.mark.parametrize("where, command", [(f, c) for f, c in COMMANDS if rule_of(c)[0] in ("parse", "fragment")],
                         ids=lambda v: v[:60])
def test_a_command_that_needs_more_parses(where, command):
    """The command's own parser reads it (a flag it lacks would be an error), without running it: snapeval's, or
    lm-eval's for lm-eval's command line."""
    if " && " in command:  # each part read by its own parser
        for part in command.split(" && "):
            test_a_command_that_needs_more_parses(where, part)
        return
    argv = shlex.split(command.replace("<results dir>", "results/quickstart"))
    if rule_of(command)[0] == "fragment":  # flags shown in prose: the one required flag the text leaves out added
        argv += ["--tasks", "snapeval_passkey"]
    if argv[:3] == ["python", "-m", "cProfile"]:  # python -m cProfile -m snapeval ...: snapeval's arguments
        argv = argv[argv.index("snapeval"):]
    if argv[0].endswith("snapeval"):
        from snapeval.cli import build_parser

        assert callable(build_parser().parse_args(argv[1:]).func)
        return
    code = ("import sys; from lm_eval._cli import HarnessCLI; cli = HarnessCLI(); "
            "sys.argv = ['lm_eval', *sys.argv[1:]]; print(cli.parse_args().model)")
    out = subprocess.run([sys.executable, "-c", code, *argv[1:]], capture_output=True, text=True, cwd=REPO,
                         env=_env(), timeout=300)
    assert out.returncode == 0 and out.stdout.split()[-1] in ("hf", "snapeval"), f"{where}: {out.stderr[-1500:]}"


class _Parsed(Exception):
    """Raised by the patched ``parse_args`` once a benchmark's own parser has read its arguments."""


@pytest.mark.parametrize("where, command", [(f, c) for f, c in COMMANDS if rule_of(c)[0] == "benchmark"],
                         ids=lambda v: v[:60])
def test_a_benchmark_command_is_read_by_its_own_parser(where, command, monkeypatch):
    """A documented benchmark command (minutes, a GPU or the network) goes through its module's own ``main`` until
    its parser has read every flag as written; the parser then stops it (a stub, said here: nothing is measured)."""
    import argparse
    import importlib
    import inspect

    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    argv = shlex.split(command)
    module = importlib.import_module(argv[argv.index("-m") + 1])
    args = argv[argv.index("-m") + 2:]
    if "argparse" not in Path(module.__file__).read_text(encoding="utf-8"):  # no parser: no arguments to read
        assert not args and callable(module.main), f"{where}: {command} passes arguments to a module without a parser"
        return
    monkeypatch.setattr(sys, "argv", [argv[argv.index("-m") + 1], *args])
    with pytest.raises(_Parsed):
        module.main(args) if inspect.signature(module.main).parameters else module.main()


def _model_line(command: str, tmp_path_factory) -> dict:
    """Runs a documented model line once per test session and returns ``{"returncode", "stderr", "score"}`` (the
    snapeval_passkey score it wrote, for the README's two). The line runs in whichever test asks first; under
    pytest-xdist the workers share the result through a file beside their temp folders, under a lock, so the lines
    spread over the workers and none runs twice."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    shared = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    key = hashlib.sha256(command.encode()).hexdigest()[:16]
    record = shared / f"model-line-{key}.json"
    with FileLock(str(record) + ".lock"):
        if record.exists():
            return json.loads(record.read_text())
        out_dir = tmp_path_factory.mktemp("model-line")
        argv = argv_of(command, out_dir)
        out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=_env(), timeout=600)
        score = None
        if out.returncode == 0 and " demo" not in command:
            path = (next((out_dir / "lm_eval").rglob("results_*.json")) if argv[0].endswith("snapeval-lm-eval")
                    else out_dir / "run.json")
            score = json.loads(path.read_text())["results"]["snapeval_passkey"]["score,none"]
        result = {"returncode": out.returncode, "stderr": out.stderr[-2000:], "score": score}
        record.write_text(json.dumps(result))
        return result


@pytest.mark.slow
@pytest.mark.parametrize("where, command", distinct("model"), ids=lambda v: v[:60])
def test_a_documented_model_line_runs(where, command, tmp_path_factory):
    """Every documented `snapeval run` / `snapeval-lm-eval` line with --limit and `snapeval demo`, as written, on a
    CPU machine (each distinct command once), exits 0."""
    result = _model_line(command, tmp_path_factory)
    assert result["returncode"] == 0, f"{where}: {command}\n{result['stderr']}"


@pytest.mark.slow
def test_the_readmes_two_model_lines_give_the_same_score(tmp_path_factory):
    """The README's `snapeval run` line and its `snapeval-lm-eval` line (the same arguments; `--apply_chat_template`
    on the lm-eval side) score the same (each line run once per session: :func:`_model_line`)."""
    lines = [c for f, c in distinct("model") if f == "README.md" and "demo" not in c]
    assert len(lines) == 2
    results = [_model_line(command, tmp_path_factory) for command in lines]
    assert all(r["returncode"] == 0 for r in results), results
    assert results[0]["score"] is not None and results[0]["score"] == results[1]["score"], results
