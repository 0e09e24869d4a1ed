"""How a model is deployed for the simulator: :class:`Deployment` (sockets, parallelism, dtypes, placement, batch
granularity, speculative decoding) and the value sets its fields are checked against."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from snapeval.errors import SnapevalError, check_choice, is_int
from snapeval.models.presets import ModelPreset


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


def int_field(name: str, value: Any, minimum: int) -> int:
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
        int_field("batch", self.batch, 1)
        int_field("prompt_len", self.prompt_len, 1)
        int_field("gen_len", self.gen_len, 0)
        if self.sockets is not None:
            int_field("sockets", self.sockets, 1)
        if self.tp is not None:
            int_field("tp", self.tp, 1)
        int_field("prefill_activation_buffers", self.prefill_activation_buffers, 0)
        if self.prefill_chunk is not None:
            int_field("prefill_chunk", self.prefill_chunk, 1)
        if self.compiled_context is not None:
            int_field("compiled_context", self.compiled_context, 0)
        if self.draft_tokens is not None:
            int_field("draft_tokens", self.draft_tokens, 0)
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
