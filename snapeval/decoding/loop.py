"""The decode loop of a static batch: rows prefilled together decode together until each request stops.

:func:`snapeval.generate` (left-padded batches), a branch that decodes alone (:mod:`snapeval.branching`) and the
target of speculative prefill run it; the continuous-batching engine runs the same :func:`~snapeval.decoding.step.
decode_step` and the same stop check (:meth:`~snapeval.decoding.requests.Request.check_stop`) inside its scheduler,
which refills a finished row instead of stepping it.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from snapeval.decoding.requests import Request
from snapeval.decoding.sampling import choose
from snapeval.decoding.step import decode_step


@torch.inference_mode()
def decode(model, tokenizer, cache, logits: torch.Tensor, requests: Sequence[Request], positions: torch.Tensor, *,
           stops: frozenset[int], pad_id: int, attention_mask: torch.Tensor | None = None,
           cache_position: int | None = None, min_new_tokens: int = 0,
           on_step: Callable[[], None] | None = None) -> list[float]:
    """Decode every row of ``cache`` from ``logits`` ``[B, V]`` (its prefill's last position) until each row's
    request stops (:meth:`~snapeval.decoding.requests.Request.check_stop`: a token of ``stops``, a stop string, or
    ``max_new_tokens``); a finished row is fed ``pad_id`` while the others go on, as Hugging Face's ``generate``
    does. ``positions`` ``[B]``: each row's next position; ``attention_mask`` ``[B, L]`` grows by one column per step
    (for a cache that reads the padding), and step ``t`` runs at cache position ``cache_position + t`` (the padded
    prompt's length: ``model.generate``'s counter; None: the model reads it from the cache). ``min_new_tokens``:
    a row's stop tokens are forbidden before it has that many (Hugging Face's ``MinNewTokensLengthLogitsProcessor``).
    ``on_step()`` runs whenever a step's logits are ready (the prefill's
    included). Returns those times (``time.perf_counter``)."""
    device = logits.device
    positions = positions.to(device).clone()
    tokens = torch.full((len(requests), 1), pad_id, dtype=torch.long, device=device)
    active = set(range(len(requests)))
    times = [time.perf_counter()]
    if on_step is not None:
        on_step()
    forbidden = torch.tensor(sorted(stops), dtype=torch.long, device=device)
    step = 0
    while True:
        for row in sorted(active):
            request = requests[row]
            row_logits = logits[row]
            if len(request.token_ids) < min_new_tokens and len(forbidden):
                row_logits = row_logits.index_fill(0, forbidden, float("-inf"))
            token = choose(row_logits, request.params, request.stream)
            tokens[row, 0] = token
            if request.check_stop(token, stops, tokenizer):
                active.discard(row)
        if not active:
            return times
        for row in range(len(requests)):
            if row not in active:
                tokens[row, 0] = pad_id
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(requests), 1)], dim=1)
        at = None if cache_position is None else torch.tensor([cache_position + step], device=device)
        logits = decode_step(model, cache, tokens, positions[:, None], attention_mask=attention_mask, cache_position=at)
        positions += 1
        step += 1
        times.append(time.perf_counter())
        if on_step is not None:
            on_step()
