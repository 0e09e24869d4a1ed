"""With room for every token, each compressed cache reproduces the uncompressed model exactly."""
import pytest
import torch

from snapeval import SnapStreamConfig, generate
from snapeval.cache import SnapKVConfig, StreamingLLMConfig, make_cache
from tests.conftest import random_prompt

# budget >= prompt + generated, and the ring alone holds everything after the sinks, so nothing is evicted
ROOMY = {
    "snapstream": SnapStreamConfig(sink=4, recent=64, topk=16, observation=8),
    "streamingllm": StreamingLLMConfig(sink=4, recent=80),
    "snapkv": SnapKVConfig(budget=48, observation=8),
}


@pytest.mark.parametrize("method", sorted(ROOMY))
def test_greedy_tokens_equal_full_cache(tiny, method):
    ids = torch.tensor([random_prompt(40, seed=1)])
    reference = tiny.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False)
    cache = make_cache(tiny, ROOMY[method])
    out = tiny.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False, past_key_values=cache)
    assert torch.equal(out, reference)


def test_sampling_with_a_seed_equals_full_cache(tiny, tiny_tokenizer):
    prompt = random_prompt(30, seed=2)
    kw = dict(max_new_tokens=16, do_sample=True, temperature=0.9, top_p=0.95, seed=7)
    full = generate(tiny, tiny_tokenizer, [prompt], config=None, **kw)
    snap = generate(tiny, tiny_tokenizer, [prompt], config=ROOMY["snapstream"], **kw)
    assert snap[0].token_ids == full[0].token_ids


def test_compression_changes_the_output_when_it_evicts(tiny, tiny_tokenizer):
    prompt = random_prompt(300, seed=3)
    full = generate(tiny, tiny_tokenizer, [prompt], config=None, max_new_tokens=12)
    small = generate(tiny, tiny_tokenizer, [prompt], config=SnapStreamConfig(sink=1, recent=8, topk=8, observation=8), max_new_tokens=12)
    logits_full = tiny(torch.tensor([prompt])).logits[0, -1]
    cache = make_cache(tiny, SnapStreamConfig(sink=1, recent=8, topk=8, observation=8))
    tiny(torch.tensor([prompt[:-1]]), past_key_values=cache)
    logits_small = tiny(torch.tensor([prompt[-1:]]), past_key_values=cache).logits[0, -1]
    assert not torch.allclose(logits_full, logits_small)
    assert full.generated_tokens > 0 and small.generated_tokens > 0


@pytest.mark.slow
def test_smollm2_greedy_equal_with_roomy_budget(smollm2):
    model, tokenizer = smollm2
    prompt = "Summarise in one sentence: the quick brown fox jumps over the lazy dog because it is late for dinner."
    full = generate(model, tokenizer, [prompt], config=None, chat=True, max_new_tokens=24)
    for method, config in [
        ("snapstream", SnapStreamConfig(sink=4, recent=128, topk=32)),
        ("streamingllm", StreamingLLMConfig(sink=4, recent=160)),
        ("snapkv", SnapKVConfig(budget=128, observation=32)),
    ]:
        out = generate(model, tokenizer, [prompt], config=config, method=method, chat=True, max_new_tokens=24)
        assert out[0].token_ids == full[0].token_ids, method
