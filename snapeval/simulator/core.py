"""Analytical memory and time model of LLM inference on SN40L (and GPUs for comparison).

Everything is closed-form arithmetic on the model architecture (``ModelPreset``), the hardware spec, the deployment
and the cache method's own description of itself (a resolved :class:`~snapeval.cache.config.MethodConfig`: its KV
slots, its kept tokens over the decode, its prefill work), so one point costs well under a millisecond.
docs/simulator.md explains each term and the source of each default; ``benchmarks/simulator_calibration.py``
compares the results with every published figure.

Decode step, per socket (the slowest socket sets the pace):
    t_step = sum over kernels of max(bytes / (BW * bandwidth_efficiency), flops / (peak * efficiency))
             + the merge of a sequence's split attention + collectives + call-boundary costs
With a draft model (speculative decoding) one step is the target's verification of ``draft_tokens`` drafts plus the
draft model's own steps, each costed by the same step model.
Prefill of one prompt (batch 1, tensor parallel over all sockets): the same max(memory, compute) per kernel, plus
the kernels of the method's own prefill work (scoring, gathering) when it compresses the prompt.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from snapeval.cache.config import DEFAULT_KERNEL, FullConfig, MethodConfig, PrefillWork
from snapeval.errors import SnapevalError, check_choice, is_int
from snapeval.models.presets import ModelPreset, get_preset
from snapeval.simulator.hardware import HardwareSpec, get_hardware

DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
PLACEMENTS = ("hbm", "hbm+ddr")
ATTENTION_PARALLEL = ("auto", "dp", "tp")
BATCH_GRANULARITY = ("auto", "pow2", "any")
KV_SLOTS = ("exact", "bucket")
MOE_PARALLEL = ("auto", "ep", "tp")
ATTENTION_TILINGS = ("auto", "keys", "rows")
PAPER_MTP_FACTOR = 2.4  # SnapStream paper: DeepSeek-R1 throughputs x2.4 for multi-token prediction (80% acceptance)
#: The longest lookahead a draft model is tried with (speculative decoding with ``draft_tokens=None``).
MAX_LOOKAHEAD = 16
#: Bytes of one element of a partial attention result (accumulators are kept in fp32).
PARTIAL_BYTES = 4.0


def _int_field(name: str, value: Any, minimum: int) -> int:
    if not is_int(value) or value < minimum:
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
      reports); ``any`` = any batch size; ``auto`` = the hardware's ``assumptions.batch_granularity`` (``any``
      on H100/H200: snapeval's engine of static rows runs any batch; ``pow2`` elsewhere).
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
    - ``draft_tokens``: speculative tokens verified per sequence per step (each adds a query token to every
      kernel of the target's step). Without a ``draft_model`` they are the model's own multi-token-prediction
      drafts and ``None`` = the fewest drafts whose expected accepted tokens ``1 + a + a^2 + ... + a^k`` (``a`` =
      ``draft_acceptance``) reach ``mtp_factor``: 2 for the paper's 2.4x at 80% acceptance (1 + 0.8 + 0.64 =
      2.44); 0 when ``mtp_factor`` is 1.
    - ``attention_tiling``: how decode attention's work is tiled over a socket's compute units: ``auto`` = the
      cheapest tiling whose per-unit working set (its query rows and their fp32 partial results) fits one unit's
      share of on-chip memory; ``keys`` = split each stream's key axis only (every unit keeps all of its stream's
      query rows: flash-decoding's split-K); ``rows`` = split its query rows only (every unit reads all of its
      stream's keys; nothing to merge). A tiling that fits no unit is refused with the bytes it needs.
    - ``draft_model``: speculative decoding with a separate draft model (a preset name or a ``ModelPreset``): every
      step, the draft decodes ``draft_tokens`` tokens one by one, then the target verifies them in one step; each
      drafted token is accepted with probability ``draft_acceptance`` until the first rejection, so a step yields
      ``(1 - a^(k+1)) / (1 - a)`` tokens on average. Both models are costed by this simulator's step model on the
      same sockets, and both hold their weights and KV caches there. ``draft_tokens=None`` = the lookahead
      (0..16) that gives the highest expected speed at this point, 0 (plain decoding) when speculation does not
      pay. The reported tokens/s are the expected tokens, not a multiplier; ``mtp_factor`` is 1.
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
    batch_granularity: str = "auto"
    prefill_activation_buffers: int = 4
    prefill_chunk: int | None = None
    compiled_context: int | None = None
    kv_slot: str = "exact"
    moe_parallel: str = "auto"
    attention_tiling: str = "auto"
    draft_tokens: int | None = None
    draft_acceptance: float = 0.8
    draft_model: str | ModelPreset | None = None

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
        check_choice("attention_tiling", self.attention_tiling, ATTENTION_TILINGS)
        check_choice("attention_parallel", self.attention_parallel, ATTENTION_PARALLEL)
        check_choice("weight_dtype", self.weight_dtype, ("auto", *DTYPE_BYTES))
        check_choice("kv_dtype", self.kv_dtype, DTYPE_BYTES)
        check_choice("activation_dtype", self.activation_dtype, DTYPE_BYTES)
        check_choice("placement", self.placement, PLACEMENTS)
        check_choice("batch_granularity", self.batch_granularity, BATCH_GRANULARITY)
        if self.mtp_factor is not None and not (isinstance(self.mtp_factor, (int, float)) and self.mtp_factor >= 1):
            raise SnapevalError(f"mtp_factor={self.mtp_factor!r} must be a number >= 1")
        if self.draft_model is not None:
            if not isinstance(self.draft_model, (str, ModelPreset)) or not str(getattr(self.draft_model, "name",
                                                                                        self.draft_model)).strip():
                raise SnapevalError(f"draft_model={self.draft_model!r} must be a model preset name")
            if self.mtp_factor not in (None, 1, 1.0):
                raise SnapevalError(f"mtp_factor={self.mtp_factor!r} cannot be combined with draft_model: a draft "
                                    "model's tokens are costed, not multiplied; leave mtp_factor out")
            if self.draft_tokens is not None and self.draft_tokens > MAX_LOOKAHEAD:
                raise SnapevalError(f"draft_tokens={self.draft_tokens} must be at most {MAX_LOOKAHEAD} with a "
                                    "draft_model")


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
    """Memory and time of one (hardware, model, deployment, method) point. Times in seconds, memory in bytes.

    Throughput fields are ``None`` when the point does not fit (``fits`` is False and ``reason`` says why).
    ``decode_tokens_per_s`` includes ``mtp_factor`` when ``includes_mtp``; ``decode_tokens_per_s_raw`` never does.
    Both count the expected tokens of speculative decoding with a draft model (``tokens_per_step``), which is a
    costed mechanism, not a multiplier. ``method`` is the method's label (``snapstream@32768``); ``kept_tokens`` its
    mean tokens per sequence over the decode (what decode attention reads); ``attention_units`` the compute units one
    KV stream's decode attention is tiled over (row groups x key pieces; 1 without ``compute_units``).
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
    kept_tokens: float
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
    attention_units: int
    # speculative decoding with a draft model (draft_model None: none; draft_tokens are then MTP drafts)
    draft_model: str | None
    draft_tokens: int
    tokens_per_step: float
    draft_seconds_per_step: float | None
    # prefill
    prefill_seconds: float | None
    prefill_compression_seconds: float
    prefill_overhead_fraction: float
    prefill_kernel_share: dict[str, float]
    _inputs: tuple = field(default=(), repr=False, compare=False)
    #: What the decode step spends besides its kernels, ``(name, seconds)``: call boundaries, the fill/drain of each
    #: layer call's pipeline, cross-socket collectives; kernels + these (+ drafting) = ``decode_step_seconds``.
    decode_overheads: tuple[tuple[str, float], ...] = ()

    @property
    def memory_per_socket(self) -> float:
        return self.hbm.total + self.ddr.total

    def gain_vs_full(self) -> dict[str, float | None]:
        """This method's gain over the full cache at the same point (1.0 everywhere for a full-cache result).

        ``kv_memory_reduction`` and ``memory_reduction`` are full / this; ``batch_gain`` is the ratio of the
        largest batches that fit; ``throughput_gain_same_batch`` compares this batch; ``throughput_gain_max_batch``
        compares each method at its own largest batch (the paper's 434 -> 1832 tok/s comparison).
        """
        hardware, model, deployment, _ = self._inputs
        full = simulate(hardware, model, deployment, FullConfig())

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
    hardware, model, deployment, method = result._inputs
    return simulate(hardware, model, replace(deployment, batch=batch), method)


# ---------------------------------------------------------------------------------------------------------------
# helpers

def _resolve_model(model: str | ModelPreset) -> ModelPreset:
    return model if isinstance(model, ModelPreset) else get_preset(model)


def _weight_bytes(model: ModelPreset, dtype: str) -> tuple[float, float]:
    """(bytes of the linear layers' weights per parameter, bytes per embedding/lm-head parameter)."""
    wb = DTYPE_BYTES[dtype]
    # Sub-16-bit checkpoints keep embeddings, lm head and norms in BF16 (DeepSeek's FP8 release, GGUF/AWQ alike).
    return wb, max(wb, 2.0)


def _call_boundary(hardware: HardwareSpec, sockets: int) -> float:
    """Fixed cost of one kernel call: its launch and barrier, plus the cross-socket barrier when several sockets
    run it (decode and prefill kernels alike, and the small kernels of a method's compression)."""
    a = hardware.assumptions
    return a.kernel_call_sync_s + (a.cross_socket_sync_s if sockets > 1 else 0.0)


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
    return _Plan(sockets, tp, dp, attn, wdtype, looping, float(mtp), compiled, moe, drafts, granularity, held)


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
    transient_prompt_kv = planned * kv_per_token * plan.prompt_kv_held / plan.sockets
    return max(prefill, decode) + transient_prompt_kv


def _slot_tokens(dep: Deployment, plan: _Plan, method: MethodConfig) -> int:
    """Tokens one sequence's KV slot is allocated for: what the method's static-row allocation reserves
    (``method.cache_slots``: the budget for a fixed-size cache, the kept prompt plus the output otherwise); with
    ``kv_slot="bucket"`` a growing slot is rounded up to the next power of two, capped at the compiled context."""
    slots = method.cache_slots(dep.prompt_len, dep.gen_len)
    if dep.kv_slot == "exact" or method.FIXED_SIZE:
        return slots
    bucket = 1 << max(0, (slots - 1).bit_length())
    return max(slots, min(bucket, plan.compiled_context))


# ---------------------------------------------------------------------------------------------------------------
# decode

@dataclass(frozen=True)
class _Step:
    """One decode step: its time, its kernels, its bytes and FLOPs over all sockets, and the compute units one KV
    stream's attention was tiled over."""

    seconds: float
    kernels: list[KernelTime]
    bytes: float
    flops: float
    attention_units: int
    overheads: tuple[tuple[str, float], ...] = ()  # (name, seconds) besides the kernels; they sum to the rest


def _split_attention(hardware: HardwareSpec, model: ModelPreset, dep: Deployment, plan: _Plan, local_seqs: int,
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


def _decode_step(hardware: HardwareSpec, model: ModelPreset, dep: Deployment, plan: _Plan,
                 context: float, weights_ddr_fraction: float, kv_ddr_fraction: float) -> _Step:
    """Time of one decode step (all sequences advance one token) with ``context`` cached tokens per sequence
    (the method's mean kept tokens over the decode)."""
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
    barrier = _call_boundary(hardware, plan.sockets)
    if plan.kernel_looping:
        # consecutive identical layer kernels become one looped call: one call per run of identical layers
        regions = 1 + (1 if model.num_dense_layers and model.num_moe_layers else 0)
        overheads = [("call boundaries (looped)", (regions + 1) * barrier)]
    else:
        layer_work = work - kernels[-1].seconds
        overheads = [("call boundaries", (layer_calls + 1) * barrier),
                     ("fill/drain (per layer call)", a.call_fill_drain_fraction * layer_work)]
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
    return _Step(work + overhead, kernels, total_bytes, total_flops, splits, tuple(overheads))


# ---------------------------------------------------------------------------------------------------------------
# prefill

def _prompt_kv_per_token(model: ModelPreset, sockets: int, kv_bytes: float) -> float:
    """Bytes of one prompt token's KV for one layer on one socket of a tensor-parallel prefill: MLA's whole latent
    (every socket holds it: the up-projection of its heads' keys and values reads every latent), else the KV heads
    the socket holds (at least one)."""
    if model.is_mla:
        return model.kv_values_per_token_per_layer * kv_bytes
    return 2 * max(1.0, model.num_kv_heads / sockets) * model.head_dim * kv_bytes


def _compression(hardware: HardwareSpec, model: ModelPreset, dep: Deployment, plan: _Plan, work: PrefillWork,
                 t) -> tuple[float, float]:
    """(scoring, gathering) seconds per layer on one socket of what a method computes at the end of prefill,
    priced from its own :class:`~snapeval.cache.config.PrefillWork` (nothing when ``work.none``).

    Scoring, per head on this socket (prefill is TP over every socket): with a window, (1) the window queries'
    scores against every prompt key are recomputed (the fused flash-attention kernel never materialises them) and
    (2) softmaxed over the keys; scores read from the layer's hidden states (a press) add (3) a pass over the
    scored tokens' hidden states and the window queries' projection; materialised attention weights (4) are read
    back; then (5) one score per scored token is reduced over the window and pooled and (6) the top tokens kept.
    Gathering: one kernel per contiguous piece the kept tokens come from, plus one concatenation when there are
    several. A static-shape graph gathers by a masked select over the prompt, not by moving only the kept rows:
    each piece's kernel streams the whole prompt's KV as this socket holds it (MLA: the whole latent, which every
    socket keeps to up-project its heads' keys and values; GQA: its KV heads) and writes its piece; the
    concatenation reads and writes the kept tokens. Every kernel also pays one call boundary, as every other
    prefill kernel does (``kernel_call_sync_s`` + ``cross_socket_sync_s`` on several sockets)."""
    if work.none:
        return 0.0, 0.0
    a = hardware.assumptions
    P = plan.sockets
    L = dep.prompt_len
    lin_b, _ = _weight_bytes(model, plan.weight_dtype)
    act_b = DTYPE_BYTES[dep.activation_dtype]
    kv_b = DTYPE_BYTES[dep.kv_dtype]
    h, n = model.hidden_size, model.num_attention_heads
    hl = n / P
    qk_dim = model.qk_nope_head_dim + model.qk_rope_head_dim if model.is_mla else model.head_dim
    kv_heads_local = hl if model.is_mla else max(1.0, model.num_kv_heads / P)
    k_local = L * kv_heads_local * qk_dim * act_b
    w, scored, kept = work.window_queries, work.scored_tokens, work.gathered_tokens
    score_bytes = hl * w * L * 4.0  # fp32 scores of the window's queries against every key
    scoring: list[float] = []
    if w:
        scoring.append(t(k_local + hl * w * qk_dim * act_b + score_bytes, 2 * hl * qk_dim * w * L,
                         a.prefill_attention_efficiency))
        scoring.append(t(2 * score_bytes, 5 * hl * w * L, a.gemm_efficiency))
    if "hidden_states" in work.score_inputs:
        q_params = h * n * qk_dim if not model.q_lora_rank else h * model.q_lora_rank + model.q_lora_rank * n * qk_dim
        scoring.append(t(scored * h * act_b + q_params * lin_b / P, 2 * q_params * w / P + 2 * scored * h,
                         a.gemm_efficiency))
    if "attention_weights" in work.score_inputs:
        scoring.append(t(hl * L * (L + 1) / 2 * 4.0, hl * L * (L + 1) / 2, a.gemm_efficiency))
    if scored:
        row = hl * scored * 4.0  # one fp32 score per scored token and head
        source = score_bytes if w else k_local  # window scores, or the keys themselves
        scoring.append(t(source + 2 * row, hl * w * L + 2 * hl * scored * DEFAULT_KERNEL, a.gemm_efficiency))
        scoring.append(t(row + hl * kept * 4.0, 0.0, 1.0))
    gathers: list[float] = []
    if kept:
        token_kv = _prompt_kv_per_token(model, P, kv_b)
        pieces = work.gathered_segments
        gathers = [t(L * token_kv + kept / pieces * token_kv, 0.0, 1.0)] * pieces
        if pieces > 1:
            gathers.append(t(2 * kept * token_kv, 0.0, 1.0))
    call = _call_boundary(hardware, P)
    return sum(scoring) + len(scoring) * call, sum(gathers) + len(gathers) * call


def _prefill(hardware: HardwareSpec, model: ModelPreset, dep: Deployment, plan: _Plan, method: MethodConfig
             ) -> tuple[float, float, dict[str, float]]:
    """Prefill of one prompt at batch 1, tensor parallel over all sockets. Returns (seconds, seconds of the
    method's own prefill work, share of each kernel in one (MoE) layer: ``scoring`` and ``gather`` are the
    method's compression, SnapStream's "SnapKV" and "ring buffer" kernels)."""
    a = hardware.assumptions
    s = hardware.socket
    P = plan.sockets  # prefill runs TP over every socket (SnapStream: TP16, batch 1)
    L = dep.prompt_len
    lin_b, emb_b = _weight_bytes(model, plan.weight_dtype)
    act_b = DTYPE_BYTES[dep.activation_dtype]
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
    scoring, gather = _compression(hardware, model, dep, plan, method.prefill_work(L), t)
    compress = 0.0
    if scoring or gather:
        shares["scoring"] = scoring
        shares["gather"] = gather
        compress = (scoring + gather) * model.num_layers
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
    sync = (calls + 1) * _call_boundary(hardware, P)
    seconds = total_layers + compress + lm_head + sync
    share = {k: v / layer_moe for k, v in shares.items()}
    return seconds, compress, share


# ---------------------------------------------------------------------------------------------------------------

def _method_config(method: MethodConfig | None) -> MethodConfig:
    if method is None:
        return FullConfig()
    if not isinstance(method, MethodConfig):
        raise SnapevalError(f"method={method!r} is not a method configuration; build one with "
                            "snapeval.cache.resolve_method(name, budget)")
    return method


@dataclass(frozen=True)
class _Draft:
    """A draft model on the target's sockets: its model, deployment, plan, and the memory it takes."""

    model: ModelPreset
    dep: Deployment
    plan: _Plan
    weights_socket: float
    kv_seq_socket: float  # bytes of one sequence's draft cache on a socket holding it (a full cache)


def _draft_for(hardware: HardwareSpec, dep: Deployment, plan: _Plan) -> _Draft | None:
    if dep.draft_model is None:
        return None
    model = _resolve_model(dep.draft_model)
    # the draft runs on the same sockets with its own default parallelism and dtype, one token per step
    draft_dep = replace(dep, draft_model=None, draft_tokens=0, mtp_factor=1.0, sockets=plan.sockets, tp=None,
                        attention_parallel="auto", weight_dtype="auto", moe_parallel="auto")
    draft_plan = _plan(hardware, model, draft_dep)
    kv_per_token = model.num_layers * model.kv_values_per_token_per_layer * DTYPE_BYTES[dep.kv_dtype]
    slot = FullConfig().cache_slots(dep.prompt_len, dep.gen_len)
    return _Draft(model, draft_dep, draft_plan, _weights_per_socket(model, draft_plan)[1],
                  slot * kv_per_token * _kv_share(model, draft_plan))


@dataclass(frozen=True)
class _Memory:
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


def _memory(hw: HardwareSpec, m: ModelPreset, dep: Deployment, plan: _Plan, method: MethodConfig,
            draft: _Draft | None) -> _Memory:
    kv_per_token = m.num_layers * m.kv_values_per_token_per_layer * DTYPE_BYTES[dep.kv_dtype]
    kv_seq = _slot_tokens(dep, plan, method) * kv_per_token
    share = _kv_share(m, plan)
    kv_seq_socket = kv_seq * share
    weights_total, weights_socket = _weights_per_socket(m, plan)
    if draft is not None:
        weights_socket += draft.weights_socket

    def kv_on_busiest(batch: int) -> float:
        out = _seqs_on_busiest_socket(batch, plan) * kv_seq_socket
        if draft is not None:
            out += _seqs_on_busiest_socket(batch, draft.plan) * draft.kv_seq_socket
        return out

    activations = _activation_bytes(m, dep, plan, kv_per_token)
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
        return weights_socket + _activation_bytes(m, replace(dep, batch=batch), plan, kv_per_token) \
            + kv_on_busiest(batch)

    free = capacity - weights_socket - _activation_bytes(m, replace(dep, batch=1), plan, kv_per_token)
    if free < kv_on_busiest(1) or kv_seq_socket <= 0:
        max_exact = 0
    else:
        lo, hi = 1, int(free // kv_seq_socket) * plan.dp  # need_for(lo) fits; hi is an upper bound
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if need_for(mid) <= capacity else (lo, mid - 1)
        max_exact = lo
    max_batch = _pow2_floor(max_exact) if plan.batch_granularity == "pow2" else max_exact

    # tier placement: weights first, then activations, then KV; overflow to DDR when allowed
    need = weights_socket + activations + kv_socket
    hbm_w = min(weights_socket, hbm_cap)
    hbm_a = min(activations, hbm_cap - hbm_w)
    hbm_kv = min(kv_socket, hbm_cap - hbm_w - hbm_a)
    ddr = TierUsage(weights_socket - hbm_w, kv_socket - hbm_kv, activations - hbm_a) if ddr_cap else TierUsage()
    hbm = TierUsage(hbm_w, hbm_kv, hbm_a) if ddr_cap else TierUsage(weights_socket, kv_socket, activations)
    return _Memory(weights_total, weights_socket, kv_seq, kv_socket, kv_total, activations, hbm, ddr, hbm_cap,
                   ddr_cap, need, max_exact, max_batch)


def _expected_tokens(drafts: int, acceptance: float) -> float:
    """Expected tokens one speculative step yields: the verified token plus the accepted prefix of ``drafts``
    drafts, each accepted with probability ``acceptance`` until the first rejection."""
    return sum(acceptance ** i for i in range(drafts + 1))


def _speculative_step(hw: HardwareSpec, m: ModelPreset, dep: Deployment, plan: _Plan, draft: _Draft,
                      context: float, w_ddr: float, kv_ddr: float, fits) -> tuple[_Step, float, int]:
    """(target step, draft seconds per step, lookahead) of speculative decoding with a draft model: the given
    ``draft_tokens``, or the lookahead with the highest expected tokens per second among those whose verification
    buffers fit (``fits(k)``; 0: plain decoding)."""
    draft_context = FullConfig().mean_kept_tokens(dep.prompt_len, dep.gen_len)
    draft_step = _decode_step(hw, draft.model, draft.dep, draft.plan, draft_context, w_ddr, kv_ddr).seconds
    lookaheads = [dep.draft_tokens] if dep.draft_tokens is not None else \
        [k for k in range(MAX_LOOKAHEAD + 1) if k == 0 or fits(k)]
    best = None
    for k in lookaheads:
        step = _decode_step(hw, m, dep, replace(plan, draft_tokens=k), context, w_ddr, kv_ddr)
        speed = _expected_tokens(k, dep.draft_acceptance) / (step.seconds + k * draft_step)
        if best is None or speed > best[0]:
            best = (speed, step, k * draft_step, k)
    return best[1], best[2], best[3]


def simulate(hardware: str | HardwareSpec, model: str | ModelPreset, deployment: Deployment | None = None,
             method: MethodConfig | None = None) -> SimResult:
    """Simulate one point of ``model`` with the cache ``method`` (a resolved configuration, e.g.
    ``snapeval.cache.resolve_method("snapstream", 32768)``; None: the full cache). The simulator reads the method's
    own description (its KV slots, mean kept tokens over the decode and prefill work), never its name. Raises
    :class:`SnapevalError` for invalid specs; a point that does not fit returns a result with ``fits=False`` and a
    ``reason`` (and ``None`` throughputs)."""
    hw = get_hardware(hardware)
    m = _resolve_model(model)
    dep = deployment or Deployment()
    method = _method_config(method)
    plan = _plan(hw, m, dep)
    draft = _draft_for(hw, dep, plan)
    mem = _memory(hw, m, dep, plan, method, draft)
    final_context = dep.prompt_len + dep.gen_len
    capacity = mem.hbm_capacity + mem.ddr_capacity
    gib = 1e9
    reason = ""
    if mem.weights_socket > capacity:
        reason = (f"weights need {mem.weights_socket / gib:.1f} GB per socket ({m.name}, {plan.weight_dtype}, "
                  f"tp={plan.tp}{', with the draft model' if draft else ''}) but a socket of {hw.name} holds "
                  f"{capacity / gib:.1f} GB")
    elif mem.need > capacity:
        reason = (f"needs {mem.need / gib:.1f} GB per socket (weights {mem.weights_socket / gib:.1f} + KV "
                  f"{mem.kv_socket / gib:.1f} + activations {mem.activations / gib:.1f}) but a socket holds "
                  f"{capacity / gib:.1f} GB; largest batch that fits: {mem.max_batch}")
    elif final_context > m.max_context:
        reason = f"prompt_len + gen_len = {final_context} exceeds the {m.max_context}-token context of {m.name}"
    elif draft is not None and final_context > draft.model.max_context:
        reason = (f"prompt_len + gen_len = {final_context} exceeds the {draft.model.max_context}-token context of "
                  f"the draft model {draft.model.name}")
    fits = not reason
    kv_per_token = m.num_layers * m.kv_values_per_token_per_layer * DTYPE_BYTES[dep.kv_dtype]
    kept = method.mean_kept_tokens(dep.prompt_len, dep.gen_len)
    base = dict(
        hardware=hw.name, model=m.name, method=method.label, budget=method.budget, batch=dep.batch,
        prompt_len=dep.prompt_len, gen_len=dep.gen_len, sockets=plan.sockets, tp=plan.tp,
        attention_parallel=plan.attention_parallel, weight_dtype=plan.weight_dtype, kv_dtype=dep.kv_dtype,
        kernel_looping=plan.kernel_looping, fits=fits, reason=reason, hbm=mem.hbm, ddr=mem.ddr,
        hbm_capacity=mem.hbm_capacity, ddr_capacity=mem.ddr_capacity, weights_bytes_total=mem.weights_total,
        kv_bytes_total=mem.kv_total, kv_bytes_per_seq=mem.kv_seq, kv_bytes_per_token=kv_per_token, kept_tokens=kept,
        max_batch=mem.max_batch, max_batch_exact=mem.max_batch_exact, mtp_factor=plan.mtp_factor,
        includes_mtp=plan.mtp_factor != 1.0, draft_model=draft.model.name if draft else None,
        _inputs=(hw, m, dep, method),
    )
    if not fits:
        return SimResult(**base, decode_step_seconds=None, decode_tokens_per_s=None,
                         decode_tokens_per_s_per_seq=None, decode_tokens_per_s_raw=None,
                         achieved_bandwidth_fraction=None, decode_bytes_per_step=None, decode_flops_per_step=None,
                         decode_kernels=[], attention_units=1, draft_tokens=plan.draft_tokens, tokens_per_step=1.0,
                         draft_seconds_per_step=None, prefill_seconds=None, prefill_compression_seconds=0.0,
                         prefill_overhead_fraction=0.0, prefill_kernel_share={})

    w_ddr = mem.ddr.weights / mem.weights_socket if mem.weights_socket and mem.ddr_capacity else 0.0
    kv_ddr = mem.ddr.kv_cache / mem.kv_socket if mem.kv_socket and mem.ddr_capacity else 0.0
    draft_seconds, tokens = None, 1.0
    if draft is None:
        step = _decode_step(hw, m, dep, plan, kept, w_ddr, kv_ddr)
    else:
        def fits_with(k: int) -> bool:  # the target's decode buffers grow with the tokens it verifies
            buffers = _activation_bytes(m, dep, replace(plan, draft_tokens=k), kv_per_token)
            return mem.need - mem.activations + buffers <= capacity

        step, draft_seconds, lookahead = _speculative_step(hw, m, dep, plan, draft, kept, w_ddr, kv_ddr, fits_with)
        tokens = _expected_tokens(lookahead, dep.draft_acceptance)
        if lookahead != plan.draft_tokens:  # the verification buffers of the chosen lookahead
            plan = replace(plan, draft_tokens=lookahead)
            mem = _memory(hw, m, dep, plan, method, draft)
            base.update(hbm=mem.hbm, ddr=mem.ddr, max_batch=mem.max_batch, max_batch_exact=mem.max_batch_exact)
    seconds = step.seconds + (draft_seconds or 0.0)
    raw = dep.batch * tokens / seconds
    peak_bw = hw.socket.hbm_bandwidth * plan.sockets
    prefill_s, compress_s, shares = _prefill(hw, m, dep, plan, method)
    return SimResult(
        **base,
        decode_step_seconds=seconds,
        decode_tokens_per_s=raw * plan.mtp_factor,
        decode_tokens_per_s_per_seq=raw * plan.mtp_factor / dep.batch,
        decode_tokens_per_s_raw=raw,
        achieved_bandwidth_fraction=step.bytes / step.seconds / peak_bw,
        decode_bytes_per_step=step.bytes,
        decode_flops_per_step=step.flops,
        decode_kernels=step.kernels,
        decode_overheads=step.overheads,
        attention_units=step.attention_units,
        draft_tokens=plan.draft_tokens,
        tokens_per_step=tokens,
        draft_seconds_per_step=draft_seconds,
        prefill_seconds=prefill_s,
        prefill_compression_seconds=compress_s,
        prefill_overhead_fraction=compress_s / (prefill_s - compress_s) if compress_s else 0.0,
        prefill_kernel_share=shares,
    )


def forward_flops_per_token(model: str | ModelPreset, context: int) -> float:
    """FLOPs of one token's forward pass at ``context`` cached tokens, by the textbook count: ``2 N + 4 L H Q T``
    with ``N`` every parameter (embedding and LM head included), ``L`` layers, ``H`` heads, ``Q`` head dimension,
    ``T`` the context. It is the forward third of the ``6 N + 12 L H Q T`` FLOPs per training token of PaLM
    (arXiv 2204.02311, Appendix B) and nanoGPT's ``estimate_mfu``. A reporting convention, for comparing with
    figures counted that way (Kernel Looping's Table 1 counts every weight per token: 14.9 GiB = 8.03e9 x 2 B); the
    step model's own ``decode_flops_per_step`` counts what a step computes (the embedding rows are gathered, not
    multiplied; MLA and GQA attention by their real shapes)."""
    m = _resolve_model(model)
    _int_field("context", context, 0)
    return 2.0 * m.param_count() + 4.0 * m.num_layers * m.num_attention_heads * m.head_dim * context


def simulate_point(model: str | ModelPreset, hardware: str | HardwareSpec = "sn40l-16", prompt_len: int = 4096,
                   gen_len: int = 1024, budget: int | None = None, batch: int = 1, *,
                   method: str | MethodConfig | None = None, settings: dict[str, Any] | None = None,
                   split: dict[str, Any] | None = None, **deployment_overrides: Any) -> SimResult:
    """Convenience wrapper: ``simulate_point("deepseek-r1", "sn40l-16", 131072, 1024, budget=32768, batch=64)``.

    ``method``: a resolved configuration, or a method name resolved with ``budget`` and ``settings`` (its
    settings, e.g. ``{"observation": 288}``; ``split`` is their deprecated name) by
    :func:`snapeval.cache.resolve_method`; None = ``snapstream`` when a budget is given, else the full cache. ``deployment_overrides`` are :class:`Deployment` fields (``sockets``,
    ``tp``, ``weight_dtype``, ``kernel_looping``, ``mtp_factor``, ``draft_model``, ...)."""
    allowed = set(Deployment.__dataclass_fields__)
    bad = sorted(set(deployment_overrides) - allowed)
    if bad:
        raise SnapevalError(f"unknown deployment field(s): {', '.join(bad)}; allowed: {', '.join(sorted(allowed))}")
    if split is not None:
        import warnings

        warnings.warn("simulate_point(split=...) is deprecated; pass settings=...", DeprecationWarning, 2)
        settings = {**split, **(settings or {})}
    if not isinstance(method, MethodConfig):
        from snapeval.cache import resolve_method

        name = method if method is not None else ("full" if budget is None else "snapstream")
        method = resolve_method(name, budget, **(settings or {}))
    elif budget is not None or settings:
        raise SnapevalError("budget and settings are part of a resolved method configuration; give one or the other")
    dep = Deployment(batch=batch, prompt_len=prompt_len, gen_len=gen_len, **deployment_overrides)
    return simulate(hardware, model, dep, method)
