"""The paper's Figure 4: 26-token prompt, 1 sink, a ring of 4, no top-k (positions here are 0-based)."""
import torch

from snapeval import SnapStreamConfig
from snapeval.cache import StreamingLLMConfig
from snapeval.cache import make_cache
from snapeval.cache.snapstream import ring_slot
from tests.conftest import random_prompt, tiny_model


def test_figure4_ring_contents_and_eviction():
    model = tiny_model("llama")
    cfg = StreamingLLMConfig(sink=1, recent=4)
    cache = make_cache(model, cfg)
    prompt = torch.tensor([random_prompt(26, seed=4)])
    out = model(prompt, past_key_values=cache)
    # Paper, 1-based: ring slots 1..4 hold tokens [25, 26, 23, 24]  ->  0-based positions [24, 25, 22, 23].
    for layer in range(len(cache.layers)):
        pos = cache.slot_positions(layer)[0]
        assert pos.shape == (model.config.num_key_value_heads, 5)
        assert pos[:, 0].eq(0).all()  # the sink
        assert pos[0, 1:].tolist() == [24, 25, 22, 23]
    token = out.logits[:, -1:].argmax(-1)
    history = list(range(26))
    for step in range(10):
        before = cache.slot_positions(0)[0, 0].tolist()
        out = model(token, past_key_values=cache)
        token = out.logits[:, -1:].argmax(-1)
        new_position = 26 + step
        history.append(new_position)
        after = cache.slot_positions(0)[0, 0].tolist()
        oldest = min(before[1:])
        assert after[0] == 0  # sinks never change
        changed = [i for i in range(5) if before[i] != after[i]]
        assert changed == [before.index(oldest)]  # exactly the oldest ring entry was replaced
        assert after[changed[0]] == new_position
        assert sorted(after[1:]) == history[-4:]  # the ring holds exactly the last 4 tokens
    # 1-based token 27 (0-based 26) overwrote token 23 (0-based 22), as in the figure
    assert int(ring_slot(torch.tensor(26), 1, 4)) == 3


def test_topk_and_sink_slots_are_never_written_during_decode():
    model = tiny_model("qwen2")
    cache = make_cache(model, SnapStreamConfig(sink=2, recent=8, topk=6, observation=4))
    out = model(torch.tensor([random_prompt(60, seed=5)]), past_key_values=cache)
    fixed = torch.cat([cache.slot_positions(1)[..., :2], cache.slot_positions(1)[..., 10:]], dim=-1)
    keys_before = cache.layers[1].keys.clone()
    token = out.logits[:, -1:].argmax(-1)
    for _ in range(20):
        token = model(token, past_key_values=cache).logits[:, -1:].argmax(-1)
    pos = cache.slot_positions(1)
    assert torch.equal(torch.cat([pos[..., :2], pos[..., 10:]], dim=-1), fixed)
    assert torch.equal(cache.layers[1].keys[..., 10:, :], keys_before[..., 10:, :])
    assert sorted(pos[0, 0, 2:10].tolist()) == list(range(72, 80))


def test_short_prompt_leaves_topk_slots_empty_and_masked():
    model = tiny_model("llama")
    cfg = SnapStreamConfig(sink=4, recent=32, topk=16, observation=8)
    cache = make_cache(model, cfg)
    ids = torch.tensor([random_prompt(10, seed=6)])
    model(ids, past_key_values=cache)
    pos = cache.slot_positions(0)[0]
    assert (pos[:, 36:] == -1).all()  # no middle tokens: top-k empty
    assert sorted(p for p in pos[0].tolist() if p >= 0) == list(range(10))
    # empty slots are masked: generation equals the uncompressed model
    ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False)
    cache = make_cache(model, cfg)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False, past_key_values=cache)
    assert torch.equal(out, ref)


def test_multi_token_append_equals_token_by_token_decode():
    """Scoring a continuation in one forward sees exactly what decoding it token by token would."""
    model = tiny_model("llama")
    cfg = SnapStreamConfig(sink=2, recent=6, topk=5, observation=4)
    prompt, continuation = random_prompt(50, seed=7), random_prompt(15, seed=8)
    one = make_cache(model, cfg)
    model(torch.tensor([prompt]), past_key_values=one)
    chunk_logits = model(torch.tensor([continuation]), past_key_values=one).logits[0]
    two = make_cache(model, cfg)
    model(torch.tensor([prompt]), past_key_values=two)
    step_logits = torch.cat([model(torch.tensor([[t]]), past_key_values=two).logits[0] for t in continuation])
    torch.testing.assert_close(chunk_logits, step_logits)
    assert torch.equal(one.slot_positions(0), two.slot_positions(0))


def test_grouped_decode_attention_equals_repeated_kv_sdpa():
    """The masked decode step folds each KV group's query heads into queries instead of copying K/V per head."""
    from transformers.integrations.sdpa_attention import repeat_kv

    from snapeval.cache.attention import grouped_decode_attention

    g = torch.Generator().manual_seed(0)
    query = torch.randn(3, 8, 1, 16, generator=g, dtype=torch.float64)  # [B, Hq, 1, D], 4 query heads per KV head
    key, value = (torch.randn(3, 2, 40, 16, generator=g, dtype=torch.float64) for _ in range(2))  # [B, Hkv, S, D]
    mask = torch.rand(3, 1, 1, 40, generator=g) > 0.3  # [B, 1, 1, S]; row 2 keeps only its first slot
    mask[2] = False
    mask[2, ..., 0] = True
    out = grouped_decode_attention(query, key, value, mask, scaling=0.25)
    reference = torch.nn.functional.scaled_dot_product_attention(
        query, repeat_kv(key, 4), repeat_kv(value, 4), attn_mask=mask, scale=0.25).transpose(1, 2)
    assert out.shape == (3, 1, 8, 16)
    torch.testing.assert_close(out, reference, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out[2, 0], value[2, :, 0].repeat_interleave(4, dim=0))  # only slot 0: its value
