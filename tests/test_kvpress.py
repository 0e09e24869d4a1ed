"""kvpress presses as methods: the same harness, the same budget semantics; SnapKV and StreamingLLM selections equal
to kvpress's own on the real SmolLM2."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

kvpress = pytest.importorskip("kvpress")

from snapeval.cache import SnapKVConfig, make_cache, resolve_method  # noqa: E402
from snapeval.engine import SamplingParams  # noqa: E402
from snapeval.errors import SnapevalError  # noqa: E402
from tests.conftest import TinyTokenizer, random_prompt, tiny_model  # noqa: E402
from tests.default_presses import DEFAULT_PRESSES  # noqa: E402

DATA = Path(os.environ.get("SNAPEVAL_DATA_DIR") or Path(__file__).resolve().parents[1].parent / "shared" / "data")


def _prefill(model, config, prompt):
    cache = make_cache(model, config)
    logits = cache.prefill(model, torch.tensor([prompt]))
    return logits, cache


@pytest.mark.parametrize("method, press_args", DEFAULT_PRESSES)
def test_every_press_keeps_the_budget_and_generates(method, press_args):
    from snapeval.branching import BranchSet

    model = tiny_model("llama")
    config = resolve_method(method, 24, **press_args)
    assert config.method == method and config.identity()["budget"] == 24
    prompt = random_prompt(60, seed=3)
    _, cache = _prefill(model, config, prompt)
    kept = [layer.keys.shape[2] for layer in cache.layers]
    assert sum(kept) / len(kept) == pytest.approx(24, abs=1), kept  # per layer and KV head on average
    short = random_prompt(10, seed=4)  # a prompt that fits is not compressed
    assert _prefill(model, config, short)[1].layers[0].keys.shape[2] == 10
    done = BranchSet(model, TinyTokenizer(), [config]).generate([prompt], [SamplingParams(max_new_tokens=5)])[0][0]
    assert 1 <= len(done.token_ids) <= 5 and done.kv_bytes > 0


def test_press_errors_are_one_line():
    with pytest.raises(SnapevalError, match=r"method='kvpress:NoSuchPress' is not allowed; kvpress presses: .*SnapKVPress"):
        resolve_method("kvpress:NoSuchPress", 64)
    with pytest.raises(SnapevalError, match=r"kvpress:SnapKVPress takes no argument 'windows'; allowed: .*window_size"):
        resolve_method("kvpress:SnapKVPress", 64, windows=3)
    with pytest.raises(SnapevalError, match=r"kvpress:SnapKVPress.window_size='x' is invalid; allowed: a int"):
        resolve_method("kvpress:SnapKVPress", 64, window_size="x")
    with pytest.raises(SnapevalError, match="needs a budget"):
        resolve_method("kvpress:TOVAPress")


def test_press_cells_in_a_sweep_config():
    from snapeval.sweep import expand_grid, parse_config

    config = parse_config({"models": ["smollm2-135m-instruct"], "tasks": ["snapeval_passkey"],
                           "methods": ["full", {"method": "kvpress:SnapKVPress", "budgets": [64, 128],
                                                "press": {"window_size": 16}}]})
    cells = expand_grid(config)
    assert [c.policy.label for c in cells] == ["full", "kvpress:SnapKVPress@64", "kvpress:SnapKVPress@128"]
    assert cells[1].identity()["policy"] == {"method": "kvpress:SnapKVPress", "budget": 64, "window_size": 16}
    assert not cells[1].shares_prefill  # a press prefills through its own hooks


def _longbench_prompts(tokenizer, lengths):
    rows = [json.loads(line) for line in open(DATA / "longbench_v2" / "longbench_v2.jsonl")][:10]
    out = []
    for length in lengths:
        ids = next(tokenizer(r["context"]).input_ids for r in rows if len(r["context"]) > 4 * length)
        out.append(ids[:length])
    return out


class Recorder:
    """Wraps a press's compress to record, per layer, the kept positions of every KV head."""

    def __init__(self, press):
        self.press, self.kept = press, {}
        original = press.compress

        def compress(module, hidden_states, keys, values, attentions, kwargs):
            from kvpress.utils import compute_n_kept

            scores = press.score(module, hidden_states, keys, values, attentions, kwargs)
            n_kept = compute_n_kept(keys.shape[2], press.compression_ratio)
            index = scores.topk(n_kept, dim=-1).indices[0]  # [H, n_kept]
            self.kept[module.layer_idx] = [set(map(int, row)) for row in index]
            return original(module, hidden_states, keys, values, attentions, kwargs)

        press.compress = compress


def assert_same_kept(model, ours, press, prompt):
    """Run ``press`` over ``prompt`` and check it keeps exactly the positions of our cache, in every layer and head."""
    from transformers import DynamicCache

    recorder = Recorder(press)
    with press(model):
        model(input_ids=torch.tensor([prompt]), past_key_values=DynamicCache(config=model.config))
    for layer in range(model.config.num_hidden_layers):
        mine = ours.slot_positions(layer)[0]
        for head in range(mine.shape[0]):
            assert set(map(int, mine[head])) == recorder.kept[layer][head], (layer, head)


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "longbench_v2" / "longbench_v2.jsonl").is_file(), reason="no LongBench-v2 data")
@pytest.mark.parametrize("length, window", [(2048, 32), (2048, 64)])
def test_snapkv_selection_equals_kvpress_on_smollm2(smollm2, length, window):
    """Same window, kernel 5, average pooling and kept count per layer and KV head: the same tokens in every layer
    and head (pooling only over the candidates before the window, as the reference code does)."""
    model, tokenizer = smollm2
    (prompt,) = _longbench_prompts(tokenizer, [length])
    budget = length // 4
    ours = make_cache(model, SnapKVConfig(budget=budget, observation=window, kernel=5, pooling="avg"))
    model(input_ids=torch.tensor([prompt]), past_key_values=ours)
    config = resolve_method("kvpress:SnapKVPress", budget, window_size=window, kernel_size=5)
    assert_same_kept(model, ours, config.make_press(len(prompt)), prompt)


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "longbench_v2" / "longbench_v2.jsonl").is_file(), reason="no LongBench-v2 data")
def test_streamingllm_selection_equals_kvpress_on_smollm2(smollm2):
    model, tokenizer = smollm2
    (prompt,) = _longbench_prompts(tokenizer, [1024])
    ours = make_cache(model, resolve_method("streamingllm", 256))
    model(input_ids=torch.tensor([prompt]), past_key_values=ours)
    assert_same_kept(model, ours, resolve_method("kvpress:StreamingLLMPress", 256, n_sink=4).make_press(len(prompt)),
                     prompt)


def test_unsupported_architecture_is_refused_before_loading(tmp_path):
    from snapeval.harness.lm_eval_model import SnapStreamLM

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(SnapevalError, match=r"is a 'gpt2' model; method='kvpress:TOVAPress' supports: llama, qwen2"):
        SnapStreamLM(pretrained=str(tmp_path), method="kvpress:TOVAPress", budget=64)


def test_plain_generate_refuses_a_press_it_cannot_apply():
    from snapeval import generate

    with pytest.raises(SnapevalError, match="prefills through its own hooks"):
        generate(tiny_model("llama"), TinyTokenizer(), [[5, 6, 7]], config=resolve_method("kvpress:TOVAPress", 16))
