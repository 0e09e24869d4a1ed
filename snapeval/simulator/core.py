"""Analytical memory and time model of LLM inference on SN40L (and GPUs for comparison).

Everything is closed-form arithmetic on the model architecture (``ModelPreset``), the hardware spec and the
deployment, so one point costs a few microseconds. docs/simulator.md explains each term and the source of each
default; ``benchmarks/simulator_calibration.py`` compares the results with every published figure.

Decode step, per socket (the slowest socket sets the pace):
    t_step = sum over kernels of max(bytes / (BW * bandwidth_efficiency), flops / (peak * efficiency))
             + call-boundary costs (removed by kernel looping)
Prefill of one prompt (batch 1, tensor parallel over all sockets): the same max(memory, compute) per kernel, with
SnapStream's SnapKV scoring and ring-buffer construction kernels added when the prompt exceeds the budget.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from snapeval.errors import SnapevalError, check_choice
from snapeval.models.presets import ModelPreset, get_preset
from snapeval.simulator.hardware import HardwareSpec, get_hardware

DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
POLICIES = ("full", "snapstream")
PLACEMENTS = ("hbm", "hbm+ddr")
ATTENTION_PARALLEL = ("auto", "dp", "tp")
BATCH_GRANULARITY = ("pow2", "any")
KV_SLOTS = ("exact", "bucket")
MOE_PARALLEL = ("auto", "ep", "tp")
PAPER_MTP_FACTOR = 2.4  # SnapStream paper: DeepSeek-R1 throughputs x2.4 for multi-token prediction (80% acceptance)


def _int_field(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SnapevalError(f"{name}={value!r} must be an integer >= {minimum}")
    return value


@dataclass(frozen=True)
class Deployment:
    """How the model runs. ``None`` fields take hardware/model-dependent defaults (see :meth:`resolve`).

    - ``sockets``: sockets used (default: all of the hardware); ``tp``: tensor-parallel degree of the GEMMs
      (default: the largest divisor of ``sockets`` that divides the heads; the other sockets hold replicas);
      ``attention_parallel``: ``dp`` partitions the sequences (and their KV cache) over the
      sockets, ``tp`` splits heads; ``auto`` = ``dp`` for MLA models (the SnapStream deployment), ``tp`` otherwise.
    - ``weight_dtype``: ``auto`` = the published checkpoint's precision (``fp8`` for DeepSeek-V3/R1, whose linear
      layers ship in FP8 with BF16 embeddings; ``bfloat16`` otherwise).
    - ``mtp_factor``: multiplier for multi-token prediction; ``None`` = 2.4 for DeepSeek-V3/R1 (as the SnapStream
      paper reports) and 1.0 otherwise. ``kernel_looping``: ``None`` = on where the hardware supports it.
    - ``placement``: ``hbm`` = everything must fit HBM (the paper's batch-limit assumption); ``hbm+ddr`` lets
      what does not fit spill to DDR (read at DDR bandwidth).
    - ``batch_granularity``: ``pow2`` = static graphs compiled for power-of-two batches (the batches the paper
      reports); ``any`` = any batch size.
    - ``prefill_activation_buffers``: hidden-state-sized buffers ([context, hidden]) the prefill graph keeps
      live on every socket; ``prefill_chunk``: tokens per prefill chunk (``None`` = whole prompt at once).
    - ``compiled_context``: the maximum context the static graphs are compiled for. Memory that a static-graph
      deployment plans once, at graph compile time, is sized for it, not for the actual prompt: the prefill
      workspace and the slot that receives the KV of the prompt being prefilled. ``None`` = the hardware's
      ``assumptions.compiled_context`` (131072 on SN40L: the SnapStream deployment's "128k context length"; 0 on
      GPUs: memory planned for the actual prompt, as paged-KV servers do), capped at the model's context; it never
      falls below the prompt. Set it to the prompt length to model a graph compiled for exactly that prompt.
    - ``kv_slot``: ``exact`` = a full-cache KV slot holds prompt + generated tokens; ``bucket`` = it is rounded up
      to the next power-of-two sequence-length bucket (a decode graph compiled per bucket), capped at the
      compiled context. A SnapStream slot is always its budget (a fixed shape).
    - ``moe_parallel``: how routed experts are split over the sockets in decode: ``ep`` = expert parallel (each
      socket holds ``n_experts / sockets`` whole experts; the socket that must stream the most distinct experts
      sets the pace), ``tp`` = every expert sliced over the sockets; ``auto`` = ``ep`` when the sockets divide the
      experts, else ``tp``.
    - ``draft_tokens``: speculative (MTP) tokens verified per sequence per step (each adds a query token to every
      kernel of the step); ``None`` = the fewest drafts whose expected accepted tokens
      ``1 + a + a^2 + ... + a^k`` (``a`` = ``draft_acceptance``) reach ``mtp_factor``: 2 for the paper's 2.4x at
      80% acceptance (1 + 0.8 + 0.64 = 2.44); 0 when ``mtp_factor`` is 1.
    """

    batch: int = 1
    prompt_len: int = 4096
    gen_len: int = 1024
    sockets: int | None = None
    tp: int | None = None
    attention_parallel: str = "auto"
    weight_dtype: str = "auto"
    kv_dtype: str = "bfloat16"
    activation_dtype: str = "bfloat16"
    mtp_factor: float | None = None
    kernel_looping: bool | None = None
    placement: str = "hbm"
    batch_granularity: str = "pow2"
    prefill_activation_buffers: int = 4
    prefill_chunk: int | None = None
    compiled_context: int | None = None
    kv_slot: str = "exact"
    moe_parallel: str = "auto"
    draft_tokens: int | None = None
    draft_acceptance: float = 0.8

    def __post_init__(self) -> None:
        _int_field("batch", self.batch, 1)
        _int_field("prompt_len", self.prompt_len, 1)
        _int_field("gen_len", self.gen_len, 0)
        if self.sockets is not None:
            _int_field("sockets", self.sockets, 1)
        if self.tp is not None:
            _int_field("tp", self.tp, 1)
        _int_field("prefill_activation_buffers", self.prefill_activation_buffers, 0)
        if self.prefill_chunk is not None:
            _int_field("prefill_chunk", self.prefill_chunk, 1)
        if self.compiled_context is not None:
            _int_field("compiled_context", self.compiled_context, 0)
        if self.draft_tokens is not None:
            _int_field("draft_tokens", self.draft_tokens, 0)
        if isinstance(self.draft_acceptance, bool) or not isinstance(self.draft_acceptance, (int, float)) \
                or not 0 <= self.draft_acceptance < 1:
            raise SnapevalError(f"draft_acceptance={self.draft_acceptance!r} must be a number in [0, 1)")
        check_choice("kv_slot", self.kv_slot, KV_SLOTS)
        check_choice("moe_parallel", self.moe_parallel, MOE_PARALLEL)
        check_choice("attention_parallel", self.attention_parallel, ATTENTION_PARALLEL)
        check_choice("weight_dtype", self.weight_dtype, ("auto", *DTYPE_BYTES))
        check_choice("kv_dtype", self.kv_dtype, DTYPE_BYTES)
        check_choice("activation_dtype", self.activation_dtype, DTYPE_BYTES)
        check_choice("placement", self.placement, PLACEMENTS)
        check_choice("batch_granularity", self.batch_granularity, BATCH_GRANULARITY)
        if self.mtp_factor is not None and not (isinstance(self.mtp_factor, (int, float)) and self.mtp_factor >= 1):
            raise SnapevalError(f"mtp_factor={self.mtp_factor!r} must be a number >= 1")


@dataclass(frozen=True)
class KVPolicy:
    """KV-cache policy: ``full``, or ``snapstream`` with a total ``budget`` (sinks + ring + top-k) in tokens.

    ``observation_length`` is SnapKV's number of last prompt queries used to score the middle tokens (it sets the
    cost of the compression kernel; the paper does not state its value, default 32 as in SnapKV's code).
    """

    method: str = "full"
    budget: int | None = None
    observation_length: int = 32

    def __post_init__(self) -> None:
        check_choice("method", self.method, POLICIES)
        if self.method == "snapstream":
            if self.budget is None:
                raise SnapevalError("budget is required for method='snapstream'")
            _int_field("budget", self.budget, 1)
        elif self.budget is not None:
            raise SnapevalError("budget is only allowed with method='snapstream'")
        _int_field("observation_length", self.observation_length, 1)

    @classmethod
    def from_budget(cls, budget: int | None, **kwargs: Any) -> "KVPolicy":
        return cls() if budget is None else cls(method="snapstream", budget=budget, **kwargs)

    def cached_tokens(self, context: int) -> int:
        """Tokens held per sequence after ``context`` tokens (the budget caps the cache)."""
        return context if self.budget is None else min(context, self.budget)


@dataclass(frozen=True)
class TierUsage:
    """Bytes per socket in one memory tier."""

    weights: float = 0.0
    kv_cache: float = 0.0
    activations: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations


@dataclass(frozen=True)
class KernelTime:
    """Time of one kind of kernel summed over the layers of one step (per socket)."""

    name: str
    seconds: float
    bytes: float
    flops: float
    bound: str  # "memory" | "compute"


@dataclass
class SimResult:
    """Memory and time of one (hardware, model, deployment, policy) point. Times in seconds, memory in bytes.

    Throughput fields are ``None`` when the point does not fit (``fits`` is False and ``reason`` says why).
    ``decode_tokens_per_s`` includes ``mtp_factor`` when ``includes_mtp``; ``decode_tokens_per_s_raw`` never does.
    """

    hardware: str
    model: str
    method: str
    budget: int | None
    batch: int
    prompt_len: int
    gen_len: int
    sockets: int
    tp: int
    attention_parallel: str
    weight_dtype: str
    kv_dtype: str
    kernel_looping: bool
    fits: bool
    reason: str
    # memory (per socket unless named *_total)
    hbm: TierUsage
    ddr: TierUsage
    hbm_capacity: float
    ddr_capacity: float
    weights_bytes_total: float
    kv_bytes_total: float
    kv_bytes_per_seq: float
    kv_bytes_per_token: float
    max_batch: int
    max_batch_exact: int
    # decode
    decode_step_seconds: float | None
    decode_tokens_per_s: float | None
    decode_tokens_per_s_per_seq: float | None
    decode_tokens_per_s_raw: float | None
    achieved_bandwidth_fraction: float | None
    decode_bytes_per_step: float | None
    decode_flops_per_step: float | None
    decode_kernels: list[KernelTime]
    mtp_factor: float
    includes_mtp: bool
    # prefill
    prefill_seconds: float | None
    prefill_compression_seconds: float
    prefill_overhead_fraction: float
    prefill_kernel_share: dict[str, float]
    _inputs: tuple = field(default=(), repr=False, compare=False)

    @property
    def memory_per_socket(self) -> float:
        return self.hbm.total + self.ddr.total

    def gain_vs_full(self) -> dict[str, float | None]:
        """SnapStream's gain over the full cache at the same point (1.0 everywhere for a full-cache result).

        ``kv_memory_reduction`` and ``memory_reduction`` are full / this; ``batch_gain`` is the ratio of the
        largest batches that fit; ``throughput_gain_same_batch`` compares this batch; ``throughput_gain_max_batch``
        compares each policy at its own largest batch (the paper's 434 -> 1832 tok/s comparison).
        """
        hardware, model, deployment, policy = self._inputs
        full = simulate(hardware, model, deployment, KVPolicy(observation_length=policy.observation_length))

        def ratio(a, b):
            return None if a is None or b is None or b == 0 else a / b

        mine_max = _at_batch(self, self.max_batch)
        full_max = _at_batch(full, full.max_batch)
        return {
            "kv_memory_reduction": ratio(full.kv_bytes_total, self.kv_bytes_total),
            "memory_reduction": ratio(full.memory_per_socket, self.memory_per_socket),
            "batch_gain": ratio(self.max_batch, full.max_batch),
            "throughput_gain_same_batch": ratio(self.decode_tokens_per_s, full.decode_tokens_per_s)
            if self.fits and full.fits else None,
            "throughput_gain_max_batch": ratio(mine_max.decode_tokens_per_s if mine_max else None,
                                               full_max.decode_tokens_per_s if full_max else None),
            "full_max_batch": full.max_batch,
            "max_batch": self.max_batch,
        }

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "_inputs"}
        out["memory_per_socket"] = self.memory_per_socket
        return out


def _at_batch(result: SimResult, batch: int) -> SimResult | None:
    if batch < 1:
        return None
    if batch == result.batch:
        return result
    hardware, model, deployment, policy = result._inputs
    return simulate(hardware, model, replace(deployment, batch=batch), policy)


# ---------------------------------------------------------------------------------------------------------------
# helpers

def _resolve_model(model: str | ModelPreset) -> ModelPreset:
    return model if isinstance(model, ModelPreset) else get_preset(model)


def _weight_bytes(model: ModelPreset, dtype: str) -> tuple[float, float]:
    """(bytes of the linear layers' weights per parameter, bytes per embedding/lm-head parameter)."""
    wb = DTYPE_BYTES[dtype]
    # Sub-16-bit checkpoints keep embeddings, lm head and norms in BF16 (DeepSeek's FP8 release, GGUF/AWQ alike).
    return wb, max(wb, 2.0)


def _pow2_floor(n: int) -> int:
    return 0 if n < 1 else 1 << (n.bit_length() - 1)


def _expected_distinct_experts(model: ModelPreset, tokens: int) -> float:
    """Expected routed experts touched by ``tokens`` tokens in one MoE layer (uniform, independent routing)."""
    n, k = model.n_routed_experts, model.experts_per_token
    return n * (1.0 - (1.0 - k / n) ** tokens)


def _expected_max_local_experts(model: ModelPreset, tokens: int, sockets: int) -> float:
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
class _Plan:
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


def _draft_tokens_for(mtp_factor: float, acceptance: float) -> int:
    """Fewest drafts k with 1 + a + ... + a^k >= mtp_factor (within 2%), capped at 16."""
    if mtp_factor <= 1.0:
        return 0
    for k in range(1, 17):
        if sum(acceptance ** i for i in range(k + 1)) >= mtp_factor * 0.98:
            return k
    return 16


def _plan(hardware: HardwareSpec, model: ModelPreset, dep: Deployment) -> _Plan:
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
        mtp = PAPER_MTP_FACTOR if model.family == "deepseek_v3" else 1.0
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
    drafts = dep.draft_tokens if dep.draft_tokens is not None else _draft_tokens_for(mtp, dep.draft_acceptance)
    return _Plan(sockets, tp, dp, attn, wdtype, looping, float(mtp), compiled, moe, drafts)


def _weights_per_socket(model: ModelPreset, plan: _Plan) -> tuple[float, float]:
    """(total weight bytes, weight bytes per socket): GEMM weights split by TP, replicated over DP groups."""
    lin_b, emb_b = _weight_bytes(model, plan.weight_dtype)
    emb = model.embedding_params() + model.lm_head_params()
    total = (model.param_count() - emb) * lin_b + emb * emb_b
    return total, total / plan.tp


def _kv_share(model: ModelPreset, plan: _Plan) -> float:
    """Fraction of one sequence's KV cache a socket holding it stores."""
    if plan.attention_parallel == "dp":
        return 1.0
    if model.is_mla:
        return 1.0  # the latent is shared by all heads: head-parallel attention replicates it
    return max(1, model.num_kv_heads // plan.tp) / model.num_kv_heads


def _seqs_on_busiest_socket(batch: int, plan: _Plan) -> int:
    """Sequences whose cache the busiest socket holds: DP attention spreads them over every socket; TP attention
    over the ``dp`` replicas (each of ``tp`` sockets, which split the heads)."""
    return math.ceil(batch / plan.dp)


def _activation_bytes(model: ModelPreset, dep: Deployment, plan: _Plan, kv_per_token: float) -> float:
    """Per-socket activation/buffer bytes: prefill workspace (the larger) or decode buffers, plus the slot that
    receives the full KV of the prompt being prefilled (compressed right after prefill under SnapStream).

    Both prefill terms are sized for ``plan.compiled_context``: a static-graph deployment plans them once, for
    the longest prompt its graphs accept, so a shorter prompt frees none of it."""
    act_b = DTYPE_BYTES[dep.activation_dtype]
    planned = plan.compiled_context
    chunk = min(planned, dep.prefill_chunk or planned)
    prefill = dep.prefill_activation_buffers * chunk * model.hidden_size * act_b
    decode = dep.batch * (1 + plan.draft_tokens) * (4 * model.hidden_size + model.vocab_size / plan.tp) * 4.0
    transient_prompt_kv = planned * kv_per_token / plan.sockets
    return max(prefill, decode) + transient_prompt_kv


def _slot_tokens(dep: Deployment, plan: _Plan, policy: "KVPolicy") -> int:
    """Tokens one sequence's KV slot is allocated for (and the decode attention kernel reads with ``bucket``)."""
    final = dep.prompt_len + dep.gen_len
    if dep.kv_slot == "exact":
        return policy.cached_tokens(final)
    if policy.budget is not None:
        return policy.budget
    bucket = 1 << max(0, (final - 1).bit_length())
    return max(final, min(bucket, plan.compiled_context))


# ---------------------------------------------------------------------------------------------------------------
# decode

def _decode_step(hardware: HardwareSpec, model: ModelPreset, dep: Deployment, plan: _Plan,
                 context: float, weights_ddr_fraction: float, kv_ddr_fraction: float) -> tuple[float, list[KernelTime], float, float]:
    """Time of one decode step (all sequences advance one token) with ``context`` cached tokens per sequence.

    Returns (seconds, kernels, bytes per step over all sockets, flops per step over all sockets)."""
    a = hardware.assumptions
    s = hardware.socket
    lin_b, emb_b = _weight_bytes(model, plan.weight_dtype)
    kv_b = DTYPE_BYTES[dep.kv_dtype]
    batch, tp = dep.batch, plan.tp
    local_seqs = _seqs_on_busiest_socket(batch, plan)
    share = _kv_share(model, plan)
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
    add("attention (KV cache)", 0.0, kv_bytes, local_seqs * context * flops_per_cached * (1 + plan.draft_tokens),
        a.decode_attention_efficiency, model.num_layers, other_ddr=kv_ddr_fraction)
    # FFN
    if model.num_dense_layers:
        p = model.dense_ffn_params()
        add("dense FFN", p * lin_b / tp, 0.0, 2 * p * q_tok / tp, a.gemm_efficiency, model.num_dense_layers)
    if model.is_moe:
        active = model.experts_per_token + model.n_shared_experts
        p_e = model.expert_params()
        shared = model.n_shared_experts * p_e / plan.sockets  # the shared expert is sliced over every socket
        if plan.moe_parallel == "ep":
            experts = _expected_max_local_experts(model, q_tok, plan.sockets)
            routed_tokens = q_tok * model.experts_per_token / plan.sockets  # expert rows per socket (balanced)
            flops = 2 * p_e * (routed_tokens + model.n_shared_experts * q_tok / plan.sockets) \
                + 2 * model.router_params() * q_tok / plan.sockets
            add("MoE FFN (router + experts)", experts * p_e * lin_b + shared * lin_b
                + model.router_params() * lin_b / plan.sockets, 0.0, flops, a.gemm_efficiency, model.num_moe_layers)
        else:
            experts = _expected_distinct_experts(model, q_tok) + model.n_shared_experts
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
    barrier = a.kernel_call_sync_s + (a.cross_socket_sync_s if multi else 0.0)
    if plan.kernel_looping:
        # consecutive identical layer kernels become one looped call: one call per run of identical layers
        regions = 1 + (1 if model.num_dense_layers and model.num_moe_layers else 0)
        overhead = (regions + 1) * barrier
    else:
        layer_work = work - kernels[-1].seconds
        overhead = (layer_calls + 1) * barrier + a.call_fill_drain_fraction * layer_work
    if multi:
        # cross-socket collectives: two per layer (after attention, after the FFN/MoE); their latency grows with
        # the sockets a ring/all-to-all must pass through. Not hidden by pipelining: a layer needs the previous
        # layer's reduced hidden state before it can start.
        hops = 2 * (plan.sockets - 1)
        overhead += 2 * model.num_layers * (a.collective_latency_s + hops * a.link_hop_latency_s)
    total_bytes = sum(k.bytes for k in kernels) * plan.sockets
    total_flops = sum(k.flops for k in kernels) * plan.sockets
    return work + overhead, kernels, total_bytes, total_flops


# ---------------------------------------------------------------------------------------------------------------
# prefill

def _prefill(hardware: HardwareSpec, model: ModelPreset, dep: Deployment, plan: _Plan, policy: KVPolicy
             ) -> tuple[float, float, dict[str, float]]:
    """Prefill of one prompt at batch 1, tensor parallel over all sockets. Returns (seconds, seconds of the
    SnapStream compression kernels, share of each kernel in one (MoE) layer)."""
    a = hardware.assumptions
    s = hardware.socket
    P = plan.sockets  # prefill runs TP over every socket (SnapStream: TP16, batch 1)
    L = dep.prompt_len
    lin_b, emb_b = _weight_bytes(model, plan.weight_dtype)
    act_b = DTYPE_BYTES[dep.activation_dtype]
    kv_b = DTYPE_BYTES[dep.kv_dtype]
    bw = s.hbm_bandwidth * a.bandwidth_efficiency
    h, n = model.hidden_size, model.num_attention_heads

    def t(nbytes: float, flops: float, eff: float) -> float:
        return max(nbytes / bw, flops / (s.peak_flops * eff))

    hidden_bytes = L * h * act_b  # replicated on every socket between TP kernels
    if model.is_mla:
        qk_dim, v_dim = model.qk_nope_head_dim + model.qk_rope_head_dim, model.v_head_dim
    else:
        qk_dim = v_dim = model.head_dim
    kv_heads_local = n / P if model.is_mla else max(1.0, model.num_kv_heads / P)
    q_local = L * (n / P) * qk_dim * act_b
    k_local = L * kv_heads_local * qk_dim * act_b
    v_local = L * kv_heads_local * v_dim * act_b
    attn_p = model.attention_params_per_layer()
    o_p = n * v_dim * h
    qkv_p = attn_p - o_p
    dense_ffn = t(model.dense_ffn_params() * lin_b / P + 2 * hidden_bytes, 2 * model.dense_ffn_params() * L / P,
                  a.gemm_efficiency)
    shares: dict[str, float] = {}
    shares["QKV projections"] = t(qkv_p * lin_b / P + hidden_bytes + q_local + k_local + v_local,
                                  2 * qkv_p * L / P, a.gemm_efficiency)
    causal_pairs = L * (L + 1) / 2
    shares["attention"] = t(q_local + k_local + v_local + L * (n / P) * v_dim * act_b,
                            2 * (n / P) * (qk_dim + v_dim) * causal_pairs, a.prefill_attention_efficiency)
    shares["output projection"] = t(o_p * lin_b / P + L * (n / P) * v_dim * act_b + hidden_bytes,
                                    2 * o_p * L / P, a.gemm_efficiency)
    if model.is_moe:
        r = model.router_params()
        # routing is computed for every token on every socket (the top-k needs all expert scores)
        shares["router"] = t(r * lin_b + hidden_bytes + L * model.n_routed_experts * 4.0, 2 * r * L,
                             a.gemm_efficiency)
        active = model.experts_per_token + model.n_shared_experts
        touched = _expected_distinct_experts(model, L) + model.n_shared_experts
        ffn = t(touched * model.expert_params() * lin_b / P + 2 * hidden_bytes
                + 2 * L * active * model.moe_intermediate_size / P * act_b,
                2 * active * model.expert_params() * L / P, a.gemm_efficiency)
        shares["MoE FFN"] = ffn
    else:
        shares["FFN"] = dense_ffn
    # Sequence-parallel TP prefill: between kernels each socket holds 1/P of the tokens' hidden states; the
    # normed input is all-gathered before the QKV projections and before the FFN block (the router reads it
    # first), and the outputs of the output projection and of the FFN are reduce-scattered. Each moves
    # (P - 1) / P of one [L, hidden] activation through a socket's links; it delays the kernel that waits on it.
    link = hardware.link_bandwidth or a.assumed_link_bandwidth
    collective = (P - 1) / P * hidden_bytes / link if P > 1 and link else 0.0
    shares["QKV projections"] += collective
    shares["output projection"] += collective
    if model.is_moe:
        shares["router"] += collective
        shares["MoE FFN"] += collective
    else:
        shares["FFN"] += 2 * collective
    dense_ffn += 2 * collective
    compress = 0.0
    if policy.budget is not None and L > policy.budget:
        w = min(policy.observation_length, L)
        hl = n / P                     # heads on this socket (prefill is TP over every socket)
        fixed = a.aux_kernel_fixed_s   # launch + pipeline fill/drain of one small, unfused kernel
        score_bytes = hl * w * L * 4.0  # fp32 scores of the window's queries against every key
        row_bytes = hl * L * 4.0        # one fp32 score per key and head
        # SnapKV (paper: a separate compression kernel): (1) recompute Q_obs K^T over the whole key range (the
        # fused flash-attention kernel never materialises the probabilities), (2) softmax over the keys,
        # (3) sum over the window and 1-D pooling over the keys, (4) top-k over the candidates, per head
        snapkv_parts = [
            t(k_local + hl * w * qk_dim * act_b + score_bytes, 2 * hl * qk_dim * w * L,
              a.prefill_attention_efficiency),
            t(2 * score_bytes, 5 * hl * w * L, a.gemm_efficiency),
            t(score_bytes + 3 * row_bytes, hl * w * L + 2 * hl * L * 5, a.gemm_efficiency),
            t(row_bytes + hl * policy.budget * 4.0, 0.0, 1.0),
        ]
        snapkv = sum(snapkv_parts) + len(snapkv_parts) * fixed
        # ring-buffer construction: gather sinks, gather the recent window, gather the top-k entries, concatenate
        # them into the fixed-shape slot (bytes: the kept latent of this socket's share, read and written)
        kv_layer = model.kv_values_per_token_per_layer * kv_b
        kept = policy.budget  # the prompt is longer than the budget here
        ring_parts = [t(2 * kept * kv_layer / P / 3, 0.0, 1.0) for _ in range(3)] + [t(2 * kept * kv_layer / P, 0.0, 1.0)]
        ring = sum(ring_parts) + len(ring_parts) * fixed
        shares["SnapKV compression"] = snapkv
        shares["ring buffer"] = ring
        compress = (snapkv + ring) * model.num_layers
    layer_moe = sum(shares.values())
    base_layer = layer_moe - (compress / model.num_layers if compress else 0.0)
    if model.is_moe:
        dense_layer = base_layer - shares["router"] - shares["MoE FFN"] + dense_ffn
        total_layers = model.num_moe_layers * base_layer + model.num_dense_layers * dense_layer
    else:
        total_layers = model.num_layers * base_layer
    lm = model.vocab_size * h
    lm_head = t(lm * emb_b / P, 2 * lm / P, a.gemm_efficiency)  # logits of the last position only
    calls = model.num_layers * (a.kernels_per_layer_mla_moe if (model.is_mla or model.is_moe)
                                else a.kernels_per_layer_dense)
    sync = (calls + 1) * (a.kernel_call_sync_s + (a.cross_socket_sync_s if P > 1 else 0.0))
    seconds = total_layers + compress + lm_head + sync
    share = {k: v / layer_moe for k, v in shares.items()}
    return seconds, compress, share


# ---------------------------------------------------------------------------------------------------------------

def simulate(hardware: str | HardwareSpec, model: str | ModelPreset, deployment: Deployment | None = None,
             policy: KVPolicy | None = None) -> SimResult:
    """Simulate one point. Raises :class:`SnapevalError` for invalid specs; a point that does not fit returns a
    result with ``fits=False`` and a ``reason`` (and ``None`` throughputs)."""
    hw = get_hardware(hardware)
    m = _resolve_model(model)
    dep = deployment or Deployment()
    pol = policy or KVPolicy()
    plan = _plan(hw, m, dep)
    kv_b = DTYPE_BYTES[dep.kv_dtype]
    kv_per_token = m.num_layers * m.kv_values_per_token_per_layer * kv_b
    final_context = dep.prompt_len + dep.gen_len
    cached_final = _slot_tokens(dep, plan, pol)
    kv_seq = cached_final * kv_per_token
    share = _kv_share(m, plan)
    kv_seq_socket = kv_seq * share
    weights_total, weights_socket = _weights_per_socket(m, plan)
    activations = _activation_bytes(m, dep, plan, kv_per_token)
    local = _seqs_on_busiest_socket(dep.batch, plan)
    kv_socket = local * kv_seq_socket
    kv_total = dep.batch * kv_seq * (share * plan.tp if plan.attention_parallel == "tp" and not m.is_mla else 1.0)
    if plan.attention_parallel == "tp" and m.is_mla:
        kv_total = dep.batch * kv_seq * plan.tp  # replicated on every TP socket

    hbm_cap = hw.socket.hbm_bytes
    ddr_cap = hw.socket.ddr_bytes if dep.placement == "hbm+ddr" else 0.0
    capacity = hbm_cap + ddr_cap

    # largest batch that fits with these lengths: memory is monotone in the batch, so bisect below the bound
    # given by the KV cache alone
    def need_for(batch: int) -> float:
        acts = _activation_bytes(m, replace(dep, batch=batch), plan, kv_per_token)
        return weights_socket + acts + _seqs_on_busiest_socket(batch, plan) * kv_seq_socket

    free = capacity - weights_socket - _activation_bytes(m, replace(dep, batch=1), plan, kv_per_token)
    if free < kv_seq_socket or kv_seq_socket <= 0:
        max_exact = 0
    else:
        lo, hi = 1, int(free // kv_seq_socket) * plan.dp  # need_for(lo) fits; hi is an upper bound
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if need_for(mid) <= capacity else (lo, mid - 1)
        max_exact = lo
    max_batch = _pow2_floor(max_exact) if dep.batch_granularity == "pow2" else max_exact

    # tier placement: weights first, then activations, then KV; overflow to DDR when allowed
    need = weights_socket + activations + kv_socket
    hbm_w = min(weights_socket, hbm_cap)
    hbm_a = min(activations, hbm_cap - hbm_w)
    hbm_kv = min(kv_socket, hbm_cap - hbm_w - hbm_a)
    ddr = TierUsage(weights_socket - hbm_w, kv_socket - hbm_kv, activations - hbm_a) if ddr_cap else TierUsage()
    hbm = TierUsage(hbm_w, hbm_kv, hbm_a) if ddr_cap else TierUsage(weights_socket, kv_socket, activations)

    gib = 1e9
    reason = ""
    if weights_socket > capacity:
        reason = (f"weights need {weights_socket / gib:.1f} GB per socket ({m.name}, {plan.weight_dtype}, "
                  f"tp={plan.tp}) but a socket of {hw.name} holds {capacity / gib:.1f} GB")
    elif need > capacity:
        reason = (f"needs {need / gib:.1f} GB per socket (weights {weights_socket / gib:.1f} + KV "
                  f"{kv_socket / gib:.1f} + activations {activations / gib:.1f}) but a socket holds "
                  f"{capacity / gib:.1f} GB; largest batch that fits: {max_batch}")
    elif final_context > m.max_context:
        reason = f"prompt_len + gen_len = {final_context} exceeds the {m.max_context}-token context of {m.name}"
    fits = not reason

    base = dict(
        hardware=hw.name, model=m.name, method=pol.method, budget=pol.budget, batch=dep.batch,
        prompt_len=dep.prompt_len, gen_len=dep.gen_len, sockets=plan.sockets, tp=plan.tp,
        attention_parallel=plan.attention_parallel, weight_dtype=plan.weight_dtype, kv_dtype=dep.kv_dtype,
        kernel_looping=plan.kernel_looping, fits=fits, reason=reason, hbm=hbm, ddr=ddr, hbm_capacity=hbm_cap,
        ddr_capacity=ddr_cap, weights_bytes_total=weights_total, kv_bytes_total=kv_total, kv_bytes_per_seq=kv_seq,
        kv_bytes_per_token=kv_per_token, max_batch=max_batch, max_batch_exact=max_exact,
        mtp_factor=plan.mtp_factor, includes_mtp=plan.mtp_factor != 1.0,
        _inputs=(hw, m, dep, pol),
    )
    if not fits:
        return SimResult(**base, decode_step_seconds=None, decode_tokens_per_s=None,
                         decode_tokens_per_s_per_seq=None, decode_tokens_per_s_raw=None,
                         achieved_bandwidth_fraction=None, decode_bytes_per_step=None, decode_flops_per_step=None,
                         decode_kernels=[], prefill_seconds=None, prefill_compression_seconds=0.0,
                         prefill_overhead_fraction=0.0, prefill_kernel_share={})

    # mean cached length over the generated tokens (step time is linear in it)
    if pol.budget is None:
        mean_context = dep.prompt_len + dep.gen_len / 2
    else:
        start = min(dep.prompt_len, pol.budget)
        mean_context = min(pol.budget, start + dep.gen_len / 2)
    w_ddr = ddr.weights / weights_socket if weights_socket and ddr_cap else 0.0
    kv_ddr = ddr.kv_cache / kv_socket if kv_socket and ddr_cap else 0.0
    step, kernels, step_bytes, step_flops = _decode_step(hw, m, dep, plan, mean_context, w_ddr, kv_ddr)
    raw = dep.batch / step
    peak_bw = hw.socket.hbm_bandwidth * plan.sockets
    prefill_s, compress_s, shares = _prefill(hw, m, dep, plan, pol)
    return SimResult(
        **base,
        decode_step_seconds=step,
        decode_tokens_per_s=raw * plan.mtp_factor,
        decode_tokens_per_s_per_seq=raw * plan.mtp_factor / dep.batch,
        decode_tokens_per_s_raw=raw,
        achieved_bandwidth_fraction=step_bytes / step / peak_bw,
        decode_bytes_per_step=step_bytes,
        decode_flops_per_step=step_flops,
        decode_kernels=kernels,
        prefill_seconds=prefill_s,
        prefill_compression_seconds=compress_s,
        prefill_overhead_fraction=compress_s / (prefill_s - compress_s) if compress_s else 0.0,
        prefill_kernel_share=shares,
    )


def simulate_point(model: str | ModelPreset, hardware: str | HardwareSpec = "sn40l-16", prompt_len: int = 4096,
                   gen_len: int = 1024, budget: int | None = None, batch: int = 1, *,
                   observation_length: int = 32, **deployment_overrides: Any) -> SimResult:
    """Convenience wrapper: ``simulate_point("deepseek-r1", "sn40l-16", 131072, 1024, budget=32768, batch=64)``.

    ``deployment_overrides`` are :class:`Deployment` fields (``sockets``, ``tp``, ``weight_dtype``,
    ``kernel_looping``, ``mtp_factor``, ...)."""
    allowed = set(Deployment.__dataclass_fields__)
    bad = sorted(set(deployment_overrides) - allowed)
    if bad:
        raise SnapevalError(f"unknown deployment field(s): {', '.join(bad)}; allowed: {', '.join(sorted(allowed))}")
    dep = Deployment(batch=batch, prompt_len=prompt_len, gen_len=gen_len, **deployment_overrides)
    return simulate(hardware, model, dep, KVPolicy.from_budget(budget, observation_length=observation_length))
