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
from tests.conftest import skip_if_it_needed_the_shared_data

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
                          "--include_path", str(REPO / "tasks")], capture_output=True, text=True,
                         timeout=300,
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


# --------------------------------------------------------------------------------------------------------------------
# issue #26: damaged or mismatched results directories and baselines: one clear line, never a silent pass

REMEDY = "re-run the sweep with --out {root} to recompute this cell (a sweep redoes every cell whose file it cannot read)"


@pytest.fixture
def swept(tmp_path):
    """A finished results directory (full + snapstream@64 on 2 passkey items) and the snapstream cell's file."""
    from snapeval.sweep import parse_config, run_sweep

    out = tmp_path / "res"
    run_sweep(parse_config(BASE), out, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
              report=False)
    views = json.loads((out / "manifest.json").read_text())["cells"]
    cell = next(v["cell_id"] for v in views if v["method"] == "snapstream")
    return out, out / "cells" / f"{cell}.json", cell


LABEL = "(smollm2-135m-instruct | snapeval_passkey | snapstream@64 | seed 0)"


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))  # json writes NaN as NaN, as a careless script would


def _both_commands_say(capsys, out, line):
    """`report` and `regress` (as current and as baseline) print exactly ``line`` and exit 2."""
    for argv in (["report", str(out), "--out", str(out.parent / "rep")],
                 ["regress", "--baseline", str(out), "--current", str(out)]):
        assert cli(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and err.splitlines()[-1] == line, err


def test_nan_scores_are_an_error_not_na(swept, capsys):
    out, path, cell = swept
    _edit(path, lambda d: d["samples"][0]["scores"].update({"exact_match,strict": float("nan")}))
    _both_commands_say(capsys, out, f"snapeval: error: {path}: cell {cell} {LABEL}: "
                                    f"samples[0].scores['exact_match,strict']=nan is invalid; allowed: a finite number; "
                                    + REMEDY.format(root=out))


def test_string_scores_are_an_error_not_a_traceback(swept, capsys):
    out, path, cell = swept
    _edit(path, lambda d: d["samples"][1]["scores"].update({"exact_match,flexible": "1.0"}))
    _both_commands_say(capsys, out, f"snapeval: error: {path}: cell {cell} {LABEL}: "
                                    f"samples[1].scores['exact_match,flexible']='1.0' is invalid; allowed: a finite "
                                    f"number; " + REMEDY.format(root=out))


def test_duplicate_item_ids_are_an_error(swept, capsys):
    out, path, cell = swept
    _edit(path, lambda d: d["samples"][1].update({"doc_id": 0}))
    _both_commands_say(capsys, out, f"snapeval: error: {path}: cell {cell} {LABEL}: samples[1].doc_id=0 is a "
                                    f"duplicate of samples[0] in subtask 'snapeval_passkey'; allowed: one record per "
                                    f"item; " + REMEDY.format(root=out))


def test_truncated_cell_file_names_the_cell_and_the_remedy(swept, capsys):
    out, path, cell = swept
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    try:
        json.loads(text[: len(text) // 2])
    except json.JSONDecodeError as exc:
        why = str(exc)
    _both_commands_say(capsys, out, f"snapeval: error: {path}: cell {cell}: not valid JSON "
                                    f"(truncated or edited?): {why}; " + REMEDY.format(root=out))


def test_missing_manifest_names_the_remedy(swept, capsys):
    out, _, _ = swept
    (out / "manifest.json").unlink()
    _both_commands_say(capsys, out, f"snapeval: error: {out / 'manifest.json'} is missing; re-run `snapeval sweep "
                                    f"CONFIG --out {out}` with the config that wrote it (it writes the manifest again and "
                                    f"keeps every finished cell)")


def test_write_baseline_into_a_missing_directory(swept, capsys):
    out, _, _ = swept
    target = out.parent / "no" / "such" / "baseline.json"
    assert cli(["regress", "--current", str(out), "--baseline", str(target), "--write-baseline"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"snapeval: error: --baseline {target}: directory {target.parent} does not exist; create it first "
        f"(mkdir -p {target.parent}) or give another path")
    assert not (out.parent / "no").exists()  # nothing created silently


def _cell_dir(tmp_path, name, docs, solved, greedy):
    """A results directory with one cell over items ``docs``, the first ``solved`` of them correct."""
    import hashlib

    from snapeval.results import CellResult, MetricValue, ResultsStore, SampleRecord
    from snapeval.results.schema import ID_LENGTH, canonical_json

    samples = [SampleRecord("t", d, str(d), (f"answer {d}" if i < solved else "no",),
                            {"acc,none": 1.0 if i < solved else 0.0}, greedy) for i, d in enumerate(docs)]
    value = solved / len(docs)
    se = (value * (1 - value) / (len(docs) - 1)) ** 0.5
    identity = {"model": {}, "seed": 0, "task": {"limit": None, "generation": {}, "metadata": {}, "data": {}}}
    cell_id = hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:ID_LENGTH]  # regress checks it
    store = ResultsStore(tmp_path / name)
    store.write_manifest(name, [{"cell_id": cell_id, "model": "m", "task": "t", "method": "full", "seed": 0}], {})
    store.write(CellResult(cell_id, identity, [MetricValue("t", "acc", "none", value, se, len(docs))], samples))
    return store.root


def test_baseline_over_different_items_is_reported_unpaired(tmp_path, capsys):
    """A baseline fixes its items (issue #39): a current run over other items fails with one line naming them;
    --allow-unpaired (exploration) pairs the shared ones."""
    base = _cell_dir(tmp_path, "base", range(10), 8, greedy=False)
    other = _cell_dir(tmp_path, "other", range(5, 15), 8, greedy=False)
    assert cli(["regress", "--baseline", str(base), "--current", str(other)]) == 1
    text = capsys.readouterr().out
    assert ("UNPAIRED    m | t | full | seed 0: the current run scored 5 of the baseline's 10 items; 5 missing: doc 0, "
            "doc 1, doc 2, doc 3, doc 4; 5 not in the baseline: doc 10, doc 11, doc 12, doc 13, doc 14") \
        in text.splitlines()
    assert cli(["regress", "--baseline", str(base), "--current", str(other), "--allow-unpaired"]) == 0
    assert "paired over 5 items in 5 clusters" in capsys.readouterr().out  # only the shared items are paired
    greedy_base = _cell_dir(tmp_path, "gbase", range(10), 8, greedy=True)
    greedy_other = _cell_dir(tmp_path, "gother", range(5, 15), 8, greedy=True)
    assert cli(["regress", "--baseline", str(greedy_base), "--current", str(greedy_other), "--allow-unpaired"]) == 1
    text = capsys.readouterr().out
    # 10 items on one side only, and docs 8-9 (solved in the other run, not in the baseline): never more than exist
    assert "CHANGED     m | t | full | seed 0: 12 of 15 items changed (greedy decoding reproduces every item)" in text
    assert "  t doc 0: missing from the current run" in text and "  t doc 14: not in the baseline" in text


def test_real_drop_with_zero_standard_error_on_one_side_fails(tmp_path, capsys):
    base = _cell_dir(tmp_path, "b3", range(3), 3, greedy=False)  # 1.0, stderr 0
    cur = _cell_dir(tmp_path, "c3", range(3), 0, greedy=False)  # 0.0, stderr 0
    assert cli(["regress", "--baseline", str(base), "--current", str(cur)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert ("REGRESSION  m | t | full | seed 0: acc,none: 1.0000 -> 0.0000 (paired over 3 items in 3 clusters: "
            "-1.0000, 3 worse, 0 better; McNemar mid-p, one-sided p=0.0625, Holm p=0.0625 over 1 sampled cells; "
            "power 0% against a 10-point drop at 0% churn, level 0.05); the paired test cannot reject at n=3 "
            "(smallest possible p 0.0625 >= level 0.05), so the tolerance rule applies too: drop +1.0000 vs "
            "tolerance 0.0200") in lines
    base4 = _cell_dir(tmp_path, "b4", range(4), 4, greedy=False)
    cur4 = _cell_dir(tmp_path, "c4", range(4), 1, greedy=False)  # 1.0 (se 0) -> 0.25
    assert cli(["regress", "--baseline", str(base4), "--current", str(cur4)]) == 0  # 3 of 4: p = 0.0625, honest
    none4 = _cell_dir(tmp_path, "n4", range(4), 0, greedy=False)
    assert cli(["regress", "--baseline", str(base4), "--current", str(none4)]) == 1  # 4 of 4: p = 0.031


# --------------------------------------------------------------------------------------------------------------------
# issue #40: every bad press or device argument is one line before anything heavy is imported or loaded

RUN = ["run", "--tasks", "snapeval_passkey", "--budget", "64"]
#: (class, arguments after RUN, the line's text): one entry per class of the red team's list, several where the class
#: has several forms.
BAD_LINES = [
    ("abstract press class", ["--method", "kvpress:ScorerPress"],
     "kvpress:ScorerPress is abstract: its score() raises NotImplementedError"),
    ("negative argument", ["--method", "kvpress:SnapKVPress", "--press-arg", "window_size=-1"],
     "kvpress:SnapKVPress.window_size='-1' is invalid; allowed: an integer >= 1 (default 64)"),
    ("negative argument", ["--method", "kvpress:StreamingLLMPress", "--press-arg", "n_sink=-4"],
     "kvpress:StreamingLLMPress.n_sink='-4' is invalid; allowed: an integer >= 0 (default 4)"),
    ("zero kernel", ["--method", "kvpress:SnapKVPress", "--press-arg", "kernel_size=0"],
     "kvpress:SnapKVPress.kernel_size='0' is invalid; allowed: an integer >= 1 (default 5)"),
    ("window longer than the prompt", ["--method", "kvpress:SnapKVPress", "--press-arg", "window_size=100000"],
     "window_size=100000 is invalid: the press needs prompts longer than window_size, and the model takes at most "
     "8,192 tokens"),
    ("window longer than the prompt", ["--method", "kvpress:ExpectedAttentionPress", "--press-arg", "n_sink=9000"],
     "n_sink=9000 is invalid: the press needs prompts longer than n_sink"),
    ("untyped optional given a string", ["--method", "kvpress:RandomPress", "--press-arg", "seed=abc"],
     "kvpress:RandomPress.seed='abc' is invalid; allowed: an integer or none (default None)"),
    ("untyped optional given a string", ["--method", "kvpress:CompactorPress", "--press-arg", "blending=abc"],
     "kvpress:CompactorPress.blending='abc' is invalid; allowed: a finite number or none"),
    ("a press needing another model", ["--method", "kvpress:RestoreKVPress"],
     "kvpress:RestoreKVPress needs another model's files: it calls hf_hub_download"),
    ("a press needing another model", ["--method", "kvpress:LUKVPress"],
     "kvpress:LUKVPress needs another model's files: it calls requests.get"),
    ("bad literal", ["--method", "kvpress:CURPress", "--press-arg", "leverage_type=foo"],
     "kvpress:CURPress.leverage_type='foo' is not allowed; allowed: one of 'key', 'value', 'kv_avg', 'kv_product'"),
    ("duplicated press argument",
     ["--method", "kvpress:SnapKVPress", "--press-arg", "window_size=8", "--press-arg", "window_size=16"],
     "--press-arg window_size is given twice (window_size='8' and window_size='16')"),
    ("bool for int", ["--method", "kvpress:SnapKVPress", "--press-arg", "window_size=true"],
     "kvpress:SnapKVPress.window_size='true' is invalid; allowed: an integer >= 1"),
    ("NaN", ["--method", "kvpress:ExpectedAttentionPress", "--press-arg", "epsilon=nan"],
     "kvpress:ExpectedAttentionPress.epsilon='nan' is invalid; allowed: a finite number >= 0"),
    ("NaN", ["--method", "kvpress:CapPress", "--press-arg", "tau=inf"],
     "kvpress:CapPress.tau='inf' is invalid; allowed: a finite number >= 0"),
    ("private field", ["--method", "kvpress:CompactorPress", "--press-arg", "_leverage_press=1"],
     "kvpress:CompactorPress._leverage_press is a private field of the press; allowed: blending, chunk_size"),
    ("unknown press", ["--method", "kvpress:BasePress"], "method='kvpress:BasePress' is not allowed; kvpress presses:"),
    ("device garbage", ["--method", "snapstream", "--device", "gpu0"],
     "--device='gpu0' is invalid; allowed: cpu, cuda, cuda:N (a GPU index), mps"),
    ("device empty", ["--method", "snapstream", "--device", ""], "--device='' is invalid; allowed: cpu, cuda"),
    ("device meta", ["--method", "snapstream", "--device", "meta"],
     "--device='meta' is invalid: a meta device holds no weights"),
    ("model", ["--method", "snapstream", "--model", "no-such-model"],
     "model='no-such-model' is not a preset, a local directory, a .gguf file or a hub id"),
    ("setting", ["--method", "snapstream", "--sink", "99"], "sink=99 is invalid with budget=64; allowed: 0..63"),
]
HEAVY = ("torch", "lm_eval", "kvpress", "transformers")


def _run_cli(argv: list[str]) -> tuple[int, str, list[str]]:
    """``snapeval ARGV`` in a fresh interpreter: exit code, stderr, the heavy modules it imported. "Before anything
    loads" is what was imported, never how long it took (the seconds are in ``benchmarks/bad_input.py``)."""
    probe = ("import json, sys\nfrom snapeval.cli import main\nrc = main(sys.argv[1:])\n"
             f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\nsys.exit(rc)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=300, env=env,
                         cwd=REPO)
    return out.returncode, out.stderr, json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind, args, expected", BAD_LINES, ids=[f"{k}:{a[-1]}" for k, a, _ in BAD_LINES])
def test_bad_run_argument_is_one_line_before_loading(kind, args, expected):
    rc, err, heavy = _run_cli(RUN + args)
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("snapeval: error: ") and expected in err, err
    assert heavy == [], f"imported {heavy} before refusing"


def test_gpu_index_without_a_gpu_is_one_line():
    rc, err, heavy = _run_cli(RUN + ["--method", "snapstream", "--device", "cuda:1"])
    assert rc == 2 and err.strip() == ("snapeval: error: --device='cuda:1' is invalid: this machine has no GPU; "
                                       "allowed: cpu"), err
    assert heavy == [], heavy


@pytest.mark.parametrize("press, expected", [
    ({"window_size": -1}, "kvpress:SnapKVPress.window_size=-1 is invalid; allowed: an integer >= 1"),
    ({"window_size": True}, "kvpress:SnapKVPress.window_size=True is invalid; allowed: an integer >= 1"),
    ({"kernel_size": float("nan")}, "kvpress:SnapKVPress.kernel_size=nan is invalid"),
    ({"window_size": 9000}, "window_size=9000 is invalid: the press needs prompts longer than window_size, and the "
                            "model takes at most 8,192 tokens"),
    ({"_leverage_press": 1}, "takes no argument '_leverage_press'"),
])
def test_bad_press_in_a_sweep_is_one_line(tmp_path, capsys, press, expected):
    raw = {**BASE, "methods": ["full", {"method": "kvpress:SnapKVPress", "budgets": [64], "press": press}]}
    one_line_exit_2(capsys, ["sweep", str(write(tmp_path, raw)), "--dry-run"], expected)


def test_press_argument_given_twice_in_a_sweep(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("name: bad\nmodels: [smollm2-135m-instruct]\ntasks: [snapeval_passkey]\nmethods:\n"
                    "  - {method: 'kvpress:SnapKVPress', budgets: [64], press: {window_size: 8, window_size: 16}}\n")
    one_line_exit_2(capsys, ["sweep", str(path), "--dry-run"],
                    "c.yaml: line 5: key 'window_size' is given twice in one mapping")


def test_sweep_with_a_bad_press_refuses_before_loading(tmp_path):
    raw = {**BASE, "methods": ["full", {"method": "kvpress:ScorerPress", "budgets": [64]}]}
    rc, err, heavy = _run_cli(["sweep", str(write(tmp_path, raw)), "--dry-run"])
    assert rc == 2 and "kvpress:ScorerPress is abstract" in err and len(err.strip().splitlines()) == 1, err
    assert heavy == [], heavy


def test_object_typed_press_field_is_refused(tmp_path, monkeypatch, capsys):
    """A press field whose type no command line can give (an object): one line naming the type. kvpress's usable
    presses have no such public field, so a press source of that shape is planted."""
    from snapeval.cache import press_spec

    root = tmp_path / "kvpress"
    (root / "presses").mkdir(parents=True)
    (root / "__init__.py").write_text('__all__ = ["HelperPress"]\n')
    (root / "presses" / "base_press.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass BasePress:\n"
        "    def compress(self, module):\n        raise NotImplementedError\n")
    (root / "presses" / "helper_press.py").write_text(
        "from dataclasses import dataclass, field\nfrom kvpress.presses.base_press import BasePress\n\n"
        "@dataclass\nclass HelperPress(BasePress):\n    compression_ratio: float = 0.0\n"
        "    helper: BasePress = field(default_factory=BasePress)\n    def compress(self, module):\n        return 1\n")
    monkeypatch.setattr(press_spec, "kvpress_dir", lambda: root)
    press_spec.press_specs.cache_clear()
    try:
        one_line_exit_2(capsys, RUN + ["--method", "kvpress:HelperPress", "--press-arg", "helper=x"],
                        "kvpress:HelperPress.helper='x' is invalid: helper takes a BasePress object, which no command "
                        "line or YAML value can give")
    finally:
        press_spec.press_specs.cache_clear()


def test_press_source_reading_matches_the_imported_classes():
    """What :mod:`snapeval.cache.press_spec` reads from kvpress's source equals what the imported classes say: every
    exported press's fields and defaults, whether it installs its own hooks, whether it keeps its budget per layer."""
    import dataclasses

    kvpress = pytest.importorskip("kvpress")
    from kvpress.presses.base_press import BasePress
    from kvpress.presses.scorer_press import ScorerPress

    from snapeval.cache.press_spec import REQUIRED, press_names, press_specs

    specs = press_specs()
    for name in kvpress.__all__:
        cls = getattr(kvpress, name)
        if not (isinstance(cls, type) and issubclass(cls, BasePress) and dataclasses.is_dataclass(cls)) \
                or cls is BasePress:
            continue
        spec = specs[name]
        fields = [f for f in dataclasses.fields(cls) if f.init]
        assert list(spec.fields) == [f.name for f in fields], name
        for f in fields:
            if f.default is not dataclasses.MISSING:
                assert spec.fields[f.name].default == f.default, (name, f.name)
            elif f.default_factory is dataclasses.MISSING:
                assert spec.fields[f.name].default is REQUIRED, (name, f.name)
        assert spec.overrides_call == (cls.__call__ is not BasePress.__call__), name
        assert spec.overrides_forward_hook == (cls.forward_hook is not BasePress.forward_hook), name
        assert spec.scorer_compress == (issubclass(cls, ScorerPress) and cls.compress is ScorerPress.compress), name
    usable = press_names()
    assert "ScorerPress" not in usable and "RestoreKVPress" not in usable
    assert {"SnapKVPress", "TOVAPress", "StreamingLLMPress", "ExpectedAttentionPress", "KVComposePress"} <= set(usable)


def test_a_press_assertion_on_a_short_prompt_is_one_line():
    """A window shorter than the model's context but longer than this prompt: the press's own assertion, as one
    line naming the press and the prompt."""
    pytest.importorskip("kvpress")
    import torch

    from snapeval.cache import make_cache, resolve_method
    from tests.conftest import tiny_model

    model = tiny_model("llama")
    config = resolve_method("kvpress:SnapKVPress", 4, window_size=8)
    with pytest.raises(SnapevalError, match=r"^kvpress:SnapKVPress with \{'window_size': 8\} cannot compress a 6-token "
                                            r"prompt: Query length 6 should be greater than the window size 8$"):
        make_cache(model, config).prefill(model, torch.tensor([[5, 6, 7, 8, 9, 10]]))


def test_devices_checked_without_torch():
    from snapeval.models.devices import check_device, parse_device_map, usable_device

    assert check_device("cpu") == "cpu" and check_device(" cuda ") == "cuda"
    for bad in ("", None, "meta", "cuda:-1", "cuda:01", "tpu", "cpu:0:1"):
        with pytest.raises(SnapevalError, match="is invalid"):
            check_device(bad)
    with pytest.raises(SnapevalError, match=r"device_map\['model.layers.0'\]='gpu' is invalid"):
        parse_device_map({"model.layers.0": "gpu"})
    with pytest.raises(SnapevalError, match="'meta' is invalid"):
        usable_device("meta")


# --------------------------------------------------------------------------------------------------------------------
# issue #62: one check on all three surfaces (`snapeval run`, a sweep's model entry, snapeval-lm-eval's model_args)

#: (argument, bad value as a user types it): every run argument's bad value (tests/test_run_args.py's BAD), the
#: method, its budget and a setting, a device map naming a GPU this machine lacks, speculative prefill without keep.
THREE_SURFACES = [
    ("dtype", "fp8"), ("batch_size", "0"), ("max_gen_toks", "-3"), ("max_length", "zero"), ("engine", "sometimes"),
    ("engine_slots", "0"), ("decode_kernel", "flash"), ("capture", "maybe"), ("specprefill_keep", "1.5"),
    ("specprefill_chunk", "0"), ("specprefill_lookahead", "x"), ("specprefill_pool_kernel", "-1"),
    ("device_map", "everywhere"), ("device_map", '{"": -1}'), ("device_map", '{"": 0}'),
    ("specprefill_draft", "smollm2-135m-instruct"), ("method", "lru"), ("budget", "1"), ("sink", "99"),
    ("recent", "abc"), ("capture", "true"), ("decode_kernel", "triton"),
]


def _core(message: str, name: str) -> str:
    """The part of a refusal every surface must share: from the argument's name on, in one spelling, unquoted."""
    message = message.replace("--" + name.replace("_", "-"), name)
    at = message.rfind(name + "=")
    if at < 0:
        at = message.rfind(name)
    return message[at:].replace("'", "").replace('"', "")


def _three_answers(name: str, value: str, tmp_path, capsys) -> dict[str, tuple[int, str]]:
    import yaml as _yaml

    from snapeval.harness import lm_eval_cli
    from snapeval.run_args import RunArgs

    answers = {}
    method = {"method": "snapstream", "budget": "64"}
    if name in ("method", "budget"):
        method[name] = value
    run_argv = ["run", "--tasks", "snapeval_passkey", "--method", method["method"], "--budget", method["budget"]]
    if name in RunArgs.names("run"):
        run_argv += ["--" + name.replace("_", "-"), value]
    elif name not in ("method", "budget"):
        run_argv += ["--method-arg", f"{name}={value}"]
    if name == "specprefill_keep" or (name.startswith("specprefill_") and name != "specprefill_draft"):
        run_argv += ["--specprefill-draft", "smollm2-135m-instruct"]
    rc = cli(run_argv)
    answers["run"] = (rc, capsys.readouterr().err.strip())
    entry = {"pretrained": "smollm2-135m-instruct"}
    methods = [{"method": method["method"], "budgets": [_yaml.safe_load(method["budget"])]}]
    if name in RunArgs.names("sweep"):
        entry[name] = _yaml.safe_load(value)
        if name.startswith("specprefill_") and name != "specprefill_draft":
            entry["specprefill_draft"] = "smollm2-135m-instruct"
    elif name not in ("method", "budget"):
        methods[0][name] = _yaml.safe_load(value)
    config = write(tmp_path, {"name": "three", "models": [entry], "tasks": ["snapeval_passkey"], "methods": methods})
    rc = cli(["sweep", str(config), "--dry-run", "--out", str(tmp_path / "out")])
    answers["sweep"] = (rc, capsys.readouterr().err.strip())
    pairs = {"pretrained": "smollm2-135m-instruct", **method, name: value}
    if name.startswith("specprefill_") and name != "specprefill_draft":
        pairs["specprefill_draft"] = "smollm2-135m-instruct"
    argv = ["--model", "snapeval", "--model_args", ",".join(f"{k}={v}" for k, v in pairs.items()), "--tasks",
            "snapeval_passkey", "--include_path", str(REPO / "tasks")]
    try:
        lm_eval_cli.prepare_argv(argv)
        answers["model_args"] = (0, "")
    except SnapevalError as exc:
        answers["model_args"] = (exc.exit_code, f"snapeval-lm-eval: error: {exc}")
    return answers


@pytest.mark.parametrize("name, value", THREE_SURFACES, ids=[f"{n}={v}" for n, v in THREE_SURFACES])
def test_a_bad_value_is_answered_the_same_on_all_three_surfaces(name, value, tmp_path, capsys, monkeypatch):
    """Each bad value through `snapeval run`, a sweep entry and snapeval-lm-eval's model_args (its argv pre-parse,
    before lm-eval loads: tests/test_preflight.py runs the command itself): exit 2, one line, the same words from
    the argument's name on."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a CPU machine, whatever runs the test
    answers = _three_answers(name, value, tmp_path, capsys)
    cores = {}
    for surface, (rc, err) in answers.items():
        assert rc == 2, (surface, answers)
        assert "Traceback" not in err and len(err.splitlines()) == 1, (surface, err)
        cores[surface] = _core(err, name)
    assert len(set(cores.values())) == 1, cores


def test_model_args_are_read_as_lm_eval_reads_them_and_valid_ones_run_through_its_cli():
    """snapeval-lm-eval's pre-parse (without lm-eval) splits and types as lm-eval 0.4.13 does; a JSON device_map
    among key=value pairs, which lm-eval alone refuses, reaches the model as one JSON object."""
    import argparse

    from lm_eval._cli.utils import MergeDictAction

    from snapeval.harness.lm_eval_cli import prepare_argv
    from snapeval.harness.model_args import model_args_of, typed_value

    parser = argparse.ArgumentParser()
    parser.add_argument("--model_args", "-a", nargs="+", action=MergeDictAction)
    for argv in (["--model_args", "pretrained=x,budget=64,sink=4"], ["-a", "method=full", "batch_size=2"],
                 ["--model_args", '{"method": "full", "device_map": {"": "cpu"}}'],
                 ["--model_args", "a=[1, 2],b=true,c=0.5"]):
        ours = {k: typed_value(v) if isinstance(v, str) else v for k, v in model_args_of(argv).items()}
        assert ours == parser.parse_args(argv).model_args, argv
    argv = ["--model", "snapeval", "--model_args", 'pretrained=smollm2-135m-instruct,method=full,batch_size=2,'
            'device=cpu,device_map={"model": "cpu", "lm_head": "cpu"}', "--tasks", "snapeval_passkey"]
    out = prepare_argv(argv)
    assert json.loads(out[out.index("--model_args") + 1]) == {
        "pretrained": "smollm2-135m-instruct", "method": "full", "batch_size": 2, "device": "cpu",
        "device_map": {"model": "cpu", "lm_head": "cpu"}}
    assert out[-2:] == ["--device", "cpu"]
    with pytest.raises(SnapevalError, match="batch_size is given twice: --batch_size 4 and model_args batch_size='2'"):
        prepare_argv([*argv, "--batch_size", "4"])


def test_snapeval_lm_eval_skips_lm_eval_s_builtin_tasks_only_for_tasks_the_folders_define(task_dir, tmp_path,
                                                                                         monkeypatch):
    """Every --tasks name a task of --include_path, or a group of only such tasks: lm-eval's TaskManager is built
    without its built-in tasks (the same task, from the same YAML); a built-in task, a group reaching one or no
    --include_path keeps lm-eval's whole index."""
    import lm_eval.tasks

    from snapeval.harness.lm_eval_cli import _skip_builtin_tasks_when_the_folders_define_them as skip

    (tmp_path / "mixed.yaml").write_text("group: mixed\ntask:\n  - tiny_gen\n  - hellaswag\n")
    folders = os.pathsep.join([str(task_dir), str(tmp_path)])
    stock = lm_eval.tasks.TaskManager
    for argv in (["--tasks", "tiny_gen"], ["--tasks", "tiny_gen,hellaswag", "--include_path", str(task_dir)],
                 ["--tasks", "mixed", "--include_path", folders]):
        monkeypatch.setattr(lm_eval.tasks, "TaskManager", stock)
        skip(argv)
        assert lm_eval.tasks.TaskManager is stock, argv
    skip(["--tasks", "snapeval_synthetic", "--include_path", str(REPO / "tasks")])  # a group of the folder's tasks
    assert lm_eval.tasks.TaskManager is not stock
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", stock)
    skip(["--tasks", "tiny_mc,tiny_gen", "--include_path", str(task_dir)])
    manager = lm_eval.tasks.TaskManager(include_path=str(task_dir))
    assert isinstance(manager, stock) and sorted(manager.all_subtasks) == ["tiny_gen", "tiny_mc"]
    assert manager._index["tiny_gen"].yaml_path == task_dir / "tiny_gen.yaml"


@pytest.mark.slow
def test_valid_model_args_run_through_snapeval_lm_eval(tmp_path, tiny_dir, task_dir):
    """batch_size and device in model_args (lm-eval passed its own as well: "multiple values") and a JSON
    device_map run to the end."""
    out = subprocess.run([sys.executable, "-m", "snapeval.harness.lm_eval_cli", "--model", "snapeval",
                          "--model_args", f'pretrained={tiny_dir},method=full,batch_size=2,device=cpu,dtype=float64,'
                          'max_gen_toks=2,device_map={"": "cpu"}', "--tasks", "tiny_gen", "--include_path",
                          str(task_dir), "--limit", "1", "--output_path", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "tiny_gen" in out.stdout


# --------------------------------------------------------------------------------------------------------------------
# issue #62: no file of the user's replaced, nothing opened that blocks, nothing silent

@pytest.mark.parametrize("manifest, expected", [
    ('{"format": "snapeval-manifest/1", "sweep": 5, "cells": []}', "is not a snapeval sweep's"),
    ('{"format": "snapeval-manifest/1", "cells": []}', "is not a snapeval sweep's"),
    ('{"format": "snapeval-man', "its manifest.json is damaged"),
    ('[1, 2]', "is not a snapeval sweep's"),
])
def test_a_manifest_that_is_not_this_sweeps_is_never_replaced(tmp_path, capsys, manifest, expected):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(manifest)
    config = write(tmp_path, BASE)
    last = one_line_exit_2(capsys, ["sweep", str(config), "--out", str(out)], expected, f"--out={str(out)!r}")
    assert "moved away" in last and (out / "manifest.json").read_text() == manifest


def test_a_config_of_the_same_name_with_another_grid_is_refused(tmp_path, capsys):
    from snapeval.sweep import load_config, run_sweep

    out = tmp_path / "out"
    first = write(tmp_path, BASE, "a.yaml")
    run_sweep(load_config(first), out, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
              report=False)
    before = (out / "manifest.json").read_text()
    other = write(tmp_path, {**BASE, "methods": ["full", {"method": "snapkv", "budgets": [64]}]}, "b.yaml")
    one_line_exit_2(capsys, ["sweep", str(other), "--out", str(out)], "holds the results of sweep 'bad' from",
                    "with another grid than")
    assert (out / "manifest.json").read_text() == before
    run_sweep(load_config(first), out, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
              report=False)  # the config that wrote it: resumes


def test_special_files_are_refused_never_opened(tmp_path, swept, capsys):
    """A FIFO named *.yaml in a task folder, a cell file that is a FIFO or a folder: one line, no hang."""
    folder = tmp_path / "tasks_extra"
    folder.mkdir()
    os.mkfifo(folder / "trap.yaml")
    env = {**os.environ, "PYTHONPATH": str(REPO), "SNAPEVAL_TASKS_PATH": str(folder), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "snapeval", "run", "--tasks", "snapeval_passkey", "--method", "full",
                           "--limit", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "trap.yaml is not a regular file" in done.stderr, done.stderr
    out, path, cell = swept
    path.unlink()
    os.mkfifo(path)
    one_line_exit_2(capsys, ["report", str(out), "--out", str(tmp_path / "rep")], f"cell {cell}: not a regular file")
    path.unlink()
    path.mkdir()
    one_line_exit_2(capsys, ["report", str(out), "--out", str(tmp_path / "rep")], f"cell {cell}: not a regular file")


def test_report_refuses_swapped_and_listed_twice_and_says_what_it_left_out(swept, tmp_path, capsys):
    out, path, cell = swept
    manifest = json.loads((out / "manifest.json").read_text())
    other = next(v["cell_id"] for v in manifest["cells"] if v["cell_id"] != cell)
    original = path.read_text()
    path.write_text((out / "cells" / f"{other}.json").read_text())  # a swapped file
    one_line_exit_2(capsys, ["report", str(out), "--out", str(tmp_path / "rep")], f"holds cell {other}, not cell {cell}")
    path.write_text(original)
    scored = json.loads(original)  # a per-item score of 1.7: outside a share's range
    key = next(k for k, v in scored["samples"][0]["scores"].items() if isinstance(v, (int, float)))
    scored["samples"][0]["scores"][key] = 1.7
    path.write_text(json.dumps(scored))
    one_line_exit_2(capsys, ["report", str(out), "--out", str(tmp_path / "rep")], f"per-item score {key}=1.7")
    path.write_text(original)
    twice = {**manifest, "cells": manifest["cells"] + manifest["cells"][:1]}
    (out / "manifest.json").write_text(json.dumps(twice))
    one_line_exit_2(capsys, ["report", str(out), "--out", str(tmp_path / "rep")], "is listed 2 times")
    (out / "manifest.json").write_text(json.dumps(manifest))
    path.unlink()  # an unfinished cell: said on stderr; --strict fails
    assert cli(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    assert f"1 cell(s) of the sweep's grid have no result in {out}" in capsys.readouterr().err
    assert cli(["report", str(out), "--out", str(tmp_path / "rep"), "--strict"]) == 1


@pytest.mark.parametrize("change, flags, expected", [
    ({"methods": [{"method": "snapstream", "budgets": [64]}]}, ["--until-decided"], "needs the full cache"),
    ({"methods": ["full"]}, ["--until-decided"], "needs a method with budgets beside the full cache"),
    ({"decision": {"margin": 0}}, ["--until-decided"], "decision.margin=0.0 is invalid with --until-decided"),
    ({}, ["--monotone"], "--monotone is an option of --until-decided"),
    ({}, ["--batch", "4"], "--batch is an option of --until-decided"),
    ({"methods": ["full", {"method": "kvpress:SnapKVPress", "budgets": [64]},
                  {"method": "kvpress:SnapKVPress", "budgets": [64]}]}, [],
     "methods[2]: gives the same cells as methods[1] (kvpress:SnapKVPress@64)"),
    ({"seeds": [2 ** 32]}, [], "seeds[0]: seed=4294967296 is invalid; allowed: an integer in 0..4294967295"),
])
def test_sweep_options_that_cannot_apply_are_refused(tmp_path, capsys, change, flags, expected):
    one_line_exit_2(capsys, ["sweep", str(write(tmp_path, {**BASE, **change})), "--dry-run", *flags], expected)


def test_run_seed_and_method_arg_budget_and_specprefill_are_one_line(capsys):
    base = ["run", "--tasks", "snapeval_passkey", "--method", "snapstream", "--budget", "64"]
    one_line_exit_2(capsys, base + ["--seed", str(2 ** 32)], "--seed=4294967296 is invalid; allowed: an integer in 0..")
    one_line_exit_2(capsys, base + ["--method-arg", "budget=512"], "'budget' is not a setting of method 'snapstream'",
                    "--budget 512")
    one_line_exit_2(capsys, base + ["--specprefill-draft", "smollm2-135m-instruct"], "needs specprefill_keep")
    one_line_exit_2(capsys, base + ["--specprefill-keep", "0.5"], "given without specprefill_draft")


def test_a_missing_tasks_path_is_refused_by_the_listing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SNAPEVAL_TASKS_PATH", str(tmp_path / "nowhere"))
    one_line_exit_2(capsys, ["tasks"], "SNAPEVAL_TASKS_PATH=", "does not exist")
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("SNAPEVAL_TASKS_PATH", str(tmp_path / "file"))
    one_line_exit_2(capsys, ["tasks"], "is not a folder")


def test_yaml_merge_keys_are_accepted_and_a_key_given_twice_still_refused(tmp_path, capsys):
    from snapeval.sweep import load_config

    path = tmp_path / "merge.yaml"
    path.write_text("name: merge\nmodels: [smollm2-135m-instruct]\ntasks: [snapeval_passkey]\n"
                    "methods:\n  - full\n  - &ss {method: snapstream, budgets: [64]}\n"
                    "  - {<<: *ss, method: streamingllm}\n")  # the merged entry's own key wins
    config = load_config(path)
    assert [m.method for m in config.methods] == ["full", "snapstream", "streamingllm"]
    path.write_text("name: a\nname: b\nmodels: [x]\ntasks: [t]\nmethods: [full]\n")
    one_line_exit_2(capsys, ["sweep", str(path), "--dry-run"], "key 'name' is given twice")


def test_a_closed_pipe_is_not_a_disk_error():
    """`snapeval sweep ... --dry-run | head -1`: the reader leaves early; no "fix the disk", no traceback."""
    reader = subprocess.run(f"{sys.executable} -m snapeval sweep configs/paper_llama.yaml --dry-run | head -1; "
                            "echo \"status=${PIPESTATUS[0]}\" >&2", shell=True, executable="/bin/bash",
                            capture_output=True, text=True, cwd=REPO, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})
    if not reader.stdout:
        skip_if_it_needed_the_shared_data(reader.stderr)
    assert reader.stdout.startswith("sweep "), reader
    assert "disk" not in reader.stderr and "Traceback" not in reader.stderr and "status=141" in reader.stderr, reader


@pytest.mark.parametrize("budgets, expected", [
    ("0", "SnapStreamConfig.budget=0 is invalid; allowed: an integer >= 2"),
    ("256,x", "budgets='256,x' is invalid; allowed: comma-separated integers >= "),
])
def test_demo_budgets_answer_in_one_line_before_the_model_loads(capsys, monkeypatch, budgets, expected):
    import snapeval.models.loading as loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    one_line_exit_2(capsys, ["demo", "--budgets", budgets], expected)
