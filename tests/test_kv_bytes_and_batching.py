import pytest
import torch

from snapeval import SnapStreamConfig, generate
from snapeval.cache import StreamingLLMConfig
from snapeval.cache import make_cache
from snapeval.errors import SnapevalError
from tests.conftest import random_prompt, tiny_model


def test_kv_bytes_formula_and_constant_through_a_long_decode(tiny_tokenizer):
    model = tiny_model("llama", layers=3, heads=4, kv_heads=2)
    cfg = SnapStreamConfig(sink=4, recent=24, topk=12, observation=8)
    cache = make_cache(model, cfg)
    out = model(torch.tensor([random_prompt(100, seed=9)]), past_key_values=cache)
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    expected = cfg.budget * 3 * 2 * head_dim * 2 * 8  # budget x layers x KV heads x head dim x (K,V) x float64
    assert cache.kv_bytes() == expected
    storage = [l.keys.data_ptr() for l in cache.layers]
    token = out.logits[:, -1:].argmax(-1)
    for _ in range(200):
        token = model(token, past_key_values=cache).logits[:, -1:].argmax(-1)
        assert cache.kv_bytes() == expected
    assert [l.keys.data_ptr() for l in cache.layers] == storage  # written in place, never reallocated
    result = generate(model, tiny_tokenizer, [random_prompt(100, seed=9)], config=cfg, max_new_tokens=50)
    assert result[0].kv_bytes == expected


def test_snapkv_cache_grows_and_full_cache_counts_every_token(tiny_tokenizer):
    model = tiny_model("llama")
    prompt = random_prompt(80, seed=10)
    snapkv = generate(model, tiny_tokenizer, [prompt], config=32, method="snapkv", max_new_tokens=10)
    per_token = 2 * 2 * 16 * 2 * 8  # layers x KV heads x head dim x (K,V) x float64
    assert snapkv[0].kv_bytes == (32 + 9) * per_token  # the last generated token is never fed back
    full = generate(model, tiny_tokenizer, [prompt], config=None, max_new_tokens=10)
    assert full[0].kv_bytes == (80 + 9) * per_token


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("method, config", [
    ("snapstream", SnapStreamConfig(sink=2, recent=10, topk=8, observation=6)),
    ("streamingllm", StreamingLLMConfig(sink=2, recent=16)),
    ("snapkv", 20),
    ("full", None),
])
def test_batched_equals_each_row_alone(family, method, config, tiny_tokenizer):
    model = tiny_model(family)
    prompts = [random_prompt(n, seed=n) for n in (70, 23, 45, 8)]
    batched = generate(model, tiny_tokenizer, prompts, config=config, method=method, max_new_tokens=15)
    for i, prompt in enumerate(prompts):
        alone = generate(model, tiny_tokenizer, [prompt], config=config, method=method, max_new_tokens=15)
        assert batched[i].token_ids == alone[0].token_ids, i
        assert batched[i].prompt_tokens == len(prompt)
        if method != "full":  # the prefill selection (rows may decode for different numbers of steps)
            fixed = _prefill_slots(config, len(prompt))
            assert torch.equal(batched[i].slot_positions(0)[:, fixed], alone[0].slot_positions(0)[:, fixed])


def _prefill_slots(config, prompt_len):
    if isinstance(config, int):  # snapkv: the first min(budget, L) slots
        return slice(0, min(config, prompt_len))
    return [*range(config.sink), *range(config.sink + config.recent, config.budget)]


def test_unsupported_architecture_is_a_clear_error():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    with pytest.raises(SnapevalError, match=r"'gpt2' is not supported.*llama.*qwen2"):
        make_cache(model, SnapStreamConfig.from_budget(64))


def test_generate_rejects_bad_arguments(tiny_tokenizer):
    model = tiny_model("llama")
    with pytest.raises(SnapevalError, match="method='lru'"):
        generate(model, tiny_tokenizer, [[5, 6, 7]], config=64, method="lru")
    with pytest.raises(SnapevalError, match="max_new_tokens=0"):
        generate(model, tiny_tokenizer, [[5, 6, 7]], config=64, max_new_tokens=0)
