"""Speculative prefill: a small (possibly cross-family) draft model picks the prompt tokens the target reads."""
from snapeval.specprefill.config import SpecPrefillConfig
from snapeval.specprefill.method import (
    CompressedPrompt,
    DraftScores,
    TargetRun,
    compress_prompt,
    generate_full,
    generate_specprefill,
    load_draft,
    score_prompt,
)

__all__ = [
    "CompressedPrompt",
    "DraftScores",
    "SpecPrefillConfig",
    "TargetRun",
    "compress_prompt",
    "generate_full",
    "generate_specprefill",
    "load_draft",
    "score_prompt",
]
