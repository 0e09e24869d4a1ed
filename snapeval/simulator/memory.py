"""Memory of one point per socket: weights (a draft model's too), the KV cache on the busiest socket, activation
buffers, their placement in HBM and DDR, and the largest batch that fits (:func:`memory_use`)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from snapeval.cache.config import FullConfig, MethodConfig
from snapeval.errors import SnapevalError
from snapeval.models.presets import ModelPreset
from snapeval.simulator.deployment import DTYPE_BYTES, Deployment
from snapeval.simulator.hardware import HardwareSpec
from snapeval.simulator.plan import (
    Plan, activation_bytes, kv_share, plan_deployment, pow2_floor, resolve_model, seqs_on_busiest_socket, slot_tokens,
    weights_per_socket,
)
from snapeval.simulator.records import TierUsage


def method_or_full(method: MethodConfig | None) -> MethodConfig:
    if method is None:
        return FullConfig()
    if not isinstance(method, MethodConfig):
        raise SnapevalError(f"method={method!r} is not a method configuration; build one with "
                            "snapeval.cache.resolve_method(name, budget)")
    return method


@dataclass(frozen=True)
class Draft:
    """A draft model on the target's sockets: its model, deployment, plan, and the memory it takes."""

    model: ModelPreset
    dep: Deployment
    plan: Plan
    weights_socket: float
    kv_seq_socket: float  # bytes of one sequence's draft cache on a socket holding it (a full cache)


def draft_for(hardware: HardwareSpec, dep: Deployment, plan: Plan) -> Draft | None:
    if dep.draft_model is None:
        return None
    model = resolve_model(dep.draft_model)
    # the draft runs on the same sockets with its own default parallelism and dtype, one token per step
    draft_dep = replace(dep, draft_model=None, draft_tokens=0, mtp_factor=1.0, sockets=plan.sockets, tp=None,
                        attention_parallel="auto", weight_dtype="auto", moe_parallel="auto")
    draft_plan = plan_deployment(hardware, model, draft_dep)
    kv_per_token = model.num_layers * model.kv_values_per_token_per_layer * DTYPE_BYTES[dep.kv_dtype]
    slot = FullConfig().cache_slots(dep.prompt_len, dep.gen_len)
    return Draft(model, draft_dep, draft_plan, weights_per_socket(model, draft_plan)[1],
                  slot * kv_per_token * kv_share(model, draft_plan))


@dataclass(frozen=True)
class MemoryUse:
    weights_total: float
    weights_socket: float   # target and draft
    kv_seq: float           # one sequence's target KV slot (logical bytes)
    kv_socket: float        # KV on the busiest socket (target and draft)
    kv_total: float
    activations: float
    hbm: TierUsage
    ddr: TierUsage
    hbm_capacity: float
    ddr_capacity: float
    need: float
    max_batch_exact: int
    max_batch: int


def memory_use(hw: HardwareSpec, m: ModelPreset, dep: Deployment, plan: Plan, method: MethodConfig,
            draft: Draft | None) -> MemoryUse:
    kv_per_token = m.num_layers * m.kv_values_per_token_per_layer * DTYPE_BYTES[dep.kv_dtype]
    kv_seq = slot_tokens(dep, plan, method) * kv_per_token
    share = kv_share(m, plan)
    kv_seq_socket = kv_seq * share
    weights_total, weights_socket = weights_per_socket(m, plan)
    if draft is not None:
        weights_socket += draft.weights_socket

    def kv_on_busiest(batch: int) -> float:
        out = seqs_on_busiest_socket(batch, plan) * kv_seq_socket
        if draft is not None:
            out += seqs_on_busiest_socket(batch, draft.plan) * draft.kv_seq_socket
        return out

    activations = activation_bytes(m, dep, plan, kv_per_token)
    kv_socket = kv_on_busiest(dep.batch)
    kv_total = dep.batch * kv_seq * (share * plan.tp if plan.attention_parallel == "tp" and not m.is_mla else 1.0)
    if plan.attention_parallel == "tp" and m.is_mla:
        kv_total = dep.batch * kv_seq * plan.tp  # replicated on every TP socket
    hbm_cap = hw.socket.hbm_bytes
    ddr_cap = hw.socket.ddr_bytes if dep.placement == "hbm+ddr" else 0.0
    capacity = hbm_cap + ddr_cap

    # largest batch that fits with these lengths: memory is monotone in the batch, so bisect below the bound
    # given by the KV cache alone
    def need_for(batch: int) -> float:
        return weights_socket + activation_bytes(m, replace(dep, batch=batch), plan, kv_per_token) \
            + kv_on_busiest(batch)

    free = capacity - weights_socket - activation_bytes(m, replace(dep, batch=1), plan, kv_per_token)
    if free < kv_on_busiest(1) or kv_seq_socket <= 0:
        max_exact = 0
    else:
        lo, hi = 1, int(free // kv_seq_socket) * plan.dp  # need_for(lo) fits; hi is an upper bound
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if need_for(mid) <= capacity else (lo, mid - 1)
        max_exact = lo
    max_batch = pow2_floor(max_exact) if plan.batch_granularity == "pow2" else max_exact

    # tier placement: weights first, then activations, then KV; overflow to DDR when allowed
    need = weights_socket + activations + kv_socket
    hbm_w = min(weights_socket, hbm_cap)
    hbm_a = min(activations, hbm_cap - hbm_w)
    hbm_kv = min(kv_socket, hbm_cap - hbm_w - hbm_a)
    ddr = TierUsage(weights_socket - hbm_w, kv_socket - hbm_kv, activations - hbm_a) if ddr_cap else TierUsage()
    hbm = TierUsage(hbm_w, hbm_kv, hbm_a) if ddr_cap else TierUsage(weights_socket, kv_socket, activations)
    return MemoryUse(weights_total, weights_socket, kv_seq, kv_socket, kv_total, activations, hbm, ddr, hbm_cap,
                   ddr_cap, need, max_exact, max_batch)
