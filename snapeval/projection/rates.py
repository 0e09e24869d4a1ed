"""The rates of the projection's model of a shared group's time (:class:`Rates`): fitted to measured groups
(:func:`fit_rates`, the GPU calibration of ``benchmarks/paper_projection.py``) or to a committed ``benchmarks.gpu`` run
(:func:`rates_from_gpu_json`, no GPU), by exact least squares (the same figures give the same rates on every
machine)."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from snapeval.memory_plan import EAGER_STEP_FACTOR, HOST_LINK_BYTES_PER_S
from snapeval.projection.schedule import step_bytes


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
    """:class:`Rates` from measured groups (the records of ``benchmarks/paper_projection.py``'s
    ``measure_group``: each one's prefills, each configuration's decode, its engines and the rest)."""
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
