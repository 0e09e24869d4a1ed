"""How each method looks in tables and plots: its rank, colour and marker, one entry per method name.

Every method registered here keeps its look in every plot of every report (kvpress's presses included, so that
ExpectedAttentionPress never borrows SnapStream's colour). A method that is not registered (a new press, a new cache)
gets the first colour and marker that no method of the same plot uses, in name order: deterministic, and never a
clash inside one figure. ``register_style`` adds a permanent entry.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodStyle:
    color: str
    marker: str
    rank: int  # order in tables and legends (full cache first)


_STYLES: dict[str, MethodStyle] = {}

#: Colours and markers for methods without an entry (tab10 and tab20's dark half, then more markers).
_SPARE_COLORS = ("tab:brown", "tab:pink", "tab:olive", "tab:cyan", "#393b79", "#637939", "#8c6d31", "#843c39",
                 "#7b4173", "#3182bd", "#e6550d", "#31a354")
_SPARE_MARKERS = ("P", "X", "*", "h", "<", ">", "8", "p", "H", "d")


def register_style(method: str, color: str, marker: str, rank: int | None = None) -> MethodStyle:
    """Give ``method`` a permanent colour and marker (``rank``: its place in tables; default after the others)."""
    style = MethodStyle(color, marker, len(_STYLES) if rank is None else rank)
    _STYLES[method] = style
    return style


for _name, _color, _marker in (
    ("full", "black", "s"),
    ("snapstream", "tab:blue", "o"),
    ("snapkv", "tab:green", "^"),
    ("streamingllm", "tab:orange", "v"),
    ("kvpress:SnapKVPress", "tab:olive", "D"),
    ("kvpress:StreamingLLMPress", "tab:red", "<"),
    ("kvpress:TOVAPress", "tab:purple", ">"),
    ("kvpress:ExpectedAttentionPress", "tab:brown", "P"),
    ("kvpress:KnormPress", "tab:pink", "X"),
    ("kvpress:RandomPress", "tab:gray", "x"),
    ("kvpress:ObservedAttentionPress", "tab:cyan", "h"),
):
    register_style(_name, _color, _marker)


def method_rank(method: str) -> int:
    """Sort key of a method in tables: registered methods in registration order, then the rest."""
    style = _STYLES.get(method)
    return style.rank if style is not None else len(_STYLES)


def styles_for(methods) -> dict[str, MethodStyle]:
    """The style of every method of one figure: registered ones as registered, the others the first spare colour
    and marker not used by any method of the figure (in name order)."""
    methods = list(dict.fromkeys(methods))
    out = {m: _STYLES[m] for m in methods if m in _STYLES}
    used_colors = {s.color for s in out.values()}
    used_markers = {s.marker for s in out.values()}
    colors = [c for c in _SPARE_COLORS if c not in used_colors]
    markers = [m for m in _SPARE_MARKERS if m not in used_markers]
    for i, method in enumerate(sorted(m for m in methods if m not in out)):
        out[method] = MethodStyle(colors[i % len(colors)], markers[i % len(markers)], len(_STYLES) + i)
    return out
