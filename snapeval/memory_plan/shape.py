"""The model's shape as the plan sees it (:class:`ModelShape`): sizes, the cache dtype, the weights' bytes, and the
bytes of every tensor the plan counts (a row's cache, a capture, a forward's activations, a decode step)."""
from __future__ import annotations

from dataclasses import dataclass

from snapeval.memory_plan.units import INT64
from snapeval.models.presets import head_dim


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs to know of a decoder (Llama, Qwen2): sizes, the cache dtype and the weights' bytes."""

    layers: int
    kv_heads: int
    q_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    dtype_bytes: int
    weight_bytes: int

    @classmethod
    def of(cls, model) -> "ModelShape":
        """The shape of a loaded model; ``weight_bytes`` is what its parameters and buffers hold."""
        cfg = model.config
        weights = sum(p.nbytes for p in model.parameters()) + sum(b.nbytes for b in model.buffers())
        return cls.from_config(cfg, next(model.parameters()).dtype.itemsize, weights)

    @classmethod
    def from_config(cls, cfg, dtype_bytes: int, weight_bytes: int) -> "ModelShape":
        return cls(layers=cfg.num_hidden_layers, kv_heads=cfg.num_key_value_heads, q_heads=cfg.num_attention_heads,
                   head_dim=head_dim(cfg), hidden=cfg.hidden_size, intermediate=cfg.intermediate_size,
                   vocab=cfg.vocab_size, dtype_bytes=dtype_bytes, weight_bytes=weight_bytes)

    @classmethod
    def of_preset(cls, name: str, dtype_bytes: int = 2) -> "ModelShape":
        """A preset's real shape (``snapeval models``), weights counted from its parameters, without loading it."""
        from snapeval.models.presets import get_preset

        preset = get_preset(name)
        return cls.from_config(preset.hf_config(), dtype_bytes, preset.param_count() * dtype_bytes)

    # --- KV bytes ----------------------------------------------------------------------------------------------
    @property
    def kv_token_bytes(self) -> int:
        """Keys and values of one token over all layers (one row)."""
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes

    def dynamic_cache_bytes(self, tokens: int, rows: int = 1) -> int:
        """A Hugging Face ``DynamicCache`` (the full cache, a kvpress press's cache): keys and values only."""
        return rows * tokens * self.kv_token_bytes

    def rows_cache_bytes(self, slots: int, rows: int = 1) -> int:
        """A compressed-cache layout (:class:`~snapeval.cache.base.CompressedKVCache`): per layer ``keys`` and
        ``values`` ``[R, Hkv, S, D]``, ``positions`` ``[R, Hkv, S]`` int64, ``next_position`` and ``fill`` ``[R]``."""
        per_layer = rows * (slots * self.kv_heads * (2 * self.head_dim * self.dtype_bytes + INT64) + 2 * INT64)
        return self.layers * per_layer

    def capture_bytes(self, prompt: int, window: int) -> int:
        """A one-row capture of ``prompt`` tokens (:meth:`~snapeval.cache.capture.PromptCapture.nbytes`): per layer
        the keys and values, the last ``window`` queries, the key validity ``[1, L]`` (bool) and positions
        ``[1, L]`` (int64)."""
        per_layer = (prompt * self.kv_heads * self.head_dim * 2 * self.dtype_bytes
                     + self.q_heads * min(window, prompt) * self.head_dim * self.dtype_bytes + prompt * (1 + INT64))
        return self.layers * per_layer

    def window_transient_bytes(self, prompt: int, window: int) -> int:
        """One layer's window attention while it is computed: float32 logits and softmax ``[Hq, W, L]``, and the
        window sums ``[Hq, L]`` kept for every budget until the layer is released."""
        return 2 * self.q_heads * min(window, prompt) * prompt * 4 + self.q_heads * prompt * 4

    def activation_bytes(self, tokens: int, context: int | None = None) -> int:
        """Live activations of one decoder layer's forward over ``tokens`` query tokens: what the model's forward
        holds through every layer (the embeddings' output and the layer's input ``[T, hidden]``, RoPE's cos and sin
        ``[T, head_dim]``) and, inside the layer, the residual stream and the normed input ``[T, hidden]`` with, at
        the MLP, gate/up/product ``[T, intermediate]``; at the attention, the projected and rotated queries, keys
        and values and the output. Attention itself is SDPA's fused kernel (no ``[T, L]`` matrix); the logits of
        the last position only. ``context``: keys attended (a prefill chunk attends to the whole prefix), which
        adds nothing with the fused kernel. Checked against the live tensors of a real forward
        (``tests/test_memory_plan.py``); an H100 run of Llama-3.1-8B at 128k measured the two held ``[T, hidden]``
        tensors and cos/sin (2.07 GiB) that an earlier estimate left out (``results/bench/gpu_shared.json``)."""
        held = 2 * self.hidden + 2 * self.head_dim
        mlp = 3 * self.intermediate + 2 * self.hidden
        attention = 3 * self.hidden + 3 * (self.q_heads + 2 * self.kv_heads) * self.head_dim
        return tokens * (held + max(mlp, attention)) * self.dtype_bytes + self.vocab * 4

    def decode_step_bytes(self, rows: int) -> int:
        """A decode step of ``rows`` rows: one token's activations per row and the float logits ``[R, V]``."""
        return rows * (self.activation_bytes(1) + self.vocab * self.dtype_bytes)

