"""One chunk of a group in bytes: what a plan is asked (:class:`Ask`), one candidate it weighs (:class:`Candidate`),
each configuration's decode under it (:func:`configuration_plans`) and the group's growth at the top of each phase
of the chunk (:func:`phases`; the phases are the module docstring's of :mod:`snapeval.memory_plan`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from snapeval.cache.config import MethodConfig
from snapeval.memory_plan.records import (BRANCH_LOOP, ENGINE_ROWS, IN_ROWS, ONE_ROW_ENGINE, OWN_PREFILL,
                                          SHARED_STEP_ROWS, ConfigurationPlan, Item)
from snapeval.memory_plan.shape import ModelShape
from snapeval.memory_plan.sizes import (alone_cache_bytes, branch_bytes, captures_alone, engine_bytes,
                                        holds_whole_prompt, is_press, layout_bytes, row_bytes, static_rows)


@dataclass(frozen=True)
class Ask:
    """What a group asks of its plan (the arguments of :func:`~snapeval.memory_plan.plan_group`, read once).

    Attributes:
        shape, configs: the model's shape and the group's configurations, in the group's order.
        largest: the largest item (longest prompt, most new tokens, longest shared prefix) the plan is sized for.
        flight: the items the call has (a chunk never holds more).
        window: the last prompt queries a capture keeps.
        chunk: the items asked to be in flight (rows per engine, even for fewer items).
        prefill_tokens: a forced prefill chunk (tokens per forward), or None.
        budget, in_use: the device's budget (None: unbounded) and what was in use at the start (weights included).
        device: where the group's tensors live.
        alone: labels of configurations that prefill themselves (a press that cannot branch), decoded alone.
        captured: a configuration decoded alone decodes in a captured engine of one row (:func:`captures_alone`).
        host_budget, host_in_use: the host's budget for held branches (None: they stay on the device) and its use.
        one_step: the configurations in rows may share one decode step.
    """

    shape: ModelShape
    configs: tuple[MethodConfig, ...]
    largest: Item
    flight: int
    window: int
    chunk: int
    prefill_tokens: int | None = None
    budget: int | None = None
    in_use: int = 0
    device: str = "cpu"
    alone: frozenset[str] = frozenset()
    captured: bool = False
    host_budget: int | None = None
    host_in_use: int = 0
    one_step: bool = False

    @property
    def presses(self) -> bool:
        """A configuration branches through its own prefill hooks (they read the whole prompt's hidden states)."""
        return any(is_press(c) and c.label not in self.alone for c in self.configs)

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")


@dataclass(frozen=True)
class Candidate:
    """One plan the search weighs: ``chunk`` items in flight, ``tokens`` per prefill forward, the capture in host
    memory or not, the held branches in host memory or not, one shared decode step or an engine each, and whether a
    cache of the whole prompt decodes in rows at any size (``batch_whole``) or only while its rows hold fewer bytes
    than the weights."""

    chunk: int
    tokens: int
    capture_on_host: bool = False
    held_on_host: bool = False
    shared: bool = False
    batch_whole: bool = False


def decodes_in_rows(ask: Ask, config: MethodConfig, chunk: int, batch_whole: bool) -> bool:
    """Whether ``config`` decodes in rows (see :func:`configuration_plans`)."""
    whatever_the_chunk = rows_whatever_the_chunk(ask, config, batch_whole)
    return rows_at_chunk(ask, config, chunk) if whatever_the_chunk is None else whatever_the_chunk


def rows_whatever_the_chunk(ask: Ask, config: MethodConfig, batch_whole: bool) -> bool | None:
    """:func:`decodes_in_rows` where the chunk does not change it; None where it does (a growing cache of the whole
    prompt, not batched: :func:`rows_at_chunk`). A search reads it once per configuration."""
    if (ask.alone and config.label in ask.alone) or not static_rows(config):  # no label formatted for an empty one
        return False
    if not batch_whole and not config.FIXED_SIZE and holds_whole_prompt(config, ask.largest.prompt):
        return None
    return True


def rows_at_chunk(ask: Ask, config: MethodConfig, chunk: int) -> bool:
    """Whether a growing cache of the whole prompt, not batched, decodes in rows at ``chunk``: only while its engine
    holds fewer bytes than the weights (it pays below them)."""
    return engine_bytes(ask.shape, config, chunk, ask.largest.prompt, ask.largest.max_new) <= ask.shape.weight_bytes


def batch_whole_matters(ask: Ask) -> bool:
    """Whether ``batch_whole`` can change a plan: some configuration that decodes in rows keeps the whole prompt
    and grows (otherwise :func:`decodes_in_rows` never reads it)."""
    return any(c.label not in ask.alone and static_rows(c) and not c.FIXED_SIZE
               and holds_whole_prompt(c, ask.largest.prompt) for c in ask.configs)


def configuration_plans(ask: Ask, candidate: Candidate, in_rows: Sequence[bool],
                        room: int | None) -> tuple[ConfigurationPlan, ...]:
    """Each configuration's decode: in rows (``in_rows``, from :func:`decodes_in_rows`), as many as fit ``room`` (the
    bytes left for one engine once the chunk's branches are held; None: unbounded) at its own :func:`row_bytes`, at
    most the chunk and at least 1; or alone. ``batch_whole``: a cache of the whole prompt decodes in rows too (a
    GPU, where a captured batched step pays at any length: the issue's 128k full cache ran 112 tok/s at batch 3
    against 67 alone); otherwise only while its rows hold fewer bytes than the weights. In a ``captured`` run a
    configuration decoded alone does so in an engine of one row (:func:`captures_alone`), its branch built into
    that row. ``shared``: the configurations in rows share one engine (:attr:`GroupPlan.shared_step`): each the
    same rows, as many as fit ``room`` with one row of each. Each configuration's route (:data:`~snapeval.memory_plan.
    records.ROUTES`) is decided here and nowhere else."""
    shape, prompt, max_new, chunk = ask.shape, ask.largest.prompt, ask.largest.max_new, candidate.chunk
    together = (sum(row_bytes(shape, c, prompt, max_new) for c, r in zip(ask.configs, in_rows) if r)
                if candidate.shared else 0)
    in_rows_route = SHARED_STEP_ROWS if candidate.shared and sum(in_rows) > 1 else ENGINE_ROWS  # one engine of one
    plans = []
    for config, rows_of_it in zip(ask.configs, in_rows):
        if rows_of_it:
            per_row = together or row_bytes(shape, config, prompt, max_new)
            rows = rows_that_fit(chunk, room, per_row)
            plans.append(ConfigurationPlan(config.label, "rows", rows, branch_bytes(shape, config, prompt),
                                           engine_bytes(shape, config, rows, prompt, max_new), in_rows_route))
            continue
        plans.append(alone_plan(ask, config))
    return tuple(plans)


def alone_plan(ask: Ask, config: MethodConfig) -> ConfigurationPlan:
    """The decode of ``config`` alone (:func:`configuration_plans`), whatever the candidate: its route and, in a
    ``captured`` run, an engine of one row's bytes (a method prefilled alone too), else its cache decoded alone."""
    shape, prompt, max_new = ask.shape, ask.largest.prompt, ask.largest.max_new
    route = (OWN_PREFILL if config.label in ask.alone
             else ONE_ROW_ENGINE if captures_alone(config, ask.captured) else BRANCH_LOOP)
    if captures_alone(config, ask.captured):
        return ConfigurationPlan(config.label, "alone", 1, 0, engine_bytes(shape, config, 1, prompt, max_new), route)
    return ConfigurationPlan(config.label, "alone", 1, 0, alone_cache_bytes(shape, config, prompt, max(max_new - 1, 0)),
                             route)


def rows_that_fit(chunk: int, room: int | None, per_row: int) -> int:
    """An engine's rows: as many as fit ``room`` (None: unbounded) at ``per_row`` bytes each, at most the chunk and at
    least 1."""
    return chunk if room is None else max(1, min(chunk, room // per_row))


def _alone_built(ask: Ask, pairs) -> tuple[list, int]:
    """The configurations decoded alone from the shared prefill (not a press that prefills itself), each built
    from the capture, and the bytes of their caches as built."""
    shared_alone = [(c, p) for c, p in pairs if p.route in (BRANCH_LOOP, ONE_ROW_ENGINE)]
    return shared_alone, sum(alone_cache_bytes(ask.shape, c, ask.largest.prompt) for c, _ in shared_alone)


def _branch_phase(ask: Ask, candidate: Candidate, pairs, earlier: int, prefix: int, presses: int) -> int:
    """The top of the branch phase: the capture's layers move into the branches one by one (the larger of the two,
    plus a layer of each), with one layer's window attention."""
    shape, prompt = ask.shape, ask.largest.prompt
    held_one = sum(p.branch_bytes for _, p in pairs)
    capture = shape.capture_bytes(prompt, ask.window)
    layer = capture // shape.layers
    on_device = layer if candidate.capture_on_host else capture
    shared_alone, alone_built = _alone_built(ask, pairs)
    # each held layer leaves for the host once built, when the branches wait there
    built = (held_one // shape.layers if candidate.held_on_host else held_one) + alone_built
    # a captured one-row engine's row is allocated whole before the capture's layers move into the branches
    one_rows = sum(p.decode_bytes for _, p in shared_alone if p.route == ONE_ROW_ENGINE)
    # a held branch's layer is built at the whole layout before it is cut to its kept prompt
    whole = held_one + alone_built + sum(layout_bytes(shape, c, prompt) - p.branch_bytes
                                         for c, p in pairs if p.route in IN_ROWS and not is_press(c))
    return (earlier + prefix + presses + max(on_device, built - one_rows) + one_rows + layer
            + whole // shape.layers + shape.window_transient_bytes(prompt, ask.window))


def phases(ask: Ask, candidate: Candidate, plans: tuple[ConfigurationPlan, ...]) -> dict[str, int]:
    """The group's growth at the top of each phase of a chunk of the largest items (see the package's docstring);
    a chunk holds at most the call's items (fewer than ``chunk`` rows when the call has fewer items); with
    ``held_on_host`` the held branches wait in host memory (one layer of them on the device while it is built);
    each configuration's bytes follow its route (:data:`~snapeval.memory_plan.records.ROUTES`): the shared step's
    rows are held together, an engine's rows one engine at a time."""
    shape, item = ask.shape, ask.largest
    pairs = list(zip(ask.configs, plans))  # each configuration with its plan (both in the group's order)
    held_device = 0 if candidate.held_on_host else sum(p.branch_bytes for p in plans)  # one item's, on the device
    flight = min(candidate.chunk, ask.flight)
    earlier = (flight - 1) * held_device  # the chunk's earlier items wait with their branches
    capture = shape.capture_bytes(item.prompt, ask.window)
    on_device = capture // shape.layers if candidate.capture_on_host else capture
    prefix = shape.capture_bytes(item.prefix, ask.window) if item.prefix else 0
    presses = sum(shape.dynamic_cache_bytes(c.kept_tokens(item.prompt, 0)) for c in ask.configs
                  if is_press(c) and c.label not in ask.alone)
    activations = shape.activation_bytes(candidate.tokens, item.prompt)
    out = {"prefill": earlier + prefix + on_device + presses + activations,
           "branch": _branch_phase(ask, candidate, pairs, earlier, prefix, presses)}
    if any(p.route not in IN_ROWS for p in plans):
        # the eager loop grows its branch in place; a captured engine's row is made first and the branch is built
        # into it layer by layer: either way the decode's cache takes the branch's place
        growth = max(p.decode_bytes - (alone_cache_bytes(shape, c, item.prompt) if p.route != OWN_PREFILL else 0)
                     + p.decode_bytes // shape.layers for c, p in pairs if p.route not in IN_ROWS)
        out["alone"] = (flight * held_device + prefix + _alone_built(ask, pairs)[1] + growth
                        + shape.decode_step_bytes(1) + (activations if ask.alone else 0))
    shared = [p for p in plans if p.route == SHARED_STEP_ROWS]
    own = [p for p in plans if p.route == ENGINE_ROWS]
    if shared:
        out["decode"] = (flight * held_device + sum(p.decode_bytes for p in shared)
                         + shape.decode_step_bytes(sum(p.rows for p in shared)))
    elif own:
        out["decode"] = flight * held_device + max(p.decode_bytes + shape.decode_step_bytes(p.rows) for p in own)
    return out
