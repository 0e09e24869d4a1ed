"""User-facing errors: one line, naming the field and the allowed values; exit code 2."""
from __future__ import annotations


class SnapevalError(ValueError):
    """Bad user input or an unusable resource. The CLI prints ``snapeval: error: <message>`` and exits 2."""

    exit_code = 2


def check_choice(field: str, value, allowed) -> None:
    """Raise :class:`SnapevalError` unless ``value`` is one of ``allowed``."""
    allowed = list(allowed)
    if value not in allowed:
        raise SnapevalError(f"{field}={value!r} is not allowed; choose one of: {', '.join(map(str, allowed))}")
