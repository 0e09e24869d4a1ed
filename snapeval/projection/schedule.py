"""A shared group's time as the sweep runs it, read from the routes of its memory plan: each configuration's decode
schedule (:func:`decode_schedule`: per engine or per item decoded alone, its steps and the bytes each step moves) and
the predicted seconds of a whole group (:func:`project_group`) at given :class:`~snapeval.projection.rates.Rates`.

The schedule is a function of the routes the plan hands :class:`~snapeval.branching.BranchSet`
(:data:`snapeval.memory_plan.ROUTES`), as the plan's byte phases are (``memory_plan/chunk.py``): one description of
a chunk, read as a run, as bytes and as time (``tests/test_paper_projection.py`` holds the three together).
"""
from __future__ import annotations

from dataclasses import dataclass


def step_bytes(shape, config, rows: int, prompt: int, max_new: int) -> int:
    """Bytes one decode step of an engine moves: the weights and its rows (:func:`snapeval.memory_plan.engine_bytes`,
    what the plan holds: keys, values and positions of every slot; the kernels read them all, masked)."""
    from snapeval.memory_plan import engine_bytes

    return shape.weight_bytes + engine_bytes(shape, config, rows, prompt, max_new)

def engine_steps(lengths: list[int], rows: int) -> int:
    """Decode steps of an engine of ``rows`` slots given requests of ``lengths`` steps each, in that order: each
    request takes the slot that frees first (:class:`~snapeval.engine.Engine`'s continuous batching), and the engine
    steps until the last one ends. Equal lengths ``m``: ``ceil(k / rows) m``."""
    import heapq

    slots = [0] * min(rows, len(lengths))
    for length in lengths:
        heapq.heappush(slots, heapq.heappop(slots) + length)
    return max(slots, default=0)

def group_plan(shape, configs, items, *, budget: int, chunk: int | None = None, host_budget: int | None = None,
               one_step: bool = True):
    """The memory plan of a group on CUDA (:func:`snapeval.memory_plan.plan_group`), as ``BranchSet.plan`` makes it
    there with ``budget`` bytes and the weights in use: at most ``chunk`` items in flight (default: the sweep's
    :data:`~snapeval.memory_plan.GPU_CHUNK`), never more than the items; ``host_budget``: the host memory its held
    branches may take (None: they stay on the device); ``one_step``: its configurations in rows may share one decode
    step (``BranchSet.one_step``: the ``triton`` kernel, as on an H100 with the package)."""
    from snapeval.branching import capture_window
    from snapeval.memory_plan import GPU_CHUNK, Item, plan_group

    chunk = min(chunk or GPU_CHUNK, len(items))
    items = [entry if isinstance(entry, Item) else Item(*entry) for entry in items]  # (prompt, new[, shared prefix])
    return plan_group(shape, configs, items, chunk=chunk, window=capture_window(configs),
                      budget=budget, in_use=shape.weight_bytes, device="cuda:0", captured=True,
                      host_budget=host_budget, one_step=one_step)

def decode_schedule(shape, configs, items, plan) -> dict[str, list[tuple[int, int, str, float]]]:
    """Per configuration, its decode as the group runs it, read from its route in ``plan`` (the route
    :class:`~snapeval.branching.BranchSet` runs, :data:`snapeval.memory_plan.ROUTES`): one entry per engine
    (configurations in rows: one per chunk of ``plan.chunk`` items in input order) or per item decoded alone, each
    ``(steps, bytes per step, route, share)``: the configuration's share of those steps' time (1; the shared step's
    ``k`` configurations: ``1 / k`` each, every step moving all their rows).
    An engine of ``r`` rows decodes ``k`` requests of ``m`` new tokens in ``ceil(k / r) (m - 1)`` steps (the first
    token comes from the prefill; continuous batching refills a slot as its request ends: with equal lengths, in
    waves; with mixed lengths, :func:`engine_steps`), every step moving :func:`step_bytes` at the chunk's largest
    prompt."""
    from snapeval.memory_plan import IN_ROWS, SHARED_STEP_ROWS, alone_cache_bytes, engine_bytes

    shared = [c for c in configs if plan.decode_mode(c.label).route == SHARED_STEP_ROWS]
    starts = range(0, len(items), plan.chunk)
    largest = {start: (max(p for p, _ in items[start:start + plan.chunk]),
                       max(m for _, m in items[start:start + plan.chunk])) for start in starts}
    # the shared step's bytes of each chunk, the same for every configuration in it: summed once per chunk
    shared_rows = [(c, plan.decode_mode(c.label).rows) for c in shared]
    shared_moved = {start: shape.weight_bytes + sum(engine_bytes(shape, c, rows, *largest[start])
                                                    for c, rows in shared_rows) for start in starts}
    out: dict[str, list[tuple[int, int, str, float]]] = {}
    for config in configs:
        mode, entries = plan.decode_mode(config.label), []
        for start in starts:
            part = items[start:start + plan.chunk]
            if mode.route in IN_ROWS:
                prompt, new = largest[start]
                steps = engine_steps([m - 1 for _, m in part], mode.rows)
                if mode.route == SHARED_STEP_ROWS:
                    entries.append((steps, shared_moved[start], mode.route, 1 / len(shared)))
                else:
                    entries.append((steps, step_bytes(shape, config, mode.rows, prompt, new), mode.route, 1.0))
            else:
                entries += [(m - 1, shape.weight_bytes + alone_cache_bytes(shape, config, p, m // 2), mode.route, 1.0)
                            for p, m in part]
        out[config.label] = entries
    return out

def group_chunks(shape, configs, items, *, budget: int, chunk: int | None = None, host_budget: int | None = None,
                 by_length: bool = True, documents: "Documents | None" = None, one_step: bool = True
                 ) -> list[tuple[list[tuple[int, int]], object]]:
    """The chunks of a group as ``BranchSet.generate`` takes them on CUDA, each ``(its items, its plan)``: with
    ``by_length`` (:func:`snapeval.memory_plan.longest_first`) longest prompt first, each chunk planned for the
    items left; else in input order under one plan. ``documents``: the items' document families, each family's
    members together and never split by a chunk (:func:`snapeval.memory_plan.whole_families`), planned with their
    shared prefix held."""
    from snapeval.memory_plan import whole_families
    from snapeval.memory_plan import Item, chunk_order

    families = documents.families if documents is not None else None
    heads = documents.heads if documents is not None else [0] * len(items)
    entries = [Item(p, m, h) for (p, m), h in zip(items, heads)]
    pending = chunk_order(entries, by_length, families)
    plan = group_plan(shape, configs, [entries[i] for i in pending], budget=budget, chunk=chunk,
                      host_budget=host_budget, one_step=one_step)
    parts = []
    while pending:
        part = whole_families(pending, plan.chunk, families)
        parts.append(([items[i] for i in part], plan))
        pending = pending[len(part):]
        if by_length and pending:
            plan = group_plan(shape, configs, [entries[i] for i in pending], budget=budget, chunk=chunk,
                              host_budget=host_budget, one_step=one_step)
    return parts

@dataclass(frozen=True)
class Documents:
    """The document families of a group's items (:func:`snapeval.memory_plan.document_families`): per item its family
    (None: alone) and the family's shared prefix in tokens, prefilled once per family; each member then computes its
    own suffix on top of it."""

    families: list
    heads: list

    def prefill_s(self, items, rates) -> float:
        """Seconds of the items' prefills: each family's prefix once (``prefill_s(h)``), each member's suffix as
        the rest of its prompt's FLOPs (``prefill_s(n) - prefill_s(h)``) plus one forward's floor; an item alone
        whole."""
        floor = rates.prefill[0]
        heads = {f: h for f, h in zip(self.families, self.heads) if f is not None}
        out = sum(rates.prefill_s(h) for h in heads.values())
        for (prompt, _), family, head in zip(items, self.families, self.heads):
            out += rates.prefill_s(prompt) if family is None else rates.prefill_s(prompt) - rates.prefill_s(head) + floor
        return out

def merged_schedule(configs, schedules) -> dict[str, list[tuple[int, int, str, float]]]:
    """Per configuration, the entries of every chunk's :func:`decode_schedule` of ``schedules``, in chunk order."""
    return {c.label: [entry for one in schedules for entry in one[c.label]] for c in configs}

def chunks_schedule(shape, configs, parts) -> dict[str, list[tuple[int, int, str, float]]]:
    """:func:`decode_schedule` of every chunk ``(items, plan)`` of ``parts``, per configuration in chunk order."""
    return merged_schedule(configs, [decode_schedule(shape, configs, part, plan) for part, plan in parts])

def engine_count(schedule) -> int:
    """The engines of a :func:`decode_schedule` in rows: an engine shared by ``k`` configurations counts once."""
    from snapeval.memory_plan import IN_ROWS

    return round(sum(share for entries in schedule.values() for _, _, route, share in entries if route in IN_ROWS))

def project_group(shape, configs, items, rates, *, budget: int, chunk: int | None = None,
                  prefills: int = 1, host_budget: int | None = None, by_length: bool = True,
                  documents: Documents | None = None, one_step: bool = True) -> dict:
    """The predicted seconds of one group: ``items`` ``[(prompt tokens, new tokens)]`` under every configuration,
    ``prefills`` prefills per item (1: shared by every configuration; a two-pass task's second pass prefills each
    configuration's own prompt: ``len(configs)``), within ``budget`` on the device and ``host_budget`` on the host,
    chunk by chunk (:func:`group_chunks`; ``by_length``: as on a GPU; ``documents``: items that share a document
    prefill it once, :class:`Documents`; ``rates``: :class:`~snapeval.projection.rates.Rates`). Returns the parts, the first (largest) chunk's plan, each configuration's
    rows over the chunks, and the steps."""
    from snapeval.memory_plan import IN_ROWS, ONE_ROW_ENGINE, branch_bytes

    parts = group_chunks(shape, configs, items, budget=budget, chunk=chunk, host_budget=host_budget,
                         by_length=by_length, documents=documents, one_step=one_step)
    schedules = [decode_schedule(shape, configs, part, plan) for part, plan in parts]
    schedule = merged_schedule(configs, schedules)  # each chunk's own too: its plan says how its alone ones step
    prefill = (prefills * sum(rates.prefill_s(p) for p, _ in items) if documents is None
               else prefills * documents.prefill_s(items, rates))
    engines = engine_count(schedule)
    branch = len(configs) * sum(rates.branch_per_token_s * p for p, _ in items) + engines * rates.engine_s
    decode = {label: 0.0 for label in schedule}
    host = 0.0
    for (part, plan), one in zip(parts, schedules):
        # a route decoded alone steps at its measured factor: a captured engine of one row, or the eager loop
        factor = {ONE_ROW_ENGINE: rates.alone_factor}
        for label, entries in one.items():
            decode[label] += sum(share * steps * rates.step_s(moved)
                                 * (1.0 if route in IN_ROWS else factor.get(route, rates.eager_factor))
                                 for steps, moved, route, share in entries)
        if plan.branches_on_host:  # each item's held branches go to the host and back
            held = [c for c in configs if plan.decode_mode(c.label).route in IN_ROWS]
            host += 2 * sum(branch_bytes(shape, c, p) for p, _ in part for c in held) / rates.host_bandwidth
    total = prefill + branch + host + sum(decode.values())
    first = parts[0][1]
    rows = {c.label: sorted({plan.decode_mode(c.label).rows for _, plan in parts}) for c in configs}
    return {"seconds": total, "prefill_s": prefill, "branch_s": branch, "host_s": host,
            "decode_s": sum(decode.values()), "branches_on_host": first.branches_on_host,
            "decode_s_per_configuration": decode, "engines": engines,
            "steps": {label: sum(s for s, *_ in entries) for label, entries in schedule.items()},
            "chunk": first.chunk, "rows": {c.label: first.decode_mode(c.label).rows for c in configs},
            "shared_step_chunks": sum(1 for _, plan in parts if plan.shared_step),
            "chunks": len(parts), "rows_range": {label: [r[0], r[-1]] for label, r in rows.items()},
            "alone": [c.label for c in configs if any(plan.decode_mode(c.label).decode == "alone" for _, plan in parts)],
            "alone_captured": first.alone_captured,
            "items": len(items), "prompt_tokens_mean": sum(p for p, _ in items) / len(items)}
