"""Decode: the time of one step per socket (:func:`decode_step_time`: every kernel's max(memory, compute) time, the
split attention's merge, collectives and call boundaries), and speculative decoding with a draft model
(:func:`speculative_step`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from snapeval.cache.config import FullConfig
from snapeval.errors import SnapevalError
from snapeval.models.presets import ModelPreset
from snapeval.simulator.deployment import ATTENTION_TILINGS, DTYPE_BYTES, Deployment, MAX_LOOKAHEAD, PARTIAL_BYTES
from snapeval.simulator.hardware import HardwareSpec
from snapeval.simulator.memory import Draft
from snapeval.simulator.plan import (
    Plan, call_boundary, expected_distinct_experts, expected_max_local_experts, kv_share, seqs_on_busiest_socket,
    weight_bytes,
)
from snapeval.simulator.records import KernelTime


@dataclass(frozen=True)
class Step:
    """One decode step: its time, its kernels, its bytes and FLOPs over all sockets, and the compute units one KV
    stream's attention was tiled over."""

    seconds: float
    kernels: list[KernelTime]
    bytes: float
    flops: float
    attention_units: int
    overheads: tuple[tuple[str, float], ...] = ()  # (name, seconds) besides the kernels; they sum to the rest


def _split_attention(hardware: HardwareSpec, model: ModelPreset, dep: Deployment, plan: Plan, local_seqs: int,
                     kv_bytes: float, flops: float, stream_seconds: float) -> tuple[float, int, str]:
    """One layer of decode attention on the busiest socket: (seconds, compute units per sequence, bound).

    The socket's sequences are independent streams of work (one per sequence and KV head on the socket; the MLA
    latent is one head shared by every query head). When there are fewer streams than compute units, a stream is
    tiled over ``r x c`` units: ``r`` groups of its query rows times ``c`` pieces of its key axis. Every row group
    reads the stream's keys again from on-chip memory (``r x`` the KV bytes through the on-chip bandwidth), and the
    ``c`` partial results of a row group (its rows x (value dim + 2 softmax statistics), fp32) are merged by a
    binary tree of ``ceil(log2 c)`` levels, each reading two partials and writing one through one unit's share of
    the on-chip bandwidth; the output projection waits on the merge, so its latency adds. A unit must hold its
    query rows and their partial result in its share of the on-chip memory (``sram_bytes / compute_units``): a
    tiling that does not fit is never taken (when even a row group per unit leaves none that fits, units take
    several smaller row groups one after another). Among the tilings ``dep.attention_tiling`` allows, the one that
    minimises the layer's time is taken. Without ``compute_units`` in the hardware spec the work is spread over the
    whole socket; without ``sram_bandwidth`` on-chip traffic is free, without ``sram_bytes`` it always fits."""
    s, a = hardware.socket, hardware.assumptions
    peak = s.peak_flops * a.decode_attention_efficiency
    if not s.compute_units:
        compute = flops / peak
        return max(stream_seconds, compute), 1, "memory" if stream_seconds >= compute else "compute"
    heads = model.num_attention_heads if plan.attention_parallel == "dp" else model.num_attention_heads / plan.tp
    kv_heads = 1.0 if model.is_mla else (model.num_kv_heads if plan.attention_parallel == "dp"
                                         else max(1.0, model.num_kv_heads / plan.tp))
    streams = local_seqs * kv_heads
    rows = heads / kv_heads * (1 + plan.draft_tokens)
    value_dim = model.kv_lora_rank if model.is_mla else model.head_dim
    query_dim = model.kv_lora_rank + model.qk_rope_head_dim if model.is_mla else model.head_dim
    row_bytes = query_dim * DTYPE_BYTES[dep.activation_dtype] + (value_dim + 2) * PARTIAL_BYTES
    unit_memory = s.sram_bytes / s.compute_units if s.sram_bytes else math.inf
    unit_bandwidth = s.sram_bandwidth / s.compute_units if s.sram_bandwidth else math.inf
    most = max(1, int(s.compute_units // streams))
    best = None
    for i in range(int(rows).bit_length()):
        r = min(1 << i, int(rows))
        if r > most and best is not None:
            break  # more row groups than a stream's units only when nothing else fits (below)
        if (dep.attention_tiling == "keys" and r > 1) or (rows / r) * row_bytes > unit_memory:
            continue
        pieces = max(1, most // r)
        for j in range(pieces.bit_length() + 1):
            c = min(1 << j, pieces)
            if dep.attention_tiling == "rows" and c > 1:
                break
            used = min(1.0, streams * r * c / s.compute_units)
            compute = flops / (peak * used)
            reread = (r - 1) * kv_bytes / (unit_bandwidth * s.compute_units) if r > 1 else 0.0
            level = 3 * (rows / r) * (value_dim + 2) * PARTIAL_BYTES / unit_bandwidth
            seconds = max(stream_seconds, compute, reread) + math.ceil(math.log2(c)) * level
            if best is None or seconds < best[0]:
                best = (seconds, min(r * c, most), "memory" if stream_seconds >= compute else "compute")
    if best is None:
        fewest = 1 if dep.attention_tiling == "keys" else 1 << (int(rows).bit_length() - 1)
        raise SnapevalError(
            f"attention_tiling={dep.attention_tiling!r} does not fit {hardware.name}: a compute unit holding "
            f"{rows / fewest:g} query rows of a {model.name} stream needs {rows / fewest * row_bytes / 1e3:.0f} KB "
            f"(queries + fp32 partial results) but holds {unit_memory / 1e3:.0f} KB of on-chip memory; allowed: "
            f"{', '.join(t for t in ATTENTION_TILINGS if t != dep.attention_tiling)}")
    return best


def decode_step_time(hardware: HardwareSpec, model: ModelPreset, dep: Deployment, plan: Plan,
                 context: float, weights_ddr_fraction: float, kv_ddr_fraction: float) -> Step:
    """Time of one decode step (all sequences advance one token) with ``context`` cached tokens per sequence
    (the method's mean kept tokens over the decode)."""
    a = hardware.assumptions
    s = hardware.socket
    lin_b, emb_b = weight_bytes(model, plan.weight_dtype)
    kv_b = DTYPE_BYTES[dep.kv_dtype]
    batch, tp = dep.batch, plan.tp
    local_seqs = seqs_on_busiest_socket(batch, plan)
    share = kv_share(model, plan)
    bw_hbm = s.hbm_bandwidth * a.bandwidth_efficiency
    bw_ddr = (s.ddr_bandwidth * a.bandwidth_efficiency) or math.inf

    def stream(nbytes: float, ddr_fraction: float) -> float:
        return nbytes * (1 - ddr_fraction) / bw_hbm + (nbytes * ddr_fraction / bw_ddr if ddr_fraction else 0.0)

    kernels: list[KernelTime] = []

    def add(name: str, wbytes: float, other_bytes: float, flops: float, efficiency: float, count: int,
            other_ddr: float = 0.0) -> None:
        t_mem = stream(wbytes, weights_ddr_fraction) + stream(other_bytes, other_ddr)
        t_cmp = flops / (s.peak_flops * efficiency)
        kernels.append(KernelTime(name, count * max(t_mem, t_cmp), count * (wbytes + other_bytes), count * flops,
                                  "memory" if t_mem >= t_cmp else "compute"))

    h = model.hidden_size
    q_tok = batch * (1 + plan.draft_tokens)  # query tokens per step: every sequence verifies its drafts
    # attention projections (TP GEMMs over every query token)
    attn_params = model.attention_params_per_layer()
    add("attention projections", attn_params * lin_b / tp, 0.0, 2 * attn_params * q_tok / tp,
        a.gemm_efficiency, model.num_layers)
    # attention over the cache (per socket: its sequences, its share of the heads, every query token)
    kv_values = model.kv_values_per_token_per_layer
    kv_bytes = local_seqs * context * kv_values * kv_b * share
    heads_local = model.num_attention_heads if plan.attention_parallel == "dp" else model.num_attention_heads / tp
    if model.is_mla:  # absorbed MLA: scores on latent+rope, values on the latent
        flops_per_cached = 2 * heads_local * (model.kv_lora_rank + model.qk_rope_head_dim) \
            + 2 * heads_local * model.kv_lora_rank
    else:
        flops_per_cached = 4 * heads_local * model.head_dim
    attention_flops = local_seqs * context * flops_per_cached * (1 + plan.draft_tokens)
    layer_seconds, splits, bound = _split_attention(hardware, model, dep, plan, local_seqs, kv_bytes,
                                                    attention_flops, stream(kv_bytes, kv_ddr_fraction))
    kernels.append(KernelTime("attention (KV cache)", model.num_layers * layer_seconds,
                              model.num_layers * kv_bytes, model.num_layers * attention_flops, bound))
    # FFN
    if model.num_dense_layers:
        p = model.dense_ffn_params()
        add("dense FFN", p * lin_b / tp, 0.0, 2 * p * q_tok / tp, a.gemm_efficiency, model.num_dense_layers)
    if model.is_moe:
        active = model.experts_per_token + model.n_shared_experts
        p_e = model.expert_params()
        shared = model.n_shared_experts * p_e / plan.sockets  # the shared expert is sliced over every socket
        if plan.moe_parallel == "ep":
            experts = expected_max_local_experts(model, q_tok, plan.sockets)
            routed_tokens = q_tok * model.experts_per_token / plan.sockets  # expert rows per socket (balanced)
            flops = 2 * p_e * (routed_tokens + model.n_shared_experts * q_tok / plan.sockets) \
                + 2 * model.router_params() * q_tok / plan.sockets
            add("MoE FFN (router + experts)", experts * p_e * lin_b + shared * lin_b
                + model.router_params() * lin_b / plan.sockets, 0.0, flops, a.gemm_efficiency, model.num_moe_layers)
        else:
            experts = expected_distinct_experts(model, q_tok) + model.n_shared_experts
            add("MoE FFN (router + experts)", (experts * p_e + model.router_params()) * lin_b / tp, 0.0,
                2 * (active * p_e + model.router_params()) * q_tok / tp, a.gemm_efficiency, model.num_moe_layers)
    # LM head (the embedding lookup reads only `batch` rows: negligible)
    lm = model.vocab_size * h
    add("LM head", lm * emb_b / tp, 0.0, 2 * lm * q_tok / tp, a.gemm_efficiency, 1)

    work = sum(k.seconds for k in kernels)
    # call-boundary costs
    per_layer = a.kernels_per_layer_mla_moe if (model.is_mla or model.is_moe) else a.kernels_per_layer_dense
    layer_calls = model.num_layers * per_layer
    multi = plan.sockets > 1
    barrier = call_boundary(hardware, plan.sockets)
    if plan.kernel_looping:
        # consecutive identical layer kernels become one looped call: one call per run of identical layers
        regions = 1 + (1 if model.num_dense_layers and model.num_moe_layers else 0)
        overheads = [("call boundaries (looped)", (regions + 1) * barrier)]
    else:
        layer_work = work - kernels[-1].seconds
        overheads = [("call boundaries", (layer_calls + 1) * barrier),
                     ("fill/drain (per layer call)", a.call_fill_drain_fraction * layer_work)]
    if a.decode_step_fixed_s:
        overheads.append(("step (graph launch, sampling, host sync)", a.decode_step_fixed_s))
    if multi:
        # cross-socket collectives: two per layer (after attention, after the FFN/MoE); their latency grows with
        # the sockets a ring/all-to-all must pass through. Not hidden by pipelining: a layer needs the previous
        # layer's reduced hidden state before it can start.
        hops = 2 * (plan.sockets - 1)
        overheads.append(("cross-socket collectives",
                          2 * model.num_layers * (a.collective_latency_s + hops * a.link_hop_latency_s)))
    overhead = sum(seconds for _, seconds in overheads)
    total_bytes = sum(k.bytes for k in kernels) * plan.sockets
    total_flops = sum(k.flops for k in kernels) * plan.sockets
    return Step(work + overhead, kernels, total_bytes, total_flops, splits, tuple(overheads))



def expected_tokens(drafts: int, acceptance: float) -> float:
    """Expected tokens one speculative step yields: the verified token plus the accepted prefix of ``drafts``
    drafts, each accepted with probability ``acceptance`` until the first rejection."""
    return sum(acceptance ** i for i in range(drafts + 1))


def speculative_step(hw: HardwareSpec, m: ModelPreset, dep: Deployment, plan: Plan, draft: Draft,
                      context: float, w_ddr: float, kv_ddr: float, fits) -> tuple[Step, float, int]:
    """(target step, draft seconds per step, lookahead) of speculative decoding with a draft model: the given
    ``draft_tokens``, or the lookahead with the highest expected tokens per second among those whose verification
    buffers fit (``fits(k)``; 0: plain decoding)."""
    draft_context = FullConfig().mean_kept_tokens(dep.prompt_len, dep.gen_len)
    draft_step = decode_step_time(hw, draft.model, draft.dep, draft.plan, draft_context, w_ddr, kv_ddr).seconds
    lookaheads = [dep.draft_tokens] if dep.draft_tokens is not None else \
        [k for k in range(MAX_LOOKAHEAD + 1) if k == 0 or fits(k)]
    best = None
    for k in lookaheads:
        step = decode_step_time(hw, m, dep, replace(plan, draft_tokens=k), context, w_ddr, kv_ddr)
        speed = expected_tokens(k, dep.draft_acceptance) / (step.seconds + k * draft_step)
        if best is None or speed > best[0]:
            best = (speed, step, k * draft_step, k)
    return best[1], best[2], best[3]
