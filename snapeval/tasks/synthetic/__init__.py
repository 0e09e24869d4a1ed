"""Synthetic long-context retrieval tasks (RULER / InfiniteBench style), generated from a seed.

Passkey retrieval, key-value needles (one, or several with distractors) and multi-hop variable tracking, at a
context length measured in tokens of the evaluated model's tokenizer (any object with ``encode``/``decode``: a
``transformers`` tokenizer, a ``tokenizers.Tokenizer``, or a test double). The haystack is RULER's "repeat" filler,
so only the needles carry information: this is where StreamingLLM-style eviction (which keeps the start and the
end) loses needles in the middle, and prompt-aware selection (SnapKV) keeps them.

Every sample reports where its needles are: the requested depth (0 = start of the haystack, 1 = end), the character
offset in the prompt and the token offset (tokens of the prompt before the needle).
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from snapeval.errors import SnapevalError, check_choice, is_int
from snapeval.tasks.families import TaskFamily
from snapeval.tasks.reasoning import split_thinking
from snapeval.tasks.tokens import Tokenizer, count_tokens

FILLER = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.")
TASKS = ("passkey", "kv_needle", "kv_needle_multi", "variable_tracking")
#: The task family this folder is (snapeval.tasks.families): tasks ``snapeval_<name>``, generated from a seed in
#: the evaluated model's tokens (no data file), at the lengths their configuration sets.
FAMILY = TaskFamily("snapeval", data=None, typical_lengths=None, hooks="snapeval.tasks.synthetic.hooks",
                    reference_reply=lambda doc: ", ".join(doc["answers"]))
#: Lengths that get their own ``score_<length>`` metric in the lm-eval tasks.
REPORTED_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)

_ADJ = ("amber", "brisk", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy", "jolly", "keen", "lucky",
        "misty", "noble", "olive", "proud", "quiet", "rapid", "silent", "tidy", "vivid", "wild", "young", "zesty")
_NOUN = ("anchor", "badger", "canyon", "dolphin", "ember", "falcon", "garden", "harbor", "island", "jungle",
         "kettle", "lantern", "meadow", "nectar", "orchard", "pepper", "quarry", "river", "saddle", "tunnel",
         "umbrella", "valley", "walnut", "yarrow")


@dataclass
class SyntheticSample:
    """One generated prompt. ``answers`` are the strings a correct output contains (all of them)."""

    task: str
    prompt: str
    answers: list[str]
    length: int
    tokens: int
    needle_depths: list[float]
    needle_char_offsets: list[int]
    needle_token_offsets: list[int]
    needles: list[str]
    seed: int
    index: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_doc(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.update(doc.pop("extra"))
        return doc


def _compose(tokenizer: Tokenizer, length: int, prefix: str, suffix: str, needles: Sequence[str],
             depths: Sequence[float], rng: random.Random) -> tuple[str, int, list[int]]:
    """Largest haystack such that the prompt has at most ``length`` tokens; needles at their depths (in order)."""
    start = rng.randrange(len(FILLER))

    def build(n: int) -> tuple[str, list[int]]:
        sentences = [FILLER[(start + i) % len(FILLER)] for i in range(n)]
        slots = sorted(zip((min(n, round(d * n)) for d in depths), range(len(needles))))
        parts, offsets, pos, cursor = [prefix], [0] * len(needles), len(prefix), 0
        for slot, k in slots:
            chunk = " ".join(sentences[cursor:slot])
            if chunk:
                parts.append(chunk + " ")
                pos += len(chunk) + 1
            offsets[k] = pos
            parts.append(needles[k] + " ")
            pos += len(needles[k]) + 1
            cursor = slot
        parts.append(" ".join(sentences[cursor:]))
        parts.append(suffix)
        return "".join(parts), offsets

    base_text, _ = build(0)
    base = count_tokens(tokenizer, base_text)
    if base > length:
        raise SnapevalError(f"length={length} is too small for this task: the prompt without filler has {base} tokens")
    per = max(1e-3, count_tokens(tokenizer, " ".join(FILLER * 20)) / (len(FILLER) * 20))
    lo, hi = 0, int((length - base) / per * 1.25) + 8
    while count_tokens(tokenizer, build(hi)[0]) <= length:  # make sure hi is above the answer
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # invariant: build(lo) fits, build(hi) does not
        mid = (lo + hi) // 2
        if count_tokens(tokenizer, build(mid)[0]) <= length:
            lo = mid
        else:
            hi = mid
    text, offsets = build(lo)
    return text, count_tokens(tokenizer, text), offsets


def _rng(task: str, seed: int, length: int, index: int) -> random.Random:
    return random.Random(f"snapeval-synthetic:{task}:{seed}:{length}:{index}")


def _sample(task: str, tokenizer: Tokenizer, length: int, seed: int, index: int, rng: random.Random, prefix: str,
            suffix: str, needles: list[str], depths: list[float], answers: list[str], **extra: Any) -> SyntheticSample:
    text, tokens, offsets = _compose(tokenizer, length, prefix, suffix, needles, depths, rng)
    token_offsets = [count_tokens(tokenizer, text[:off]) for off in offsets]
    return SyntheticSample(task, text, answers, length, tokens, list(depths), offsets, token_offsets, needles,
                           seed, index, dict(extra))


def _depths(rng: random.Random, k: int, depth: float | Sequence[float] | None) -> list[float]:
    if depth is None:
        return [rng.random() for _ in range(k)]
    values = [float(depth)] * k if isinstance(depth, (int, float)) else [float(d) for d in depth]
    if len(values) != k or any(not 0.0 <= d <= 1.0 for d in values):
        raise SnapevalError(f"depth={depth!r} is not allowed; give {k} value(s) in [0, 1]")
    return values


def passkey(tokenizer: Tokenizer, length: int, *, seed: int = 0, index: int = 0,
            depth: float | None = None) -> SyntheticSample:
    """Passkey retrieval: a 5-digit key hidden once in the filler."""
    rng = _rng("passkey", seed, length, index)
    key = str(rng.randint(10000, 99999))
    return _sample(
        "passkey", tokenizer, length, seed, index, rng,
        prefix=("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
                "I will quiz you about the important information there.\n\n"),
        suffix="\n\nWhat is the pass key? The pass key is",
        needles=[f"The pass key is {key}. Remember it. {key} is the pass key."],
        depths=_depths(rng, 1, depth), answers=[key])


def _key(rng: random.Random, taken: set[str]) -> str:
    while True:
        key = f"{rng.choice(_ADJ)}-{rng.choice(_NOUN)}"
        if key not in taken:
            taken.add(key)
            return key


def kv_needle(tokenizer: Tokenizer, length: int, *, num_needles: int = 1, num_queries: int = 1, seed: int = 0,
              index: int = 0, depth: float | Sequence[float] | None = None) -> SyntheticSample:
    """Key-value needles (RULER NIAH): ``num_needles`` "magic number" facts; ``num_queries`` of them are asked for,
    the others are distractors. The answers are the queried values."""
    if not 1 <= num_queries <= num_needles:
        raise SnapevalError(f"num_queries={num_queries} must be between 1 and num_needles={num_needles}")
    task = "kv_needle" if num_needles == 1 else "kv_needle_multi"
    rng = _rng(task, seed, length, index)
    taken: set[str] = set()
    keys = [_key(rng, taken) for _ in range(num_needles)]
    values = [str(rng.randint(1_000_000, 9_999_999)) for _ in keys]
    asked = sorted(rng.sample(range(num_needles), num_queries))
    query = ", ".join(keys[i] for i in asked)
    if num_queries == 1:
        suffix = (f"\nWhat is the special magic number for {query} mentioned in the provided text? "
                  f"The special magic number for {query} mentioned in the provided text is")
    else:
        suffix = (f"\nWhat are the special magic numbers for {query} mentioned in the provided text? "
                  f"The special magic numbers for {query} mentioned in the provided text are")
    return _sample(
        task, tokenizer, length, seed, index, rng,
        prefix=("Some special magic numbers are hidden within the following text. Make sure to memorize it. "
                "I will quiz you about the numbers afterwards.\n"),
        suffix=suffix,
        needles=[f"One of the special magic numbers for {k} is: {v}." for k, v in zip(keys, values)],
        depths=_depths(rng, num_needles, depth), answers=[values[i] for i in asked],
        queried_keys=[keys[i] for i in asked])


def variable_tracking(tokenizer: Tokenizer, length: int, *, num_hops: int = 4, seed: int = 0, index: int = 0,
                      depth: Sequence[float] | None = None) -> SyntheticSample:
    """Multi-hop variable tracking (RULER VT): ``VAR A = 12345. VAR B = VAR A. ...`` spread over the filler, in
    order; the answer is every variable of the chain."""
    if num_hops < 1:
        raise SnapevalError(f"num_hops={num_hops} must be at least 1")
    rng = _rng("variable_tracking", seed, length, index)
    names: list[str] = []
    while len(names) < num_hops + 1:
        name = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))
        if name not in names:
            names.append(name)
    value = str(rng.randint(10000, 99999))
    needles = [f"VAR {names[0]} = {value}."] + [f"VAR {b} = VAR {a}." for a, b in zip(names, names[1:])]
    depths = sorted(_depths(rng, len(needles), depth))
    return _sample(
        "variable_tracking", tokenizer, length, seed, index, rng,
        prefix="Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n",
        suffix=(f"\nQuestion: Find all variables that are assigned the value {value} in the text above. "
                f"Answer: According to the chain(s) of variable assignment in the text above, {len(names)} "
                f"variables are assigned the value {value}, they are:"),
        needles=needles, depths=depths, answers=names, value=value)


_GENERATORS: dict[str, Callable[..., SyntheticSample]] = {
    "passkey": passkey,
    "kv_needle": kv_needle,
    "kv_needle_multi": lambda tok, length, **kw: kv_needle(tok, length, num_needles=4, num_queries=2, **kw),
    "variable_tracking": variable_tracking,
}


def generate(task: str, tokenizer: Tokenizer, lengths: Sequence[int], num_samples: int, *,
             seed: int = 0) -> list[SyntheticSample]:
    """``num_samples`` samples per length. Single-needle tasks spread the needle evenly over depths
    ``(i + 0.5) / num_samples``; the others draw depths from the seed."""
    check_choice("task", task, TASKS)
    if num_samples < 1:
        raise SnapevalError(f"num_samples={num_samples} must be at least 1")
    out = []
    for length in lengths:
        if not is_int(length) or length < 1:
            raise SnapevalError(f"max_seq_lengths entry {length!r} must be a positive integer")
        for i in range(num_samples):
            kw: dict[str, Any] = {"seed": seed, "index": i}
            if task in ("passkey", "kv_needle"):
                kw["depth"] = (i + 0.5) / num_samples
            out.append(_GENERATORS[task](tokenizer, length, **kw))
    return out


def score(doc: dict, response: str, *, assume_thinking: bool = False) -> dict[str, float | None]:
    """``score``: fraction of the answers found in the output (after the thinking section), case-insensitive;
    ``score_<length>`` for the doc's own length (``None`` for the others); ``truncated_in_thinking``."""
    _, text, cut = split_thinking(response, assume_thinking=assume_thinking)
    text = text.lower()
    value = sum(a.lower() in text for a in doc["answers"]) / len(doc["answers"])
    out: dict[str, float | None] = {"score": value, "truncated_in_thinking": float(cut)}
    out.update({f"score_{n}": (value if doc["length"] == n else None) for n in REPORTED_LENGTHS})
    return out
