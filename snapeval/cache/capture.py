"""A prefill that compresses nothing and keeps what every method needs to compress later.

:class:`PromptCapture` is a cache for one prefill: attention runs exactly as it does for any compressed cache (full
causal attention over the prompt), and at the end of each layer it keeps that layer's prompt keys and values, the
last ``queries`` queries and the padding (a :class:`~snapeval.cache.base.LayerPrompt`). Any number of caches of any
method and budget are then built from it with ``cache.load_prompt(capture.prompts)``; SnapKV's window attention is
computed once per layer and window size and shared by all of them.
"""
from __future__ import annotations

from snapeval.cache.base import CompressedKVCache, CompressedLayer, LayerPrompt


class CaptureLayer(CompressedLayer):
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

    def kv_bytes(self) -> int:
        return sum(l.prompt.keys.nbytes + l.prompt.values.nbytes for l in self.layers if getattr(l, "prompt", None) is not None)
