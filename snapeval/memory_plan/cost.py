"""The cost model that ranks the plans that fit on a GPU: bytes moved per decoded token (:func:`bytes_per_token`),
at the rates of the hardware sheet of the device the plan runs on (``snapeval/simulator/hardware/*.yaml``:
:class:`CostModel`)."""
from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

from snapeval.memory_plan.records import ConfigurationPlan, Decoding, GroupPlan
from snapeval.memory_plan.shape import ModelShape

log = logging.getLogger(__name__)

#: How much slower an eager decode step is than the same step replayed as a CUDA graph, at batch 1: the full cache's
#: eager over CUDA-graph batch-1 step in ``results/bench/gpu.json`` (one H100: 5.10x at 32k and 64k, 2.99x at 128k;
#: the median). The plan weighs a configuration decoded alone in the eager loop with it, in a run that captures.
EAGER_STEP_FACTOR = 5.1
#: Bytes per second a held branch crosses the host link each way (device to host once built, back into an engine
#: row): an assumption, not a measurement here. PCIe 5.0 x16 carries 63 GB/s each way; the branches move as pageable
#: copies (pinned host memory would be allocated in powers of two, up to twice the plan's bytes), taken at a third
#: of that. ``benchmarks.paper_projection`` measures the link of the GPU it runs on.
HOST_LINK_BYTES_PER_S = 20e9
#: The sheet of a device no sheet names (a CUDA device of another model, or none visible: the committed projection's
#: H100).
DEFAULT_HARDWARE = "h100"


@dataclass(frozen=True)
class CostModel:
    """A device's rates as the plan counts them: ``device_bytes_per_s``, the bandwidth a decode step's bytes move
    at (the sheet's ``bandwidth_efficiency`` of one socket's ``hbm_bandwidth``: the simulator's fit), and
    ``step_fixed_bytes``, a captured step's fixed time (the sheet's ``decode_step_fixed_s``) as the bytes it could
    have moved, paid once per step for all its rows."""

    hardware: str
    device_bytes_per_s: float
    step_fixed_bytes: int

    @classmethod
    def of(cls, hardware: str = DEFAULT_HARDWARE) -> "CostModel":
        """The cost model of a hardware sheet (``snapeval hardware`` lists them)."""
        from snapeval.simulator.hardware import get_hardware

        spec = get_hardware(hardware)
        rate = spec.assumptions.bandwidth_efficiency * spec.socket.hbm_bandwidth
        return cls(spec.name, rate, int(spec.assumptions.decode_step_fixed_s * rate))


@functools.lru_cache(maxsize=None)
def cost_model(device: str) -> CostModel:
    """The cost model of the GPU ``device`` names: the one-GPU sheet whose name its model name carries (an
    ``NVIDIA H200`` reads ``h200.yaml``); :data:`DEFAULT_HARDWARE`'s where no CUDA device is visible (a plan made
    ahead of a run, as the projection's) or no sheet names it (said once in the log)."""
    import torch

    if not (device.startswith("cuda") and torch.cuda.is_available()):
        return CostModel.of(DEFAULT_HARDWARE)
    from snapeval.simulator.hardware import get_hardware, list_hardware

    name = torch.cuda.get_device_name(torch.device(device)).lower()
    for sheet in list_hardware():
        spec = get_hardware(sheet)
        if spec.kind == "gpu" and spec.sockets == 1 and spec.name.lower() in name:
            return CostModel.of(sheet)
    log.warning("no hardware sheet names %r; the memory plan ranks its plans at %s's rates", name, DEFAULT_HARDWARE)
    return CostModel.of(DEFAULT_HARDWARE)


def bytes_per_token(shape: ModelShape, plan: GroupPlan | Decoding, captured: bool = False,
                    cost: CostModel | None = None) -> float:
    """Bytes a GPU moves per decoded token of one item over every configuration of ``plan``: a configuration in
    ``rows`` rows reads the weights once per step for all of them and its rows' cache, so ``(weights + its engine's
    bytes) / rows`` (``rows`` the tokens a step decodes on average over the chunk's waves); one decoded alone, the
    weights and its cache for each token (a decode step is bound by these bytes: ``docs/engine.md``), plus each
    step's fixed time (:attr:`CostModel.step_fixed_bytes`) shared by its rows. In a ``captured`` run a
    configuration the plan decodes alone in the eager loop counts :data:`EAGER_STEP_FACTOR` times (its step pays
    the host's launches, the others' do not). A ``shared_step`` plan's configurations in rows count one step for all
    of them: the fixed time and the weights once, every engine's rows. Branches held in host memory add their trip
    there and back at :data:`HOST_LINK_BYTES_PER_S`, counted as the device bytes moved in that time. ``cost``: the
    rates (default: :func:`cost_model` of the plan's device). ``plan`` may be a candidate's :class:`Decoding` (the
    search prices it before its phases are counted): its decode is all this reads."""
    cost = cost_model(plan.device) if cost is None else cost

    def weight(c: ConfigurationPlan) -> float:
        return EAGER_STEP_FACTOR if captured and c.decode == "alone" and not plan.alone_captured else 1.0

    def tokens_per_step(c: ConfigurationPlan) -> float:
        """A chunk's requests decode to the plan's ``max_new_tokens`` in waves of ``rows``: ``chunk`` requests in
        ``ceil(chunk / rows)`` waves, each step moving every row's bytes (a partly filled last wave too)."""
        return plan.chunk / math.ceil(plan.chunk / c.rows) if c.decode == "rows" else 1.0

    def step(together: list[ConfigurationPlan]) -> float:
        """One step of these configurations' rows: its fixed time, the weights, and every row's bytes."""
        return cost.step_fixed_bytes + shape.weight_bytes + sum(c.decode_bytes for c in together)

    shared = [c for c in plan.configurations if c.decode == "rows"] if plan.shared_step else []
    # the configurations outside the shared step (tested by route, not by comparing each plan with every shared one)
    moved = sum(weight(c) * step([c]) / tokens_per_step(c) for c in plan.configurations
                if not (shared and c.decode == "rows"))
    if shared:  # one step for every row of them: its fixed time and the weights paid once
        moved += step(shared) / tokens_per_step(shared[0])
    if plan.branches_on_host:
        moved += host_trip_bytes(sum(c.branch_bytes for c in plan.configurations), plan.max_new_tokens, cost)
    return moved


def host_trip_bytes(held_one: int, max_new: int, cost: CostModel) -> float:
    """What an item's held branches (``held_one`` bytes) cost per decoded token of its ``max_new`` on their trip to
    the host and back at :data:`HOST_LINK_BYTES_PER_S`: the device bytes moved in the same time."""
    return 2 * held_one * cost.device_bytes_per_s / HOST_LINK_BYTES_PER_S / max(1, max_new)
