"""What a simulation returns: :class:`SimResult` (memory, decode and prefill of one point), with
:class:`TierUsage` and :class:`KernelTime`. Records hold numbers only: they never simulate again
(:func:`snapeval.simulator.core.gain_vs_full` and :func:`~snapeval.simulator.core.at_batch` do, from
``SimResult.inputs``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any



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
    #: ``(hardware, model, deployment, method)`` as simulated: what :func:`snapeval.simulator.core.gain_vs_full` and
    #: :func:`~snapeval.simulator.core.at_batch` simulate again from (a record never re-runs the model itself).
    inputs: tuple = field(default=(), repr=False, compare=False)
    #: What the decode step spends besides its kernels, ``(name, seconds)``: call boundaries, the fill/drain of each
    #: layer call's pipeline, cross-socket collectives; kernels + these (+ drafting) = ``decode_step_seconds``.
    decode_overheads: tuple[tuple[str, float], ...] = ()

    @property
    def memory_per_socket(self) -> float:
        return self.hbm.total + self.ddr.total

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "inputs"}
        out["memory_per_socket"] = self.memory_per_socket
        return out
