"""``generate``: batched generation under a KV-cache method, with honest timings and exact cache sizes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch

from snapeval.cache import FullConfig, MethodConfig, method_info, resolve_method
from snapeval.cache.methods import build_cache
from snapeval.cache.full import StaticFullCache
from snapeval.decoding import (Request, SamplingParams, decode, pad_token_id, prefill, request_stream,
                               stop_token_ids)
from snapeval.decoding.prompts import encode_prompt
from snapeval.errors import SnapevalError, check_int, is_int
from snapeval.models.devices import input_device
from snapeval.run_args import DecodeChoices, RunArgs


@dataclass
class GenerationOutput:
    """One prompt's result. ``row`` indexes the batch inside ``cache``."""

    prompt_tokens: int
    token_ids: list[int]
    text: str
    kv_bytes: int
    cache: object = field(repr=False)
    row: int = 0

    def slot_positions(self, layer_idx: int) -> torch.Tensor:
        """``[Hkv, S]`` original token position held by every slot of every KV head of a layer (-1: empty slot)."""
        return self.cache.slot_positions(layer_idx)[self.row]


@dataclass
class GenerationResult:
    """Outputs in prompt order plus timings of the whole batch (``generated_tokens`` counts real tokens only)."""

    outputs: list[GenerationOutput]
    config: MethodConfig
    batch_size: int
    prompt_tokens: int
    generated_tokens: int
    prefill_seconds: float
    compress_seconds: float
    decode_seconds: float
    decode_steps: int

    @property
    def method(self) -> str:
        return self.config.method

    def __len__(self) -> int:
        return len(self.outputs)

    def __getitem__(self, i) -> GenerationOutput:
        return self.outputs[i]

    def __iter__(self):
        return iter(self.outputs)

    @property
    def decode_tokens_per_s(self) -> float:
        """Batch decode throughput: rows x decode steps / decode time (steps after the first token)."""
        return self.batch_size * self.decode_steps / self.decode_seconds if self.decode_seconds > 0 else float("nan")

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else float("nan")

    @property
    def kv_bytes(self) -> int:
        return sum(o.kv_bytes for o in self.outputs)


def encode_prompts(tokenizer, prompts, chat: bool = False, system: str | None = None):
    """Left-padded ``input_ids``/``attention_mask`` for strings (optionally through the chat template) or id lists."""
    if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    if not prompts:
        raise SnapevalError("prompts must be a non-empty list of strings or token-id lists")
    rows = []
    for p in prompts:
        if isinstance(p, str):
            if chat:
                messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": p}]
                ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
                ids = ids["input_ids"] if hasattr(ids, "keys") else ids
            else:
                ids = encode_prompt(tokenizer, p)  # its BOS as its files say, once
        else:
            ids = list(p)
        if not ids:
            raise SnapevalError("prompts: an empty prompt cannot be generated from")
        rows.append(list(ids))
    length = max(map(len, rows))
    pad = pad_token_id(tokenizer)
    input_ids = torch.tensor([[pad] * (length - len(r)) + r for r in rows])
    attention_mask = torch.tensor([[0] * (length - len(r)) + [1] * len(r) for r in rows])
    return input_ids, attention_mask


@dataclass
class GenerateRun:
    """What :func:`generate_ids` returns: each row's request (its tokens and why it stopped), the cache and the
    step times (``time.perf_counter`` when each step's logits were ready, the prefill's included)."""

    requests: list[Request]
    cache: object
    start: float
    step_times: list[float]

    @property
    def token_ids(self) -> list[list[int]]:
        """Each row's generated tokens, the eos token or the token that completed a stop string included."""
        return [request.token_ids for request in self.requests]

    @property
    def prefill_seconds(self) -> float:
        return (self.step_times[0] if self.step_times else time.perf_counter()) - self.start

    @property
    def decode_seconds(self) -> float:
        return self.step_times[-1] - self.step_times[0] if self.step_times else 0.0

    @property
    def decode_steps(self) -> int:
        return max(len(self.step_times) - 1, 0)

    @property
    def compress_seconds(self) -> float:
        return self.cache.compress_seconds

    def kv_bytes_per_row(self) -> int:
        return self.cache.kv_bytes_per_row()


def cache_for(model, config: MethodConfig, attention_mask: torch.Tensor, max_new_tokens: int = 0, *,
              decoding: DecodeChoices | None = None):
    """A fresh cache of ``config``'s method for left-padded rows (``attention_mask`` ``[B, L]``). The full cache
    decodes in static rows (:class:`~snapeval.cache.full.StaticFullCache` with ``max_new_tokens`` free slots after
    each prompt: decoded tokens written by index, no per-step concatenation, the decode kernel of the device) when
    ``max_new_tokens`` is given; otherwise it is Hugging Face's ``DynamicCache``, which learns each row's padding for
    its slot-position introspection. ``decoding``: the run's choices (:class:`~snapeval.run_args.DecodeChoices`), whose
    decode kernel the cache carries (:func:`~snapeval.cache.methods.build_cache`)."""
    if max_new_tokens and isinstance(config, FullConfig):
        return build_cache(model, config, StaticFullCache, decoding=decoding, reserve=max_new_tokens)
    cache = build_cache(model, config, decoding=decoding)
    if hasattr(cache, "padding"):
        cache.padding = (attention_mask == 0).sum(dim=1).cpu()
    return cache


@torch.inference_mode()
def generate_ids(model, tokenizer, input_ids: torch.Tensor, attention_mask: torch.Tensor, config: MethodConfig,
                 params: SamplingParams | Sequence[SamplingParams], *, seed: int | None = None,
                 min_new_tokens: int = 0, on_step=None, static_full: bool = True,
                 decoding: DecodeChoices | None = None) -> GenerateRun:
    """Left-padded rows ``input_ids``/``attention_mask`` ``[B, L]`` under a fresh cache of ``config``'s method:
    :func:`~snapeval.decoding.prefill` of the batch, then :func:`~snapeval.decoding.decode` until every row stops.

    Inputs are those Hugging Face's ``model.generate`` passes (positions from the attention mask, cache positions
    ``0..L-1`` then ``L, L+1, ...``), so greedy tokens are ``model.generate``'s. ``params``: one
    :class:`~snapeval.decoding.SamplingParams` for every row, or one per row; a sampled row draws from its own
    stream (:func:`~snapeval.decoding.request_stream`), seeded by its params' seed or ``seed`` plus its row
    (``seed=None``: drawn from torch's global generator, so ``torch.manual_seed`` makes it reproducible). ``min_new_tokens``: the stop tokens are forbidden
    before that many tokens (Hugging Face's ``min_new_tokens``). ``on_step(cache)`` runs whenever a step's logits
    are ready. ``static_full``: the full cache decodes in static rows (:func:`cache_for`; the same greedy tokens as
    Hugging Face's ``DynamicCache``, ``tests/test_gpu_decode.py``); False keeps the ``DynamicCache``.
    ``decoding``: the run's decode choices (:class:`~snapeval.run_args.DecodeChoices`), of which the cache carries
    the decode kernel (default ``auto``: the device's, :func:`snapeval.cache.kernels.resolve_decode_kernel`).
    """
    rows = input_ids.shape[0]
    params = [params] * rows if isinstance(params, SamplingParams) else list(params)
    if len(params) != rows:
        raise SnapevalError(f"params: {len(params)} sampling settings for {rows} rows; allowed: one, or one per row")
    device = input_ids.device
    seed = sampling_seed(params, seed)
    requests = [Request(index=row, prompt=row_prompt(input_ids, attention_mask, row), params=p,
                        stream=request_stream(p, seed, row))
                for row, p in enumerate(params)]
    cache = cache_for(model, config, attention_mask, max(p.max_new_tokens for p in params) if static_full else 0,
                      decoding=decoding)
    length = input_ids.shape[1]
    start = time.perf_counter()
    logits = prefill(model, cache, input_ids, attention_mask=attention_mask,
                     position_ids=(attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0),
                     cache_position=torch.arange(length, device=device))
    static = isinstance(cache, StaticFullCache)  # its rows know their valid slots: no growing padding mask
    times = decode(model, tokenizer, cache, logits, requests, attention_mask.sum(dim=1),
                   stops=stop_token_ids(model, tokenizer), pad_id=pad_token_id(tokenizer),
                   attention_mask=None if static else attention_mask, cache_position=length,
                   min_new_tokens=min_new_tokens,
                   on_step=None if on_step is None else lambda: on_step(cache))
    return GenerateRun(requests=requests, cache=cache, start=start, step_times=times)


def sampling_seed(params: Sequence[SamplingParams], seed: int | None) -> int:
    """The base seed of a call's sampling streams (row ``r`` draws from ``seed + r`` unless its params seed it):
    ``seed``, else, when some row samples, one drawn from torch's global generator (so ``torch.manual_seed`` makes
    it reproducible), else 0."""
    if seed is None and any(p.do_sample for p in params):
        seed = int(torch.randint(0, 2**31 - 1, ()))
    return seed or 0


def row_prompt(input_ids: torch.Tensor, attention_mask: torch.Tensor, row: int) -> list[int]:
    """Row ``row``'s prompt tokens of left-padded ``input_ids``/``attention_mask`` ``[B, L]``, padding dropped."""
    return input_ids[row, -int(attention_mask[row].sum()):].tolist()


@dataclass
class EngineRun:
    """What :func:`generate_on_engine` returns: each row's completion, in row order, and the engine they decoded in
    (its :attr:`~snapeval.engine.Engine.cache` holds row ``r``'s cache in row ``r``; its stats, the timings)."""

    completions: list
    engine: object

    @property
    def token_ids(self) -> list[list[int]]:
        return [c.token_ids for c in self.completions]

    @property
    def cache(self):
        return self.engine.cache

    @property
    def prefill_seconds(self) -> float:
        return self.engine.stats.prefill_seconds

    @property
    def compress_seconds(self) -> float:
        return self.engine.prefill_cache.compress_seconds

    @property
    def decode_seconds(self) -> float:
        return self.engine.stats.decode_seconds

    @property
    def decode_steps(self) -> int:
        return self.engine.stats.decode_steps

    def kv_bytes_per_row(self) -> int:
        """The largest row's filled slots, every step of the call included: what the padded batch's cache reports
        (:meth:`~snapeval.cache.full.StaticFullCache.kv_bytes_per_row`), so sizes do not depend on the path."""
        return max(self.cache.row_kv_bytes(row) for row in range(len(self.completions)))


@torch.inference_mode()
def generate_on_engine(model, tokenizer, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       config: MethodConfig, params: Sequence[SamplingParams], *, seed: int | None = None,
                       decoding: DecodeChoices = DecodeChoices(capture=True)) -> EngineRun:
    """The rows of :func:`generate_ids` (left-padded ``input_ids``/``attention_mask`` ``[B, L]``, one
    :class:`~snapeval.decoding.SamplingParams` per row) on a continuous-batching :class:`~snapeval.engine.Engine` of
    one slot per row that keeps its rows (each prompt prefilled alone, then every row decoded in static rows;
    ``decoding``: the run's decode choices, :class:`~snapeval.run_args.DecodeChoices`; by default the step is
    recorded once as a CUDA graph and replayed). The same greedy tokens as :func:`generate_ids`
    where decoding is exact (float32 on the CPU), and the same draws: row ``r`` samples from the same stream."""
    from snapeval.engine import Engine

    rows = input_ids.shape[0]
    engine = Engine(model, tokenizer, config, num_slots=rows, seed=sampling_seed(params, seed), decoding=decoding,
                    keep_rows=True)
    completions = engine.generate([row_prompt(input_ids, attention_mask, row) for row in range(rows)], list(params))
    engine.release()  # the recorded graph and its pool; the rows stay with the outputs
    return EngineRun(completions=completions, engine=engine)


#: What ``generate``'s ``**sampling`` may hold (besides ``min_new_tokens``): the sampling settings of a request,
#: under Hugging Face's names.
SAMPLING_ARGS = {"do_sample": "do_sample", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                 "stop_strings": "stop"}


def generate(
    model,
    tokenizer,
    prompts,
    config: MethodConfig | int | None = None,
    method: str = "snapstream",
    max_new_tokens: int = 64,
    *,
    chat: bool = False,
    system: str | None = None,
    seed: int | None = None,
    on_step=None,
    decode_kernel: str = "auto",
    capture: str | bool = "auto",
    **sampling,
) -> GenerationResult:
    """Generate for each prompt under a KV-cache ``method``.

    Args:
        prompts: a string, a list of strings, or token-id lists. Rows are left-padded and batched; each row
            compresses its own tokens.
        config: a method configuration (:class:`~snapeval.cache.SnapStreamConfig`, ...; it names its method), or an
            integer total budget for ``method`` (resolved by :func:`snapeval.cache.resolve_method`). ``None`` is the
            uncompressed baseline.
        method: the method of an integer budget: any name of the method table (``snapeval methods`` lists them).
        chat: wrap string prompts in the tokenizer's chat template.
        seed: seeds sampling (``do_sample=True``): row ``r`` samples from its own stream seeded ``seed + r``.
        on_step: called with the cache after every generation step (introspection, benchmarks).
        decode_kernel: the attention kernel of a decode step, as the run argument (:mod:`snapeval.run_args`):
            ``auto`` (the device's: sdpa on the CPU) or one of ``sdpa``, ``split``, ``flex``, ``triton``.
        capture: record the decode step once as a CUDA graph and replay it, as the run argument
            (:meth:`snapeval.run_args.RunArgs.capture_on`): ``auto`` (on CUDA, never on the CPU), ``true`` (needs
            CUDA) or ``false``. A captured call of a method with a static-row layout decodes on the engine
            (:func:`generate_on_engine`); a call with ``on_step`` or ``min_new_tokens`` keeps the eager loop (the
            engine has neither a per-step hook nor a minimum length).
        sampling: under Hugging Face's names, ``do_sample``, ``temperature``, ``top_p``, ``top_k`` (0: off),
            ``stop_strings`` (a row stops once its text holds one) and ``min_new_tokens`` (no stop token before).

    Every row is prefilled and decoded by :func:`snapeval.decoding.prefill` and :func:`snapeval.decoding.decode`
    (:func:`generate_ids`), the one loop of every generation path; greedy tokens equal ``model.generate``'s. Where
    the decode step is captured (a GPU, ``capture`` auto) each row is prefilled alone and the rows decode together
    on the engine (:func:`generate_on_engine`, the sweep's path on a GPU): the same result, its rows in prompt order
    (``result[r].slot_positions`` reads row ``r`` of the engine's cache).
    """
    check_int("max_new_tokens", max_new_tokens, 1)
    if config is None:
        config = FullConfig()
    elif is_int(config):
        config = resolve_method(method, budget=config)
    elif not isinstance(config, MethodConfig):
        raise SnapevalError(f"config={config!r} is invalid; allowed: a method configuration, an integer budget or None")
    if method_info(config).prefill_hook:  # e.g. a kvpress press: it compresses through its own prefill hooks
        raise SnapevalError(f"method={config.method!r} prefills through its own hooks; generate with "
                            "snapeval.branching.BranchSet(model, tokenizer, [config]) or the lm-eval model")
    min_new_tokens = sampling.pop("min_new_tokens", 0)
    unknown = sorted(set(sampling) - set(SAMPLING_ARGS))
    if unknown:
        raise SnapevalError(f"{unknown[0]}={sampling[unknown[0]]!r} is not a sampling argument of generate; allowed: "
                            f"{', '.join([*SAMPLING_ARGS, 'min_new_tokens'])}")
    check_int("min_new_tokens", min_new_tokens, 0)
    params = SamplingParams(max_new_tokens=max_new_tokens, **{SAMPLING_ARGS[k]: v for k, v in sampling.items()})
    input_ids, attention_mask = encode_prompts(tokenizer, prompts, chat=chat, system=system)
    device = input_device(model)
    run_args = RunArgs(device=device.type, decode_kernel=decode_kernel, capture=capture)  # checked as a run's are
    decoding = run_args.decode_choices(device)
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    if decoding.capture and method_info(config).on_engine(run_args, device) and on_step is None and not min_new_tokens:
        run = generate_on_engine(model, tokenizer, input_ids, attention_mask, config, [params] * len(input_ids),
                                 seed=seed, decoding=decoding)
    else:
        run = generate_ids(model, tokenizer, input_ids, attention_mask, config, params, seed=seed,
                           min_new_tokens=min_new_tokens, on_step=on_step, decoding=decoding)
    new_tokens = run.token_ids
    outputs = [
        GenerationOutput(
            prompt_tokens=int(attention_mask[row].sum()),
            token_ids=ids,
            text=tokenizer.decode(ids, skip_special_tokens=True),
            kv_bytes=run.kv_bytes_per_row(),
            cache=run.cache,
            row=row,
        )
        for row, ids in enumerate(new_tokens)
    ]
    return GenerationResult(
        outputs=outputs,
        config=config,
        batch_size=len(outputs),
        prompt_tokens=int(attention_mask.sum()),
        generated_tokens=sum(len(ids) for ids in new_tokens),
        prefill_seconds=run.prefill_seconds,
        compress_seconds=run.compress_seconds,
        decode_seconds=run.decode_seconds,
        decode_steps=run.decode_steps,
    )
