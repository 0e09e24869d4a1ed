"""lm-eval integration: the ``snapeval`` model and :func:`evaluate` (one lm-eval run with full provenance)."""
from __future__ import annotations

from snapeval.harness.evaluate import evaluate

__all__ = ["evaluate"]
