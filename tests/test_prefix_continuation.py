"""A prefilled prefix continued with a suffix holds the whole prompt, as one prefill of it would; prompts that share
a prefix (LongBench-v2's second pass) decode exactly as each configuration prefilling its whole prompt alone."""
from __future__ import annotations

import pytest
import torch

from snapeval.branching import BranchSet, shared_prefix
from snapeval.cache import FullConfig, SnapKVConfig, SnapStreamConfig, StreamingLLMConfig
from snapeval.cache.capture import PromptCapture
from snapeval.engine import SamplingParams
from tests.conftest import TinyTokenizer, random_prompt, tiny_model

CONFIGS = [FullConfig(), SnapStreamConfig.from_budget(16), StreamingLLMConfig.from_budget(12),
           SnapKVConfig.from_budget(16)]


def _capture(model, prompt, window=8, prefix=None):
    capture = PromptCapture(model, window) if prefix is None else prefix.continued(model)
    logits = model(input_ids=torch.tensor([prompt]), past_key_values=capture, use_cache=True, logits_to_keep=1).logits
    return logits[0, -1], capture


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("split", [1, 5, 40, 59])
def test_prefix_then_suffix_equals_the_whole_prompt(family, split):
    model = tiny_model(family, heads=6, kv_heads=2)
    prompt = random_prompt(60, seed=3)
    whole_logits, whole = _capture(model, prompt)
    _, prefix = _capture(model, prompt[:split])
    logits, continued = _capture(model, prompt[split:], prefix=prefix)
    assert continued.prompt_length == 60 and prefix.prompt_length == split  # the prefix is left as it was
    torch.testing.assert_close(logits, whole_logits, rtol=0, atol=1e-10)
    for a, b in zip(continued.prompts, whole.prompts):
        for name in ("keys", "values", "queries"):
            torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=1e-10)
        assert torch.equal(a.key_valid, b.key_valid) and a.scaling == b.scaling


def test_a_capture_continues_twice_and_refuses_padding():
    model = tiny_model("llama")
    prompt = random_prompt(30, seed=1)
    _, prefix = _capture(model, prompt[:20])
    first = _capture(model, prompt[20:], prefix=prefix)[1].prompts[0].keys
    second = _capture(model, prompt[20:], prefix=prefix)[1].prompts[0].keys
    assert torch.equal(first, second)
    padded = PromptCapture(model, 4)
    ids = torch.tensor([prompt[:10], prompt[:10]])
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    model(input_ids=ids, attention_mask=mask, past_key_values=padded, use_cache=True)
    with pytest.raises(ValueError, match="one-row, unpadded"):
        padded.continued(model)


def test_shared_prefix_leaves_every_prompt_a_suffix():
    assert shared_prefix([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert shared_prefix([[1, 2, 3], [1, 2, 3]]) == 2
    assert shared_prefix([[7, 2], [1, 2]]) == 0


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_each_configuration_decodes_its_own_prompt_as_if_alone(family):
    from snapeval import generate

    model = tiny_model(family)
    head = [random_prompt(n, seed=n) for n in (30, 22, 41)]
    # every configuration continues the same head with its own suffix (its own first-pass reasoning)
    prompts = [[h + random_prompt(5 + 3 * c + i, seed=100 * c + i) for i, h in enumerate(head)] for c in range(len(CONFIGS))]
    params = [SamplingParams(max_new_tokens=k) for k in (9, 4, 7)]
    branches = BranchSet(model, TinyTokenizer(), CONFIGS, batch=2)
    out = branches.generate_each(prompts, params)
    for c, config in enumerate(CONFIGS):
        for i, p in enumerate(params):
            alone = generate(model, TinyTokenizer(), [prompts[c][i]], config=config, max_new_tokens=p.max_new_tokens)[0]
            assert out[c][i].token_ids == alone.token_ids, (config, i)
            assert out[c][i].index == i
    # one prefix prefill per item, then one suffix per configuration and item: the head is never computed twice
    assert branches.stats.prefills == 3 + 3 * len(CONFIGS)
    assert branches.stats.prefill_tokens == sum(len(h) for h in head) + sum(
        len(prompts[c][i]) - len(head[i]) for c in range(len(CONFIGS)) for i in range(3))


def test_generate_each_checks_its_shape():
    branches = BranchSet(tiny_model("llama"), TinyTokenizer(), CONFIGS)
    with pytest.raises(ValueError, match="one list of 1 prompts per configuration"):
        branches.generate_each([[[5, 6, 7]]], [SamplingParams(max_new_tokens=2)])
