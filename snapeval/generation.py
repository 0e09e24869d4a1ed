"""``generate``: batched generation under a KV-cache method, with honest timings and exact cache sizes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from snapeval.cache import FullConfig, MethodConfig, make_cache, method_info, resolve_method
from snapeval.errors import SnapevalError
from snapeval.models.devices import input_device


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


class _StepClock:
    """A logits processor that only records when each generation step's logits are ready (and calls ``on_step``)."""

    def __init__(self, on_step=None):
        self.times: list[float] = []
        self.on_step = on_step

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        if self.on_step is not None:
            self.on_step()
        return scores


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
                ids = tokenizer(p, add_special_tokens=False).input_ids
        else:
            ids = list(p)
        if not ids:
            raise SnapevalError("prompts: an empty prompt cannot be generated from")
        rows.append(list(ids))
    length = max(map(len, rows))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids = torch.tensor([[pad] * (length - len(r)) + r for r in rows])
    attention_mask = torch.tensor([[0] * (length - len(r)) + [1] * len(r) for r in rows])
    return input_ids, attention_mask


@dataclass
class GenerateRun:
    """What :func:`generate_ids` returns: the sequences (prompt + new tokens), the cache and the step times."""

    sequences: torch.Tensor
    cache: object
    start: float
    step_times: list[float]

    @property
    def prefill_seconds(self) -> float:
        return (self.step_times[0] if self.step_times else time.perf_counter()) - self.start

    @property
    def decode_seconds(self) -> float:
        return self.step_times[-1] - self.step_times[0] if self.step_times else 0.0

    @property
    def decode_steps(self) -> int:
        return max(len(self.step_times) - 1, 0)


def cache_for(model, config: MethodConfig, attention_mask: torch.Tensor):
    """A fresh cache of ``config``'s method for left-padded rows (``attention_mask`` ``[B, L]``); the full cache
    learns each row's padding for its slot-position introspection."""
    cache = make_cache(model, config)
    if hasattr(cache, "padding"):
        cache.padding = (attention_mask == 0).sum(dim=1).cpu()
    return cache


@torch.inference_mode()
def generate_ids(model, input_ids, attention_mask, config: MethodConfig, *, on_step=None, **generate_kwargs) -> GenerateRun:
    """``model.generate`` on left-padded ids with a fresh cache of ``config``'s method; records when each step's
    logits exist. ``input_ids``/``attention_mask`` ``[B, L]``; ``config`` from :func:`snapeval.cache.resolve_method`.
    """
    cache = cache_for(model, config, attention_mask)
    clock = _StepClock(None if on_step is None else lambda: on_step(cache))
    processors = list(generate_kwargs.pop("logits_processor", None) or []) + [clock]
    start = time.perf_counter()
    sequences = model.generate(
        input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, logits_processor=processors,
        **generate_kwargs,
    )
    return GenerateRun(sequences=sequences, cache=cache, start=start, step_times=clock.times)


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
    **sampling,
) -> GenerationResult:
    """Generate for each prompt under a KV-cache ``method``.

    Args:
        prompts: a string, a list of strings, or token-id lists. Rows are left-padded and batched; each row
            compresses its own tokens.
        config: a method configuration (:class:`~snapeval.cache.SnapStreamConfig`, ...; it names its method), or an
            integer total budget for ``method`` (resolved by :func:`snapeval.cache.resolve_method`). ``None`` is the
            uncompressed baseline.
        method: the method of an integer budget: ``snapstream``, ``streamingllm``, ``snapkv`` (see ``METHODS``).
        chat: wrap string prompts in the tokenizer's chat template.
        seed: seeds sampling (``do_sample=True``) for reproducibility.
        on_step: called with the cache after every generation step (introspection, benchmarks).
        sampling: passed to ``model.generate`` (``do_sample``, ``temperature``, ``top_p``, ``stop_strings``, ...).
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise SnapevalError(f"max_new_tokens={max_new_tokens!r} is invalid; allowed: an integer >= 1")
    if config is None:
        config = FullConfig()
    elif isinstance(config, int) and not isinstance(config, bool):
        config = resolve_method(method, budget=config)
    elif not isinstance(config, MethodConfig):
        raise SnapevalError(f"config={config!r} is invalid; allowed: a method configuration, an integer budget or None")
    if method_info(config).prefill_hooks:  # a kvpress press compresses through its own prefill hooks
        raise SnapevalError(f"method={config.method!r} prefills through its own hooks; generate with "
                            "snapeval.branching.BranchSet(model, tokenizer, [config]) or the lm-eval model")
    input_ids, attention_mask = encode_prompts(tokenizer, prompts, chat=chat, system=system)
    device = input_device(model)
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    if seed is not None:
        torch.manual_seed(seed)
    sampling.setdefault("do_sample", False)
    if "stop_strings" in sampling:
        sampling.setdefault("tokenizer", tokenizer)
    run = generate_ids(
        model, input_ids, attention_mask, config, on_step=on_step,
        max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling,
    )
    stops = {tokenizer.eos_token_id, *(_as_list(model.generation_config.eos_token_id))}
    new_tokens = strip_after_stop(run.sequences[:, input_ids.shape[1] :].cpu(), stops)
    outputs = [
        GenerationOutput(
            prompt_tokens=int(attention_mask[row].sum()),
            token_ids=ids,
            text=tokenizer.decode(ids, skip_special_tokens=True),
            kv_bytes=run.cache.kv_bytes_per_row(),
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
        compress_seconds=run.cache.compress_seconds,
        decode_seconds=run.decode_seconds,
        decode_steps=run.decode_steps,
    )


def strip_after_stop(new_tokens: torch.Tensor, stops: set[int]) -> list[list[int]]:
    """Per row, the generated ids up to and including the first stop id (padding after it removed)."""
    rows = []
    for ids in new_tokens.tolist():
        cut = next((i + 1 for i, tok in enumerate(ids) if tok in stops), len(ids))
        rows.append(ids[:cut])
    return rows


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
