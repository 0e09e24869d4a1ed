"""A static-shape generation engine with continuous batching over fixed-size compressed KV caches.

The engine owns ``num_slots`` rows of one cache of its configuration's static-row class
(:meth:`~snapeval.cache.methods.MethodInfo.static_cache_class`: every method whose entry has ``static_rows``),
allocated once: per layer ``keys``/``values`` ``[num_slots, Hkv, S, D]``, ``positions`` ``[num_slots, Hkv, S]``,
``next_position`` ``[num_slots]`` (``S``: the budget of a fixed-size cache; for an appending one, the largest
request's kept prompt and new tokens, reallocated only when a call needs more). A request is

1. **prefilled alone** (batch 1, as SnapStream is deployed) into a fresh cache, which compresses it to its kept
   tokens and yields its first token;
2. **copied into a free slot** (:meth:`~snapeval.cache.base.CompressedKVCache.load_row`);
3. **decoded together with every other slot**, one batched forward per token: ``input_ids`` ``[num_slots, 1]`` and
   explicit ``position_ids`` ``[num_slots, 1]`` (each row's next position) and the cache's validity mask. Every
   decode step runs on the same shapes, whatever the batch composition, through the decode kernel its caches carry
   (the run's ``decode_kernel``, :func:`snapeval.cache.kernels.decode_attention`: grouped-query heads read their KV
   head in place). The mask is
   always given with ``compile=True`` or ``capture=True`` (one graph) and to the ``split``/``flex``/``triton``
   kernels (a GPU's); the ``sdpa`` kernel (the CPU's) leaves it out eagerly when every slot is valid. The rows, the
   token ids and the positions are static addresses, written in place, so the step can be recorded once as a CUDA
   graph and replayed (``capture=True``, :class:`~snapeval.decoding.graphs.CapturedDecodeStep`: no compiler, the
   sweep's path on a GPU) or compiled (``compile="reduce-overhead"``).

When a request stops (eos, a stop string, or ``max_new_tokens``) its slot is parked and refilled from the queue
before the next step (continuous batching). A parked slot holds zero keys and values, all visible, so its
(ignored) row never attends over an empty set and cannot produce NaNs. Greedy outputs equal :func:`snapeval.generate` run on each
request alone; sampling draws from each request's own stream (:mod:`snapeval.decoding.sampling`), inside the step
(captured too): the same tokens alone or in any batch.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from snapeval.cache import METHOD_TABLE, MethodConfig, method_info, resolve_method
from snapeval.cache.config import MIN_BUDGET
from snapeval.cache.methods import build_cache
from snapeval.cache.attention import install
from snapeval.decoding.graphs import CapturedDecodeStep
from snapeval.decoding import (Completion, Request, SamplingParams, SlotSampler, choose, decode_step, pad_token_id,
                               request_stream, stop_token_ids)
from snapeval.decoding.prompts import encode_prompt
from snapeval.decoding.step import prefill as prefill_prompt
from snapeval.errors import SnapevalError, check_int, is_int
from snapeval.models.devices import input_device, layer_devices
from snapeval.models.presets import head_dim
from snapeval.run_args import DecodeChoices

logger = logging.getLogger(__name__)

#: The built-in methods the engine runs (every one with static rows: appending caches get rows sized for their
#: requests; :attr:`~snapeval.cache.methods.MethodInfo.static_rows`).
ENGINE_METHODS = tuple(name for name in METHOD_TABLE.names() if METHOD_TABLE.get(name).static_rows)
@dataclass
class EngineStats:
    """Totals of one :meth:`Engine.generate` call."""

    num_slots: int
    requests: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    wall_seconds: float = 0.0
    prefill_seconds: float = 0.0  # batch-1 prefills (compression included)
    decode_seconds: float = 0.0  # batched decode steps (sampling and stop checks included)
    decode_steps: int = 0
    active_slot_steps: int = 0  # sum over decode steps of the slots that were decoding

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of wall time (prefill included): the end-to-end throughput."""
        return self.generated_tokens / self.wall_seconds if self.wall_seconds > 0 else float("nan")

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens produced by batched decode steps per second of decode time."""
        return self.active_slot_steps / self.decode_seconds if self.decode_seconds > 0 else float("nan")

    @property
    def occupancy(self) -> float:
        """Mean fraction of the slots that were decoding, over decode steps."""
        return self.active_slot_steps / (self.decode_steps * self.num_slots) if self.decode_steps else float("nan")

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items()}
        out.update(tokens_per_s=self.tokens_per_s, decode_tokens_per_s=self.decode_tokens_per_s, occupancy=self.occupancy)
        return out


def greedy_step(model, cache, input_ids: torch.Tensor, position_ids: torch.Tensor, sampler: SlotSampler
                ) -> torch.Tensor:
    """One decode step of every slot (:func:`~snapeval.decoding.step.decode_step`) and each slot's argmax written
    into ``input_ids`` ``[N, 1]`` in place; returns the logits ``[N, V]``."""
    logits = decode_step(model, cache, input_ids, position_ids)
    input_ids[:, 0].copy_(logits.argmax(-1))
    return logits


def sampled_step(model, cache, input_ids: torch.Tensor, position_ids: torch.Tensor, sampler: SlotSampler
                 ) -> torch.Tensor:
    """:func:`greedy_step` for a call where some request samples: each slot's token from ``sampler``
    (:meth:`~snapeval.decoding.sampling.SlotSampler.choose`: argmax, or a draw from the slot's own stream)."""
    logits = decode_step(model, cache, input_ids, position_ids)
    input_ids[:, 0].copy_(sampler.choose(logits))
    return logits


def eager_sampled_step(model, cache, input_ids: torch.Tensor, position_ids: torch.Tensor, sampler: SlotSampler
                       ) -> torch.Tensor:
    """:func:`sampled_step` of an engine that neither compiles nor captures its step: the same tokens, drawn only for
    the slots whose request samples (:meth:`~snapeval.decoding.sampling.SlotSampler.choose_eager`), not for every
    row (the whole vocabulary of every row sorted at every step)."""
    logits = decode_step(model, cache, input_ids, position_ids)
    input_ids[:, 0].copy_(sampler.choose_eager(logits))
    return logits


#: The engine's step per kind of call (whether any request samples): what runs compiled, or is recorded as a CUDA
#: graph, sampling included (pure tensor operations) ...
STEPS = {False: greedy_step, True: sampled_step}
#: ... and what runs eagerly: the same tokens, a sampled call drawing only for the slots that sample.
EAGER_STEPS = {False: greedy_step, True: eager_sampled_step}


#: ``prefill(request_index, prompt_ids) -> (logits [V] of the last prompt position, a compressed cache whose row 0
#: holds the prompt)``: how a prompt becomes a decode row (default: :meth:`Engine.prefill`, a batch-1 prefill).
PrefillFn = Callable[[int, list], "tuple[torch.Tensor, object]"]
#: Requests an engine decodes together when its caller names no ``num_slots`` (nor an admission).
DEFAULT_SLOTS = 8

#: The one line of an engine asked to prefill whose admission builds no rows (a segmented engine's).
PREFILL_BY_CALLER = ("prefill: this engine decodes rows built by its caller (its admission builds none); allowed: "
                     "generate(..., prefill=...)")
#: ``torch.compile`` modes the decode step accepts (``compile=`` one of these, or ``True`` for the default mode).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class Admission:
    """How an engine's rows are laid out and which row a request is admitted into: the policy an engine is given
    (as vLLM keeps admission in a scheduler its model runner does not inherit from). This one, every engine's
    default: ``num_slots`` rows of one configuration's static-row cache; a request goes into the first free row (into
    the row of its index where the engine keeps its rows). A fixed-size method's rows hold its budget; an appending
    one's the largest kept prompt and new tokens of a call, grown when a call needs more.
    (:class:`~snapeval.engine.segmented.SegmentAdmission` lays several configurations' rows out in one step.)

    What an engine asks of its admission: :attr:`num_slots`, :attr:`configs`, :meth:`prefill_cache`,
    :meth:`allocate`, :meth:`grow`, :meth:`assign`, :meth:`next` and :meth:`stepped`.
    """

    def __init__(self, config: MethodConfig, num_slots: int, keep_rows: bool = False):
        check_int("num_slots", num_slots, 1)
        self.config, self.configs, self.num_slots, self.keep_rows = config, [config], num_slots, bool(keep_rows)
        self.fixed_size = method_info(config).fixed_size
        self.slots = config.budget if self.fixed_size else 1  # each row's slots

    def prefill_cache(self, engine):
        """The reusable batch-1 cache a prompt is prefilled into (:meth:`Engine.prefill`); None where the caller
        builds every row (a segmented engine's)."""
        return self._rows_cache(engine)

    def _rows_cache(self, engine):
        """A cache of the configuration's static-row class, decoding with the engine's kernel."""
        return build_cache(engine.model, self.config, method_info(self.config).static_cache_class(),
                           decoding=engine.decoding)

    def allocate(self, engine) -> None:
        """(Re)allocate :attr:`Engine.cache`'s rows at :attr:`slots` slots each."""
        if engine.cache is None:
            engine.cache = self._rows_cache(engine)
        engine.cache.allocate_rows(self.num_slots, *engine.row_shape, engine.dtype, engine.layer_devices,
                                   always_mask=engine.always_mask, slots=self.slots)

    def assign(self, requests: list[Request], groups: Sequence[int] | None) -> None:
        """A call's requests (``groups``: each request's group of rows, for a policy that has groups; None here)."""
        if groups is not None:
            raise SnapevalError("segments: an engine of one configuration has one group of rows; allowed: None")
        if self.keep_rows and len(requests) > self.num_slots:
            raise SnapevalError(f"prompts: {len(requests)} requests for an engine of num_slots={self.num_slots} that "
                                f"keeps its rows; allowed: at most {self.num_slots} (one slot each)")

    def grow(self, requests: list[Request]) -> bool:
        """Whether the rows must be reallocated for ``requests``: an appending cache needs, per row, its kept prompt
        plus every token it may decode (rows are sized for the call's largest request, grown only)."""
        if self.fixed_size:
            return False
        needed = (max(self.config.kept_tokens(len(r.prompt)) for r in requests)
                  + max(r.params.max_new_tokens for r in requests))
        if needed <= self.slots:
            return False
        self.slots = needed
        return True

    def next(self, queue: deque, active: dict[int, Request]) -> tuple[Request, int] | None:
        """The request to admit next, taken off ``queue``, and its slot: the queue's head in the first free slot (in
        the slot of its index when the engine keeps its rows); None: no request can be admitted now."""
        slot = queue[0].index if self.keep_rows else next(s for s in range(self.num_slots) if s not in active)
        return queue.popleft(), slot

    def stepped(self, active: dict[int, Request]) -> None:
        """A decode step ran over ``active`` (slot -> request): a policy's own counts (none here)."""


class Engine:
    """Continuous-batching generation: ``Engine(model, tokenizer, 1024, num_slots=8).generate(prompts, sampling)``.

    Args:
        model: a Hugging Face causal LM of a supported architecture (Llama, Qwen2).
        tokenizer: decodes completions (stop strings, text); encodes string prompts (no special tokens added).
        config: a fixed-size method's configuration (a :class:`~snapeval.cache.SnapStreamConfig` or
            :class:`~snapeval.cache.StreamingLLMConfig`), used as given, or an integer total budget for ``method``.
        method: the method of an integer budget (``snapstream`` or ``streamingllm``, or any method with a static-row
            layout). ``full``/``snapkv`` caches grow while decoding: the engine runs them too, its rows reallocated
            to the largest request of a call.
        num_slots: requests decoded together (the static batch size; default :data:`DEFAULT_SLOTS`).
        compile: run the decode step through ``torch.compile``: ``True`` (its default mode) or a mode name from
            :data:`COMPILE_MODES` (``"reduce-overhead"`` captures the step in CUDA graphs on a GPU). Off by default:
            it brought no reliable gain on CPU (``docs/engine.md``), and each new shape costs a compilation.
        decoding: the run's choices of the decode step (:class:`~snapeval.run_args.DecodeChoices`, resolved for
            its device by :meth:`snapeval.run_args.RunArgs.decode_choices`; default: the ``auto`` kernel, eager):
            ``decode_kernel``, the attention kernel every cache of the engine carries to every layer; ``capture``,
            record the decode step once per row allocation as a CUDA graph and replay it
            (:class:`~snapeval.decoding.graphs.CapturedDecodeStep`): the launch overhead of a step gone without a
            compiler (a capture costs a few steps' time, where a compilation costs tens of seconds per shape). The
            graph is recorded on parked rows before the first request is admitted, which are parked again after.
            Needs every layer on one CUDA device (a model split over devices decodes eagerly, logged; an error with
            ``capture_required``).
        seed: base seed of requests whose :class:`SamplingParams` gives none.
        admission: how the rows are laid out and filled (:class:`Admission` of ``config``, ``num_slots`` and
            ``keep_rows`` by default; :class:`~snapeval.engine.segmented.SegmentAdmission`: several configurations'
            rows in one step). Given, it decides the configurations, the slots and the rows kept: ``config``,
            ``num_slots`` or ``keep_rows`` given beside it is a one-line :class:`SnapevalError`.
        keep_rows: every request of a call decodes in the slot of its index and keeps its row when it finishes
            (never parked, never refilled: row ``i`` of :attr:`cache` holds request ``i`` when the call ends, as
            row ``i`` of a padded batch does, for :func:`snapeval.generate`'s introspection); a call then takes at
            most ``num_slots`` requests. A finished row goes on decoding until the call ends (its output ignored),
            as a padded batch's finished row does; rows sized for the call's largest request hold every such step.
    """

    def __init__(self, model, tokenizer, config: MethodConfig | int | None = None, method: str = "snapstream",
                 num_slots: int | None = None, *, compile: bool | str = False,
                 decoding: DecodeChoices | None = None, seed: int = 0, keep_rows: bool | None = None,
                 admission: Admission | None = None):
        if admission is None:
            admission = Admission(self._configuration(config, method), DEFAULT_SLOTS if num_slots is None else
                                  num_slots, bool(keep_rows))
        else:  # the admission lays the rows out: what it decides is not given twice
            given = [f"{name}={value!r}" for name, value in (("config", config), ("num_slots", num_slots),
                                                              ("keep_rows", keep_rows)) if value is not None]
            if given:
                raise SnapevalError(f"{', '.join(given)} given with an admission, which names the configurations "
                                    "and lays out their rows; allowed: the admission alone")
        if not isinstance(compile, bool) and compile not in COMPILE_MODES:
            raise SnapevalError(f"compile={compile!r} is invalid; allowed: True, False or one of {', '.join(COMPILE_MODES)}")
        decoding = DecodeChoices() if decoding is None else decoding
        if decoding.capture and compile:
            raise SnapevalError(f"capture=True with compile={compile!r} is invalid; allowed: one of them (capture "
                                "records the eager step as a CUDA graph, compile's reduce-overhead mode its own)")
        self.model, self.tokenizer, self.seed, self.decoding = model, tokenizer, seed, decoding
        self.admission, self.num_slots = admission, admission.num_slots
        self.config = admission.configs[0]  # the first (an engine of one configuration: its only) configuration
        self.device = input_device(model)  # token ids, positions and logits; each layer's rows live on its device
        self.layer_devices = layer_devices(model)
        self.dtype = next(model.parameters()).dtype
        self.row_shape = (model.config.num_key_value_heads, head_dim(model.config))
        self.prefill_cache = admission.prefill_cache(self)  # reset, reused by prefills (None: the caller's rows)
        #: a capture the run asked for by name (``capture: true``): failing to record it is an error, not a fallback
        self.capture_required = decoding.capture and decoding.capture_required
        self.captured = decoding.capture and self._can_capture(model)
        self.always_mask = bool(compile) or self.captured
        #: the recorded steps (greedy, sampled), each at the first generate that needs it after each allocation
        self._graphs: dict[bool, CapturedDecodeStep] = {}
        self._sampling = False  # whether the current call samples (its step also draws: SlotSampler)
        self.stops = stop_token_ids(model, tokenizer)
        self.pad_id = pad_token_id(tokenizer)
        self.input_ids = torch.full((self.num_slots, 1), self.pad_id, dtype=torch.long, device=self.device)
        self.position_ids = torch.zeros(self.num_slots, 1, dtype=torch.long, device=self.device)
        self.sampler = SlotSampler(self.num_slots, self.device)
        for tensor in (self.input_ids, self.position_ids, *self.sampler.tensors()):  # written in place: graphs read them
            torch._dynamo.mark_static_address(tensor)
        self.compiled = bool(compile)
        mode = compile if isinstance(compile, str) else None
        # the step function, not a bound method: an engine that held its own method would sit in a reference cycle,
        # and its rows (gigabytes on a GPU) would outlive it until the cyclic collector happened to run
        self._step_functions = ({sampled: torch.compile(step, dynamic=False, mode=mode) for sampled, step in STEPS.items()}
                                if compile else dict(EAGER_STEPS))
        self.cache = None
        self._allocate()
        self.stats = EngineStats(num_slots=self.num_slots)

    @staticmethod
    def _configuration(config: MethodConfig | int, method: str) -> MethodConfig:
        """``config`` as a method configuration the engine runs (an integer: a budget of ``method``)."""
        if is_int(config):
            config = resolve_method(method, budget=config)
        if not isinstance(config, MethodConfig):
            raise SnapevalError(f"config={config!r} is invalid for the engine; allowed: a method configuration or a budget "
                                f">= {MIN_BUDGET}")
        if not method_info(config).static_rows:
            raise SnapevalError(
                f"method={config.method!r} is not supported by the engine; choose one of: {', '.join(ENGINE_METHODS)} "
                "(methods with a static-row layout; use snapeval.generate for the others)"
            )
        return config

    @property
    def method(self) -> str:
        return self.config.method

    def _can_capture(self, model) -> bool:
        """Whether the step can be recorded as one CUDA graph: every layer and the inputs on one CUDA device."""
        devices = {torch.device(d) for d in self.layer_devices} | {torch.device(self.device)}
        if len(devices) == 1 and CapturedDecodeStep.supports(next(iter(devices))):
            return True
        if self.capture_required:
            raise SnapevalError(f"capture='true': the decode step cannot be recorded as one CUDA graph (this model's "
                                f"layers are on {', '.join(sorted(map(str, devices)))}); allowed: auto (eager there, "
                                "recorded as captured: false) or false")
        logger.warning("capture=True: the decode step stays eager (a CUDA graph needs every layer on one CUDA "
                       "device; this model's layers are on %s)", ", ".join(sorted(map(str, devices))))
        return False

    def _allocate(self) -> None:
        """(Re)allocate every row at its admission's slots (compiled or captured: one graph, the mask always given;
        eager: no mask when every slot is valid). A recorded graph of the old rows is dropped."""
        self._release_graph()
        self.admission.allocate(self)
        for slot in range(self.num_slots):
            self._park(slot)

    # --- public API ---------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int] | str],
                 sampling: SamplingParams | Sequence[SamplingParams] | None = None, *,
                 prefill: PrefillFn | None = None, segments: Sequence[int] | None = None) -> list[Completion]:
        """Run every prompt to completion; completions come back in input order. :attr:`stats` holds the totals.

        ``prompts``: token-id lists (used as given) or strings (tokenized without special tokens).
        ``sampling``: one :class:`SamplingParams` for all, one per prompt, or ``None`` (greedy, defaults).
        ``prefill``: how a prompt becomes a decode row (default :meth:`prefill`); a shared prefill
        (:mod:`snapeval.branching`) passes rows it built from one prefill for several methods and budgets; required
        where the admission builds no rows itself (a segmented engine's).
        ``segments``: each request's group of rows, where the admission has groups
        (:class:`~snapeval.engine.segmented.SegmentAdmission`: request ``i`` decodes in segment ``segments[i]``).
        """
        requests = self._requests(prompts, sampling)
        if prefill is None and self.prefill_cache is None:
            raise SnapevalError(PREFILL_BY_CALLER)
        self.admission.assign(requests, segments)
        install(self.model)  # the `snapstream` attention (idempotent; another caller may have switched it)
        self._prepare(requests)
        return self._run(requests, prefill or self.prefill)

    def reserve(self, prompt_tokens: int, sampling: SamplingParams) -> None:
        """Size the rows for a request of ``prompt_tokens`` tokens and ``sampling`` and record its step now, before
        any row is loaded: a caller that then builds a request's row in place (:meth:`~snapeval.cache.base.
        CompressedKVCache.load_row_layer` into :attr:`cache`, one layer at a time) decodes it with :meth:`generate`
        and a ``prefill`` that returns ``(logits, None)``."""
        request = Request(index=0, prompt=[self.pad_id] * prompt_tokens, params=sampling)
        self.admission.assign([request], None)
        self._prepare([request])

    def _prepare(self, requests: list[Request]) -> None:
        """Rows sized for ``requests``, and the step of their kind (greedy, or sampling) recorded if it is not yet."""
        if self.admission.grow(requests):
            self._allocate()
        self._sampling = any(r.params.do_sample for r in requests)
        if self.captured and self._sampling not in self._graphs:
            self._record_graph()

    def release(self) -> None:
        """Drop the recorded CUDA graph and its memory pool (the rows go with the engine)."""
        self._release_graph()

    def _release_graph(self) -> None:
        for graph in self._graphs.values():
            graph.release()
        self._graphs = {}

    def _record_graph(self) -> None:
        """Record the current call's step (greedy, or with sampling) over the current rows, every slot parked (the
        capture's warm-up steps advance the rows as decode steps do), then park every slot again: the graph replays
        on the same addresses."""
        self._graphs[self._sampling] = CapturedDecodeStep(step=STEPS[self._sampling])
        try:
            self.step_rows()
        except RuntimeError as exc:  # under auto, a step that cannot be captured decodes eagerly (captured: false)
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            if self.capture_required:
                self._release_graph()
                raise SnapevalError(f"capture='true': recording the decode step as a CUDA graph failed ({reason}); "
                                    "allowed: auto (eager where it fails, recorded as captured: false) or false") from None
            logger.warning("capture=True: recording the decode step failed (%s); it stays eager (captured: false in "
                           "the run's provenance)", reason)
            self._release_graph()
            self.captured = False
        for slot in range(self.num_slots):
            self._park(slot)

    def prefill(self, index: int, prompt: list[int]):
        """Prefill one prompt alone (batch 1) into the reusable prefill cache, which compresses it.
        Returns the last position's logits ``[V]`` and that cache."""
        cache = self.prefill_cache
        if cache is None:
            raise SnapevalError(PREFILL_BY_CALLER)
        cache.reset()
        return prefill_prompt(self.model, cache, torch.tensor([prompt], device=self.device))[0], cache

    def slot_tensors(self) -> list[torch.Tensor]:
        """Every tensor the slots live in (for introspection: their storage never changes)."""
        return self.cache.row_tensors()

    # --- internals ----------------------------------------------------------------------------------------------
    def _run(self, requests: list[Request], prefill: PrefillFn) -> list[Completion]:
        self.stats = stats = EngineStats(num_slots=self.num_slots, requests=len(requests),
                                         prompt_tokens=sum(len(r.prompt) for r in requests))
        queue, active, done = deque(requests), {}, {}
        if self.admission.keep_rows:  # the previous call's rows, kept, go idle
            for slot in range(self.num_slots):
                self._park(slot)
        start = time.perf_counter()
        while queue or active:
            while queue and len(active) < self.num_slots:  # admission: refill free slots, one batch-1 prefill each
                admitted = self.admission.next(queue, active)
                if admitted is None:
                    break
                request, slot = admitted
                if self._admit(request, slot, start, prefill):
                    done[request.index] = request.completion(self.tokenizer, time.perf_counter() - start)
                else:
                    active[slot] = request
            if not active:
                continue
            step_start = time.perf_counter()
            self._step(active, done, start)
            stats.decode_seconds += time.perf_counter() - step_start
        stats.wall_seconds = time.perf_counter() - start
        stats.generated_tokens = sum(c.generated_tokens for c in done.values())
        stats.prefill_seconds = sum(c.prefill_seconds for c in done.values())
        return [done[i] for i in range(len(requests))]

    def _requests(self, prompts, sampling) -> list[Request]:
        if isinstance(prompts, str) or not isinstance(prompts, Sequence) or not prompts:
            raise SnapevalError("prompts must be a non-empty list of token-id lists or strings")
        if sampling is None or isinstance(sampling, SamplingParams):
            sampling = [sampling or SamplingParams()] * len(prompts)
        sampling = list(sampling)
        if len(sampling) != len(prompts) or not all(isinstance(s, SamplingParams) for s in sampling):
            raise SnapevalError(f"sampling must be one SamplingParams or a list of {len(prompts)} (one per prompt)")
        requests = []
        for i, (prompt, params) in enumerate(zip(prompts, sampling)):
            ids = encode_prompt(self.tokenizer, prompt) if isinstance(prompt, str) else list(prompt)
            if not ids:
                raise SnapevalError(f"prompts[{i}] is empty; allowed: at least one token")
            requests.append(Request(index=i, prompt=[int(t) for t in ids], params=params,
                                    stream=request_stream(params, self.seed, i)))
        return requests

    def _admit(self, request: Request, slot: int, start: float, prefill: PrefillFn) -> bool:
        """Prefill ``request``, choose its first token, load it into ``slot``. True if it already finished."""
        t0 = time.perf_counter()
        request.admitted_at = t0 - start
        logits, cache = prefill(request.index, request.prompt)  # cache None: the row was built in place (reserve)
        token = choose(logits, request.params, request.stream)
        request.first_token_at = time.perf_counter() - start
        finished = request.check_stop(token, self.stops, self.tokenizer)
        request.kv_bytes = cache.row_kv_bytes(0) if cache is not None else self.cache.row_kv_bytes(slot)
        if cache is not None and (not finished or self.admission.keep_rows):
            self.cache.load_row(slot, cache)
        if not finished:
            self.input_ids[slot, 0] = token
            self.sampler.assign(slot, request.params, request.stream)
            request.slot = slot
        request.prefill_seconds = time.perf_counter() - t0
        return finished

    def _forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """One decode step of every slot and the choice of each slot's next token, written into ``input_ids``
        (:data:`STEPS`: replayed when captured, compiled when the engine is): ``[N, 1]`` ids and positions ->
        ``[N, V]`` logits."""
        graph = self._graphs.get(self._sampling)
        if graph is not None:
            return graph(self.model, self.cache, input_ids, position_ids, self.sampler)
        return self._step_functions[self._sampling](self.model, self.cache, input_ids, position_ids, self.sampler)

    def step_rows(self) -> torch.Tensor:
        """One static decode step of every slot from :attr:`input_ids` (each slot's next token written back into it);
        returns ``[num_slots, V]`` logits. What :meth:`generate` steps its rows with (a benchmark times it alone)."""
        self.position_ids.copy_(self.cache.next_positions()[:, None])
        return self._forward(self.input_ids, self.position_ids)

    def _step(self, active: dict[int, Request], done: dict[int, Completion], start: float) -> None:
        self.admission.stepped(active)
        self.step_rows()
        tokens = self.input_ids[:, 0].tolist()  # what the step chose for every slot: the one copy to the host
        self.stats.decode_steps += 1
        self.stats.active_slot_steps += len(active)
        for slot, request in list(active.items()):
            if request.stream is not None:
                request.stream.drawn += 1  # the slot's counter advanced on the device
            if request.check_stop(tokens[slot], self.stops, self.tokenizer):
                request.kv_bytes = self.cache.row_kv_bytes(slot)
                done[request.index] = request.completion(self.tokenizer, time.perf_counter() - start)
                del active[slot]
                if not self.admission.keep_rows:
                    self._park(slot)

    def _park(self, slot: int) -> None:
        """Idle ``slot`` (:meth:`~snapeval.cache.base.CompressedKVCache.park_row`) fed the pad token (later steps
        feed it whatever they chose for it; its output is ignored)."""
        self.cache.park_row(slot)
        self.sampler.park(slot)
        self.input_ids[slot, 0] = self.pad_id
