"""The deployment plan of one point: sockets, tensor-parallel degree, replicas, dtypes, drafts
(:func:`plan_deployment`), and what follows from it per socket: weights, the KV share, the busiest socket's
sequences, activation buffers, a sequence's KV slot."""
from __future__ import annotations

import math
from dataclasses import dataclass

from snapeval.cache.config import MethodConfig
from snapeval.errors import SnapevalError
from snapeval.models.presets import ModelPreset, get_preset
from snapeval.simulator.deployment import DTYPE_BYTES, Deployment, PAPER_MTP_FACTOR
from snapeval.simulator.hardware import HardwareSpec


def resolve_model(model: str | ModelPreset) -> ModelPreset:
    return model if isinstance(model, ModelPreset) else get_preset(model)


def weight_bytes(model: ModelPreset, dtype: str) -> tuple[float, float]:
    """(bytes of the linear layers' weights per parameter, bytes per embedding/lm-head parameter)."""
    wb = DTYPE_BYTES[dtype]
    # Sub-16-bit checkpoints keep embeddings, lm head and norms in BF16 (DeepSeek's FP8 release, GGUF/AWQ alike).
    return wb, max(wb, 2.0)


def call_boundary(hardware: HardwareSpec, sockets: int) -> float:
    """Fixed cost of one kernel call: its launch and barrier, plus the cross-socket barrier when several sockets
    run it (decode and prefill kernels alike, and the small kernels of a method's compression)."""
    a = hardware.assumptions
    return a.kernel_call_sync_s + (a.cross_socket_sync_s if sockets > 1 else 0.0)


def pow2_floor(n: int) -> int:
    return 0 if n < 1 else 1 << (n.bit_length() - 1)


def expected_distinct_experts(model: ModelPreset, tokens: int) -> float:
    """Expected routed experts touched by ``tokens`` tokens in one MoE layer (uniform, independent routing)."""
    n, k = model.n_routed_experts, model.experts_per_token
    return n * (1.0 - (1.0 - k / n) ** tokens)


def expected_max_local_experts(model: ModelPreset, tokens: int, sockets: int) -> float:
    """Expert parallelism: expected largest number of distinct routed experts one socket must stream in one MoE
    layer, when ``tokens`` tokens each pick ``experts_per_token`` of ``n`` experts uniformly and every socket
    holds ``n / sockets`` of them (each local expert is touched with probability ``p``; the per-socket counts
    are treated as independent binomials; E[max] = sum_k P(max >= k))."""
    n, k = model.n_routed_experts, model.experts_per_token
    local = n // sockets
    p = 1.0 - (1.0 - k / n) ** tokens
    cdf, acc = [], 0.0
    for j in range(local + 1):
        acc += math.comb(local, j) * p ** j * (1 - p) ** (local - j)
        cdf.append(min(1.0, acc))
    return sum(1.0 - cdf[j - 1] ** sockets for j in range(1, local + 1))


@dataclass(frozen=True)
class Plan:
    sockets: int
    tp: int
    dp: int
    attention_parallel: str
    weight_dtype: str
    kernel_looping: bool
    mtp_factor: float
    compiled_context: int   # context the memory plan is sized for (>= the prompt)
    moe_parallel: str       # "ep" | "tp" ("tp" also for dense models)
    draft_tokens: int       # speculative tokens verified per sequence per step
    batch_granularity: str = "pow2"  # "pow2" | "any" (resolved from "auto")
    prompt_kv_held: float = 1.0  # fraction of the prompt's KV the prefill holds beside the rows


def _draft_tokens_for(mtp_factor: float, acceptance: float) -> int:
    """Fewest drafts k with 1 + a + ... + a^k >= mtp_factor (within 2%), capped at 16."""
    if mtp_factor <= 1.0:
        return 0
    for k in range(1, 17):
        if sum(acceptance ** i for i in range(k + 1)) >= mtp_factor * 0.98:
            return k
    return 16


def plan_deployment(hardware: HardwareSpec, model: ModelPreset, dep: Deployment) -> Plan:
    sockets = dep.sockets or hardware.sockets
    if sockets > hardware.sockets:
        raise SnapevalError(f"sockets={sockets} exceeds the {hardware.sockets} socket(s) of hardware "
                            f"{hardware.name!r}")
    def kv_ok(t: int) -> bool:
        return model.is_mla or model.num_kv_heads % t == 0 or t % model.num_kv_heads == 0

    # default TP: the largest degree that divides the sockets and the heads; other sockets serve replicas (DP)
    tp = dep.tp or max(t for t in range(1, sockets + 1)
                       if sockets % t == 0 and model.num_attention_heads % t == 0 and kv_ok(t))
    if sockets % tp:
        raise SnapevalError(f"tp={tp} must divide sockets={sockets}")
    if model.num_attention_heads % tp:
        raise SnapevalError(f"tp={tp} does not divide the {model.num_attention_heads} attention heads of "
                            f"{model.name}; choose a divisor of {model.num_attention_heads}")
    attn = dep.attention_parallel
    if attn == "auto":
        attn = "dp" if model.is_mla else "tp"
    if attn == "tp" and not model.is_mla and model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise SnapevalError(f"tp={tp} and the {model.num_kv_heads} KV heads of {model.name} do not divide each "
                            "other; use attention_parallel='dp' or another tp")
    dp = sockets if attn == "dp" else sockets // tp
    wdtype = dep.weight_dtype
    if wdtype == "auto":
        wdtype = "fp8" if model.family == "deepseek_v3" else "bfloat16"
    looping = hardware.assumptions.supports_kernel_looping if dep.kernel_looping is None else dep.kernel_looping
    if looping and not hardware.assumptions.supports_kernel_looping:
        raise SnapevalError(f"kernel_looping is not available on {hardware.name!r} (kind {hardware.kind})")
    mtp = dep.mtp_factor
    if mtp is None:
        mtp = PAPER_MTP_FACTOR if model.family == "deepseek_v3" and dep.draft_model is None else 1.0
    compiled = dep.compiled_context
    if compiled is None:
        compiled = min(hardware.assumptions.compiled_context, model.max_context)
    compiled = max(compiled, dep.prompt_len)  # a graph is never compiled for less than the prompt it serves
    moe = dep.moe_parallel
    if moe == "auto":
        moe = "ep" if model.is_moe and sockets > 1 and model.n_routed_experts % sockets == 0 else "tp"
    if moe == "ep" and model.is_moe and model.n_routed_experts % sockets:
        raise SnapevalError(f"moe_parallel='ep' needs sockets={sockets} to divide the {model.n_routed_experts} "
                            f"routed experts of {model.name}; use moe_parallel='tp'")
    if dep.draft_tokens is not None:
        drafts = dep.draft_tokens
    else:  # a draft model's lookahead is chosen by speed later (simulate); MTP drafts follow from the factor
        drafts = 0 if dep.draft_model is not None else _draft_tokens_for(mtp, dep.draft_acceptance)
    granularity = dep.batch_granularity
    if granularity == "auto":  # static graphs compile power-of-two batches; an engine of static rows runs any
        granularity = hardware.assumptions.batch_granularity
    held = 1.0 if hardware.assumptions.prefill_holds_prompt_kv else 1.0 / model.num_layers
    return Plan(sockets, tp, dp, attn, wdtype, looping, float(mtp), compiled, moe, drafts, granularity, held)


def weights_per_socket(model: ModelPreset, plan: Plan) -> tuple[float, float]:
    """(total weight bytes, weight bytes per socket): GEMM weights split by TP, replicated over DP groups."""
    lin_b, emb_b = weight_bytes(model, plan.weight_dtype)
    emb = model.embedding_params() + model.lm_head_params()
    total = (model.param_count() - emb) * lin_b + emb * emb_b
    return total, total / plan.tp


def kv_share(model: ModelPreset, plan: Plan) -> float:
    """Fraction of one sequence's KV cache a socket holding it stores."""
    if plan.attention_parallel == "dp":
        return 1.0
    if model.is_mla:
        return 1.0  # the latent is shared by all heads: head-parallel attention replicates it
    return max(1, model.num_kv_heads // plan.tp) / model.num_kv_heads


def seqs_on_busiest_socket(batch: int, plan: Plan) -> int:
    """Sequences whose cache the busiest socket holds: DP attention spreads them over every socket; TP attention
    over the ``dp`` replicas (each of ``tp`` sockets, which split the heads)."""
    return math.ceil(batch / plan.dp)


def activation_bytes(model: ModelPreset, dep: Deployment, plan: Plan, kv_per_token: float) -> float:
    """Per-socket activation/buffer bytes: prefill workspace (the larger) or decode buffers, plus the slot that
    receives the full KV of the prompt being prefilled (compressed right after prefill under SnapStream).

    Both prefill terms are sized for ``plan.compiled_context``: a static-graph deployment plans them once, for
    the longest prompt its graphs accept, so a shorter prompt frees none of it."""
    act_b = DTYPE_BYTES[dep.activation_dtype]
    planned = plan.compiled_context
    chunk = min(planned, dep.prefill_chunk or planned)
    prefill = dep.prefill_activation_buffers * chunk * model.hidden_size * act_b
    decode = dep.batch * (1 + plan.draft_tokens) * (4 * model.hidden_size + model.vocab_size / plan.tp) * 4.0
    transient_prompt_kv = planned * kv_per_token * plan.prompt_kv_held / plan.sockets
    return max(prefill, decode) + transient_prompt_kv


def slot_tokens(dep: Deployment, plan: Plan, method: MethodConfig) -> int:
    """Tokens one sequence's KV slot is allocated for: what the method's static-row allocation reserves
    (``method.cache_slots``: the budget for a fixed-size cache, the kept prompt plus the output otherwise); with
    ``kv_slot="bucket"`` a growing slot is rounded up to the next power of two, capped at the compiled context."""
    slots = method.cache_slots(dep.prompt_len, dep.gen_len)
    if dep.kv_slot == "exact" or method.FIXED_SIZE:
        return slots
    bucket = 1 << max(0, (slots - 1).bit_length())
    return max(slots, min(bucket, plan.compiled_context))
