"""A prefill that compresses nothing and keeps what every method needs to compress later.

:class:`PromptCapture` is a cache for one prefill: attention runs exactly as it does for any compressed cache (full
causal attention over the prompt), and at the end of each layer it keeps that layer's prompt keys and values, the
last ``queries`` queries and the padding (a :class:`~snapeval.cache.base.LayerPrompt`). Any number of caches of any
method and budget are then built from it with ``cache.load_prompt(capture.prompts)``; SnapKV's window attention is
computed once per layer and window size and shared by all of them.

A capture can also be *continued* (:meth:`PromptCapture.continued`): prompts that share a prefix (LongBench-v2's
second pass: one question, each configuration's own reasoning) prefill the prefix once; each continuation then runs
only its own suffix, attending to the prefix's keys and values, and holds the whole prompt as if it had been
prefilled at once (the same keys, values and window queries, up to float rounding).
"""
from __future__ import annotations

import torch

from snapeval.cache.attention import PendingAttention, hand_off
from snapeval.cache.base import CompressedKVCache, CompressedLayer, LayerPrompt


class CaptureLayer(CompressedLayer):
    #: The prefilled prefix this layer continues (:meth:`PromptCapture.continued`), or None.
    prefix: LayerPrompt | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, cache_kwargs=None):
        """A continuation's prefill: the suffix's keys ``[1, Hkv, T, D]`` join the prefix's, and attention sees
        both (Hugging Face's causal mask, offset by the prefix length this layer reports)."""
        if self.prefix is None or self.positions is not None:
            return super().update(key_states, value_states, cache_kwargs)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.seen += key_states.shape[2]
        keys = torch.cat([self.prefix.keys, key_states], dim=2)
        values = torch.cat([self.prefix.values, value_states], dim=2)
        self._prompt = (keys, values)
        hand_off(PendingAttention(self.layer_idx, after=self.compress, replace_mask=False))
        return keys, values

    def compress(self, query: torch.Tensor, hf_mask, scaling: float) -> None:
        if self.prefix is not None:  # the window may reach back into the prefix's last queries
            query = torch.cat([self.prefix.queries, query], dim=2)
            self.prefix = None
        super().compress(query, hf_mask, scaling)

    def build(self, prompt: LayerPrompt) -> None:
        keep = min(self.config, prompt.queries.shape[2])
        self.prompt = LayerPrompt(prompt.keys, prompt.values, prompt.queries[:, :, -keep:].clone(), prompt.key_valid,
                                  prompt.scaling)
        self.positions = prompt.positions()  # marks the prefill as done; nothing is decoded into a capture


class PromptCapture(CompressedKVCache):
    """``PromptCapture(model, queries=W)``: prefill once, keep the last ``W`` queries of every layer (``W`` >= the
    largest observation window of the methods that will be built from it)."""

    layer_class = CaptureLayer
    config_class = int

    def __init__(self, model, queries: int):
        super().__init__(model, queries)

    @property
    def prompts(self) -> list[LayerPrompt]:
        """One :class:`LayerPrompt` per layer (after the prefill)."""
        if any(getattr(layer, "prompt", None) is None for layer in self.layers):
            raise RuntimeError("PromptCapture.prompts is read before the prefill ran through it")
        return [layer.prompt for layer in self.layers]

    @property
    def prompt_length(self) -> int:
        """Tokens of the captured prompt (one unpadded row)."""
        return int(self.prompts[0].keys.shape[2])

    def continued(self, model) -> "PromptCapture":
        """A fresh capture that continues this one: run only the new tokens through it (``model(input_ids=suffix,
        past_key_values=capture)``; positions follow on from the prefix) and it holds the whole prompt, prefix then
        suffix, as one prefill of the whole prompt would. This capture is left unchanged (it can be continued again).
        One unpadded row only."""
        prompts = self.prompts
        if prompts[0].keys.shape[0] != 1 or not bool(prompts[0].key_valid.all()):
            raise ValueError("only a one-row, unpadded capture can be continued")
        out = PromptCapture(model, self.config)
        for layer, prompt in zip(out.layers, prompts):
            layer.prefix = prompt
            layer.seen = prompt.keys.shape[2]
        return out

    def kv_bytes(self) -> int:
        return sum(l.prompt.keys.nbytes + l.prompt.values.nbytes for l in self.layers if getattr(l, "prompt", None) is not None)
