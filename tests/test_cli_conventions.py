"""One convention across the commands (issue #40): help and a default on every flag, `--tasks` (and `--task`), run
outputs named by every setting, dry-run labels that tell cells apart, `simulate`'s default model and a decode
breakdown that sums to its step."""
from __future__ import annotations

import argparse

import pytest

from snapeval.cli import build_parser
from snapeval.cli import main as cli


def _commands():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_every_flag_has_help_and_shows_its_default():
    missing = [(name, a.option_strings) for name, command in _commands().items() for a in command._actions
               if a.option_strings and not a.help]
    assert not missing
    run_help = " ".join(_commands()["run"].format_help().split())
    assert "(default: 256)" in run_help and "(default: snapstream)" in run_help
    assert "(default: smollm2-135m-instruct)" in " ".join(_commands()["simulate"].format_help().split())


def test_tasks_flag_and_its_alias():
    run = _commands()["run"]
    assert run.parse_args(["--tasks", "a,b"]).tasks == "a,b"
    assert run.parse_args(["--task", "a"]).tasks == "a"


def test_run_and_simulate_share_the_default_model():
    from snapeval.models.presets import DEFAULT_MODEL

    commands = _commands()
    assert commands["run"].get_default("model") == commands["simulate"].get_default("model") == DEFAULT_MODEL
    assert commands["demo"].get_default("model") == DEFAULT_MODEL
    text = " ".join(commands["simulate"].format_help().split())
    assert "SN40L" in text and "GPU" in text and "h200" in text


def test_run_default_output_names_every_setting():
    from snapeval.harness.cli import default_output

    base = {"pretrained": "smollm2-135m-instruct", "method": "snapstream", "budget": 64, "dtype": None,
            "batch_size": 1, "max_gen_toks": 256, "engine": "auto", "engine_slots": None, "device": "cpu",
            "device_map": None}
    run = {"limit": 4, "seed": 0, "metadata": {}}
    plain = default_output(["snapeval_passkey"], base, **run)
    sink8 = default_output(["snapeval_passkey"], {**base, "sink": 8}, **run)
    sink4 = default_output(["snapeval_passkey"], {**base, "sink": 4}, **run)
    assert len({plain, sink8, sink4}) == 3 and "sink=8" in sink8.name
    assert default_output(["snapeval_passkey"], base, **{**run, "seed": 1}) != plain
    assert default_output(["snapeval_passkey"], {**base, "dtype": "bfloat16"}, **run) != plain
    assert default_output(["snapeval_passkey"], base, **run) == plain  # the same run, the same file: resumable
    assert plain.parent.as_posix() == "results/runs" and plain.name.startswith("snapeval_passkey-smollm2")


def test_dry_run_labels_tell_cells_apart(tmp_path, capsys):
    import yaml

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "name": "labels", "models": ["smollm2-135m-instruct"], "tasks": [{"name": "snapeval_passkey", "limit": 2}],
        "methods": ["full", {"method": "snapstream", "budgets": [64], "sink": 4},
                    {"method": "snapstream", "budgets": [64], "sink": 8}]}))
    assert cli(["sweep", str(config), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    lines = [line.split(None, 2)[2] for line in capsys.readouterr().out.splitlines()[1:]
             if not line.startswith("  plan  ")]  # the cells (a group's decision plan follows them)
    assert len(lines) == len(set(lines)) == 3
    assert any("snapstream@64 | seed 0 (sink=4" in line for line in lines)
    assert any("snapstream@64 | seed 0 (sink=8" in line for line in lines)


@pytest.mark.parametrize("model, hardware, extra", [
    ("llama-3.1-8b-instruct", "h200", {}),
    ("llama-3.1-8b-instruct", "sn40l-16", {}),
    ("deepseek-r1", "sn40l-16", {"kernel_looping": True}),
    ("deepseek-r1", "sn40l-16", {"kernel_looping": False}),
    ("deepseek-r1-distill-llama-70b", "sn40l-16", {"draft_model": "llama-3.1-8b-instruct"}),
])
def test_simulated_step_breakdown_sums_to_the_step(model, hardware, extra):
    from snapeval.simulator.core import simulate_point

    r = simulate_point(model, hardware, prompt_len=4096, gen_len=512, budget=1024, **extra)
    parts = sum(k.seconds for k in r.decode_kernels) + sum(s for _, s in r.decode_overheads) \
        + (r.draft_seconds_per_step or 0.0)
    assert parts == pytest.approx(r.decode_step_seconds, rel=1e-12)
    assert r.decode_overheads  # the rest is named, never left out


def test_simulate_prints_the_fill_drain_line(capsys):
    assert cli(["simulate", "--model", "llama-3.1-8b-instruct", "--hardware", "h200", "--budget", "1024"]) == 0
    out = capsys.readouterr().out
    step = float(out.split("decode step: ")[1].split(" ms")[0])
    lines = [line for line in out.splitlines() if line.startswith("  ") and line.rstrip().endswith(("bound)", "ms"))
             and " ms" in line and "tokens" not in line]
    assert any("fill/drain" in line for line in lines)
    shown = sum(float(line.split(" ms")[0].split()[-1]) for line in lines)
    assert shown == pytest.approx(step, abs=0.01 + 0.001 * len(lines))


def test_lm_eval_noise_is_silenced_and_nothing_else(caplog):
    import logging

    import snapeval.harness.lm_eval_model  # noqa: F401  (installs the filters)

    with caplog.at_level(logging.WARNING):
        logging.getLogger("lm_eval.models.huggingface").warning(
            "`pretrained` model kwarg is not of type `str`. Many other model arguments may be ignored.")
        logging.getLogger("lm_eval.models.huggingface").warning(
            "Passed an already-initialized model through `pretrained`, assuming single-process call")
        logging.getLogger("lm_eval.api.task").warning(
            "snapeval_passkey: Custom kwargs can be passed to `--metadata` in console (as json string)")
        logging.getLogger("lm_eval.api.task").warning("a warning that says something")
    assert [r.getMessage() for r in caplog.records] == ["a warning that says something"]


# --------------------------------------------------------------------------------------------------------------------
# issue #62: every `snapeval run` flag, end to end with a value other than its default (not only parsed)

#: Every flag of ``snapeval run`` with a non-default value, and where the run shows it took it (the results JSON's
#: ``snapeval.config``, lm-eval's ``config``, or the samples). A flag added to the parser and not here fails
#: :func:`test_every_run_flag_is_exercised_end_to_end`.
def _run_flags(tiny_dir, tmp_path, data_dir):
    return {
        "--model": str(tiny_dir), "--tasks": "tiny_gen", "--method": "snapstream", "--budget": "48",
        "--method-arg": "sink=2", "--dtype": "float64", "--device": "cpu", "--device-map": '{"": "cpu"}',
        "--batch-size": "2", "--max-gen-toks": "3", "--max-length": "2048", "--engine": "false",
        "--engine-slots": "4", "--decode-kernel": "split", "--capture": "false",
        "--specprefill-draft": "smollm2-135m-instruct", "--specprefill-keep": "0.5", "--specprefill-chunk": "8",
        "--specprefill-lookahead": "2", "--specprefill-pool-kernel": "3", "--limit": "1", "--seed": "7",
        "--metadata": '{"note": 1}', "--data-dir": str(data_dir), "--output": str(tmp_path / "run.json"),
    }


@pytest.mark.slow  # the real SmolLM2 as the speculative-prefill draft
def test_every_run_flag_is_exercised_end_to_end(tiny_dir, task_dir, tmp_path, monkeypatch, data_dir):
    """The parser's every flag (deprecated spellings aside) given a non-default value in one real run of a tiny
    model: the run finishes and records each value (``--max-gen-toks 3`` once crashed: its text was the cap)."""
    import json

    run = _commands()["run"]
    flags = {a.option_strings[0] for a in run._actions if a.option_strings and a.help != argparse.SUPPRESS
             and a.option_strings[0] not in ("-h",)}
    given = _run_flags(tiny_dir, tmp_path, data_dir)
    assert flags == set(given), sorted(flags ^ set(given))
    monkeypatch.setenv("SNAPEVAL_TASKS_DIR", str(task_dir))
    assert cli(["run", *[x for item in given.items() for x in item]]) == 0
    out = json.loads((tmp_path / "run.json").read_text())
    described = out["snapeval"]["config"]
    assert described["model"] == str(tiny_dir) and described["method"] == "snapstream" and described["budget"] == 48
    assert described["settings"]["sink"] == 2 and described["dtype"] == "float64"
    assert described["max_gen_toks"] == 3 and described["max_length"] == 2048
    assert described["engine"] is None and described["decode_kernel"] == "split" and described["capture"] == "false"
    assert described["specprefill"] == {**described["specprefill"], "draft": "smollm2-135m-instruct", "keep": 0.5,
                                        "chunk": 8, "lookahead": 2, "pool_kernel": 3}
    sample = out["samples"]["tiny_gen"]
    assert len(sample) == 1 and sample[0]["arguments"][0][1]["max_gen_toks"] == 3  # the cap, as a number
    assert out["snapeval"]["seed"] == 7  # --batch-size, --device, --device-map, --data-dir: they ran (no record)
    engine_run = tmp_path / "engine.json"  # the engine's own flags: --engine true with its slots
    argv = ["run", "--model", str(tiny_dir), "--tasks", "tiny_gen", "--method", "streamingllm", "--budget", "32",
            "--engine", "true", "--engine-slots", "3", "--max-gen-toks", "2", "--limit", "1", "--output",
            str(engine_run)]
    assert cli(argv) == 0
    assert json.loads(engine_run.read_text())["snapeval"]["config"]["engine"] == {"slots": 3}


def test_cpu_threads_fit_the_free_cores(monkeypatch):
    """A busy neighbour leaves one thread of two (issue #62: two threads beside a busy core took 2.2x idle, one 1.6x);
    SNAPEVAL_THREADS chooses; a user's OMP_NUM_THREADS is kept."""
    from snapeval import threads
    from snapeval.errors import SnapevalError

    monkeypatch.delenv(threads.ENV, raising=False)
    assert threads.choose(cores=2, busy=0.0)[0] == 2 and threads.choose(cores=2, busy=0.2)[0] == 2
    assert threads.choose(cores=2, busy=0.8)[0] == 1 and threads.choose(cores=2, busy=5.0)[0] == 1
    assert threads.choose(cores=16, busy=3.0)[0] == 13
    monkeypatch.setenv(threads.ENV, "all")
    assert threads.choose(cores=2, busy=5.0)[0] == 2
    monkeypatch.setenv(threads.ENV, "3")
    assert threads.choose(cores=2, busy=0.0) == (3, "SNAPEVAL_THREADS=3")
    monkeypatch.setenv(threads.ENV, "zero")
    with pytest.raises(SnapevalError, match="SNAPEVAL_THREADS='zero' is invalid; allowed: an integer >= 1, or all"):
        threads.choose()
    monkeypatch.delenv(threads.ENV)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.apply() is None  # the user's own setting wins
    assert 0.0 <= threads.busy_elsewhere(samples=2, interval_s=0.0)


def test_a_neighbour_counts_by_its_priority(tmp_path):
    """A runnable thread of another process takes the share of a core the fair scheduler would give it against
    ours (an equal takes a core, a loop at nice 19 next to nothing); sleeping threads and this process's own count
    nothing; where /proc shows no process, the kernel's runnable count stands in."""
    import os

    from snapeval import threads

    assert threads.core_share(0) == 1.0 and threads.core_share(-5) == 1.0
    assert threads.core_share(19) == pytest.approx(2 * 1.25 ** -19 / (1.25 ** -19 + 1))  # 0.028
    assert threads.core_share(5, own_nice=5) == 1.0 and threads.core_share(0, own_nice=19) == 1.0
    assert 0.45 < threads.core_share(5) < 0.55

    def task(pid, tid, state, nice, comm="python (x) y"):
        folder = tmp_path / str(pid) / "task" / str(tid)
        folder.mkdir(parents=True)
        rest = [state] + ["0"] * 15 + [str(nice)] + ["0"] * 30  # field 3 is the state, field 19 the niceness
        (folder / "stat").write_text(f"{tid} ({comm}) " + " ".join(rest) + "\n")

    task(101, 101, "R", 0)        # a busy loop at our priority
    task(101, 102, "S", 0)        # its sleeping thread
    task(202, 202, "R", 19)       # a niced loop
    task(303, 303, "R", 0)        # this process (skipped)
    (tmp_path / "stat").write_text("cpu 0\n")
    assert sorted(threads.runnable_nices(tmp_path, skip_pid=303)) == [0, 19]
    busy = threads.busy_elsewhere(samples=1, proc=tmp_path) if os.getpriority(os.PRIO_PROCESS, 0) == 0 else None
    if busy is not None:  # the real /proc's pid differs from 303: this process is not in the fake one
        assert busy == pytest.approx(threads.core_share(0) + threads.core_share(19) + threads.core_share(0))
    assert threads.choose(cores=2, busy=1.0 + threads.core_share(19))[0] == 1
    assert threads.choose(cores=2, busy=threads.core_share(19))[0] == 2
    assert threads.runnable_nices(tmp_path / "absent") is None


def test_run_hands_the_lm_eval_model_the_configuration_it_resolved(monkeypatch, tmp_path):
    """``snapeval run`` resolves the method configuration once and hands it on, with the resolved run arguments, as
    a sweep cell does (``config=`` and ``run_args=``): the lm-eval model receives no method name, budget or setting
    to resolve again. The output file is still named by the method, budget and settings."""
    import importlib

    from snapeval.cache import SnapStreamConfig, resolve_method
    from snapeval.run_args import RunArgs

    seen = {}

    def fake_evaluate(model_args, tasks, **kwargs):
        seen.update(model_args)
        return {"results": {}, "snapeval": {"kv_cache_bytes": 0, "decode_tokens_per_s": None,
                                            "prefill_tokens_per_s": None}}

    monkeypatch.setattr(importlib.import_module("snapeval.harness.evaluate"), "evaluate", fake_evaluate)
    out = tmp_path / "run.json"
    assert cli(["run", "--tasks", "snapeval_passkey", "--method", "snapstream", "--budget", "64", "--method-arg",
                "sink=8", "--decode-kernel", "split", "--output", str(out)]) == 0
    assert sorted(seen) == ["config", "pretrained", "run_args"]
    assert isinstance(seen["config"], SnapStreamConfig)
    assert seen["config"] == resolve_method("snapstream", 64, sink=8) and seen["config"].sink == 8
    assert seen["run_args"] == RunArgs(decode_kernel="split", max_gen_toks=256)  # the flag's shown default
