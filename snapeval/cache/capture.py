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

Memory (:mod:`snapeval.memory_plan`): a shared group reads a capture one layer at a time
(:meth:`PromptCapture.layer_prompt`) and frees each layer once every branch holds it (:meth:`PromptCapture.release`),
so a capture never lives beside a full copy of itself. On a GPU the capture can live in host memory (``store="cpu"``):
each layer moves there right after its attention and comes back to its layer's device when it is read.
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
        keys = torch.cat([self.prefix.keys.to(key_states.device), key_states], dim=2)
        values = torch.cat([self.prefix.values.to(value_states.device), value_states], dim=2)
        self._prompt = (keys, values)
        hand_off(PendingAttention(self.layer_idx, after=self.compress, replace_mask=False))
        return keys, values

    def compress(self, query: torch.Tensor, hf_mask, scaling: float) -> None:
        if self.prefix is not None:  # the window may reach back into the prefix's last queries
            query = torch.cat([self.prefix.queries.to(query.device), query], dim=2)
            self.prefix = None
        super().compress(query, hf_mask, scaling)

    def build(self, prompt: LayerPrompt) -> None:
        keep = min(self.config, prompt.queries.shape[2])
        self.prompt = moved(LayerPrompt(prompt.keys, prompt.values, prompt.queries[:, :, -keep:].clone(),
                                        prompt.key_valid, prompt.scaling), self.store)
        self.positions = prompt.positions()  # marks the prefill as done; nothing is decoded into a capture

    #: Where the captured prompt is kept (None: where the layer computes; "cpu": host memory on a GPU).
    store = None


def moved(prompt: LayerPrompt, device) -> LayerPrompt:
    """``prompt`` with its tensors on ``device`` (itself when they are there already, or ``device`` is None)."""
    if device is None or prompt.keys.device == torch.device(device):
        return prompt
    return LayerPrompt(*(t.to(device) for t in (prompt.keys, prompt.values, prompt.queries, prompt.key_valid)),
                       prompt.scaling)


class PromptCapture(CompressedKVCache):
    """``PromptCapture(model, queries=W)``: prefill once, keep the last ``W`` queries of every layer (``W`` >= the
    largest observation window of the methods that will be built from it). ``store``: keep the captured prompt on
    that device (host memory, ``"cpu"``, for a model on a GPU) instead of each layer's own."""

    layer_class = CaptureLayer
    config_class = int

    def __init__(self, model, queries: int, store=None):
        super().__init__(model, queries)
        self.store = store
        for layer in self.layers:
            layer.store = store

    @property
    def prompts(self) -> list[LayerPrompt]:
        """One :class:`LayerPrompt` per layer (after the prefill)."""
        if any(getattr(layer, "prompt", None) is None for layer in self.layers):
            raise RuntimeError("PromptCapture.prompts is read before the prefill ran through it, or after release")
        return [layer.prompt for layer in self.layers]

    def layer_prompt(self, index: int, device=None) -> LayerPrompt:
        """Layer ``index``'s :class:`LayerPrompt`, on ``device`` (streamed back from host memory if it lives there)."""
        prompt = getattr(self.layers[index], "prompt", None)
        if prompt is None:
            raise RuntimeError(f"layer {index} of the capture is read before the prefill ran through it, or after "
                               "release")
        return moved(prompt, device)

    def release(self, index: int) -> None:
        """Free layer ``index``'s captured prompt (its memory goes once no branch refers to it)."""
        self.layers[index].prompt = None

    def nbytes(self) -> int:
        """Bytes the capture holds: every layer's keys, values, window queries, key validity and positions."""
        out = 0
        for layer in self.layers:
            prompt = getattr(layer, "prompt", None)
            if prompt is not None:
                out += sum(t.nbytes for t in (prompt.keys, prompt.values, prompt.queries, prompt.key_valid))
                out += layer.positions.nbytes
        return out

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
        out = PromptCapture(model, self.config, store=self.store)
        for layer, prompt in zip(out.layers, prompts):
            layer.prefix = prompt
            layer.seen = prompt.keys.shape[2]
        return out

    def kv_bytes(self) -> int:
        return sum(l.prompt.keys.nbytes + l.prompt.values.nbytes for l in self.layers if getattr(l, "prompt", None) is not None)
