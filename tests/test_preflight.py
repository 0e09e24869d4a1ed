"""Every bad input of what a command reads or writes (issue 49): exit 2, one line naming the field and what is
allowed, before anything heavy loads. "Before loading" is what the process imported (torch, lm_eval, transformers,
kvpress), never how long it took (``benchmarks/bad_input.py`` has the seconds)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "lm_eval", "kvpress", "transformers")
PROBE = ("import json, sys\nfrom snapeval.cli import main\nrc = main(sys.argv[1:])\n"
         f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\nsys.exit(rc)\n")


def refuse(argv: list[str], *expected: str, env: dict | None = None) -> str:
    """``snapeval ARGV`` in a fresh interpreter: exit 2, one line with each of ``expected``, nothing heavy imported."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "",
                **(env or {})}
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=300,
                         env=full_env, cwd=REPO)
    err = out.stderr.strip()
    assert out.returncode == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("snapeval: error: "), err
    for text in expected:
        assert text in err, err
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], f"imported heavy modules before refusing: {err}"
    return err


RUN = ["run", "--model", "smollm2-135m-instruct", "--method", "full"]


def test_a_task_typo_is_refused_with_a_suggestion():
    refuse(RUN + ["--tasks", "snapeval_paskey"], "--tasks='snapeval_paskey' is not an lm-eval task",
           "did you mean snapeval_passkey")


def test_an_lm_eval_builtin_task_is_known_without_importing_lm_eval():
    from snapeval.preflight import check_task_names

    check_task_names(["hellaswag", "arc_easy", "snapeval_passkey", "aime24_snapeval"])


def test_missing_data_is_found_before_the_model_loads(tmp_path):
    refuse(RUN + ["--tasks", "aime24_snapeval", "--data-dir", str(tmp_path)],
           "task 'aime24_snapeval' reads aime24/aime_2024.jsonl, which is not in", "allowed: a data folder")


@pytest.mark.parametrize("output, expected", [("/proc/nowhere/x.json", "cannot be written"),
                                              ("/tmp", "is a folder; allowed: a file path")])
def test_an_unwritable_output_is_found_before_the_run(output, expected):
    err = refuse(RUN + ["--tasks", "snapeval_passkey", "--output", output], f"--output={output!r}", expected)
    assert "resume" not in err


@pytest.mark.parametrize("variable, make", [("SNAPEVAL_TASKS_PATH", "missing"), ("SNAPEVAL_TASKS_PATH", "file"),
                                            ("SNAPEVAL_TASKS_DIR", "missing")])
def test_task_folder_variables_must_name_folders(tmp_path, variable, make):
    path = tmp_path / "tasks"
    if make == "file":
        path.write_text("not a folder")
    expected = "is not a folder" if make == "file" else "does not exist"
    refuse(RUN + ["--tasks", "snapeval_passkey"], f"{variable}=", expected, env={variable: str(path)})
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"name": "t", "models": ["smollm2-135m-instruct"],
                                      "tasks": [{"name": "snapeval_passkey", "limit": 2}], "methods": ["full"]}))
    if variable == "SNAPEVAL_TASKS_PATH":
        refuse(["sweep", str(config), "--dry-run"], f"{variable}=", expected, env={variable: str(path)})


def _config(tmp_path, **change) -> str:
    raw = {"name": "t", "models": ["smollm2-135m-instruct"], "tasks": [{"name": "snapeval_passkey", "limit": 2}],
           "methods": ["full"], **change}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_dry_run_refuses_an_unknown_task_and_a_missing_model(tmp_path):
    refuse(["sweep", _config(tmp_path, tasks=["snapeval_kv_needel"]), "--dry-run"],
           "tasks='snapeval_kv_needel' is not an lm-eval task", "did you mean snapeval_kv_needle")
    refuse(["sweep", _config(tmp_path, models=[str(tmp_path / "no-model")]), "--dry-run"],
           "is not a preset, a local directory, a .gguf file or a hub id")


def test_a_ray_address_is_refused_within_a_bounded_wait(tmp_path):
    refuse(["sweep", _config(tmp_path), "--executor", "ray", "--ray-address", "garbage:0", "--out",
            str(tmp_path / "o")], "--ray-address='garbage:0' is invalid; allowed: auto, local, or [ray://]HOST:PORT")
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    refuse(["sweep", _config(tmp_path), "--executor", "ray", "--ray-address", f"127.0.0.1:{port}", "--out",
            str(tmp_path / "o")], f"--ray-address='127.0.0.1:{port}': no Ray head answers there")


def test_ray_address_waits_at_most_its_timeout(monkeypatch):
    """The wait is bounded by the connection timeout handed to the one attempt (Ray's own client retries for
    minutes): checked by the argument, not the clock."""
    from snapeval import preflight
    from snapeval.errors import SnapevalError

    seen = []

    def never_answers(address, timeout):
        seen.append(timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", never_answers)
    with pytest.raises(SnapevalError, match=r"no Ray head answers there \(no answer within 5 s\)"):
        preflight.check_ray_address("10.255.255.1:6379")
    assert seen == [preflight.RAY_CONNECT_TIMEOUT_S]


def test_simulate_past_the_models_context_is_an_error():
    refuse(["simulate", "--model", "smollm2-135m-instruct", "--prompt-len", "100000"],
           "--prompt-len=100000 with --gen-len=1024 is 101,024 tokens, past smollm2-135m-instruct's 8,192-token "
           "context; allowed: prompt + generation <= 8,192")
    refuse(["simulate", "--model", "smollm2-135m-instruct", "--sweep", "prompt_len=1024,9000"], "--prompt-len=9000")


def test_report_and_regress_check_their_folders(tmp_path):
    refuse(["report", str(tmp_path / "none")], "RESULTS_DIR=", "is not a results directory (it does not exist)")
    refuse(["report", "results/quickstart", "--out", "/proc/nowhere/r"], "--out='/proc/nowhere/r' cannot be written")
    refuse(["regress", "--baseline", "results/regression/baseline.json", "--current", "README.md"],
           "--current='README.md' is not a results directory (it is not a folder)")


def test_lm_eval_cli_refuses_a_task_typo_before_lm_eval_loads():
    code = ("import json, sys\nsys.argv = ['snapeval-lm-eval', *sys.argv[1:]]\n"
            "from snapeval.harness.lm_eval_cli import main\ntry:\n    main()\nexcept SystemExit as exc:\n"
            f"    print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n    sys.exit(exc.code)\n")
    out = subprocess.run([sys.executable, "-c", code, "--model", "snapeval", "--include_path", "tasks/", "--tasks",
                          "snapeval_paskey"], capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 2 and out.stderr.startswith("snapeval-lm-eval: error: --tasks='snapeval_paskey'"), out
    assert "did you mean snapeval_passkey" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert json.loads(out.stdout.strip()) == []


def test_lm_eval_cli_defaults_the_device_to_cpu_without_a_gpu(monkeypatch):
    from snapeval.errors import SnapevalError
    from snapeval.harness import lm_eval_cli
    from snapeval.models import devices

    monkeypatch.setattr(devices, "gpu_count", lambda: 0)
    argv = ["--model", "snapeval", "--model_args", "method=full", "--tasks", "snapeval_passkey"]
    assert lm_eval_cli.prepare_argv(argv)[-2:] == ["--device", "cpu"]
    with pytest.raises(SnapevalError, match="needs a budget"):  # model_args checked too: the default method
        lm_eval_cli.prepare_argv(["--model", "snapeval", "--tasks", "snapeval_passkey"])
    assert lm_eval_cli.prepare_argv(argv + ["--device", "cpu"]).count("--device") == 1
    with pytest.raises(SnapevalError, match="--device='cuda:0' is invalid: this machine has no GPU"):
        lm_eval_cli.prepare_argv(argv + ["--device", "cuda:0"])  # as `snapeval run --device cuda:0` says
    assert "--device" not in lm_eval_cli.prepare_argv(["ls", "tasks"])
    monkeypatch.setattr(devices, "gpu_count", lambda: 1)
    assert "--device" not in lm_eval_cli.prepare_argv(argv)


def test_max_gen_toks_caps_a_tasks_own_budget():
    """`run --max-gen-toks N` lowers a task's own budget (AIME's 32,768) to N and keeps a smaller one."""
    from lm_eval.api.instance import Instance

    from snapeval.harness.lm_eval_model import cap_generation_budget

    def request(kwargs):
        return Instance(request_type="generate_until", doc={}, arguments=("prompt", kwargs), idx=0)

    aime, short, none = request({"max_gen_toks": 32768, "until": []}), request({"max_gen_toks": 32}), request({})
    cap_generation_budget([aime, short, none], 256, 1024)
    assert aime.args[1] == {"max_gen_toks": 256, "until": []}
    assert short.args[1] == {"max_gen_toks": 32} and none.args[1] == {"max_gen_toks": 256}


@pytest.mark.slow
def test_run_max_gen_toks_lowers_the_budget_in_a_real_run(tmp_path, tiny_dir):
    """Through evaluate(): a task whose YAML asks for 32 tokens generates at most the cap (one short passkey prompt:
    the task's default 60 prompts of up to 4,096 tokens would only add tokenizing)."""
    from snapeval.harness.evaluate import evaluate

    model_args = {"pretrained": str(tiny_dir), "method": "full", "max_gen_toks": 4}
    def budget(cap):
        out = evaluate(model_args, ["snapeval_passkey"], limit=1, max_gen_toks_cap=cap,
                       metadata={"max_seq_lengths": [256], "num_samples": 1})
        return out["samples"]["snapeval_passkey"][0]["arguments"][0][1]["max_gen_toks"]

    assert budget(None) == 32 and budget(4) == 4  # the task's own 32, then the cap
