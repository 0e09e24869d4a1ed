"""The two forward passes every generation path takes (gpt-fast's ``prefill`` and ``decode_one_token``), and the one
set of tokens that ends a generation.

``prefill`` runs a prompt through a cache (a compressed cache compresses it at its end; a press compresses in its own
hooks) and returns the last position's logits; ``decode_step`` runs one token per row at explicit positions (a
compressed cache is shorter than the sequence, so positions never come from the cache's length). Shapes: ids and
positions ``[B, T]``, logits ``[B, V]``. Both run under the caller's ``torch.inference_mode()`` (a compiled step
may not enter it itself).
"""
from __future__ import annotations

import torch


def stop_token_ids(model, tokenizer) -> frozenset[int]:
    """The tokens that end a generation: the tokenizer's eos and every eos of the model's generation config."""
    eos = model.generation_config.eos_token_id
    eos = list(eos) if isinstance(eos, (list, tuple)) else [eos]
    return frozenset(int(t) for t in [tokenizer.eos_token_id, *eos] if t is not None)


def pad_token_id(tokenizer) -> int:
    """The token a padded or finished row is fed: the tokenizer's pad token, else its eos token."""
    return int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)


def prefill(model, cache, input_ids: torch.Tensor, *, attention_mask: torch.Tensor | None = None,
            position_ids: torch.Tensor | None = None, cache_position: torch.Tensor | None = None) -> torch.Tensor:
    """Run the prompts ``input_ids`` ``[B, L]`` (left-padded, with their ``attention_mask``) through ``cache``;
    returns the logits ``[B, V]`` of their last position. A cache that compresses inside its own prefill (a kvpress
    press, :meth:`~snapeval.cache.kvpress_cache.KVPressCache.prefill`) runs it, one unpadded row."""
    if hasattr(cache, "prefill"):
        return cache.prefill(model, input_ids)[None]
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                cache_position=cache_position, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1]


def decode_step(model, cache, tokens: torch.Tensor, positions: torch.Tensor, *,
                attention_mask: torch.Tensor | None = None, cache_position: torch.Tensor | None = None
                ) -> torch.Tensor:
    """One decode step of every row of ``cache``: ``tokens`` ``[B, 1]`` at ``positions`` ``[B, 1]`` (each row's next
    position); ``attention_mask`` ``[B, L + t]`` for a cache that needs the padding (the full cache of left-padded
    rows) and ``cache_position`` ``[1]`` (``L + t``, as ``model.generate`` counts; None: the model reads it from the
    cache). Returns the logits ``[B, V]``."""
    out = model(input_ids=tokens, position_ids=positions, attention_mask=attention_mask, past_key_values=cache,
                cache_position=cache_position, use_cache=True)
    return out.logits[:, -1]
