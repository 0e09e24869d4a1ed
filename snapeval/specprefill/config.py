"""``SpecPrefillConfig``: which draft model compresses the prompt, and how much of it the target gets."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from snapeval.errors import SnapevalError, is_int

DRAFT_DTYPES = ("float32", "bfloat16", "float16", "float64")


def _require_int(field: str, value, minimum: int, extra: str = "") -> None:
    if not is_int(value) or value < minimum:
        raise SnapevalError(f"{field}={value!r} is invalid; allowed: an integer >= {minimum}{extra}")


@dataclass(frozen=True)
class SpecPrefillConfig:
    """Speculative prefill (Liu et al., ICML 2025; cross-family: Upasani et al., 2026).

    Attributes:
        draft: the draft model (a preset such as ``smollm2-135m-instruct`` or ``gemma-3-270m``, a directory, a
            ``.gguf`` file or a hub id). Its tokenizer may differ from the target's.
        keep: fraction of the prompt's draft tokens to keep, in (0, 1]; 1.0 sends the whole prompt.
        chunk: selection granularity in draft tokens; chunks are scored by their mean importance and kept whole.
            ``1`` keeps the top tokens individually.
        lookahead: greedy tokens the draft decodes after the prompt; their queries (plus the last prompt token's)
            score the prompt. ``0`` scores with the last prompt token only.
        pool_kernel: odd width of the 1-D average pooling of each query's attention along the prompt; 1 = none.
        draft_dtype: dtype the draft runs in.
    """

    draft: str
    keep: float
    chunk: int = 32
    lookahead: int = 8
    pool_kernel: int = 13
    draft_dtype: str = "float32"

    def __post_init__(self) -> None:
        if not isinstance(self.draft, str) or not self.draft.strip():
            raise SnapevalError(f"specprefill draft={self.draft!r} is invalid; allowed: a preset name, a path or a hub id")
        if isinstance(self.keep, bool) or not isinstance(self.keep, (int, float)) or not 0.0 < self.keep <= 1.0:
            raise SnapevalError(f"specprefill keep={self.keep!r} is invalid; allowed: a fraction in (0, 1]")
        object.__setattr__(self, "keep", float(self.keep))
        _require_int("specprefill chunk", self.chunk, 1)
        _require_int("specprefill lookahead", self.lookahead, 0)
        _require_int("specprefill pool_kernel", self.pool_kernel, 1, " and odd")
        if self.pool_kernel % 2 == 0:
            raise SnapevalError(f"specprefill pool_kernel={self.pool_kernel!r} is invalid; allowed: an odd integer >= 1")
        if self.draft_dtype not in DRAFT_DTYPES:
            raise SnapevalError(
                f"specprefill draft_dtype={self.draft_dtype!r} is invalid; allowed: {', '.join(DRAFT_DTYPES)}"
            )

    def to_dict(self) -> dict:
        return asdict(self)
