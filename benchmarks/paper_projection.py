"""What the paper grids cost on a GPU: the sweep's shared group timed on the device, a model of it fitted to those
timings, checked against a measured slice, and the whole of ``configs/paper_llama.yaml`` and
``configs/paper_r1_distill.yaml`` projected in GPU-hours over the tasks' real prompt lengths.

Model: Llama-3.1-8B-Instruct's architecture with random weights in bfloat16 (``benchmarks.gpu.build_model``), the
configurations of ``configs/paper_llama.yaml`` (the full cache, SnapStream, StreamingLLM and SnapKV at 1k-16k: 16),
greedy with no stop token (every request decodes its ``max_new`` tokens: random weights have no answer to end).

1. **Calibration** (``calibration``): the group (:class:`snapeval.branching.BranchSet`, as ``snapeval sweep`` runs
   it on CUDA: captured decode, rows from the memory plan) over ``--calibration-items`` prompts at each of
   ``--calibration-lengths``, ``--calibration-new`` new tokens. Three rates are fitted (:class:`Rates`):
   - prefill of one prompt of ``n`` tokens: ``a + b n + c n^2``, ``a`` one forward's floor (the fitted step of one
     row without a cache: the weights read once), ``b`` and ``c`` by least squares over the items' measured prefills
     (a few long prompts cannot place an intercept: three lengths fitted three terms exactly and put 0.65 s on a
     prefill of one token);
   - a decode step: ``fixed + bytes / bandwidth``, ``bytes`` the step's weights and engine rows as the memory plan
     counts them (:func:`step_bytes`), over every configuration's measured mean step;
   - the rest of the group (building each configuration's cache from the capture, engines and their capture):
     ``engine`` seconds per engine plus ``g1 n`` per item and configuration.
2. **Slice** (``slice``): ``--slice-items`` LongBench-v2 items at their real lengths (``paper_lengths.json``, cut at
   pred.py's 120,000 tokens plus the chat template, drawn with ``--seed``) x the 16 configurations x 128 new tokens,
   timed, beside what :func:`project_group` predicts for the same items from the calibration's rates, and the
   predicted decode steps per configuration beside the engines' counted steps (these must be equal: the schedule
   is the sweep's own).
3. **Projection** (``grids``): every task x model group of the two paper configs (``expand_grid``), its items'
   real lengths (:mod:`benchmarks.paper_lengths`; synthetic tasks: their sequence lengths), each generation at its
   ``max_gen_toks`` (an upper bound: real answers stop earlier; ``--new-tokens TASK=N`` sets a mean instead), the
   memory plan of each group on ``--device-gib`` per GPU times the model's GPUs, and the rates scaled from the
   measured model to each model's shape (:meth:`Rates.for_shape`: prefill's linear term by weights, its quadratic
   term and the step's fixed time by the attention's size and depth). GPU-hours are wall hours times the model's
   GPUs (a model split layer by layer runs its layers one after another). ``--as-hardware h100`` restates a run
   made on another GPU with the simulator's hardware sheets (bandwidth for the step, peak FLOPs for prefill).
   Held branches may wait in ``--host-gib`` of host memory per GPU where the plan takes it
   (:mod:`snapeval.memory_plan`), their trip there and back priced at the host link's bandwidth (measured on the
   GPU by :func:`measure_host_link`; from ``--rates-from``, :data:`snapeval.memory_plan.HOST_LINK_BYTES_PER_S`).

``--smoke`` runs all of it on the CPU at tiny shapes and lengths (the test suite runs it; its numbers mean nothing,
but the predicted decode steps must still equal the counted ones). Writes ``results/bench/paper_projection.json``
after every section.

    python -m benchmarks.paper_projection                                # on a GPU machine (about 3 min on one H100)
    python -m benchmarks.paper_projection --smoke --out /tmp/paper_projection_smoke.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from benchmarks.common import BENCH_DIR, fill_defaults, machine, write_json_at
from snapeval.memory_plan import EAGER_STEP_FACTOR, HOST_LINK_BYTES_PER_S

MODEL = "llama-3.1-8b-instruct"
ROOT = Path(__file__).resolve().parents[1]
PAPER_CONFIGS = ("configs/paper_llama.yaml", "configs/paper_r1_distill.yaml")
LENGTHS_FILE = BENCH_DIR / "paper_lengths.json"
#: The smoke run's prompts are the real lengths scaled by this (tiny shapes, a CPU).
SMOKE_SCALE = 1 / 256
#: The tokenizer family of each preset of the paper configs (``paper_lengths.json``'s keys).
FAMILY = {"llama-3.1-8b-instruct": "llama-3.1-8b-instruct", "deepseek-r1-distill-llama-8b": "llama-3.1-8b-instruct",
          "deepseek-r1-distill-llama-70b": "llama-3.1-8b-instruct"}
QWEN_FAMILY = "deepseek-r1-distill-qwen-7b"


# ---------------------------------------------------------------------------------------------------------------------
# the model of a group's time


@dataclass(frozen=True)
class Rates:
    """Seconds of the sweep's shared group on one device, for a model of ``shape`` (:class:`ModelShape` fields):

    - ``prefill_s(n) = a + b n + c n^2`` for one prompt of ``n`` tokens (one forward into the capture; ``a`` is
      :func:`prefill_floor_s`);
    - ``step_s(bytes) = step_fixed_s + bytes / bandwidth`` for one decode step that moves ``bytes``;
    - ``engine_s`` per engine (its rows, its captured step) and ``branch_per_token_s x n`` per item and configuration
      (the configuration's cache built from an ``n``-token capture);
    - a configuration decoded alone: ``alone_factor x step_s(bytes)`` in a captured engine of one row,
      ``eager_factor x step_s(bytes)`` in the eager loop (its route in the plan);
    - branches held in host memory: their bytes twice (there and back) over ``host_bandwidth``.
    """

    prefill: tuple[float, float, float]
    step_fixed_s: float
    bandwidth: float
    engine_s: float
    branch_per_token_s: float
    device: str
    shape: dict
    #: a step of a configuration decoded alone over the fitted step at the same bytes: in a captured engine of one
    #: row (``alone_factor``) or in the eager loop (``eager_factor``, when the plan has no room for the engine's row
    #: beside the branch): measured where the calibration decodes one alone that way, else 1 and
    #: :data:`snapeval.memory_plan.EAGER_STEP_FACTOR` (and the projection says which were measured)
    alone_factor: float = 1.0
    eager_factor: float = EAGER_STEP_FACTOR
    alone_measured: bool = False
    eager_measured: bool = False
    #: bytes per second between device and host memory, each way (held branches in host memory go there and back):
    #: measured on the GPU that measured the rest (:func:`measure_host_link`), else
    #: :data:`snapeval.memory_plan.HOST_LINK_BYTES_PER_S`
    host_bandwidth: float = HOST_LINK_BYTES_PER_S
    host_measured: bool = False

    def prefill_s(self, tokens: int) -> float:
        a, b, c = self.prefill
        return a + b * tokens + c * tokens * tokens

    def step_s(self, moved_bytes: float) -> float:
        return self.step_fixed_s + moved_bytes / self.bandwidth

    def for_shape(self, shape) -> "Rates":
        """These rates for a model of another ``shape``: prefill's constant and the step's fixed time scale with the
        depth, prefill's linear term with the weights (two FLOPs per weight and token), its quadratic term and the
        per-token branch cost with the attention's width times the depth (queries x keys per layer)."""
        mine = self.shape
        depth = shape.layers / mine["layers"]
        width = (shape.layers * shape.q_heads * shape.head_dim) / (mine["layers"] * mine["q_heads"] * mine["head_dim"])
        weights = shape.weight_bytes / mine["weight_bytes"]
        a, b, c = self.prefill
        return replace(self, prefill=(a * depth, b * weights, c * width), step_fixed_s=self.step_fixed_s * depth,
                       engine_s=self.engine_s * depth, branch_per_token_s=self.branch_per_token_s * width,
                       shape=asdict(shape))

    def on_hardware(self, measured: dict, target: dict) -> "Rates":
        """These rates restated for ``target`` hardware (the simulator's sheets, ``socket``): the step's byte term
        by HBM bandwidth, prefill's FLOP terms by peak FLOPs; fixed times unchanged."""
        bw = target["hbm_bandwidth"] / measured["hbm_bandwidth"]
        flops = target["peak_flops"] / measured["peak_flops"]
        a, b, c = self.prefill
        return replace(self, prefill=(a, b / flops, c / flops), bandwidth=self.bandwidth * bw,
                       branch_per_token_s=self.branch_per_token_s / flops, device=f"{self.device} as {target['name']}")


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
    out: dict[str, list[tuple[int, int, str, float]]] = {}
    for config in configs:
        mode, entries = plan.decode_mode(config.label), []
        for start in range(0, len(items), plan.chunk):
            part = items[start:start + plan.chunk]
            if mode.route in IN_ROWS:
                prompt, new = max(p for p, _ in part), max(m for _, m in part)
                steps = engine_steps([m - 1 for _, m in part], mode.rows)
                if mode.route == SHARED_STEP_ROWS:
                    moved = shape.weight_bytes + sum(engine_bytes(shape, c, plan.decode_mode(c.label).rows, prompt,
                                                                  new) for c in shared)
                    entries.append((steps, moved, mode.route, 1 / len(shared)))
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

    def prefill_s(self, items, rates: "Rates") -> float:
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


def project_group(shape, configs, items, rates: Rates, *, budget: int, chunk: int | None = None,
                  prefills: int = 1, host_budget: int | None = None, by_length: bool = True,
                  documents: Documents | None = None, one_step: bool = True) -> dict:
    """The predicted seconds of one group: ``items`` ``[(prompt tokens, new tokens)]`` under every configuration,
    ``prefills`` prefills per item (1: shared by every configuration; a two-pass task's second pass prefills each
    configuration's own prompt: ``len(configs)``), within ``budget`` on the device and ``host_budget`` on the host,
    chunk by chunk (:func:`group_chunks`; ``by_length``: as on a GPU; ``documents``: items that share a document
    prefill it once, :class:`Documents`). Returns the parts, the first (largest) chunk's plan, each configuration's
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


# ---------------------------------------------------------------------------------------------------------------------
# fitting the rates to measured groups


def least_squares(rows: list[list[float]], values: list[float]) -> list[float]:
    """Coefficients ``x`` minimising ``|A x - y|``; a negative coefficient is fixed at 0 and the rest refitted (a
    time has no negative part). Solved exactly: the normal equations in rational arithmetic over the floats given,
    rounded once at the end, so the same figures give the same rates on every machine (LAPACK's ``lstsq`` differs
    in the last digit between CPUs, and the committed projection is regenerated to the digit by a test)."""
    columns = len(rows[0])
    keep = list(range(columns))
    while True:
        solved = _exact_normal_equations([[row[j] for j in keep] for row in rows], values)
        x = [0.0] * columns
        for j, value in zip(keep, solved):
            x[j] = value
        negative = [j for j in keep if x[j] < 0]
        if not negative or len(keep) == 1:
            return [max(v, 0.0) for v in x]
        keep.remove(negative[0])


def _exact_normal_equations(rows: list[list[float]], values: list[float]) -> list[float]:
    """``x`` solving ``A^T A x = A^T y`` exactly (Gauss-Jordan over :class:`fractions.Fraction`); a column with no
    information (a singular system) gets 0."""
    from fractions import Fraction

    a = [[Fraction(v) for v in row] for row in rows]
    y = [Fraction(v) for v in values]
    n = len(a[0])
    m = [[sum((r[i] * r[j] for r in a), Fraction(0)) for j in range(n)]
         + [sum((r[i] * t for r, t in zip(a, y)), Fraction(0))] for i in range(n)]
    solution = [Fraction(0)] * n
    pivots = []
    row = 0
    for col in range(n):
        pivot = next((i for i in range(row, n) if m[i][col] != 0), None)
        if pivot is None:
            continue
        m[row], m[pivot] = m[pivot], m[row]
        m[row] = [v / m[row][col] for v in m[row]]
        for i in range(n):
            if i != row and m[i][col] != 0:
                factor = m[i][col]
                m[i] = [v - factor * w for v, w in zip(m[i], m[row])]
        pivots.append((row, col))
        row += 1
    for r, col in pivots:
        solution[col] = m[r][n]
    return [float(v) for v in solution]


def robust_least_squares(rows: list[list[float]], values: list[float]) -> list[float]:
    """:func:`least_squares` that sets outliers aside, one at a time: while the worst point's residual is over 3
    scaled median absolute deviations of the others' residuals (and over 10% of its value), it is dropped and the
    rest refitted, at most a third of the points: a calibration point slowed by something else on the machine does
    not set a rate."""
    import statistics

    keep = list(range(len(values)))
    while True:
        x = least_squares([rows[i] for i in keep], [values[i] for i in keep])
        if len(keep) <= max(len(x) + 1, 2 * len(values) // 3):
            return x
        residual = {i: values[i] - math.fsum(a * b for a, b in zip(rows[i], x)) for i in keep}
        worst = max(keep, key=lambda i: abs(residual[i]))
        others = [residual[i] for i in keep if i != worst]
        middle = statistics.median(others)
        scale = 1.4826 * statistics.median([abs(v - middle) for v in others])
        if abs(residual[worst]) <= max(3 * scale, 0.1 * abs(values[worst])):
            return x
        keep.remove(worst)


def prefill_floor_s(step_fixed_s: float, seconds_per_byte: float, weight_bytes: int) -> float:
    """The constant of a prefill: one forward reads every weight once, as a decode step of one row without a cache
    does (``step_fixed_s + weight_bytes x seconds_per_byte``, from the fitted step). Prefill's measured points are a
    few long prompts, which place its FLOP terms but not its intercept; a second pass's prompts (LongBench-v2's
    chain of thought: about 1,255 tokens) live near it."""
    return step_fixed_s + weight_bytes * seconds_per_byte


def fit_rates(runs: list[dict], device: str, shape) -> Rates:
    """:class:`Rates` from measured groups (:func:`measure_group`'s records)."""
    prefill_rows, prefill_s = [], []
    step_rows, step_s = [], []
    rest_rows, rest_s = [], []
    for run in runs:
        for n, seconds in run["prefills"]:
            prefill_rows.append([n, n * n])  # the FLOP terms; the constant is one forward's floor
            prefill_s.append(seconds)
        for entry in run["decode"].values():
            if entry["steps"]:
                step_rows.append([1.0, entry["bytes_per_step"]])
                step_s.append(entry["step_s"])
        rest_rows.append([run["engines"], run["configurations"] * sum(n for n, _ in run["prefills"])])
        rest_s.append(max(run["rest_s"], 0.0))
    fixed, per_byte = robust_least_squares(step_rows, step_s)
    a = prefill_floor_s(fixed, per_byte, shape.weight_bytes)
    b, c = robust_least_squares(prefill_rows, [s - a for s in prefill_s])
    engine, per_token = least_squares(rest_rows, rest_s)  # one point per run: nothing to set aside
    rates = Rates(prefill=(a, b, c), step_fixed_s=fixed, bandwidth=1 / per_byte if per_byte > 0 else math.inf,
                  engine_s=engine, branch_per_token_s=per_token, device=device, shape=asdict(shape))
    for captured, name in ((True, "alone"), (False, "eager")):
        factors = sorted(entry["step_s"] / rates.step_s(entry["bytes_per_step"]) for run in runs
                         if run.get("plan", {}).get("alone_captured", False) == captured
                         for entry in run.get("alone", {}).values() if entry["steps"])
        if factors:
            rates = replace(rates, **{f"{name}_factor": factors[len(factors) // 2], f"{name}_measured": True})
    return rates


def measure_group(model, tokenizer, configs, prompts, max_new: int, chunk: int, budget: int | None,
                  shared_step: str = "auto") -> dict:
    """One timed group (:class:`~snapeval.branching.BranchSet` as the sweep runs it, with the run argument
    ``shared_step``) over ``prompts``: wall time, each item's prefill, each configuration's decode (steps, seconds,
    rows, bytes per step, captured) and the rest (wall less prefills and decode steps), with the plan it ran and
    whether its configurations in rows could share one step (``one_step``)."""
    from snapeval.branching import BranchSet
    from snapeval.engine import SamplingParams
    from snapeval.run_args import RunArgs

    from benchmarks.gpu import sync

    branches = BranchSet(model, tokenizer, configs, batch=chunk, max_memory=budget,
                         run_args=RunArgs(shared_step=shared_step))
    sync(branches.device)
    start = time.perf_counter()
    out = branches.generate(prompts, [SamplingParams(max_new_tokens=max_new)] * len(prompts))
    sync(branches.device)
    wall = time.perf_counter() - start
    plan, shape = branches.plans[-1], branches.shape
    schedule = chunks_schedule(shape, configs, [([(len(prompts[i]), max_new) for i in part], chunk_plan)
                                                for part, chunk_plan in branches.chunk_plans[-1]])
    decode, alone = {}, {}
    for config in configs:
        entries = schedule[config.label]
        predicted = {"bytes_per_step": sum(s * b for s, b, *_ in entries) / max(sum(s for s, *_ in entries), 1),
                     "predicted_steps": sum(s for s, *_ in entries)}
        if config.label in branches.stats.decode:
            totals = branches.stats.decode[config.label]
            steps = totals["steps"]
            decode[config.label] = {
                "rows": totals["rows"], "steps": steps, "seconds": totals["seconds"], "captured": totals["captured"],
                # an engine shared by k configurations: each holds 1/k of its seconds, and its step is the whole
                "step_s": totals["step_seconds"] / steps if steps else None, **predicted}
        if config.label in branches.stats.decode_alone:  # decoded alone: the eager loop, one row
            totals = branches.stats.decode_alone[config.label]
            alone[config.label] = {**totals, "step_s": totals["seconds"] / totals["steps"] if totals["steps"] else None,
                                   **predicted}
    prefills = [(len(p), out[0][i].prefill_seconds) for i, p in enumerate(prompts)]
    spent = (sum(s for _, s in prefills) + sum(d["seconds"] for d in decode.values())
             + sum(d["seconds"] for d in alone.values()))
    return {"wall_s": wall, "items": len(prompts), "max_new": max_new, "configurations": len(configs),
            "engines": engine_count(schedule), "one_step": branches.one_step(),
            "prefills": prefills, "decode": decode, "alone": alone,
            "rest_s": wall - spent, "plan": plan.to_dict(), "generated": [len(c.token_ids) for c in out[0]]}


#: The compression's share of one prefill on the H100 run of 2026-11-26 (``../shared/reference/gpu.md``: SnapStream at
#: 16k against the full cache's prefill, at 32k / 64k / 128k tokens): what building one configuration's cache from
#: a prompt costs, for rates taken from ``results/bench/gpu.json``, which does not measure it.
H100_COMPRESSION_SHARE = {32768: 0.034, 65536: 0.023, 131072: 0.009}


def rates_from_gpu_json(path: Path) -> Rates:
    """:class:`Rates` from a committed ``benchmarks.gpu`` run (``results/bench/gpu.json``), without a GPU: prefill
    from the full cache's prefill at each length; the step from every decode point replayed as a CUDA graph (its
    rows and bytes as :func:`step_bytes` counts them); an engine's cost from those points' first (capturing) step;
    the per-token branch cost from :data:`H100_COMPRESSION_SHARE`; a step decoded alone (a captured engine of one
    row) from the full cache's CUDA-graph batch-1 steps. No slice checks them: that takes a GPU."""
    from snapeval.cache import resolve_method
    from snapeval.memory_plan import ModelShape

    run = json.loads(Path(path).read_text())
    result = run["results"][0]
    shape = ModelShape.of_preset(result["model"], dtype_bytes=2)
    prefill_rows, prefill_s, step_rows, step_s, firsts = [], [], [], [], []
    for length, point in result["lengths"].items():
        n, new = int(point["prompt_tokens"]), int(point["new_tokens"])
        prefill_rows.append([n, n * n])  # the FLOP terms; the constant is one forward's floor
        prefill_s.append(point["full"]["prefill_s"])
        for path_name, config in (("full", resolve_method("full")),
                                  ("snapstream", resolve_method("snapstream", int(point["decode_budget"])))):
            for key in ("batch_1_graphs", "max_batch_graphs"):
                rate = point[path_name].get(key, {})
                if "step_s" in rate:
                    step_rows.append([1.0, step_bytes(shape, config, rate["rows"], n, new)])
                    step_s.append(rate["step_s"])
                    firsts.append(rate["first_step_s"])
    fixed, per_byte = least_squares(step_rows, step_s)
    a = prefill_floor_s(fixed, per_byte, shape.weight_bytes)
    b, c = least_squares(prefill_rows, [s - a for s in prefill_s])
    per_token = least_squares([[n] for n in H100_COMPRESSION_SHARE],
                              [share * (a + b * n + c * n * n) for n, share in H100_COMPRESSION_SHARE.items()])[0]
    firsts.sort()
    rates = Rates(prefill=(a, b, c), step_fixed_s=fixed, bandwidth=1 / per_byte, engine_s=firsts[len(firsts) // 2],
                  branch_per_token_s=per_token, device=f"{run['device']} (results/bench/gpu.json)", shape=asdict(shape))
    # a configuration decoded alone: a captured engine of one row (the full cache's CUDA-graph batch-1 step), or
    # the eager loop (its eager batch-1 step), each over the fitted step at its bytes
    for key, name in (("batch_1_graphs", "alone"), ("batch_1", "eager")):
        factors = sorted(point["full"][key]["step_s"] / rates.step_s(step_bytes(
            shape, resolve_method("full"), 1, int(point["prompt_tokens"]), int(point["new_tokens"])))
            for point in result["lengths"].values() if "step_s" in point["full"].get(key, {}))
        if factors:
            rates = replace(rates, **{f"{name}_factor": factors[len(factors) // 2], f"{name}_measured": True})
    return rates


# ---------------------------------------------------------------------------------------------------------------------
# the paper grids' items


def longbench_limit(preset: str, max_new: int, template: int, metadata: dict) -> int:
    """The prompt limit of a LongBench-v2 run (docs/tasks.md): ``max_input_tokens``, else pred.py's 120,000 for a
    model it lists, else the model's context less the generation, the template and the margin."""
    from snapeval.models.presets import get_preset
    from snapeval.tasks import longbench

    if "max_input_tokens" in metadata:
        return int(metadata["max_input_tokens"])
    preset_spec = get_preset(preset)
    listed = longbench.official_limit(preset_spec.hub_id)
    return listed or longbench.fallback_limit(preset_spec.max_context, max_new, template)


def task_defaults(name: str) -> dict[str, int]:
    """A built-in task's own ``max_gen_toks`` (its first: a two-pass task's first pass) and ``repeats``, read from
    its YAML under ``tasks/`` (what the sweep runs when a config does not set them)."""
    import re

    path = next((p for p in sorted((ROOT / "tasks").rglob("*.yaml"))
                 if re.search(rf"^task:\s*{re.escape(name)}\s*$", p.read_text(), re.MULTILINE)), None)
    if path is None:
        raise SystemExit(f"benchmarks.paper_projection: no task YAML for {name!r} under tasks/")
    text = path.read_text()
    found = {key: re.search(rf"^\s*{key}:\s*(\d+)", text, re.MULTILINE) for key in ("max_gen_toks", "repeats")}
    return {key: int(match.group(1)) for key, match in found.items() if match}


def longbench_documents(prompts: list[int], documents: list[int], common: list[int], limit: int) -> Documents:
    """LongBench-v2's questions on one document as ``BranchSet.generate`` takes them on a GPU
    (:func:`snapeval.memory_plan.document_families`): a family per document asked more than once, whose shared prefix
    is what its prompts share from their start (``common``, before the cut) where none is cut, else at most the
    first half the cut keeps (pred.py's middle cut keeps ``limit // 2`` tokens of the start); at least
    :data:`~snapeval.memory_plan.MIN_SHARED_DOCUMENT` tokens, and a suffix left to every member."""
    from snapeval.memory_plan import MIN_SHARED_DOCUMENT

    members: dict[int, list[int]] = {}
    for i, document in enumerate(documents):
        members.setdefault(document, []).append(i)
    families, heads = [None] * len(prompts), [0] * len(prompts)
    for group in members.values():
        cut = any(prompts[i] > limit for i in group)
        head = min(common[group[0]], limit // 2) if cut else common[group[0]]
        head = min(head, min(min(prompts[i], limit) for i in group) - 1)
        if len(group) > 1 and head >= MIN_SHARED_DOCUMENT:
            for i in group:
                families[i], heads[i] = group[0], head
    return Documents(families, heads)


def task_items(task, preset: str, lengths: dict, new_tokens: dict[str, int]) -> list[dict]:
    """The passes of one task for one model: each ``{"items": [(prompt, new)], "prefills": per item}``. Prompt
    lengths come from ``lengths`` (``paper_lengths.json``) in the model's tokenizer family; a pass generates its
    ``max_gen_toks`` (the config's, else the task's own; or ``new_tokens[task]``, a mean), each item ``repeats``
    times (lm-eval's samples)."""
    family = lengths["tokenizers"][FAMILY.get(preset, QWEN_FAMILY)]
    template = family["template_tokens"]
    defaults = task_defaults(task.name)
    generation, metadata = {**defaults, **dict(task.generation)}, dict(task.metadata)
    name = task.name
    new = int(new_tokens.get(name, generation["max_gen_toks"]))
    repeats = defaults.get("repeats", 1)
    if name in ("longbench_v2", "longbench_v2_cot"):
        limit = longbench_limit(preset, int(generation["max_gen_toks"]), template, metadata)
        first = {"items": [(min(n, limit) + template, new) for n in family[name]], "prefills": 1}
        if f"{name}_document_common" in family:  # questions on one document: its prefill once, on a GPU
            first["documents"] = longbench_documents(family[name], family["longbench_v2_documents"],
                                                     family[f"{name}_document_common"], limit)
        if name == "longbench_v2":
            return [first]
        answer = new_tokens.get("longbench_v2_cot_answer", 128)
        second = [(n + new, answer) for n in family["longbench_v2_cot_answer"]]
        return [first, {"items": second, "prefills": "each"}]
    if name.startswith("aime24"):
        return [{"items": [(n, new) for n in family["aime24"] for _ in range(repeats)], "prefills": 1}]
    if name.startswith("livecodebench"):
        key = "livecodebench_generic" if name == "livecodebench_generic" else "livecodebench_r1"
        return [{"items": [(n, new) for n in family[key] for _ in range(repeats)], "prefills": 1}]
    if name.startswith("snapeval_"):  # synthetic: num_samples per sequence length, the prompt at that length
        count = int(metadata.get("num_samples", 50))
        return [{"items": [(int(length), new) for length in metadata["max_seq_lengths"] for _ in range(count)],
                 "prefills": 1}]
    raise SystemExit(f"benchmarks.paper_projection: no item lengths for task {name!r}")


def project_config(path: str, lengths: dict, rates: Rates, *, device_bytes: float, new_tokens: dict[str, int],
                   chunk: int | None = None, host_bytes: float | None = None, one_step: bool = True) -> dict:
    """Every model x task group of one sweep config: seconds and GPU-hours per group, per task, per model, all;
    ``host_bytes``: host memory per GPU (less the plan's margin) where held branches may wait (None: none);
    ``one_step``: a group's configurations in rows may share one decode step (the sweep's ``triton`` kernel)."""
    from snapeval.memory_plan import MARGIN_BYTES, MARGIN_FRACTION, ModelShape
    from snapeval.sweep.grid import expand_grid
    from snapeval.sweep.parse import load_config

    config = load_config(ROOT / path)
    groups: dict[tuple, list] = {}
    for cell in expand_grid(config):
        groups.setdefault((cell.model.pretrained, cell.task.name, cell.seed), []).append(cell)
    out, total_gpu_h = {"config": path, "groups": []}, 0.0
    for (preset, task_name, seed), cells in groups.items():
        gpus = max(1, int(cells[0].model.resources.num_gpus or 1))
        shape = ModelShape.of_preset(preset, dtype_bytes=2)
        budget = int(gpus * (device_bytes - max(MARGIN_BYTES, MARGIN_FRACTION * device_bytes)))
        host_budget = None if not host_bytes else int(gpus * host_bytes * (1 - MARGIN_FRACTION))
        scaled = rates.for_shape(shape)
        configs = [cell.config for cell in cells]
        parts = []
        for stage in task_items(cells[0].task, preset, lengths, new_tokens):
            prefills = len(configs) if stage["prefills"] == "each" else 1
            parts.append(project_group(shape, configs, stage["items"], scaled, budget=budget, chunk=chunk,
                                       prefills=prefills, host_budget=host_budget,
                                       documents=stage.get("documents"), one_step=one_step))
        seconds = sum(p["seconds"] for p in parts)
        entry = {"model": preset, "task": task_name, "seed": seed, "gpus": gpus, "configurations": len(configs),
                 "hours": seconds / 3600, "gpu_hours": gpus * seconds / 3600,
                 "passes": [{k: v for k, v in p.items() if k not in ("decode_s_per_configuration", "steps")}
                            for p in parts]}
        out["groups"].append(entry)
        total_gpu_h += entry["gpu_hours"]
    out["gpu_hours"] = total_gpu_h
    out["gpu_hours_by_task"] = {}
    for entry in out["groups"]:
        out["gpu_hours_by_task"][entry["task"]] = out["gpu_hours_by_task"].get(entry["task"], 0.0) + entry["gpu_hours"]
    return out


# ---------------------------------------------------------------------------------------------------------------------
# the run


def hardware_sheet(name: str) -> dict:
    """The simulator's sheet of ``name`` (:func:`snapeval.simulator.hardware.get_hardware`): its socket's figures
    and its name."""
    from snapeval.simulator.hardware import get_hardware

    spec = get_hardware(name)
    return {"name": spec.name, **asdict(spec.socket)}


def device_sheet(device_name: str) -> str | None:
    """The simulator's sheet for a CUDA device's name (``H100``/``H200``), None for any other."""
    for key in ("h200", "h100"):
        if key.upper() in device_name.upper():
            return key
    return None


def paper_llama_configs():
    """The 16 configurations of ``configs/paper_llama.yaml``, resolved as the sweep resolves them."""
    from snapeval.sweep.grid import expand_grid
    from snapeval.sweep.parse import load_config

    seen = {}
    for cell in expand_grid(load_config(ROOT / PAPER_CONFIGS[0])):
        seen.setdefault(cell.config.label, cell.config)
    return list(seen.values())


def slice_lengths(lengths: dict, count: int, seed: int, scale: float) -> list[int]:
    """``count`` LongBench-v2 items drawn with ``seed``: their prompt lengths in Llama 3's tokenizer, cut at pred.py's
    120,000 tokens, plus the chat template (``scale``: the smoke run's shrinking)."""
    family = lengths["tokenizers"][MODEL]
    drawn = random.Random(seed).sample(family["longbench_v2"], count)
    return [max(8, int((min(n, 120_000) + family["template_tokens"]) * scale)) for n in drawn]


class WithoutEos:
    """A tokenizer without an eos token (its pad token: its own, else its eos): with the model's generation config
    cleared too, every request decodes its ``max_new`` tokens, as the projection counts them."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.eos_token_id = None
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def run(args, save=lambda payload: None) -> dict:
    import torch

    from snapeval.memory_plan import document_families
    from snapeval.memory_plan import ModelShape, bytes_in_use, device_budget, longest_first, shares_documents
    from snapeval.models.loading import packaged_tokenizer

    from benchmarks.gpu import benchmark_device, build_model, prompts_of_lengths, release

    smoke = args.smoke
    device = benchmark_device(smoke, "paper_projection")
    started, load_start = time.perf_counter(), os.getloadavg()
    lengths = json.loads(Path(args.lengths).read_text())
    tokenizer = WithoutEos(packaged_tokenizer(MODEL))
    model = build_model(MODEL, device, torch.float32 if smoke else torch.bfloat16, smoke)
    model.generation_config.eos_token_id = None  # random weights: every request decodes its max_new tokens
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    configs = paper_llama_configs()
    if smoke:  # the same 16 configurations at budgets a tiny prompt can hold
        from snapeval.cache import resolve_method
        configs = [resolve_method(c.method, None if c.budget is None else max(16, c.budget // 64)) for c in configs]
    shape = ModelShape.of(model)
    device_name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    budget = args.max_memory or (device_budget(device) if device.type == "cuda" else None)
    payload = {"benchmark": "paper_projection", "smoke": smoke, "machine": machine(), "model": MODEL,
               "device": device_name, "torch": torch.__version__, "load_average_start": load_start,
               "configurations": [c.label for c in configs], "settings": {k: str(v) for k, v in vars(args).items()},
               "calibration": [], "rates": None, "slice": None, "grids": None}

    def record(**entries):
        payload.update(entries, load_average_end=os.getloadavg(), wall_seconds=time.perf_counter() - started)
        save(payload)

    from snapeval.memory_plan import GPU_CHUNK

    chunk = args.chunk or (GPU_CHUNK if device.type == "cuda" else 8)  # what the sweep asks on each device
    warm = prompts_of_lengths(tokenizer, [64])
    measure_group(model, tokenizer, configs, warm, 3, chunk, budget, args.shared_step)  # kernels, allocator, a capture
    for length in args.calibration_lengths:
        prompts = prompts_of_lengths(tokenizer, [length] * args.calibration_items)
        payload["calibration"].append(measure_group(model, tokenizer, configs, prompts, args.calibration_new,
                                                    chunk, budget, args.shared_step))
        release(device)
        record()
        print(f"[{time.perf_counter() - started:6.0f}s] calibration at {length}: "
              f"{payload['calibration'][-1]['wall_s']:.1f} s", flush=True)
    rates = fit_rates(payload["calibration"], device_name, shape)
    if device.type == "cuda":
        rates = replace(rates, host_bandwidth=measure_host_link(device), host_measured=True)
    record(rates=asdict(rates))

    slice_prompts = prompts_of_lengths(tokenizer, slice_lengths(lengths, args.slice_items, args.seed,
                                                                SMOKE_SCALE if smoke else 1.0))
    measured = measure_group(model, tokenizer, configs, slice_prompts, args.slice_new, chunk, budget, args.shared_step)
    group_budget = budget if budget is not None else 2**62
    # the host's room as the group's plan sees it (BranchSet.plan on CUDA; none on the CPU)
    host_room = device_budget("cpu") - bytes_in_use("cpu") if device.type == "cuda" else None
    # prompts that open with one document prefill it once where the group does so (a GPU)
    documents = Documents(*document_families(slice_prompts)) if shares_documents(str(device)) else None
    predicted = project_group(shape, configs, [(len(p), args.slice_new) for p in slice_prompts], rates,
                              budget=group_budget, chunk=chunk, host_budget=host_room,
                              by_length=longest_first(str(device)), documents=documents,
                              one_step=measured["one_step"])
    record(slice={"measured": measured, "predicted": predicted,
                  "predicted_over_measured": predicted["seconds"] / measured["wall_s"],
                  "steps_equal": all(d["steps"] == predicted["steps"][label]
                                     for part in ("decode", "alone") for label, d in measured[part].items())})
    print(f"[{time.perf_counter() - started:6.0f}s] slice: measured {measured['wall_s']:.1f} s, predicted "
          f"{predicted['seconds']:.1f} s ({predicted['seconds'] / measured['wall_s']:.2f}x)", flush=True)
    release(device)

    record(**project_grids(args, rates, lengths,
                           torch.cuda.get_device_properties(0).total_memory if device.type == "cuda" else 80e9))
    return payload


def project_grids(args, rates: Rates, lengths: dict, device_bytes: float) -> dict:
    """Both paper configs projected with ``rates`` (restated for ``args.as_hardware`` when they were measured on
    another GPU kind with a sheet), printed, and returned as the payload's ``grids`` entries."""
    measured_sheet = device_sheet(rates.device)
    as_rates = rates
    if args.as_hardware and measured_sheet and args.as_hardware != measured_sheet:
        as_rates = rates.on_hardware(hardware_sheet(measured_sheet), hardware_sheet(args.as_hardware))
    if args.as_hardware:
        device_bytes = hardware_sheet(args.as_hardware)["hbm_bytes"]
    new_tokens = {task: int(n) for task, n in (pair.split("=", 1) for pair in args.new_tokens)}
    host_bytes = args.host_gib * 2**30 if args.host_gib else None
    grids = {path: project_config(path, lengths, as_rates, device_bytes=device_bytes, new_tokens=new_tokens,
                                  chunk=args.chunk, host_bytes=host_bytes, one_step=args.shared_step != "false")
             for path in PAPER_CONFIGS}
    llama = grids[PAPER_CONFIGS[0]]["gpu_hours_by_task"]
    for path, grid in grids.items():
        print(f"{path}: {grid['gpu_hours']:.1f} GPU-hours ({as_rates.device}); by task: "
              + ", ".join(f"{k} {v:.1f}" for k, v in grid["gpu_hours_by_task"].items()), flush=True)
    caveats = ["every generation runs to its max_gen_toks unless --new-tokens gives a mean: an upper bound",
               f"a configuration the plan decodes alone (listed per pass) steps at {as_rates.alone_factor:.2f}x the "
               f"fitted step in a captured engine of one row ({'measured' if as_rates.alone_measured else 'assumed'}), "
               f"{as_rates.eager_factor:.2f}x in the eager loop where the plan has no room for that row "
               f"({'measured' if as_rates.eager_measured else 'memory_plan.EAGER_STEP_FACTOR'})",
               "a model split over GPUs runs its layers one after another: its hours are one GPU's, times its GPUs",
               "the configurations in rows share one decode step where the plan says so (--shared-step auto, the "
               "sweep's triton kernel): priced as one step's fixed time plus the weights once and every row's bytes, "
               "which a measured slice checks (--shared-step false: an engine each)"
               if args.shared_step != "false" else "every configuration in rows decodes in its own engine",
               f"held branches may wait in {args.host_gib:g} GiB of host memory per GPU (--host-gib: a DGX H100's "
               f"2 TiB over its 8 GPUs), crossing the host link at {as_rates.host_bandwidth / 1e9:.1f} GB/s each way "
               f"({'measured' if as_rates.host_measured else 'assumed: memory_plan.HOST_LINK_BYTES_PER_S'})"
               if args.host_gib else "held branches stay on the device (--host-gib 0)"]
    return {"grids": grids, "projected_as": as_rates.device, "projected_rates": asdict(as_rates), "caveats": caveats,
            "device_bytes": device_bytes, "host_bytes_per_gpu": host_bytes,
            "new_tokens": new_tokens or "max_gen_toks (an upper bound)",
            "paper_llama_longbench_pair_gpu_hours": llama.get("longbench_v2", 0) + llama.get("longbench_v2_cot", 0)}


def measure_host_link(device, gib: int = 1, repeats: int = 3) -> float:
    """Bytes per second between ``device`` and host memory, as held branches cross it (pageable copies, each way):
    the slower direction's median over ``repeats`` copies of ``gib`` GiB."""
    import statistics

    import torch

    on_device = torch.empty(gib << 30, dtype=torch.uint8, device=device)
    seconds = {"to_host": [], "to_device": []}
    for _ in range(repeats):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        on_host = on_device.to("cpu")
        torch.cuda.synchronize(device)
        seconds["to_host"].append(time.perf_counter() - start)
        start = time.perf_counter()
        on_device.copy_(on_host)
        torch.cuda.synchronize(device)
        seconds["to_device"].append(time.perf_counter() - start)
    del on_device
    return (gib << 30) / max(statistics.median(v) for v in seconds.values())


def project_from_rates(args, rates: Rates) -> dict:
    """The grids from rates measured elsewhere (``--rates-from``): no model, no device, no slice."""
    lengths = json.loads(Path(args.lengths).read_text())
    return {"benchmark": "paper_projection", "smoke": False, "machine": machine(), "rates_from": str(args.rates_from),
            "rates": asdict(rates), "slice": None, "load_average": os.getloadavg(),
            **project_grids(args, rates, lengths, 80e9)}


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: the same code, meaningless numbers")
    parser.add_argument("--lengths", type=Path, default=LENGTHS_FILE, help="benchmarks.paper_lengths' JSON")
    parser.add_argument("--calibration-lengths", type=int, nargs="+", default=None)
    parser.add_argument("--calibration-items", type=int, default=2)
    parser.add_argument("--calibration-new", type=int, default=None)
    parser.add_argument("--slice-items", type=int, default=8)
    parser.add_argument("--slice-new", type=int, default=None, help="new tokens of the slice (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="which LongBench-v2 items the slice draws")
    parser.add_argument("--chunk", type=int, default=None,
                        help="items in flight at most (default: the sweep's on CUDA, memory_plan.GPU_CHUNK)")
    parser.add_argument("--max-memory", type=int, default=None, help="bytes the group may use (default: the device's)")
    parser.add_argument("--as-hardware", choices=("h100", "h200"), default="h100",
                        help="project the grids for this GPU (restated from the measured one by the sheets)")
    parser.add_argument("--host-gib", type=float, default=256.0,
                        help="host memory per GPU where held branches may wait (default 256: a DGX H100's 2 TiB over "
                             "its 8 GPUs; 0: they stay on the device)")
    parser.add_argument("--new-tokens", nargs="*", default=[], metavar="TASK=N",
                        help="mean new tokens of a task instead of its max_gen_toks (an upper bound)")
    parser.add_argument("--shared-step", choices=("auto", "false"), default="auto",
                        help="the sweep's run argument: auto (its configurations in rows may share one decode step "
                             "where the kernel allows, as the projection assumes of an H100 with triton) or false")
    parser.add_argument("--rates-from", type=Path, default=None, metavar="GPU_JSON",
                        help="no measurement: project the grids from a committed benchmarks.gpu run's figures "
                             "(results/bench/gpu.json); runs on the CPU, without a slice")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "paper_projection.json")
    args = parser.parse_args(argv)
    defaults = (dict(calibration_lengths=[64, 128, 256], calibration_new=4, slice_new=6) if args.smoke else
                dict(calibration_lengths=[8192, 32768, 131008], calibration_new=32, slice_new=128))
    fill_defaults(args, defaults)
    if not args.host_gib >= 0:
        parser.error(f"--host-gib {args.host_gib:g} is invalid; allowed: GiB of host memory per GPU, 0 or more")
    for pair in args.new_tokens:
        if "=" not in pair or not pair.split("=", 1)[1].isdigit():
            parser.error(f"--new-tokens {pair!r} is invalid; allowed: TASK=N with N a whole number")
    if args.rates_from:
        write_json_at(args.out, project_from_rates(args, rates_from_gpu_json(args.rates_from)))
    else:
        run(args, lambda payload: write_json_at(args.out, payload))
    print(f"wrote {args.out}")
    return args.out


if __name__ == "__main__":
    main()
