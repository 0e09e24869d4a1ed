"""One prefill, many branches: every method and budget of a sweep built from a single prefill of each prompt.

Prefill is ordinary full attention for every method (compression happens at its end), so a prompt's prefill, and
its first generated token, are the same whatever the method and budget. :class:`BranchSet` prefills each prompt
once into a :class:`~snapeval.cache.capture.PromptCapture`, builds from it the cache of every configuration
(``cache.load_prompt``: the same kept positions, keys and values as prefilling through that cache; SnapKV's window
attention is computed once per layer and window size and reused by every budget), and then decodes or scores each
branch exactly as it would have run alone. A method that compresses inside the prefill branches too: its entry names
its prefill hooks (:attr:`~snapeval.cache.methods.MethodInfo.prefill_hook`), which during the shared prefill hand
every attention layer's inputs to each of its configurations in the group; one that cannot branch (or is alone in its
set: its own hooks, the reference path) prefills itself.

- ``generate_until``: items go through in chunks sized by a memory plan (:mod:`snapeval.memory_plan`). Each item
  is prefilled once; right after, every configuration's one-row cache is built from the capture layer by layer
  (each captured layer is freed once every branch holds it), configurations decoded *alone* (a cache of the whole
  prompt whose rows would cost more than the weights, or a method without static rows) decode the item at once,
  and the others' branches are held; then each configuration decodes the chunk's held branches together in the
  static rows of its own :class:`~snapeval.engine.Engine` (fixed-size caches: ``budget`` slots; appending caches:
  their kept prompt plus the tokens to decode, written by index), freed afterwards. An out-of-memory error halves
  the chunk and redoes the chunk's items; finished chunks are kept.
- ``loglikelihood``: one prefill per unique context; every continuation is scored against a copy of each branch's
  compressed context (:func:`score_contexts`).

Greedy outputs do not depend on the chunk, and sampled ones neither: a request samples from its own seed (the lm-eval
model gives every request one derived from its identity: task, document, request and repeat,
:func:`snapeval.harness.lm_eval_model.request_seeds`, so an item shard samples what the whole run samples), or
without one from the set's seed plus its index in the call, whatever chunk or engine row decodes it.

Shapes: prompts are token-id lists; logits ``[V]``; caches hold one row per prompt.
"""
from __future__ import annotations

import copy
import dataclasses
import gc
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from snapeval.cache import MethodConfig, method_info
from snapeval.cache.methods import build_cache
from snapeval.cache.capture import PromptCapture
from snapeval.cache.kernels import RAGGED_IN_PLACE, resolve_decode_kernel
from snapeval.decoding import (Completion, Request, SamplingParams, decode, pad_token_id, request_stream,
                               stop_token_ids)
from snapeval.errors import check_int
from snapeval.memory_plan import (BRANCH_LOOP, ENGINE_ROWS, IN_ROWS, ONE_ROW_ENGINE, OWN_PREFILL, SHARED_STEP_ROWS,
                                  GroupPlan, Item, ModelShape, PeakMeter, bytes_in_use, chunk_order, device_budget,
                                  is_out_of_memory, longest_first, plan_group, shares_documents)
from snapeval.memory_plan import document_families, shared_prefix, whole_families
from snapeval.models.devices import input_device
from snapeval.run_args import DecodeChoices, RunArgs


def capture_window(configs: Sequence[MethodConfig]) -> int:
    """How many of the last prompt queries a capture keeps: the largest observation window of the branches."""
    return max([c.window_queries() for c in configs] + [1])


def load_caches(capture: PromptCapture, caches: Sequence, *, release: bool = False, after_layer=None) -> None:
    """Build every cache of ``caches`` from ``capture`` one layer at a time (a layer kept in host memory comes back
    to its layer's device once); ``release``: free each captured layer as soon as every cache holds it, so the
    capture never lives beside a whole copy of itself; ``after_layer(cache, index)``: called as soon as ``cache``
    holds layer ``index``, before the next layer is built (a held branch cut to its filled slots,
    :meth:`~snapeval.cache.base.CompressedKVCache.compact_layer`; a branch copied into an engine row)."""
    if not caches:  # nothing reads the capture (a set of presses only: their hooks already freed it)
        return
    for index, layer in enumerate(capture.layers):
        prompt = capture.layer_prompt(index, layer.device)
        for cache in caches:
            cache.load_layer(index, prompt)
            if after_layer is not None:
                after_layer(cache, index)
        del prompt
        if release:
            capture.release(index)


@dataclass
class Prefilled:
    """One prompt prefilled once: its last-position logits ``[V]``, every layer's prompt (a capture) and the
    branches its presses built during the prefill (:attr:`~snapeval.cache.methods.MethodInfo.prefill_hook`)."""

    logits: torch.Tensor
    capture: PromptCapture | None
    seconds: float
    presses: dict = field(default_factory=dict)

    def cache(self, model, config: MethodConfig, cache_class=None, *, decoding: DecodeChoices | None = None):
        """A fresh one-row cache of ``config`` holding this prompt, compressed as ``config`` says (``cache_class``:
        another layout of the same method, such as the engine's static rows), decoding as the run's ``decoding``
        says (:class:`~snapeval.run_args.DecodeChoices`)."""
        cache = new_cache(model, config, cache_class, presses=self.presses, decoding=decoding)
        if config not in self.presses:
            load_caches(self.capture, [cache])
        return cache


def new_cache(model, config: MethodConfig, cache_class=None, *, presses: dict | None = None,
              decoding: DecodeChoices | None = None):
    """A one-row cache of ``config`` (of ``cache_class``, another layout of its method such as the engine's static
    rows, when given), decoding as the run's ``decoding`` says (:func:`~snapeval.cache.methods.build_cache`): empty,
    to be filled from a capture, or, for a press of ``presses`` (a prefill's hooks), whole as its hooks built it."""
    if presses and config in presses:
        return presses[config].cache(model, cache_class, decoding=decoding)
    return build_cache(model, config, cache_class, decoding=decoding)


@dataclass
class BranchStats:
    """What a shared run computed: prefills, their tokens and time, and the largest KV cache per configuration."""

    prefills: int = 0
    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    kv_bytes_per_row: dict[str, int] = field(default_factory=dict)  # largest one-row cache seen, per label
    chunk_halvings: list[dict] = field(default_factory=list)  # out-of-memory retries: the chunk before and after
    #: documents prefilled once for several items of a call (:func:`document_families`), and those items
    shared_documents: int = 0
    document_members: int = 0
    #: per label, its engines' decode: rows (slots), steps, seconds, active slot-steps, whether captured
    decode: dict[str, dict] = field(default_factory=dict)
    #: per label decoded alone (:func:`snapeval.decoding.decode`, one row, eager): its steps and their seconds
    decode_alone: dict[str, dict] = field(default_factory=dict)

    def count_decode(self, label: str, engine, segment: int | None = None) -> None:
        """Add one engine's :class:`~snapeval.engine.EngineStats` to ``label``'s decode totals; ``segment``: the
        label's segment of a :func:`~snapeval.engine.segmented.segmented_engine` (its rows and active rows, every
        step, and an even share of the steps' seconds; ``step_seconds``: the whole steps' seconds; ``shared_with``:
        the labels of the configurations that shared them)."""
        if segment is None:
            rows, seconds, active = engine.num_slots, engine.stats.decode_seconds, engine.stats.active_slot_steps
        else:
            admission = engine.admission  # a SegmentAdmission: each segment's rows and active rows
            rows, active = admission.rows[segment], admission.active_by_segment[segment]
            seconds = engine.stats.decode_seconds / len(admission.rows)
        totals = self.decode.setdefault(label, {"rows": rows, "steps": 0, "seconds": 0.0, "step_seconds": 0.0,
                                                "active_slot_steps": 0, "captured": engine.captured})
        totals["rows"] = max(totals["rows"], rows)
        totals["captured"] = totals["captured"] and engine.captured  # one engine that fell back to eager: false
        totals["steps"] += engine.stats.decode_steps
        totals["seconds"] += seconds
        totals["step_seconds"] += engine.stats.decode_seconds  # whole steps, shared or not: their mean is a step's
        totals["active_slot_steps"] += active
        if segment is not None:
            totals["shared_with"] = sorted(set(totals.get("shared_with", ())) | {c.label for c in engine.admission.configs})

    def count_alone(self, label: str, steps: int, seconds: float) -> None:
        """Add one request decoded alone to ``label``'s totals."""
        totals = self.decode_alone.setdefault(label, {"steps": 0, "seconds": 0.0})
        totals["steps"] += steps
        totals["seconds"] += seconds

    def count_prefill(self, tokens: int, start: float) -> float:
        """Count one prefill of ``tokens`` started at ``start`` (``time.perf_counter``); returns its seconds."""
        seconds = time.perf_counter() - start
        self.prefills += 1
        self.prefill_tokens += tokens
        self.prefill_seconds += seconds
        return seconds

    def saw_cache(self, label: str, cache) -> None:
        self.kv_bytes_per_row[label] = max(self.kv_bytes_per_row.get(label, 0), cache.kv_bytes_per_row())


#: ``sources(item, plan)``: the shared prefill(s) of one item and the configurations (indices) each one feeds; None
#: for configurations that prefill themselves.
Sources = Callable[[int, GroupPlan], Iterator["tuple[Prefilled | None, list[int]]"]]


class BranchSet:
    """The branches (method configurations) of one model, fed from shared prefills.

    ``BranchSet(model, tokenizer, configs, batch=8)``; :meth:`generate` and :meth:`score` return one list of
    results per configuration, in ``configs`` order. ``batch``: items in flight at most (the memory plan may take
    fewer); ``max_memory``: the device's budget in bytes, weights included (default: what is in use plus what is
    free, less a margin; :func:`snapeval.memory_plan.device_budget`); ``max_host_memory``: on a GPU, the host's budget
    in bytes where the plan may keep held branches (default: what is in use there plus what is available, less a
    margin); ``run_args``: the run's arguments (:class:`~snapeval.run_args.RunArgs`), resolved once for the
    model's device into :attr:`decoding` (:class:`~snapeval.run_args.DecodeChoices`: the decode kernel every cache
    carries and whether the engines' decode steps are captured in CUDA graphs), which every engine is handed.
    """

    def __init__(self, model, tokenizer, configs: Sequence[MethodConfig], *, batch: int = 8, seed: int = 0,
                 max_memory: int | None = None, max_host_memory: int | None = None, run_args: RunArgs | None = None):
        if not configs:
            raise ValueError("a BranchSet needs at least one configuration")
        check_int("batch", batch, 1, error=ValueError)
        self.model, self.tokenizer, self.configs = model, tokenizer, list(configs)
        self.batch, self.seed, self.max_memory, self.max_host_memory = batch, seed, max_memory, max_host_memory
        self.run_args = RunArgs() if run_args is None else run_args
        infos = [method_info(c) for c in self.configs]
        # A method with prefill hooks branches when it shares the prefill with another configuration; alone it
        # prefills through its own cache (the reference path of a per-cell run).
        self._branches = [info.branches and (not info.prefill_hook or len(self.configs) > 1) for info in infos]
        self.presses = [c for c, b, info in zip(self.configs, self._branches, infos) if b and info.prefill_hook]
        self.from_capture = [c for c, b, info in zip(self.configs, self._branches, infos) if b and not info.prefill_hook]
        self.window = capture_window(self.from_capture)
        self.device = input_device(model)  # token ids go there; outputs come back there (a split model too)
        #: The run's decode choices on this device, handed to every engine and cache: the decode kernel, and whether
        #: each engine records its decode step once as a CUDA graph (on CUDA unless the run says no) and replays it.
        self.decoding = self.run_args.decode_choices(self.device)
        self.stops = stop_token_ids(model, tokenizer)
        #: Whether any configuration builds its cache from the shared prefill.
        self.shares = any(self._branches)
        self.stats = BranchStats()
        self.plans: list[GroupPlan] = []  # the memory plan of every generate call, for the provenance
        #: per generate call, each chunk's items (indices, in the order they ran) and the plan it ran with
        self.chunk_plans: list[list[tuple[list[int], GroupPlan]]] = []
        self.peaks: list[dict] = []  # ... and its measured peak
        #: per chunk run, each configuration's route as it ran (the plan's: :data:`~snapeval.memory_plan.ROUTES`)
        self.routes_ran: list[dict[str, str]] = []
        self._shape: ModelShape | None = None

    def branches(self, config: MethodConfig) -> bool:
        """Whether ``config`` is built from this set's shared prefill (else it prefills itself)."""
        return self._branches[self.configs.index(config)]

    # --- memory -----------------------------------------------------------------------------------------------
    @property
    def shape(self) -> ModelShape:
        if self._shape is None:
            self._shape = ModelShape.of(self.model)
        return self._shape

    def host_room(self) -> dict:
        """On CUDA, what the plan needs to let held branches wait in host memory: the host's budget
        (``max_host_memory``) and what the process holds there now; elsewhere nothing. A call reads it once, at its
        start: each chunk's branches are gone before the next chunk, and host memory the allocator keeps after freeing
        them would otherwise read as in use."""
        if self.device.type != "cuda":
            return {}
        return {"host_budget": device_budget("cpu", self.max_host_memory), "host_in_use": bytes_in_use("cpu")}

    def plan(self, items: Sequence[Item], chunk: int | None = None, own: Sequence[int] = (),
             host: dict | None = None) -> GroupPlan:
        """The memory plan of these items (:func:`snapeval.memory_plan.plan_group`) on this model's device, within
        ``max_memory``, for at most ``chunk`` items in flight (default: ``batch``; on CUDA at most the items);
        ``own``: configurations (indices) that prefill themselves in this call besides those that never branch. On
        CUDA the held branches may wait in host memory (``host``: :meth:`host_room`, read now when not given)."""
        alone = {c.label for i, (c, b) in enumerate(zip(self.configs, self._branches)) if not b or i in own}
        chunk = chunk or self.batch
        if self.device.type == "cuda":  # rows beyond the call's items would only add work to every step
            chunk = min(chunk, len(items))
        host = self.host_room() if host is None else host
        return plan_group(self.shape, self.configs, items, chunk=chunk, window=self.window,
                          budget=device_budget(self.device, self.max_memory), in_use=bytes_in_use(self.device),
                          device=str(self.device), alone=alone, captured=self.decoding.capture,
                          one_step=self.one_step(), **host)

    def one_step(self) -> bool:
        """Whether the configurations decoded in rows may share one step (the plan decides whether they do): the
        run's ``shared_step`` allows it, and its decode kernel attends over every configuration's rows in one
        launch on this device (:data:`~snapeval.cache.kernels.RAGGED_IN_PLACE`: ``triton`` on CUDA)."""
        return (self.run_args.shared_step != "false"
                and resolve_decode_kernel(self.decoding.decode_kernel, self.device) in RAGGED_IN_PLACE)

    # --- prefill ----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, prompt: Sequence[int], *, tokens: int | None = None, store=None,
                presses: bool = True) -> Prefilled:
        """Prefill ``prompt`` (token ids) once, batch 1: into a capture (kept on ``store``, host memory, when given)
        and, with ``presses``, every branching press's compression. ``tokens``: at most that many tokens per forward
        (a long prompt continues its capture chunk by chunk: equal to one forward up to float rounding)."""
        start = time.perf_counter()
        prompt = list(prompt)
        capture = PromptCapture(self.model, self.window, store=store)
        hooks = []
        if presses and self.presses:
            if tokens is not None and tokens < len(prompt):
                raise ValueError("prefill hooks read the whole prompt's hidden states: their prefill cannot be chunked")
            by_hook: dict[str, list[MethodConfig]] = {}  # each method's entry names its hooks
            for config in self.presses:
                by_hook.setdefault(method_info(config).prefill_hook, []).append(config)
            hooks = [method_info(configs[0]).prefill_hook_class()(self.model, configs, len(prompt), capture,
                                                                  release=not self.from_capture)
                     for configs in by_hook.values()]
        step = len(prompt) if tokens is None else tokens
        with ExitStack() as stack:
            for hook in hooks:
                stack.enter_context(hook)
            logits = self._forward(capture, prompt[:step])
        for offset in range(step, len(prompt), step):
            capture = capture.continued(self.model)  # each layer of the last piece goes once it is continued
            logits = self._forward(capture, prompt[offset:offset + step])
        return Prefilled(logits, capture, self.stats.count_prefill(len(prompt), start),
                         {config: branch for hook in hooks for config, branch in hook.branches.items()})

    def _forward(self, capture: PromptCapture, ids: Sequence[int]) -> torch.Tensor:
        ids = torch.tensor([list(ids)], device=self.device)
        return self.model(input_ids=ids, past_key_values=capture, use_cache=True, logits_to_keep=1).logits[0, -1]

    @torch.inference_mode()
    def extend(self, prefix: Prefilled, suffix: Sequence[int]) -> Prefilled:
        """Continue a prefilled prefix with ``suffix`` (token ids, at least one): only the suffix is computed, and the
        result holds the whole prompt exactly as :meth:`prefill` of prefix + suffix would (up to float rounding)."""
        if not suffix:
            raise ValueError("extend needs at least one suffix token")
        start = time.perf_counter()
        capture = prefix.capture.continued(self.model)
        logits = self._forward(capture, suffix)
        return Prefilled(logits, capture, self.stats.count_prefill(len(suffix), start))

    def own_prefill(self, config: MethodConfig, prompt: Sequence[int]):
        """A configuration that cannot branch prefills ``prompt`` through its own cache (a press and its hooks);
        returns ``(logits [V], cache)``."""
        start = time.perf_counter()
        cache = self._new_cache(config)
        logits = cache.prefill(self.model, torch.tensor([list(prompt)], device=self.device))
        self.stats.count_prefill(len(prompt), start)
        return logits, cache

    def branch(self, config: MethodConfig, prefilled: "Prefilled | None", prompt: Sequence[int]):
        """``(logits [V], a fresh one-row cache)`` of ``config`` for a prompt: from the shared prefill when the
        method branches, else from its own prefill."""
        if self.branches(config):
            return prefilled.logits, prefilled.cache(self.model, config, decoding=self.decoding)
        return self.own_prefill(config, prompt)

    # --- generation -------------------------------------------------------------------------------------------
    def shares_documents(self) -> bool:
        """Whether :meth:`generate` prefills a document shared by several items once
        (:func:`~snapeval.memory_plan.shares_documents`: on a GPU; not with a branching press, whose hooks read the
        whole prompt's hidden states)."""
        return shares_documents(str(self.device)) and not self.presses

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sequence[SamplingParams]) -> list[list[Completion]]:
        """Every prompt under every configuration: ``out[c][i]`` is configuration ``c``'s completion of prompt ``i``.

        Where :meth:`shares_documents`, items that open with one document (:func:`document_families`) are taken
        together: the document is prefilled once and each item computes only its own suffix on top of it
        (:meth:`extend`), then branches as if it had prefilled its whole prompt."""
        families, heads = document_families(prompts) if self.shares_documents() else ([None] * len(prompts),
                                                                                       [0] * len(prompts))
        items = [Item(len(p), s.max_new_tokens, prefix=h) for p, s, h in zip(prompts, sampling, heads)]
        shared = [c for c, b in enumerate(self._branches) if b]
        alone = [c for c, b in enumerate(self._branches) if not b]
        left = {f: families.count(f) for f in set(families) if f is not None}  # members not yet extended
        document: dict[int, Prefilled] = {}  # the open family's prefilled document (one at a time)

        def sources(i: int, plan: GroupPlan):
            if shared:
                family = families[i]
                if family is None:
                    document.clear()
                    yield self.prefill(prompts[i], tokens=_tokens(plan, len(prompts[i])), store=_store(plan)), shared
                else:
                    if family not in document:
                        document.clear()  # the previous family's document goes before this one is prefilled
                        head = prompts[i][:heads[i]]
                        document[family] = self.prefill(head, tokens=_tokens(plan, len(head)), store=_store(plan),
                                                        presses=False)
                        self.stats.shared_documents += 1
                    extended = self.extend(document[family], prompts[i][heads[i]:])
                    self.stats.document_members += 1
                    left[family] -= 1
                    if left[family] <= 0:
                        document.clear()  # its last member: the continuation holds the whole prompt
                    yield extended, shared  # (the caller frees its capture once its branches are built)
            if alone:
                yield None, alone

        return self._run(items, lambda c, i: list(prompts[i]), sampling, sources, families=families,
                         after_chunk=document.clear)

    @torch.inference_mode()
    def generate_each(self, prompts: Sequence[Sequence[Sequence[int]]], sampling: Sequence[SamplingParams]
                      ) -> list[list[Completion]]:
        """Every configuration generates from its own prompts: ``prompts[c][i]`` is configuration ``c``'s prompt of
        item ``i`` (LongBench-v2's second pass: one question, each configuration's own first-pass reasoning), and
        ``out[c][i]`` its completion.

        The prompts of one item share a prefix (the longest common one, less a token so that every prompt keeps a
        suffix): it is prefilled once per item, and each configuration computes only its own suffix on top of it
        (:meth:`extend`), then compresses and decodes exactly as if it had prefilled its whole prompt alone. Presses
        read the whole prompt's hidden states, so they prefill their own prompts.
        """
        if len(prompts) != len(self.configs) or any(len(row) != len(sampling) for row in prompts):
            raise ValueError(f"prompts must be one list of {len(sampling)} prompts per configuration "
                             f"({len(self.configs)})")
        heads = [shared_prefix([row[i] for row in prompts]) for i in range(len(sampling))]
        items = [Item(max(len(row[i]) for row in prompts), s.max_new_tokens, prefix=heads[i])
                 for i, s in enumerate(sampling)]
        extended = [c for c, config in enumerate(self.configs) if config in self.from_capture]

        def sources(i: int, plan: GroupPlan):
            head = heads[i]
            prefix = self.prefill(prompts[0][i][:head], presses=False, store=_store(plan)) if head and extended else None
            for c in range(len(self.configs)):
                if c not in extended:
                    yield None, [c]
                elif prefix is not None:
                    yield self.extend(prefix, prompts[c][i][head:]), [c]
                else:
                    yield self.prefill(prompts[c][i], presses=False, store=_store(plan)), [c]

        own = [c for c in range(len(self.configs)) if c not in extended]  # presses: their own prompts' prefill
        return self._run(items, lambda c, i: list(prompts[c][i]), sampling, sources, own)

    def _run(self, items: Sequence[Item], prompt_of, sampling: Sequence[SamplingParams], sources: Sources,
             own: Sequence[int] = (), families: Sequence[int | None] | None = None,
             after_chunk: Callable[[], None] | None = None) -> list[list[Completion]]:
        """Every item under every configuration, chunk by chunk as the memory plan says (``own``: configurations
        that prefill themselves in this call); an out-of-memory error halves the chunk and redoes that chunk's items
        (finished chunks are kept). On a GPU the items go longest prompt first and each chunk is planned for the
        items left (:func:`~snapeval.memory_plan.longest_first`): a chunk of shorter prompts holds more rows. Every
        configuration decodes the same chunks, so items stay paired at the same batch composition. ``families``:
        per item its document family or None; a family's members go together and a chunk ends before a family it
        would split (unless the family alone is larger than the chunk). ``after_chunk``: called after each chunk's
        items are done or failed (what ``sources`` holds across items goes)."""
        from tqdm import tqdm

        sampling = [self._seeded(params, i) for i, params in enumerate(sampling)]
        out: list[list[Completion | None]] = [[None] * len(items) for _ in self.configs]
        per_chunk = longest_first(str(self.device))
        pending = chunk_order(items, per_chunk, families)
        limit = None  # the chunk asked for: the run's batch, halved by an out-of-memory error
        host = self.host_room()  # as the call starts: every chunk's plan sees the host as the first one did
        plan = self.plan(items, own=own, host=host)
        chunks: list[tuple[list[int], GroupPlan]] = []
        bar = tqdm(total=len(items), desc=f"One prefill per item, {len(self.configs)} configurations", unit="item")
        with PeakMeter(self.device) as meter:
            while pending:
                part = whole_families(pending, plan.chunk, families)
                try:
                    try:
                        done = self._chunk(part, plan, prompt_of, sampling, sources)
                    finally:
                        if after_chunk is not None:
                            after_chunk()
                except Exception as exc:  # noqa: BLE001 (anything but an allocation failure is re-raised)
                    if plan.chunk == 1 or not is_out_of_memory(exc):
                        raise
                    limit = max(1, plan.chunk // 2)
                    self.stats.chunk_halvings.append({"chunk": plan.chunk, "to": limit, "error": str(exc)[:200]})
                else:
                    for (c, i), completion in done.items():
                        out[c][i] = completion
                    chunks.append((part, plan))
                    pending = pending[len(part):]
                    bar.update(len(part))
                    if per_chunk and pending:
                        plan = self.plan([items[i] for i in pending], chunk=limit, own=own, host=host)
                    continue
                gc.collect()  # the failed chunk's tensors (the exception no longer holds its frames)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                left = [items[i] for i in pending] if per_chunk else items
                plan = dataclasses.replace(self.plan(left, chunk=limit, own=own, host=host), reasons=(
                    f"out of memory at chunk {limit * 2}: halved to {limit}",))
        bar.close()
        self.plans.append(chunks[0][1] if per_chunk else plan)  # longest first: the first chunk's, the largest items
        self.chunk_plans.append(chunks)
        self.peaks.append(meter.to_dict())
        return out

    def _chunk(self, part: list[int], plan: GroupPlan, prompt_of, sampling, sources: Sources) -> dict:
        """Items ``part``: each prefilled once and branched (decoded at once or held), then every held configuration
        decodes them together in its engine's rows. Returns ``{(configuration, item): completion}``."""
        from snapeval.engine import Engine

        done: dict[tuple[int, int], Completion] = {}
        route = [plan.decode_mode(config.label).route for config in self.configs]  # the plan's, run as it says
        ran: dict[str, str] = {}  # each configuration's route as run, for :attr:`routes_ran`
        rows = {c for c, r in enumerate(route) if r in IN_ROWS}
        held: dict[int, dict[int, tuple]] = {c: {} for c in rows}
        for i in part:
            for prefilled, members in sources(i, plan):
                if prefilled is None:  # configurations that prefill through their own hooks, decoded alone
                    for c in members:
                        if route[c] != OWN_PREFILL:
                            raise ValueError(f"{self.configs[c].label} prefills itself here; its plan's route is "
                                             f"{route[c]!r}; allowed: {OWN_PREFILL!r}")
                        ran[self.configs[c].label] = OWN_PREFILL
                        logits, cache = self.own_prefill(self.configs[c], prompt_of(c, i))
                        done[c, i] = self._decode_alone(self.configs[c], logits, cache, prompt_of(c, i), sampling[i], i)
                    continue
                # decoded alone in a captured engine of one row: its row is made (and its step recorded) first, and
                # its branch is built into it layer by layer, so the branch never stands whole beside the row
                one_row = {c: self._one_row_engine(self.configs[c], prompt_of(c, i), sampling[i]) for c in members
                           if route[c] == ONE_ROW_ENGINE}
                caches = {c: self._new_cache(self.configs[c], prefilled, c in rows or c in one_row) for c in members}
                built = [c for c in members if self.configs[c] not in prefilled.presses]
                into_row = {id(caches[c]): one_row[c] for c in one_row}
                held_ids = {id(caches[c]) for c in members if c in rows}

                def settle(cache, index: int) -> None:
                    """A held branch keeps the slots its prompt fills (in host memory where the plan says); a one-row
                    engine's branch moves into its row."""
                    if id(cache) in held_ids:
                        cache.compact_layer(index)
                        if plan.branches_on_host:
                            cache.move_layer(index, "cpu")
                    elif id(cache) in into_row:
                        into_row[id(cache)].cache.load_row_layer(0, cache, index)
                        cache.layers[index].reset()  # the layer lives in the row now

                load_caches(prefilled.capture, [caches[c] for c in built], release=True, after_layer=settle)
                prefilled.capture = None
                for c in members:
                    if c in rows:
                        if plan.branches_on_host and self.configs[c] in prefilled.presses:  # built whole by its hook
                            for index in range(len(caches[c].layers)):
                                caches[c].move_layer(index, "cpu")
                        held[c][i] = (prefilled.logits, caches.pop(c), prefilled.seconds)
                for c in [c for c in members if c not in rows]:
                    ran[self.configs[c].label] = ONE_ROW_ENGINE if c in one_row else BRANCH_LOOP
                    if c in one_row:
                        caches.pop(c)
                        done[c, i] = self._decode_in_one_row(self.configs[c], one_row.pop(c), prefilled.logits,
                                                             prompt_of(c, i), sampling[i], i, prefilled.seconds)
                    else:
                        done[c, i] = self._decode_alone(self.configs[c], prefilled.logits, caches.pop(c),
                                                        prompt_of(c, i), sampling[i], i, prefilled.seconds)
                into_row.clear()  # the one-row engines (and their rows) go once decoded
                del prefilled, caches
        shared = [c for c in sorted(rows) if route[c] == SHARED_STEP_ROWS]
        if shared:  # one engine, one step for every configuration's rows
            self._decode_in_one_step(shared, part, plan, held, prompt_of, sampling, done)
        ran.update({self.configs[c].label: route[c] for c in rows})
        for c in [c for c in sorted(rows) if route[c] == ENGINE_ROWS]:
            waiting = held.pop(c)
            if not waiting:
                continue
            seconds = {(c, i): waiting[i][2] for i in part}
            engine = Engine(self.model, self.tokenizer, self.configs[c],
                            num_slots=plan.decode_mode(self.configs[c].label).rows, seed=self.seed,
                            decoding=self.decoding)
            completions = engine.generate([prompt_of(c, i) for i in part], [sampling[i] for i in part],
                                          prefill=lambda j, _prompt, waiting=waiting: waiting.pop(part[j])[:2])
            self.stats.count_decode(self.configs[c].label, engine)
            engine.release()
            del engine  # its rows go with it, before the next configuration's engine allocates its own
            self._store_decoded([(c, i) for i in part], completions, seconds, done)
        self.routes_ran.append(ran)
        return done

    def _store_decoded(self, requests: list[tuple[int, int]], completions: list[Completion], prefill_seconds: dict,
                       done: dict) -> None:
        """The tail of a decode in rows, once its engine is counted, released and dropped by the caller (the rows go
        with the engine: an engine holds no reference cycle, so nothing waits for the cyclic collector,
        ``tests/test_engine.py``, ``tests/test_segments.py``): store each completion of ``requests`` (configuration
        ``c``, item ``i``) in ``done[c, i]`` with its item index, its prefill's seconds (``prefill_seconds[c, i]``)
        and its KV bytes."""
        for (c, i), completion in zip(requests, completions):
            completion.index = i
            completion.prefill_seconds = prefill_seconds[c, i]
            self._count_kv(self.configs[c], completion)
            done[c, i] = completion

    def _decode_in_one_step(self, members: list[int], part: list[int], plan: GroupPlan, held: dict, prompt_of,
                            sampling, done: dict) -> None:
        """The plan's ``shared_step``: configurations ``members`` decode the chunk's held branches in one
        :func:`~snapeval.engine.segmented.segmented_engine`, each in its own segment of the plan's rows; requests
        go item by item (every configuration's request of an item, then the next item's), so every segment stays
        busy."""
        from snapeval.engine.segmented import segmented_engine

        requests = [(c, i) for i in part for c in members if i in held[c]]
        if not requests:
            return
        seconds = {(c, i): held[c][i][2] for c, i in requests}
        engine = segmented_engine(self.model, self.tokenizer, [self.configs[c] for c in members],
                                  [plan.decode_mode(self.configs[c].label).rows for c in members], seed=self.seed,
                                  decoding=self.decoding)
        completions = engine.generate([prompt_of(c, i) for c, i in requests], [sampling[i] for _, i in requests],
                                      segments=[members.index(c) for c, _ in requests],
                                      prefill=lambda j, _prompt: held[requests[j][0]].pop(requests[j][1])[:2])
        for segment, c in enumerate(members):
            self.stats.count_decode(self.configs[c].label, engine, segment)
            held.pop(c)
        engine.release()
        del engine
        self._store_decoded(requests, completions, seconds, done)

    def _new_cache(self, config: MethodConfig, prefilled: Prefilled | None = None, in_rows: bool = False):
        """``config``'s one-row cache for an item (:func:`new_cache`, decoding with the run's kernel): to be filled
        from ``prefilled``'s capture (a press's comes whole from the prefill's hooks), or by its own prefill
        (``prefilled`` None); the engine's static-row layout when it decodes in rows, its own cache otherwise."""
        cache_class = method_info(config).static_cache_class() if in_rows else None
        return new_cache(self.model, config, cache_class, presses=prefilled.presses if prefilled else None,
                         decoding=self.decoding)

    def _seeded(self, params: SamplingParams, index: int) -> SamplingParams:
        """A sampled request without its own seed samples from ``seed + index`` (its index in the call, as
        :func:`~snapeval.decoding.request_stream` would seed it) whatever chunk or engine row decodes it."""
        if params.do_sample and params.seed is None:
            return dataclasses.replace(params, seed=self.seed + index)
        return params

    def _count_kv(self, config: MethodConfig, completion: Completion) -> None:
        self.stats.kv_bytes_per_row[config.label] = max(self.stats.kv_bytes_per_row.get(config.label, 0),
                                                        completion.kv_bytes)

    def _decode_alone(self, config: MethodConfig, logits: torch.Tensor, cache, prompt: list[int],
                      params: SamplingParams, index: int, prefill_seconds: float = 0.0) -> Completion:
        """Decode one prompt alone from its prefilled ``cache`` and last ``logits`` ``[V]`` with
        :func:`snapeval.decoding.decode`: one token per forward, explicit positions (a compressed cache is shorter
        than the sequence). A run that captures its steps decodes it in an engine of one row instead where the plan
        says so (:meth:`_decode_in_one_row`)."""
        request = Request(index=index, prompt=prompt, params=params, stream=request_stream(params, self.seed, index))
        times = decode(self.model, self.tokenizer, cache, logits[None], [request], torch.tensor([len(prompt)]),
                       stops=self.stops, pad_id=pad_token_id(self.tokenizer))
        self.stats.count_alone(config.label, len(times) - 1, times[-1] - times[0])
        request.kv_bytes = cache.kv_bytes_per_row()
        completion = request.completion(self.tokenizer, 0.0)
        completion.prefill_seconds = prefill_seconds
        self._count_kv(config, completion)
        return completion

    def _one_row_engine(self, config: MethodConfig, prompt: list[int], params: SamplingParams):
        """A captured engine of one row sized for ``prompt`` and ``params``, its step recorded
        (:meth:`~snapeval.engine.Engine.reserve`): what a configuration the plan decodes alone decodes in when the
        run captures (the plan's route :data:`~snapeval.memory_plan.records.ONE_ROW_ENGINE`)."""
        from snapeval.engine import Engine

        engine = Engine(self.model, self.tokenizer, config, num_slots=1, seed=self.seed, decoding=self.decoding)
        engine.reserve(len(prompt), params)
        return engine

    def _decode_in_one_row(self, config: MethodConfig, engine, logits: torch.Tensor, prompt: list[int],
                           params: SamplingParams, index: int, prefill_seconds: float) -> Completion:
        """:meth:`_decode_alone` in ``engine`` (:meth:`_one_row_engine`), whose row already holds the prompt's cache
        (the same tokens as the eager loop: ``tests/test_branching.py``)."""
        completion = engine.generate([prompt], [params], prefill=lambda j, _prompt: (logits, None))[0]
        self.stats.count_alone(config.label, engine.stats.decode_steps, engine.stats.decode_seconds)
        engine.release()
        del engine
        completion.index, completion.prefill_seconds = index, prefill_seconds
        self._count_kv(config, completion)
        return completion

    # --- scoring ----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def score(self, contexts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[list[tuple[float, bool]]]:
        """Log-likelihood of every continuation after its context, under every configuration (``out[c][i]``)."""
        return score_contexts(self, contexts, continuations)


def _tokens(plan: GroupPlan, prompt: int) -> int | None:
    """The plan's prefill chunk for a prompt (None: the whole prompt in one forward)."""
    return plan.prefill_tokens if plan.prefill_tokens < prompt else None


def _store(plan: GroupPlan):
    return "cpu" if plan.capture_on_host else None


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
            own = None if branches.branches(config) else branches.own_prefill(config, context[:-1])[1]
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
        """What the group computed so far: its configurations, the prefills they shared, the memory plan and the
        measured peak of each generation call in order (a two-pass task: the first pass's, then the second's), any
        out-of-memory halving and, on a GPU (chunks longest first, each planned for its own items), every chunk's
        plan and the documents prefilled once for several items (provenance)."""
        branches = self.branches
        stats = branches.stats
        out = {"configurations": len(branches.configs), "prefills": stats.prefills,
               "prefill_tokens": stats.prefill_tokens, "prefill_seconds": round(stats.prefill_seconds, 3),
               "memory_plans": [plan.to_dict() for plan in branches.plans], "measured_peaks": list(branches.peaks),
               "chunk_halvings": list(stats.chunk_halvings)}
        if longest_first(str(branches.device)):  # each chunk planned for its own items: what each one ran
            out["chunk_plans"] = [[plan.chunk_summary(part) for part, plan in call] for call in branches.chunk_plans]
        if stats.shared_documents:  # documents prefilled once for several items (on a GPU)
            out["shared_documents"] = {"documents": stats.shared_documents, "items": stats.document_members}
        return out

    def score(self, config: MethodConfig, contexts, continuations):
        key = ("loglikelihood", tuple(map(tuple, contexts)), tuple(map(tuple, continuations)))
        answers = self._answer(key, lambda: self.branches.score(contexts, continuations))
        return answers[self._index[config]], self.branches.stats
