"""Synthetic generators: deterministic, needles where they say, lengths on target in the model's tokens."""
from __future__ import annotations

import pytest

from snapeval.errors import SnapevalError
from snapeval.tasks import synthetic


class WordTokenizer:
    """One token per whitespace-separated word (ids from a shared vocabulary)."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def encode(self, text, add_special_tokens=False):
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]

    def decode(self, ids, skip_special_tokens=True):
        inv = {v: k for k, v in self.vocab.items()}
        return " ".join(inv[i] for i in ids)


class CharTokenizer:
    """One token per character, ``tokenizers``-style (``encode`` returns an object with ``.ids``)."""

    class _Enc:
        def __init__(self, ids):
            self.ids = ids

    def encode(self, text):
        return self._Enc([ord(c) for c in text])

    def decode(self, ids):
        return "".join(map(chr, ids))


@pytest.fixture(params=[WordTokenizer, CharTokenizer], ids=["words", "chars"])
def tok(request):
    return request.param()


@pytest.mark.parametrize("task", synthetic.TASKS)
def test_deterministic_and_seed_sensitive(task, tok):
    a = synthetic.generate(task, tok, [900], 3, seed=7)
    b = synthetic.generate(task, tok, [900], 3, seed=7)
    c = synthetic.generate(task, tok, [900], 3, seed=8)
    assert [s.to_doc() for s in a] == [s.to_doc() for s in b]
    assert [s.answers for s in a] != [s.answers for s in c]


@pytest.mark.parametrize("task", synthetic.TASKS)
@pytest.mark.parametrize("length", [900, 3000])
def test_lengths_and_needle_positions(task, length, tok):
    for s in synthetic.generate(task, tok, [length], 4, seed=1):
        assert length * 0.97 <= s.tokens <= length, (s.tokens, length)
        assert s.tokens == synthetic.count_tokens(tok, s.prompt)
        for needle, char_off, tok_off, depth in zip(s.needles, s.needle_char_offsets, s.needle_token_offsets,
                                                      s.needle_depths):
            assert s.prompt[char_off:char_off + len(needle)] == needle
            assert tok_off == synthetic.count_tokens(tok, s.prompt[:char_off])
            before = sum(s.prompt[:char_off].count(f) for f in synthetic.FILLER)
            total = sum(s.prompt.count(f) for f in synthetic.FILLER)
            assert abs(before - depth * total) <= 0.5 + 1e-9  # the needle sits round(depth * n) sentences in
        for answer in s.answers:
            assert answer in s.prompt


def test_single_needle_depths_are_spread_and_reported(tok):
    samples = synthetic.generate("passkey", tok, [800], 4)
    assert [s.needle_depths[0] for s in samples] == [0.125, 0.375, 0.625, 0.875]
    offsets = [s.needle_char_offsets[0] for s in samples]
    assert offsets == sorted(offsets)
    explicit = synthetic.passkey(tok, 800, depth=0.0)
    assert explicit.needle_token_offsets[0] == synthetic.count_tokens(tok, explicit.prompt.split("The pass key")[0])


def test_variable_tracking_chain_order_and_multi_queries(tok):
    vt = synthetic.variable_tracking(tok, 1000, num_hops=3, seed=3)
    assert len(vt.answers) == 4 and vt.needle_char_offsets == sorted(vt.needle_char_offsets)
    assert vt.needles[0] == f"VAR {vt.answers[0]} = {vt.extra['value']}."
    multi = synthetic.kv_needle(tok, 1000, num_needles=4, num_queries=2, seed=3)
    assert len(multi.needles) == 4 and len(multi.answers) == 2 and len(multi.extra["queried_keys"]) == 2
    assert all(k in multi.prompt.split("\n")[-1] for k in multi.extra["queried_keys"])


def test_bad_arguments(tok):
    with pytest.raises(SnapevalError, match="length=5 is too small"):
        synthetic.passkey(tok, 5)
    with pytest.raises(SnapevalError, match="task='ruler'"):
        synthetic.generate("ruler", tok, [100], 1)
    with pytest.raises(SnapevalError, match="num_queries=3"):
        synthetic.kv_needle(tok, 500, num_needles=2, num_queries=3)
    with pytest.raises(SnapevalError, match="depth=1.5"):
        synthetic.passkey(tok, 500, depth=1.5)
