"""Bad input from the red team's list: one line naming the field and the allowed values, exit 2, no traceback, no
silent change, nothing lost."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fixtures.sweep_fakes import fake_evaluate, fake_simulate
from snapeval.cli import main as cli
from snapeval.errors import SnapevalError

REPO = Path(__file__).resolve().parents[1]
BASE = {"name": "bad", "models": ["smollm2-135m-instruct"], "tasks": [{"name": "snapeval_passkey", "limit": 2}],
        "methods": ["full", {"method": "snapstream", "budgets": [64]}]}


def one_line_exit_2(capsys, argv, *expected):
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    last = err.splitlines()[-1]  # progress lines may come first; the error is one line, the last
    assert last.startswith("snapeval: error: "), err
    for text in expected:
        assert text in last, err
    return last


def write(tmp_path, raw, name="c.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def test_binary_and_bomb_yaml(tmp_path, capsys):
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    one_line_exit_2(capsys, ["sweep", str(binary), "--dry-run"], "not a text YAML file", "UTF-8")
    bomb = tmp_path / "bomb.yaml"
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [  # 12 levels of 9 aliases: 9**12 leaves from 1 KB
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(12)]
    bomb.write_text("\n".join(lines) + "\n")
    assert bomb.stat().st_size < 1200
    one_line_exit_2(capsys, ["sweep", str(bomb), "--dry-run"], "more than 100 YAML aliases")


@pytest.mark.parametrize("change, expected", [
    ({"methods": [{"method": "snapstream", "budgets": [256], "sink": 300}]}, "sink=300 is invalid with budget=256"),
    ({"methods": [{"method": "snapstream", "budgets": [10 ** 12]}]}, "allowed: 2..2097152"),
    ({"methods": [{"method": "snapstream", "budgets": [16384]}]}, "exceeds the 8,192-token context"),
    ({"simulate": {"hardware": "tpu-v9"}}, "simulate.hardware: 'tpu-v9' is not allowed; choose one of:"),
    ({"methods": [{"method": "streamingllm", "budgets": [64], "observation": 8}]}, "takes no 'observation'"),
])
def test_config_values(tmp_path, capsys, change, expected):
    one_line_exit_2(capsys, ["sweep", str(write(tmp_path, {**BASE, **change})), "--dry-run"], expected)


@pytest.mark.parametrize("args, expected", [
    (["--metadata", "[1,2]"], "--metadata='[1,2]' is invalid; allowed: a JSON object"),
    (["--limit", "-1"], "--limit=-1.0 is invalid"),
    (["--batch-size", "0"], "--batch-size=0 is invalid; allowed: an integer >= 1"),
    (["--engine-slots", "0"], "--engine-slots=0 is invalid"),
    (["--max-gen-toks", "-5"], "--max-gen-toks=-5 is invalid"),
    (["--budget", "64", "--sink", "64"], "sink=64 is invalid with budget=64; allowed: 0..63"),
])
def test_run_arguments(capsys, args, expected):
    base = ["run", "--task", "snapeval_passkey", "--method", "snapstream"]
    if "--budget" not in args:
        base += ["--budget", "64"]
    one_line_exit_2(capsys, base + args, expected)


def test_lm_eval_model_rejects_unknown_model_args():
    from snapeval.harness.lm_eval_model import SnapStreamLM

    with pytest.raises(SnapevalError, match="model_args: unknown argument 'budegt'; allowed: .*budget"):
        SnapStreamLM(method="snapstream", budget=64, budegt=64)
    with pytest.raises(SnapevalError, match="max_gen_toks=-5 is invalid"):
        SnapStreamLM(method="snapstream", budget=64, max_gen_toks=-5)


def test_lm_eval_cli_prints_one_line():
    out = subprocess.run([sys.executable, "-m", "snapeval.harness.lm_eval_cli", "--model", "snapstream",
                          "--model_args", "method=lru,budget=64", "--tasks", "snapeval_passkey",
                          "--include_path", str(REPO / "tasks")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("snapeval-lm-eval: error: method='lru' is not allowed") and "Traceback" not in out.stderr


def test_data_files_non_utf8_and_blank_lines(tmp_path):
    from snapeval.tasks.data import Schema, read_jsonl

    schema = Schema({"q": (str,)})
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"q": "a"}\n\n\n{"q": "\xff"}\n')
    with pytest.raises(SnapevalError, match=r"d.jsonl:4: not UTF-8 text"):
        read_jsonl(path, schema)
    path.write_bytes(b'{"q": "a"}\n\n\n{"q": 3}\n')
    with pytest.raises(SnapevalError, match=r"d.jsonl:4: field 'q'"):
        read_jsonl(path, schema)


def test_malformed_livecodebench_tests_are_one_line_errors():
    """``load`` runs ``tests_of`` on every selected row, so these fail when the data loads, not at grading."""
    from snapeval.tasks import livecodebench

    good = {"public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "stdin"}]),
            "private_test_cases": "", "metadata": "{}"}
    assert len(livecodebench.tests_of(good).cases) == 1
    for change, message in [
        ({"public_test_cases": json.dumps([{"input": "1", "testtype": "stdin"}])},
         r"f.jsonl:3: public_test_cases\[0\] must have string fields input, output and testtype"),
        ({"public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "file"}])},
         r"testtype='file' is not allowed; choose one of: stdin, functional"),
        ({"public_test_cases": "{not json"}, r"must be JSON text"),
        ({"public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "functional"}])},
         r"functional tests need metadata.func_name"),
        ({"private_test_cases": "bm90IHpsaWI="}, r"neither JSON nor the official base64/zlib/pickled-JSON"),
    ]:
        with pytest.raises(SnapevalError, match=message) as err:
            livecodebench.tests_of({**good, **change}, where="f.jsonl:3")
        assert "\n" not in str(err.value)


def test_two_sweeps_on_one_directory(tmp_path):
    from snapeval.results.store import SweepLock

    with SweepLock(tmp_path):
        from snapeval.sweep import parse_config, run_sweep

        with pytest.raises(SnapevalError, match=rf"another sweep \(pid {os.getpid()}\) is writing"):
            run_sweep(parse_config(BASE), tmp_path, evaluate=fake_evaluate, simulate=fake_simulate,
                      stream=io.StringIO(), report=False)


def test_read_only_disk_is_one_line_and_keeps_finished_cells(tmp_path, capsys, monkeypatch):
    from snapeval.results import store

    out = tmp_path / "out"
    config = write(tmp_path, BASE)
    calls = {"n": 0}
    real = store.atomic_write_text

    def full_disk(path, text):
        if "cells" in str(path):
            calls["n"] += 1
            if calls["n"] > 1:
                raise OSError(28, "No space left on device", str(path))
        return real(path, text)

    monkeypatch.setattr(store, "atomic_write_text", full_disk)
    monkeypatch.setattr("snapeval.sweep.runner.harness_evaluate", fake_evaluate)
    monkeypatch.setattr("snapeval.sweep.runner.harness_group_models", None)
    monkeypatch.setattr("snapeval.simulator.pricing.default_simulate", lambda: fake_simulate)
    err = one_line_exit_2(capsys, ["sweep", str(config), "--out", str(out), "--no-report"], "No space left on device",
                          "finished results are kept")
    assert "cannot read or write" in err
    assert len(list((out / "cells").glob("*.json"))) == 1


def test_report_names_cells_of_another_configuration(tmp_path):
    from snapeval.report import build_report
    from snapeval.sweep import parse_config, run_sweep

    other = {**BASE, "methods": ["full", {"method": "snapstream", "budgets": [128]}]}
    run_sweep(parse_config(other), tmp_path, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
              report=False)
    run_sweep(parse_config(BASE), tmp_path, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
              report=False)
    paths = build_report(tmp_path, tmp_path / "r")
    assert len(paths.foreign_cells) == 1 and "## Cells not in this report" in paths.markdown.read_text()
