"""snapeval: accuracy of LLMs under SnapStream KV-cache compression, paired with SN40L-simulated cost."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
