"""The group search: of the candidate plans (:class:`~snapeval.memory_plan.chunk.Candidate`) the one a group runs
(:func:`plan_group`). On a CPU, the largest chunk that fits; on a GPU, of those that fit the one with the fewest
bytes per decoded token (:func:`~snapeval.memory_plan.cost.bytes_per_token`); then, if one item does not fit, the
prompt prefilled in token chunks and, on a GPU, the capture kept in host memory.

On a GPU the search is best first, by bounds (:func:`_fewest_bytes`): every candidate's bytes per decoded token is
bounded from below by which configurations decode in rows and how many rows fit (:class:`_Bounds`, from sizes read
once; a candidate whose held branches alone exceed the budget is dropped), the cheapest bound is priced exactly from
its configurations' decodes (:func:`decode`, no phases), and only the cheapest priced candidate is built
(:func:`build`: its phases and peak) to see whether it fits; the first that fits is the plan. It is the plan of
building every candidate and taking the cheapest that fits (:func:`_every_candidate`, ``plan_group(...,
exhaustive=True)``; ``tests/test_memory_plan_search.py`` holds the two together), which builds dozens of candidates
where this builds one or a few."""
from __future__ import annotations

import dataclasses
import heapq
from typing import Callable, Sequence

from snapeval.cache.config import MethodConfig
from snapeval.errors import SnapevalError, check_int
from snapeval.memory_plan.chunk import (Ask, Candidate, alone_plan, batch_whole_matters, configuration_plans,
                                        decodes_in_rows, phases, rows_at_chunk, rows_that_fit,
                                        rows_whatever_the_chunk)
from snapeval.memory_plan.cost import (EAGER_STEP_FACTOR, CostModel, bytes_per_token, cost_model, host_trip_bytes)
from snapeval.memory_plan.records import SHARED_STEP_ROWS, Decoding, GroupPlan, Item
from snapeval.memory_plan.shape import ModelShape
from snapeval.memory_plan.sizes import branch_bytes, engine_bytes, holds_whole_prompt, row_bytes
from snapeval.memory_plan.units import MIN_PREFILL_TOKENS, gib


def plan_group(shape: ModelShape, configs: Sequence[MethodConfig], items: Sequence[Item], *, chunk: int,
               window: int, budget: int | None = None, in_use: int = 0, device: str = "cpu",
               prefill_tokens: int | None = None, alone: set[str] = frozenset(), captured: bool = False,
               host_budget: int | None = None, host_in_use: int = 0, one_step: bool = False,
               cost: CostModel | None = None, exhaustive: bool = False) -> GroupPlan:
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
    hardware sheet, :func:`~snapeval.memory_plan.cost.cost_model`). ``exhaustive``: build every candidate a GPU
    weighs instead of searching by bounds (the same plan, slower: the reference the search is tested against)."""
    if not items:
        raise ValueError("a memory plan needs at least one item")
    check_int("chunk", chunk, 1)
    largest = Item(max(i.prompt for i in items), max(i.max_new for i in items), max(i.prefix for i in items))
    ask = Ask(shape, tuple(configs), largest, len(items), window, chunk, prefill_tokens, budget, in_use, device,
              frozenset(alone), False, host_budget, host_in_use, one_step)
    cost = cost_model(device) if cost is None and ask.on_gpu else cost
    fewest = _every_candidate if exhaustive else _fewest_bytes
    if not (captured and ask.on_gpu):
        return _plan(ask, cost, fewest)
    plans, eager_error = [], None
    for engine_alone in _alone_engines(ask):
        try:
            plan = _plan(dataclasses.replace(ask, captured=engine_alone), cost, fewest)
        except SnapevalError as error:
            eager_error = None if engine_alone else error
            continue
        plans.append(dataclasses.replace(plan, alone_captured=engine_alone))
    if not plans:  # neither fits: the eager loop's own one-line error (the plan of ``ask``, as it is)
        if eager_error is not None:
            raise eager_error
        return _plan(ask, cost, fewest)
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


def decode(ask: Ask, candidate: Candidate, in_rows: Sequence[bool] | None = None,
           held_one: int | None = None) -> Decoding:
    """Each configuration's decode under one candidate (:func:`configuration_plans`; ``in_rows``: which decode in
    rows, default :func:`decodes_in_rows`; ``held_one``: an item's held branches under them, default
    :func:`_held_per_item`): as many rows as fit what one engine may take once the chunk's branches are held. Enough
    to price the candidate (:func:`bytes_per_token`); :func:`build` adds the phases."""
    if in_rows is None:
        in_rows = [decodes_in_rows(ask, c, candidate.chunk, candidate.batch_whole) for c in ask.configs]
    held_one = _held_per_item(ask, in_rows) if held_one is None else held_one
    plans = configuration_plans(ask, candidate, in_rows, _room(ask, candidate, held_one))
    return Decoding(ask.device, candidate.chunk, ask.largest.max_new, plans, candidate.held_on_host,
                    any(p.route == SHARED_STEP_ROWS for p in plans), ask.captured)


def _held_per_item(ask: Ask, in_rows: Sequence[bool]) -> int:
    """The bytes of an item's branches held for their rows: those of the configurations that decode in rows."""
    return sum(branch_bytes(ask.shape, c, ask.largest.prompt) for c, r in zip(ask.configs, in_rows) if r)


def _room(ask: Ask, candidate: Candidate, held_one: int) -> int | None:
    """What one engine may take once the chunk's branches (``held_one`` bytes an item) are held on the device (None:
    an unbounded budget)."""
    if ask.budget is None:
        return None
    held = 0 if candidate.held_on_host else min(candidate.chunk, ask.flight) * held_one
    return max(0, ask.budget - ask.in_use - held)


def build(ask: Ask, candidate: Candidate, reasons: Sequence[str] = (), decoding: Decoding | None = None) -> GroupPlan:
    """The plan of one candidate: its :func:`decode` (``decoding``, where the search has it already), the phases'
    bytes and the peak."""
    shape, largest = ask.shape, ask.largest
    decoding = decode(ask, candidate) if decoding is None else decoding
    grown = phases(ask, candidate, decoding.configurations)
    held_on_host = candidate.held_on_host
    return GroupPlan(device=ask.device, budget_bytes=ask.budget, in_use_bytes=ask.in_use,
                     weights_bytes=shape.weight_bytes, chunk=candidate.chunk, prefill_tokens=candidate.tokens,
                     capture_on_host=candidate.capture_on_host, prompt_tokens=largest.prompt,
                     max_new_tokens=largest.max_new, capture_bytes=shape.capture_bytes(largest.prompt, ask.window),
                     activation_bytes=shape.activation_bytes(candidate.tokens, largest.prompt),
                     window_bytes=shape.window_transient_bytes(largest.prompt, ask.window),
                     configurations=decoding.configurations, phases=grown, peak_bytes=max(grown.values()),
                     reasons=tuple(reasons), branches_on_host=held_on_host,
                     host_budget_bytes=ask.host_budget if held_on_host else None,
                     host_in_use_bytes=ask.host_in_use if held_on_host else 0, shared_step=decoding.shared_step)


def _largest_chunk(ask: Ask, tokens: int) -> GroupPlan:
    """The largest chunk, halving from the asked one, that fits (else the plan of one item)."""
    n = ask.chunk
    plan = build(ask, Candidate(n, tokens))
    while not plan.fits and n > 1:
        n = max(1, n // 2)
        plan = build(ask, Candidate(n, tokens))
    return plan


def _plan(ask: Ask, cost: CostModel | None, fewest: Callable) -> GroupPlan:
    """The plan of one way of decoding alone (``ask.captured``): the chunk (on a GPU, the fewest bytes per decoded
    token: ``fewest``, :func:`_fewest_bytes` or :func:`_every_candidate`), then the prefill cut into token chunks, then
    the capture in host memory, each only if still needed."""
    whole = ask.largest.prompt
    tokens = whole if ask.prefill_tokens is None else min(ask.prefill_tokens, whole)
    if ask.on_gpu:
        plan = fewest(ask, tokens, cost)
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
            plan = dataclasses.replace(plan, reasons=tuple(reasons))  # the last one built, with its reason
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
            held_one = _held_per_item(ask, [decodes_in_rows(ask, c, 1, batch_whole) for c in ask.configs])
            if held_one:
                sizes.append(max(1, min(ask.chunk, (ask.host_budget - ask.host_in_use) // held_one)))
    return [Candidate(n, tokens, held_on_host=held_on_host, shared=shared, batch_whole=batch_whole)
            for n in sorted(set(sizes), reverse=True) for held_on_host in hosts for batch_whole in wholes
            for shared in ((False, True) if ask.one_step else (False,))]


def _fewest_bytes(ask: Ask, tokens: int, cost: CostModel) -> GroupPlan:
    """On a GPU decode is bound by the bytes a step moves: of the candidates that fit, the one with the fewest
    bytes per decoded token (:func:`bytes_per_token`: the weights shared by a step's rows, plus each row's own), a
    larger chunk on a tie, then the branches on the device, a batched cache of the whole prompt, an engine each
    (:func:`_rank`). Holding more items gives small-budget configurations more rows but leaves less room for the rows
    of the large ones; this weighs both. With a host budget the held branches may wait in host memory: every
    configuration's engine then has the device's whole room for its rows, and the chunk is bounded by the host. The
    configurations in rows may also share one engine (one step reads the weights once for all their rows) at fewer
    rows each. When no candidate fits, the plan of one item (it does not fit either: :func:`_plan` goes on).

    Best first: the candidates wait in a queue ranked by a lower bound (:class:`_Bounds`); the first one out is priced
    exactly (:func:`decode`) and goes back at its price; a priced one that comes out first ranks below every other
    candidate's bound or price, so it is built, and if it fits it is the plan (as :func:`_every_candidate` would
    choose); if not, the next."""
    bounds, queue = _Bounds(ask, cost), []
    for order, candidate in enumerate(_candidates(ask, tokens)):
        bound = bounds(candidate)
        if bound is not None:
            queue.append((_rank(bound, candidate), order, candidate, None))
    heapq.heapify(queue)
    while queue:
        _, order, candidate, decoding = heapq.heappop(queue)
        if decoding is None:
            decoding = decode(ask, candidate, *bounds.in_rows(candidate))
            moved = bytes_per_token(ask.shape, decoding, captured=True, cost=cost)
            heapq.heappush(queue, (_rank(moved, candidate), order, candidate, decoding))
            continue
        plan = build(ask, candidate, decoding=decoding)
        if plan.fits:
            return dataclasses.replace(plan, reasons=tuple(_reasons(ask, candidate, plan)))
    return build(ask, Candidate(1, tokens))  # of every chunk _largest_chunk would try, none fits


def _every_candidate(ask: Ask, tokens: int, cost: CostModel) -> GroupPlan:
    """:func:`_fewest_bytes` by building every candidate (then, when none fits, :func:`_largest_chunk`): the search as
    it was, the reference its bounds are tested against."""
    fitting = []
    for candidate in _candidates(ask, tokens):
        plan = build(ask, candidate)
        if plan.fits and plan.shared_step == candidate.shared:
            moved = bytes_per_token(ask.shape, dataclasses.replace(plan, alone_captured=ask.captured), captured=True,
                                    cost=cost)
            fitting.append((_rank(moved, candidate), candidate, plan))
    if not fitting:
        return _largest_chunk(ask, tokens)
    _, candidate, plan = min(fitting, key=lambda entry: entry[0])
    return dataclasses.replace(plan, reasons=tuple(_reasons(ask, candidate, plan)))


def _rank(moved: float, candidate: Candidate) -> tuple:
    """The order of the candidates that fit: the fewest bytes per decoded token, then a larger chunk, the branches
    on the device, a batched cache of the whole prompt, an engine each."""
    return moved, -candidate.chunk, candidate.held_on_host, not candidate.batch_whole, candidate.shared


#: A bound is computed in another order than the price it bounds, so where the two are equal it may come out a few
#: units in the last place above; deflated by this relative slack, it never does.
BOUND_SLACK = 1e-9


class _Bounds:
    """Lower bounds on the candidates of one search (:func:`_fewest_bytes`), from each configuration's sizes read
    once: its bytes per token decoded alone, its engine's bytes per row, what a row takes of the room, its held
    branch."""

    def __init__(self, ask: Ask, cost: CostModel) -> None:
        shape, prompt, max_new = ask.shape, ask.largest.prompt, ask.largest.max_new
        self.ask, self.cost = ask, cost
        self.fixed = cost.step_fixed_bytes + shape.weight_bytes  # a step's fixed bytes and the weights
        eager = 1.0 if ask.captured else EAGER_STEP_FACTOR  # the weight of a step in the eager loop (cost.py)
        self.alone = [eager * (self.fixed + alone_plan(ask, c).decode_bytes) for c in ask.configs]
        self.row = [engine_bytes(shape, c, 1, prompt, max_new) for c in ask.configs]
        self.per_row = [row_bytes(shape, c, prompt, max_new) for c in ask.configs]
        self.branch = [branch_bytes(shape, c, prompt) for c in ask.configs]
        # decodes_in_rows, split: what the chunk does not change, read once per configuration and batch_whole
        self._rows = {whole: [rows_whatever_the_chunk(ask, c, whole) for c in ask.configs] for whole in (False, True)}
        self._chunks: dict[tuple[int, bool], tuple[list[bool], list[int], int, float]] = {}

    def in_rows(self, candidate: Candidate) -> tuple[list[bool], int]:
        """Which configurations decode in rows (:func:`decodes_in_rows`) and an item's held branches under them
        (:func:`_held_per_item`, summed in the same order): :func:`decode`'s ``in_rows`` and ``held_one``."""
        in_rows, _, held_one, _ = self._chunk(candidate)
        return in_rows, held_one

    def _chunk(self, candidate: Candidate) -> tuple[list[bool], list[int], int, float]:
        """What every candidate of one chunk and ``batch_whole`` shares, wherever its branches wait and however its
        rows step: which configurations decode in rows, what a row of each of those takes of the room, an item's
        held branches, and the bytes per token moved whatever the rows (each configuration alone's, each row's own
        engine bytes)."""
        key = (candidate.chunk, candidate.batch_whole)
        if key not in self._chunks:
            in_rows = [rows_at_chunk(self.ask, c, key[0]) if r is None else r
                       for c, r in zip(self.ask.configs, self._rows[key[1]])]
            per_row = [p for p, r in zip(self.per_row, in_rows) if r]
            held_one = sum(b for b, r in zip(self.branch, in_rows) if r)
            moved = (sum(a for a, r in zip(self.alone, in_rows) if not r)
                     + sum(e for e, r in zip(self.row, in_rows) if r))
            self._chunks[key] = (in_rows, per_row, held_one, moved)
        return self._chunks[key]

    def __call__(self, candidate: Candidate) -> float | None:
        """A lower bound on :func:`bytes_per_token` of ``candidate``'s plan, from which configurations decode in rows
        and how many rows fit (:func:`~snapeval.memory_plan.chunk.rows_that_fit`); None for a candidate the search
        never takes: one that cannot fit (:meth:`fits`), or one shared step for fewer than two configurations in rows
        (its plan has no shared step). A configuration decoded alone moves its exact bytes for each token; one in
        ``r`` rows moves ``(fixed + r e) / t`` per token, ``fixed`` a step's fixed bytes and the weights, ``e`` its
        engine's bytes per row and ``t <= r`` the tokens a step decodes on average over the chunk's waves, so at least
        ``fixed / r + e``; the configurations in one shared step pay ``fixed`` once for all their rows. The branches'
        trip to the host is exact."""
        in_rows, per_row, held_one, bound = self._chunk(candidate)
        if (candidate.shared and len(per_row) < 2) or not self.fits(candidate, held_one):
            return None
        chunk, room, fixed = candidate.chunk, _room(self.ask, candidate, held_one), self.fixed
        if candidate.shared:
            bound += fixed / rows_that_fit(chunk, room, sum(per_row))
        elif room is None:  # every engine takes the chunk's rows
            bound += sum(fixed / chunk for _ in per_row)
        else:  # rows_that_fit, inlined: the search's innermost loop
            bound += sum(fixed / max(1, min(chunk, room // p)) for p in per_row)
        if candidate.held_on_host:
            bound += host_trip_bytes(held_one, self.ask.largest.max_new, self.cost)
        return bound * (1 - BOUND_SLACK)

    def fits(self, candidate: Candidate, held_one: int) -> bool:
        """False where ``candidate`` cannot fit (:attr:`GroupPlan.fits`) whatever its rows, an item's branches
        holding ``held_one`` bytes: the decode phase (:func:`~snapeval.memory_plan.chunk.phases`) holds the chunk's
        branches on the device, besides its engines; in host memory, the host holds them all."""
        ask = self.ask
        if candidate.held_on_host:
            return ask.host_budget is None or ask.host_in_use + candidate.chunk * held_one <= ask.host_budget
        return ask.budget is None or ask.in_use + min(candidate.chunk, ask.flight) * held_one <= ask.budget


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
