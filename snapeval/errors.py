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


def is_int(value) -> bool:
    """Whether ``value`` is an integer and not a bool (``True`` is an ``int`` to Python, never to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(field: str, value, minimum: int | None = None, *, error: type[ValueError] = SnapevalError) -> int:
    """``value`` if it is an integer (:func:`is_int`) of at least ``minimum``; else ``error`` (a one-line
    ``field=value is invalid; allowed: an integer >= minimum``)."""
    if not is_int(value) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise error(f"{field}={value!r} is invalid; allowed: an integer{bound}")
    return value


_SHADOWED: set[tuple[str, str]] = set()


def entry_point_package(entry) -> str:
    """The installed package (distribution) an entry point comes from, else its top-level module."""
    dist = getattr(entry, "dist", None)
    name = getattr(dist, "name", None) or (dist.metadata["Name"] if dist is not None else None)
    return name or str(entry.value).split(":", 1)[0].split(".", 1)[0]


def warn_shadowed_plugin(kind: str, name: str, entry) -> None:
    """One line on stderr, once per process: an installed package's ``kind`` ``name`` (entry point ``entry``) is
    ignored because snapeval has a built-in of that name (the built-in is kept)."""
    import sys

    if (kind, name) in _SHADOWED:
        return
    _SHADOWED.add((kind, name))
    print(f"snapeval: warning: {kind} {name!r} of package {entry_point_package(entry)} (entry point {entry.value}) is "
          f"ignored: package snapeval has a built-in {kind} {name!r}, which is used; rename the entry point",
          file=sys.stderr)
