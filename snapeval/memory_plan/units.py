"""Byte units and the plan's constants: ``parse_bytes`` reads a user's ``max_memory``, ``gib`` rounds for people."""
from __future__ import annotations

import re

from snapeval.errors import SnapevalError

GIB = 1 << 30
#: Bytes of one int64 (slot positions, a row's next position and fill count).
INT64 = 8
#: Safety margin kept free when the budget is read from the device: the larger of this and a fraction of the total.
MARGIN_BYTES = 1 * GIB
MARGIN_FRACTION = 0.08
#: Smallest prefill chunk (tokens) the plan will split a long prompt into.
MIN_PREFILL_TOKENS = 512
#: Items a shared group asks to hold in flight on a GPU (the plan takes fewer when they do not fit, and never more
#: than the call has): each configuration decodes as many rows as its own bytes allow up to this, so a decode-bound
#: task (AIME, LiveCodeBench: short prompts, long generations) runs hundreds of small-budget rows, not 8. The CPU
#: asks for the run's batch size, at least 8 (its committed results).
GPU_CHUNK = 256
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}


def parse_bytes(value, field_name: str = "max_memory") -> int:
    """``"70GiB"``, ``"64GB"``, ``"512MiB"``, ``2**30`` -> bytes (one-line error naming the field otherwise)."""
    if isinstance(value, bool):
        raise SnapevalError(f"{field_name}={value!r} is invalid; allowed: bytes as an integer or a string such as "
                            "'70GiB', '64GB', '512MiB'")
    if isinstance(value, int) and value > 0:
        return value
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", value) if isinstance(value, str) else None
    if match and match.group(2).lower() in _UNITS and float(match.group(1)) > 0:
        return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    raise SnapevalError(f"{field_name}={value!r} is invalid; allowed: bytes as an integer or a string such as "
                        "'70GiB', '64GB', '512MiB'")


def gib(value: int | float) -> float:
    return round(value / GIB, 3)

