"""The group search: of the candidate plans (:class:`~snapeval.memory_plan.chunk.Candidate`) the one a group runs
(:func:`plan_group`). On a CPU, the largest chunk that fits; on a GPU, of those that fit the one with the fewest
bytes per decoded token (:func:`~snapeval.memory_plan.cost.bytes_per_token`); then, if one item does not fit, the
prompt prefilled in token chunks and, on a GPU, the capture kept in host memory."""
from __future__ import annotations

import dataclasses
from typing import Sequence

from snapeval.cache.config import MethodConfig
from snapeval.errors import SnapevalError, check_int
from snapeval.memory_plan.chunk import (Ask, Candidate, batch_whole_matters, configuration_plans, decodes_in_rows,
                                        phases)
from snapeval.memory_plan.cost import CostModel, bytes_per_token, cost_model
from snapeval.memory_plan.records import SHARED_STEP_ROWS, GroupPlan, Item
from snapeval.memory_plan.shape import ModelShape
from snapeval.memory_plan.sizes import branch_bytes, holds_whole_prompt
from snapeval.memory_plan.units import MIN_PREFILL_TOKENS, gib


def plan_group(shape: ModelShape, configs: Sequence[MethodConfig], items: Sequence[Item], *, chunk: int,
               window: int, budget: int | None = None, in_use: int = 0, device: str = "cpu",
               prefill_tokens: int | None = None, alone: set[str] = frozenset(), captured: bool = False,
               host_budget: int | None = None, host_in_use: int = 0, one_step: bool = False,
               cost: CostModel | None = None) -> GroupPlan:
    """The plan of a group (its keywords are :class:`~snapeval.memory_plan.chunk.Ask`'s): the largest chunk, at
    most ``chunk``, whose peak fits ``budget``; if one item does not fit, prompts are prefilled in token chunks
    (never below :data:`MIN_PREFILL_TOKENS`) and, on a GPU, the capture is kept in host memory. Raises a one-line
    :class:`SnapevalError` when nothing fits. In a ``captured`` run on a GPU, of the plans whose configurations
    decoded alone run in a captured engine of one row (beside their branch) or in the eager loop (in place), the one
    that fits with the fewest :func:`bytes_per_token` (the eager loop weighted by its factor). ``host_budget``: on a
    GPU, the bytes the host may hold (``host_in_use`` of them in use), so that held branches may wait there.
    ``one_step``: the run's decode kernel attends over several configurations' rows in one launch, in place
    (:data:`snapeval.cache.kernels.RAGGED_IN_PLACE`), so that on a GPU the configurations in rows may share one step
    (:attr:`GroupPlan.shared_step`). ``cost``: the rates that rank the plans (default: those of ``device``'s
    hardware sheet, :func:`~snapeval.memory_plan.cost.cost_model`)."""
    if not items:
        raise ValueError("a memory plan needs at least one item")
    check_int("chunk", chunk, 1)
    largest = Item(max(i.prompt for i in items), max(i.max_new for i in items), max(i.prefix for i in items))
    ask = Ask(shape, tuple(configs), largest, len(items), window, chunk, prefill_tokens, budget, in_use, device,
              frozenset(alone), False, host_budget, host_in_use, one_step)
    cost = cost_model(device) if cost is None and ask.on_gpu else cost
    if not (captured and ask.on_gpu):
        return _plan(ask, cost)
    plans = []
    for engine_alone in _alone_engines(ask):
        try:
            plan = _plan(dataclasses.replace(ask, captured=engine_alone), cost)
        except SnapevalError:
            continue
        plans.append(dataclasses.replace(plan, alone_captured=engine_alone))
    if not plans:  # neither fits: the eager loop's own one-line error
        return _plan(ask, cost)
    return min(plans, key=lambda p: (bytes_per_token(shape, p, captured=True, cost=cost), not p.alone_captured))


def _alone_engines(ask: Ask) -> tuple[bool, ...]:
    """How a configuration decoded alone may decode: in a captured engine of one row, or in the eager loop. Where
    every configuration decodes in rows whatever the plan (none is a press prefilled alone, each has static rows
    and either is fixed-size or keeps less than the prompt), the two give the same plan and the captured one is
    taken on the tie: it alone is weighed."""
    prompt = ask.largest.prompt
    if all(decodes_in_rows(ask, c, 1, False) and (c.FIXED_SIZE or not holds_whole_prompt(c, prompt))
           for c in ask.configs):
        return (True,)
    return (True, False)


def build(ask: Ask, candidate: Candidate, reasons: Sequence[str] = ()) -> GroupPlan:
    """The plan of one candidate: each configuration's decode and rows (as many as fit what one engine may take
    once the chunk's branches are held), the phases' bytes and the peak."""
    shape, largest = ask.shape, ask.largest
    in_rows = [decodes_in_rows(ask, c, candidate.chunk, candidate.batch_whole) for c in ask.configs]
    room = None
    if ask.budget is not None:
        held_one = sum(branch_bytes(shape, c, largest.prompt) for c, r in zip(ask.configs, in_rows) if r)
        held = 0 if candidate.held_on_host else min(candidate.chunk, ask.flight) * held_one
        room = max(0, ask.budget - ask.in_use - held)
    plans = configuration_plans(ask, candidate, in_rows, room)
    grown = phases(ask, candidate, plans)
    held_on_host = candidate.held_on_host
    return GroupPlan(device=ask.device, budget_bytes=ask.budget, in_use_bytes=ask.in_use,
                     weights_bytes=shape.weight_bytes, chunk=candidate.chunk, prefill_tokens=candidate.tokens,
                     capture_on_host=candidate.capture_on_host, prompt_tokens=largest.prompt,
                     max_new_tokens=largest.max_new, capture_bytes=shape.capture_bytes(largest.prompt, ask.window),
                     activation_bytes=shape.activation_bytes(candidate.tokens, largest.prompt),
                     window_bytes=shape.window_transient_bytes(largest.prompt, ask.window), configurations=plans,
                     phases=grown, peak_bytes=max(grown.values()), reasons=tuple(reasons),
                     branches_on_host=held_on_host, host_budget_bytes=ask.host_budget if held_on_host else None,
                     host_in_use_bytes=ask.host_in_use if held_on_host else 0,
                     shared_step=any(p.route == SHARED_STEP_ROWS for p in plans))


def _largest_chunk(ask: Ask, tokens: int) -> GroupPlan:
    """The largest chunk, halving from the asked one, that fits (else the plan of one item)."""
    n = ask.chunk
    plan = build(ask, Candidate(n, tokens))
    while not plan.fits and n > 1:
        n = max(1, n // 2)
        plan = build(ask, Candidate(n, tokens))
    return plan


def _plan(ask: Ask, cost: CostModel | None) -> GroupPlan:
    """The plan of one way of decoding alone (``ask.captured``): the chunk (on a GPU, the fewest bytes per decoded
    token), then the prefill cut into token chunks, then the capture in host memory, each only if still needed."""
    whole = ask.largest.prompt
    tokens = whole if ask.prefill_tokens is None else min(ask.prefill_tokens, whole)
    if ask.on_gpu:
        plan = _fewest_bytes(ask, tokens, cost) or _largest_chunk(ask, tokens)
    else:
        plan = _largest_chunk(ask, tokens)
        if plan.chunk < ask.chunk and plan.fits:
            reason = f"chunk {ask.chunk} -> {plan.chunk}: {ask.chunk} items' branches and rows exceed the budget"
            plan = dataclasses.replace(plan, reasons=(reason,))
    reasons = list(plan.reasons)
    if not plan.fits and ask.prefill_tokens is None and not ask.presses:  # presses read the whole hidden states
        while not plan.fits and tokens > MIN_PREFILL_TOKENS:
            tokens = max(MIN_PREFILL_TOKENS, tokens // 2)
            plan = build(ask, Candidate(1, tokens), reasons)
        if tokens < whole:
            reasons.append(f"prefill in chunks of {tokens} tokens: one {whole}-token forward's activations exceed "
                           "the budget")
            plan = build(ask, Candidate(1, tokens), reasons)
    if not plan.fits and ask.on_gpu:
        reasons.append("capture in host memory, streamed back layer by layer")
        plan = build(ask, Candidate(1, tokens, capture_on_host=True), reasons)
    if not plan.fits:
        raise SnapevalError(
            f"max_memory={gib(ask.budget)} GiB on {ask.device} is too small for this group: one {whole}-token item "
            f"needs {gib(plan.total_bytes)} GiB ({gib(plan.in_use_bytes)} GiB already in use); allowed: a larger "
            "max_memory, shorter prompts, or fewer configurations per group")
    return plan


def _candidates(ask: Ask, tokens: int) -> list[Candidate]:
    """The plans a GPU weighs: every chunk size from the asked one halving down to 1 (and, with a host budget, the
    largest the host holds), the held branches on the device or the host, a cache of the whole prompt batched or
    not (only where some configuration keeps the whole prompt: otherwise the two are one plan), an engine each or
    one shared step (only where the run's kernel allows it)."""
    sizes = [ask.chunk]
    while sizes[-1] > 1:
        sizes.append(max(1, sizes[-1] // 2))
    hosts = (False,)
    wholes = (True, False) if batch_whole_matters(ask) else (True,)
    if ask.host_budget is not None:
        hosts = (False, True)
        for batch_whole in wholes:
            held_one = build(ask, Candidate(1, tokens, held_on_host=True, batch_whole=batch_whole)).held_bytes
            if held_one:
                sizes.append(max(1, min(ask.chunk, (ask.host_budget - ask.host_in_use) // held_one)))
    return [Candidate(n, tokens, held_on_host=held_on_host, shared=shared, batch_whole=batch_whole)
            for n in sorted(set(sizes), reverse=True) for held_on_host in hosts for batch_whole in wholes
            for shared in ((False, True) if ask.one_step else (False,))]


def _fewest_bytes(ask: Ask, tokens: int, cost: CostModel | None) -> GroupPlan | None:
    """On a GPU decode is bound by the bytes a step moves: of the candidates that fit, the one with the fewest
    bytes per decoded token (:func:`bytes_per_token`: the weights shared by a step's rows, plus each row's own), a
    larger chunk on a tie, then the branches on the device, a batched cache of the whole prompt, an engine each.
    Holding more items gives small-budget configurations more rows but leaves less room for the rows of the large
    ones; this weighs both. With a host budget the held branches may wait in host memory: every configuration's
    engine then has the device's whole room for its rows, and the chunk is bounded by the host. The configurations
    in rows may also share one engine (one step reads the weights once for all their rows) at fewer rows each. None
    when no candidate fits."""
    fitting = []
    for candidate in _candidates(ask, tokens):
        plan = build(ask, candidate)
        if plan.fits and plan.shared_step == candidate.shared:
            moved = bytes_per_token(ask.shape, dataclasses.replace(plan, alone_captured=ask.captured), captured=True,
                                    cost=cost)
            fitting.append(((moved, -candidate.chunk, candidate.held_on_host, not candidate.batch_whole,
                             candidate.shared), candidate, plan))
    if not fitting:
        return None
    _, candidate, plan = min(fitting, key=lambda entry: entry[0])
    return dataclasses.replace(plan, reasons=tuple(_reasons(ask, candidate, plan)))


def _reasons(ask: Ask, candidate: Candidate, plan: GroupPlan) -> list[str]:
    """Why the GPU's search took ``plan`` over the asked chunk of an engine each on the device."""
    reasons = []
    if not candidate.batch_whole and any(not c.FIXED_SIZE and holds_whole_prompt(c, ask.largest.prompt)
                                         for c in ask.configs):
        reasons.append("a cache of the whole prompt decodes alone: batched, its held branches would leave "
                       "the group more bytes per decoded token")
    if plan.chunk < ask.chunk:
        reasons.append(f"chunk {ask.chunk} -> {plan.chunk}: the fewest bytes per decoded token among the chunks "
                       "that fit")
    if plan.branches_on_host:
        reasons.append(f"held branches in host memory ({gib(plan.host_bytes)} GiB): every engine has the "
                       "device's room for its rows")
    if plan.shared_step:
        reasons.append("one decode step for the configurations in rows: the weights read once for all their "
                       "rows leave fewer bytes per decoded token than an engine each")
    return reasons
