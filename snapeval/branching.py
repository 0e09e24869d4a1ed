"""One prefill, many branches: every method and budget of a sweep built from a single prefill of each prompt.

Prefill is ordinary full attention for every method (compression happens at its end), so a prompt's prefill, and
its first generated token, are the same whatever the method and budget. :class:`BranchSet` prefills each prompt
once into a :class:`~snapeval.cache.capture.PromptCapture`, builds from it the cache of every configuration
(``cache.load_prompt``: the same kept positions, keys and values as prefilling through that cache; SnapKV's window
attention is computed once per layer and window size and reused by every budget), and then decodes or scores each
branch exactly as it would have run alone:

- ``generate_until``: prompts are prefilled ``batch`` at a time; each configuration decodes those prompts together
  in the static rows of its own :class:`~snapeval.engine.Engine` (fixed-size caches: ``budget`` slots; appending
  caches, full and SnapKV: their kept prompt plus the tokens to decode, written by index); a method without a
  static-row layout decodes each prompt alone.
- ``loglikelihood``: one prefill per unique context; every continuation is scored against a copy of each branch's
  compressed context (:func:`score_contexts`).

Shapes: prompts are token-id lists; logits ``[V]``; caches hold one row per prompt.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F

from snapeval.cache import MethodConfig, make_cache, method_info
from snapeval.cache.capture import PromptCapture
from snapeval.decoding import (Completion, Request, SamplingParams, decode, pad_token_id, request_generator,
                               stop_token_ids)
from snapeval.models.devices import input_device


def capture_window(configs: Sequence[MethodConfig]) -> int:
    """How many of the last prompt queries a capture keeps: the largest observation window of the branches."""
    return max([getattr(c, "observation", 1) for c in configs] + [1])


@dataclass
class Prefilled:
    """One prompt prefilled once: its last-position logits ``[V]`` and every layer's prompt (a capture)."""

    logits: torch.Tensor
    capture: PromptCapture
    seconds: float

    def cache(self, model, config: MethodConfig, cache_class=None):
        """A fresh one-row cache of ``config`` holding this prompt, compressed as ``config`` says (``cache_class``:
        another layout of the same method, such as the engine's static rows)."""
        cache = make_cache(model, config) if cache_class is None else cache_class(model, config)
        cache.load_prompt(self.capture.prompts)
        return cache


@dataclass
class BranchStats:
    """What a shared run computed: prefills, their tokens and time, and the largest KV cache per configuration."""

    prefills: int = 0
    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    kv_bytes_per_row: dict[str, int] = field(default_factory=dict)  # largest one-row cache seen, per label

    def count_prefill(self, tokens: int, start: float) -> float:
        """Count one prefill of ``tokens`` started at ``start`` (``time.perf_counter``); returns its seconds."""
        seconds = time.perf_counter() - start
        self.prefills += 1
        self.prefill_tokens += tokens
        self.prefill_seconds += seconds
        return seconds

    def saw_cache(self, label: str, cache) -> None:
        self.kv_bytes_per_row[label] = max(self.kv_bytes_per_row.get(label, 0), cache.kv_bytes_per_row())


class BranchSet:
    """The branches (method configurations) of one model, fed from shared prefills.

    ``BranchSet(model, tokenizer, configs, batch=8)``; :meth:`generate` and :meth:`score` return one list of
    results per configuration, in ``configs`` order.
    """

    def __init__(self, model, tokenizer, configs: Sequence[MethodConfig], *, batch: int = 8, seed: int = 0):
        if not configs:
            raise ValueError("a BranchSet needs at least one configuration")
        self.model, self.tokenizer, self.configs = model, tokenizer, list(configs)
        self.batch, self.seed = batch, seed
        self.window = capture_window(self.configs)
        self.device = input_device(model)  # token ids go there; outputs come back there (a split model too)
        self.stops = stop_token_ids(model, tokenizer)
        #: Whether any configuration builds its cache from the shared prefill (a kvpress press prefills itself).
        self.shares = any(method_info(c).branches for c in self.configs)
        self.stats = BranchStats()
        self._engines: dict[MethodConfig, object] = {}

    # --- prefill ----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, prompt: Sequence[int]) -> Prefilled:
        """Prefill ``prompt`` (token ids) once, batch 1."""
        start = time.perf_counter()
        capture = PromptCapture(self.model, self.window)
        ids = torch.tensor([list(prompt)], device=self.device)
        logits = self.model(input_ids=ids, past_key_values=capture, use_cache=True, logits_to_keep=1).logits[0, -1]
        return Prefilled(logits, capture, self.stats.count_prefill(len(prompt), start))

    @torch.inference_mode()
    def extend(self, prefix: Prefilled, suffix: Sequence[int]) -> Prefilled:
        """Continue a prefilled prefix with ``suffix`` (token ids, at least one): only the suffix is computed, and the
        result holds the whole prompt exactly as :meth:`prefill` of prefix + suffix would (up to float rounding)."""
        if not suffix:
            raise ValueError("extend needs at least one suffix token")
        start = time.perf_counter()
        capture = prefix.capture.continued(self.model)
        ids = torch.tensor([list(suffix)], device=self.device)
        logits = self.model(input_ids=ids, past_key_values=capture, use_cache=True, logits_to_keep=1).logits[0, -1]
        return Prefilled(logits, capture, self.stats.count_prefill(len(suffix), start))

    def own_prefill(self, config: MethodConfig, prompt: Sequence[int]):
        """A configuration that cannot branch prefills ``prompt`` through its own cache (a press and its hooks);
        returns ``(logits [V], cache)``."""
        start = time.perf_counter()
        cache = make_cache(self.model, config)
        logits = cache.prefill(self.model, torch.tensor([list(prompt)], device=self.device))
        self.stats.count_prefill(len(prompt), start)
        return logits, cache

    def branch(self, config: MethodConfig, prefilled: "Prefilled | None", prompt: Sequence[int]):
        """``(logits [V], a fresh one-row cache)`` of ``config`` for a prompt: from the shared prefill when the
        method branches, else from its own prefill."""
        if method_info(config).branches:
            return prefilled.logits, prefilled.cache(self.model, config)
        return self.own_prefill(config, prompt)

    # --- generation -------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sequence[SamplingParams]) -> list[list[Completion]]:
        """Every prompt under every configuration: ``out[c][i]`` is configuration ``c``'s completion of prompt ``i``."""
        from tqdm import tqdm

        out: list[list[Completion | None]] = [[None] * len(prompts) for _ in self.configs]
        bar = tqdm(total=len(prompts), desc=f"One prefill per item, {len(self.configs)} configurations", unit="item")
        for start in range(0, len(prompts), self.batch):
            chunk = list(range(start, min(start + self.batch, len(prompts))))
            prefilled = {i: self.prefill(prompts[i]) if self.shares else None for i in chunk}
            for c, config in enumerate(self.configs):
                self._decode_chunk(c, chunk, prompts, sampling, prefilled.__getitem__, out)
            del prefilled
            bar.update(len(chunk))
        bar.close()
        return out

    @torch.inference_mode()
    def generate_each(self, prompts: Sequence[Sequence[Sequence[int]]], sampling: Sequence[SamplingParams]
                      ) -> list[list[Completion]]:
        """Every configuration generates from its own prompts: ``prompts[c][i]`` is configuration ``c``'s prompt of
        item ``i`` (LongBench-v2's second pass: one question, each configuration's own first-pass reasoning), and
        ``out[c][i]`` its completion.

        The prompts of one item share a prefix (the longest common one, less a token so that every prompt keeps a
        suffix): it is prefilled once per item, and each configuration computes only its own suffix on top of it
        (:meth:`extend`), then compresses and decodes exactly as if it had prefilled its whole prompt alone.
        """
        if len(prompts) != len(self.configs) or any(len(row) != len(sampling) for row in prompts):
            raise ValueError(f"prompts must be one list of {len(sampling)} prompts per configuration "
                             f"({len(self.configs)})")
        out: list[list[Completion | None]] = [[None] * len(sampling) for _ in self.configs]
        for start in range(0, len(sampling), self.batch):
            chunk = list(range(start, min(start + self.batch, len(sampling))))
            shared = {i: shared_prefix([row[i] for row in prompts]) for i in chunk}
            prefixes = {i: self.prefill(prompts[0][i][:shared[i]]) for i in chunk if shared[i] and self.shares}
            for c in range(len(self.configs)):
                def prefilled(i, own=prompts[c]):
                    if i in prefixes:
                        return self.extend(prefixes[i], own[i][shared[i]:])
                    return self.prefill(own[i]) if self.shares else None

                self._decode_chunk(c, chunk, prompts[c], sampling, prefilled, out)
            del prefixes
        return out

    def _decode_chunk(self, c: int, chunk: list[int], prompts, sampling, prefilled, out) -> None:
        """Configuration ``c`` decodes the items ``chunk`` of ``prompts``; ``prefilled(i)`` gives item ``i``'s shared
        :class:`Prefilled` (called when the item is admitted, so a continuation lives only until its cache is built;
        None for a configuration that prefills itself). Completions go to ``out[c][i]``."""
        config = self.configs[c]
        seconds: dict[int, float] = {}  # the shared prefill's time, reported as each completion's prefill time

        def row_of(i):
            row = prefilled(i) if method_info(config).branches else None  # a press prefills through its own hooks
            if row is not None:
                seconds[i] = row.seconds
            return row

        if method_info(config).static_rows:  # decoded together in the engine's static rows
            engine = self._engine(config)

            def engine_row(j, _prompt):
                row = row_of(chunk[j])
                return row.logits, row.cache(self.model, engine.config, engine.cache_class)

            done = engine.generate([list(prompts[i]) for i in chunk], [sampling[i] for i in chunk], prefill=engine_row)
        else:
            done = [self._decode_alone(config, row_of(i), list(prompts[i]), sampling[i], i) for i in chunk]
        for j, i in enumerate(chunk):
            self.stats.kv_bytes_per_row[config.label] = max(self.stats.kv_bytes_per_row.get(config.label, 0),
                                                            done[j].kv_bytes)
            done[j].index = i
            if i in seconds:
                done[j].prefill_seconds = seconds[i]
            out[c][i] = done[j]

    def _engine(self, config: MethodConfig):
        from snapeval.engine import Engine

        if config not in self._engines:
            self._engines[config] = Engine(self.model, self.tokenizer, config, num_slots=self.batch, seed=self.seed)
        return self._engines[config]

    def _decode_alone(self, config: MethodConfig, prefilled: Prefilled | None, prompt: list[int],
                      params: SamplingParams, index: int) -> Completion:
        """Decode one prompt alone (a method without static rows, such as a kvpress press) with
        :func:`snapeval.decoding.decode`: one token per forward, explicit positions (a compressed cache is shorter
        than the sequence)."""
        generator = request_generator(params, self.seed, index, self.device)
        request = Request(index=index, prompt=prompt, params=params, generator=generator)
        logits, cache = self.branch(config, prefilled, prompt)
        decode(self.model, self.tokenizer, cache, logits[None], [request], torch.tensor([len(prompt)]),
               stops=self.stops, pad_id=pad_token_id(self.tokenizer))
        request.kv_bytes = cache.kv_bytes_per_row()
        return request.completion(self.tokenizer, 0.0)

    # --- scoring ----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def score(self, contexts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[list[tuple[float, bool]]]:
        """Log-likelihood of every continuation after its context, under every configuration (``out[c][i]``)."""
        return score_contexts(self, contexts, continuations)


@torch.inference_mode()
def score_contexts(branches: BranchSet, contexts, continuations) -> list[list[tuple[float, bool]]]:
    """Score ``continuations[i]`` after ``contexts[i]`` (token ids, ``len(context) >= 2``) under every configuration.

    Each unique context is prefilled once, all but its last token; for every configuration and continuation a
    fresh copy of that configuration's cache is built from the prefill, and the last context token plus the
    continuation (but its last token) run against it, so every continuation token is scored under the budget. Each
    continuation runs alone (batch 1): the scores are exactly those of prefilling its context for it alone.
    Returns ``(sum of continuation log-probs, whether greedy decoding reproduces it)``.
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, context in enumerate(contexts):
        groups.setdefault(tuple(context), []).append(i)
    out: list[list[tuple[float, bool] | None]] = [[None] * len(contexts) for _ in branches.configs]
    device = branches.device
    for context, members in groups.items():
        prefilled = branches.prefill(context[:-1]) if branches.shares else None
        for c, config in enumerate(branches.configs):
            own = None if method_info(config).branches else branches.own_prefill(config, context[:-1])[1]
            for i in members:
                target = list(continuations[i])
                cache = prefilled.cache(branches.model, config) if own is None else copy.deepcopy(own)
                branches.stats.saw_cache(config.label, cache)
                tail = torch.tensor([[context[-1], *target[:-1]]], device=device)  # [1, T]
                positions = (len(context) - 1 + torch.arange(len(target), device=device))[None]
                logits = branches.model(input_ids=tail, position_ids=positions, past_key_values=cache).logits
                logprobs = F.log_softmax(logits[0].float(), dim=-1)  # [T, V]
                wanted = torch.tensor(target, device=logprobs.device)
                out[c][i] = (float(logprobs.gather(-1, wanted[:, None]).sum()),
                             bool((logprobs.argmax(-1) == wanted).all()))
    return out


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of ``prompts`` (token ids), less one token when it covers the shortest
    prompt, so that every prompt keeps a suffix to compute (its last position's logits)."""
    shortest = min(len(p) for p in prompts)
    length = 0
    while length < shortest and all(p[length] == prompts[0][length] for p in prompts):
        length += 1
    return min(length, shortest - 1)


class SharedBranches:
    """What every configuration's lm-eval model asks, answered from one shared computation.

    The models of one sweep group (one per configuration) receive the same requests; the first to ask computes the
    answers of all configurations (:class:`BranchSet`), the others read theirs. The answers of the last few request
    lists are kept (a task may send its single-pass and its two-pass requests as two lists).
    """

    KEPT = 4

    def __init__(self, branches: BranchSet):
        self.branches = branches
        self._index = {config: i for i, config in enumerate(branches.configs)}
        self._answers: dict = {}

    def _answer(self, key, compute):
        if key not in self._answers:
            if len(self._answers) >= self.KEPT:
                del self._answers[next(iter(self._answers))]  # the oldest
            self._answers[key] = compute()
        return self._answers[key]

    def generate(self, config: MethodConfig, prompts, params) -> list[Completion]:
        key = ("generate_until", tuple(map(tuple, prompts)), tuple(params))
        return self._answer(key, lambda: self.branches.generate(prompts, params))[self._index[config]]

    def generate_two_pass(self, config: MethodConfig, prompts, params, second, key) -> list[tuple[Completion, Completion]]:
        """Both passes of two-pass requests (LongBench-v2's official chain of thought), for every configuration: the
        first from one shared prefill per item; the second, ``second(i, first_completion) -> (prompt ids, params)``,
        from each configuration's own first answer, the prompts' common prefix prefilled once per item
        (:meth:`BranchSet.generate_each`). ``key`` identifies how second prompts are built. Returns ``(first,
        second)`` completions of ``config``, one pair per request."""
        def compute():
            first = self.branches.generate(prompts, params)
            built = [[second(i, done) for i, done in enumerate(row)] for row in first]
            answers = self.branches.generate_each([[ids for ids, _ in row] for row in built], [p for _, p in built[0]])
            return [list(zip(a, b)) for a, b in zip(first, answers)]

        full_key = ("two_pass", tuple(map(tuple, prompts)), tuple(params), key)
        return self._answer(full_key, compute)[self._index[config]]

    def describe(self) -> dict:
        """What the group computed so far: its configurations and the prefills they shared (provenance)."""
        stats = self.branches.stats
        return {"configurations": len(self.branches.configs), "prefills": stats.prefills,
                "prefill_tokens": stats.prefill_tokens, "prefill_seconds": round(stats.prefill_seconds, 3)}

    def score(self, config: MethodConfig, contexts, continuations):
        key = ("loglikelihood", tuple(map(tuple, contexts)), tuple(map(tuple, continuations)))
        answers = self._answer(key, lambda: self.branches.score(contexts, continuations))
        return answers[self._index[config]], self.branches.stats
