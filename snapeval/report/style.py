"""How each method looks in tables and plots: its label, rank, colour and marker, read from its entry in the method
table (:attr:`snapeval.cache.methods.MethodInfo.style`; a family's presses from the styles it declares).

Every method with a declared style keeps its look in every plot of every report (kvpress's presses included, so that
ExpectedAttentionPress never borrows SnapStream's colour). A method without one (a new press, a method of another
process) gets the first colour and marker that no method of the same plot uses, in name order: deterministic, and
never a clash inside one figure.
"""
from __future__ import annotations

from snapeval.cache.methods import METHOD_TABLE, MethodStyle

#: Colours and markers for methods without a declared style (tab10 and tab20's dark half, then more markers).
_SPARE_COLORS = ("tab:brown", "tab:pink", "tab:olive", "tab:cyan", "#393b79", "#637939", "#8c6d31", "#843c39",
                 "#7b4173", "#3182bd", "#e6550d", "#31a354")
_SPARE_MARKERS = ("P", "X", "*", "h", "<", ">", "8", "p", "H", "d")
#: The rank of methods without a declared style: after every declared one.
UNDECLARED_RANK = 1_000_000


def method_rank(method: str) -> int:
    """Sort key of a method in tables: declared methods by their rank, then the rest."""
    style = METHOD_TABLE.style(method)
    return style.rank if style is not None else UNDECLARED_RANK


def method_label(method: str) -> str:
    """A method's name in legends (the full cache: "full cache")."""
    style = METHOD_TABLE.style(method)
    return style.label if style is not None else method


def is_reference(method: str) -> bool:
    """Whether ``method`` is the uncompressed reference the other methods of a group are compared with."""
    return METHOD_TABLE.is_reference(method)


def styles_for(methods) -> dict[str, MethodStyle]:
    """The style of every method of one figure: declared ones as declared, the others the first spare colour and
    marker not used by any method of the figure (in name order)."""
    methods = list(dict.fromkeys(methods))
    out = {m: METHOD_TABLE.style(m) for m in methods if METHOD_TABLE.style(m) is not None}
    used_colors = {s.color for s in out.values()}
    used_markers = {s.marker for s in out.values()}
    colors = [c for c in _SPARE_COLORS if c not in used_colors]
    markers = [m for m in _SPARE_MARKERS if m not in used_markers]
    for i, method in enumerate(sorted(m for m in methods if m not in out)):
        out[method] = MethodStyle(method, colors[i % len(colors)], markers[i % len(markers)], UNDECLARED_RANK + i)
    return out
