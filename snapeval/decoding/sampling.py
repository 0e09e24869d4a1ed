"""Per-request token choice: greedy argmax, or temperature / top-k / top-p sampling from a private generator."""
from __future__ import annotations

import torch

from snapeval.decoding.requests import SamplingParams


def request_generator(params: SamplingParams, base_seed: int, index: int, device) -> torch.Generator | None:
    """A sampled request's private ``torch.Generator``, seeded by ``params.seed`` or else ``base_seed + index`` (so
    sampled tokens do not depend on which requests share a batch); ``None`` for greedy requests."""
    if not params.do_sample:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(params.seed if params.seed is not None else base_seed + index)
    return generator


def filtered_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """``logits`` ``[V]`` -> float32 logits scaled by the temperature, with tokens outside top-k / top-p at -inf.

    top-p keeps the smallest set of most likely tokens whose probability reaches ``top_p`` (the most likely token
    always survives), as Hugging Face's ``TopPLogitsWarper`` does.
    """
    logits = logits.float() / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative - sorted_logits.softmax(-1) >= params.top_p  # mass before this token already enough
        logits = logits.masked_fill(drop.scatter(0, order, drop), float("-inf"))
    return logits


def choose(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """The next token of one request from its ``[V]`` logits."""
    if not params.do_sample:
        return int(logits.argmax())
    probs = filtered_logits(logits, params).softmax(-1)
    return int(torch.multinomial(probs, 1, generator=generator))
