"""The torch side of kvpress's presses as methods (:mod:`snapeval.cache.kvpress`): the cache whose prefill runs under a
press, a press's branch of a shared prefill, and its static engine rows."""
from __future__ import annotations

import contextlib

import torch

from snapeval.cache.attention import check_architecture
from snapeval.cache.base import CompressedKVCache
from snapeval.cache.full import FullCache
from snapeval.cache.kvpress import RATIO_SCORED, KVPressConfig, branch_refusal, keeps_budget_per_layer
from snapeval.cache.methods import build_cache
from snapeval.cache.snapkv import SnapKVLayer
from snapeval.errors import SnapevalError
from snapeval.run_args import DecodeChoices


class KVPressCache(FullCache):
    """A ``DynamicCache`` whose prefill (:meth:`prefill`) runs under the configuration's press."""

    def __init__(self, model, config: KVPressConfig):
        check_architecture(model)
        super().__init__(model, config)

    def prefill(self, model, input_ids):
        """Prefill ``input_ids`` ``[1, L]`` through this cache under the press; returns the last logits ``[V]``."""
        press = self.method_config.make_press(input_ids.shape[1])
        with press_checks(self.method_config, input_ids.shape[1]), press(model):
            return model(input_ids=input_ids, past_key_values=self, use_cache=True, logits_to_keep=1).logits[0, -1]


@contextlib.contextmanager
def press_checks(config: KVPressConfig, prompt_length: int):
    """A press's own assertion on this prompt (``the query length should be greater than the window size``) as one
    line naming the press and the prompt."""
    try:
        yield
    except AssertionError as exc:
        raise SnapevalError(f"{config.method} with {dict(config.press_args)} cannot compress a {prompt_length:,}-token "
                            f"prompt: {exc or 'its own check failed'}") from None


def _language_model(model):
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner


class PressBranch:
    """One press's branch of one shared prefill: per layer its compressed keys and values ``[1, Hkv, n, D]`` and the
    prompt positions they came from ``[1, Hkv, n]`` (None where the press does not say, such as PyramidKV)."""

    def __init__(self, config: "KVPressConfig", prompt_length: int):
        self.config, self.prompt_length = config, prompt_length
        self.layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []

    def cache(self, model, cache_class=None, *, decoding: DecodeChoices | None = None):
        """A fresh one-row cache of the compressed prompt: a :class:`KVPressCache` (decoded alone, or scored), or,
        with ``cache_class`` :class:`KVPressRows`, a row the engine loads into its static rows, decoding as the run's
        ``decoding`` says (:func:`~snapeval.cache.methods.build_cache`)."""
        if cache_class is not None and issubclass(cache_class, KVPressRows):
            rows = build_cache(model, self.config, cache_class, decoding=decoding)
            rows.load_kept(self.layers, self.prompt_length)
            return rows
        cache = KVPressCache(model, self.config)
        for index, (keys, values, _) in enumerate(self.layers):
            cache.update(keys, values, index)
        return cache

    def kv_bytes(self) -> int:
        return sum(k.nbytes + v.nbytes + (0 if p is None else p.nbytes) for k, v, p in self.layers)


class PressBranches:
    """The branching presses of a group during one shared prefill: ``with PressBranches(model, configs, prompt_length,
    capture) as hooks: model(...)``; then ``hooks.branches`` maps each configuration to its :class:`PressBranch`.

    Each attention layer gets one forward hook (as kvpress's own ``BasePress.__call__`` installs, with the same
    model set-up: ``post_init_from_model`` and the layer's ``rotary_emb``). After the layer's attention, the hook
    reads its prompt keys and values from the capture and calls every press's own ``compress`` with the layer's
    inputs; presses of one family (name and arguments) at several budgets share one score per layer unless their
    score reads the ratio. ``release``: drop each capture layer once the presses compressed it (nothing else of the
    group is built from the capture)."""

    def __init__(self, model, configs, prompt_length: int, capture, *, release: bool = False):
        for config in configs:
            reason = branch_refusal(config.press_name)
            if reason is not None:
                raise SnapevalError(f"method={config.method!r} cannot branch from a shared prefill: {reason}")
        self.model, self.capture, self.release = model, capture, release
        self.presses = {config: config.make_press(prompt_length) for config in configs}
        self.branches = {config: PressBranch(config, prompt_length) for config in configs}
        self.families: dict[tuple, list] = {}
        for config in configs:
            self.families.setdefault((config.press_name, config.press_args), []).append(config)
        self._hooks: list = []

    def __enter__(self) -> "PressBranches":
        language_model = _language_model(self.model)
        for press in self.presses.values():
            press.post_init_from_model(self.model)
        for layer in language_model.layers:
            layer.self_attn.rotary_emb = language_model.rotary_emb
            self._hooks.append(layer.self_attn.register_forward_hook(self._compress, with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _compress(self, module, args, kwargs, output):
        from kvpress.utils import compute_n_kept

        index = module.layer_idx
        hidden_states = kwargs["hidden_states"]
        prompt = self.capture.layer_prompt(index, hidden_states.device)
        keys, values, attentions = prompt.keys, prompt.values, output[1]
        for (name, _), configs in self.families.items():
            shared: dict[str, torch.Tensor] = {}
            for config in configs:
                press = self.presses[config]
                scored: dict[str, torch.Tensor] = shared if name not in RATIO_SCORED else {}

                def score(*inputs, press=press, scored=scored):
                    if "scores" not in scored:
                        scored["scores"] = type(press).score(press, *inputs)
                    return scored["scores"]

                press.score = score  # an instance attribute: this prompt's press object only
                with press_checks(config, keys.shape[2]):
                    kept_keys, kept_values = press.compress(module, hidden_states, keys, values, attentions, kwargs)
                positions = None
                if press.compression_ratio == 0:  # the prompt fits: kept whole, in order
                    positions = torch.arange(keys.shape[2], device=keys.device).expand(*keys.shape[:3])
                elif keeps_budget_per_layer(name) and "scores" in scored:  # ScorerPress.compress: top-k of the scores
                    n_kept = compute_n_kept(keys.shape[2], press.compression_ratio)
                    positions = scored["scores"].topk(n_kept, dim=-1).indices
                self.branches[config].layers.append((kept_keys, kept_values, positions))
        if self.release:
            self.capture.release(index)
        return output


class PressRowsLayer(SnapKVLayer):
    """A press's branch in static rows: its kept tokens, then decoded tokens in the next free slot (as SnapKV's)."""

    def select(self, prompt):
        raise SnapevalError(f"method={self.config.method!r}: a press compresses inside its own prefill hooks; its "
                            "static rows are loaded from a shared prefill's branch (snapeval.branching), not prefilled")


class KVPressRows(CompressedKVCache):
    """A press's cache in the engine's static-row layout (``budget`` kept tokens per layer and KV head, growing
    into the slots allocated for the tokens to decode). Filled from a :class:`PressBranch` only."""

    layer_class = PressRowsLayer
    config_class = KVPressConfig

    def load_kept(self, layers, prompt_length: int) -> None:
        """One row from a branch's per-layer kept keys, values and positions (positions in slot order when the
        press does not say which prompt tokens it kept: they only mark the slots valid)."""
        for layer, (keys, values, positions) in zip(self.layers, layers):
            if positions is None:
                positions = torch.arange(keys.shape[2], device=keys.device).expand(*keys.shape[:3])
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values, layer.positions = keys, values, positions.to(torch.long)
            layer.next_position = torch.full((1,), prompt_length, dtype=torch.long, device=keys.device)
            layer.fill = torch.full((1,), keys.shape[2], dtype=torch.long, device=keys.device)
            layer.seen = prompt_length
