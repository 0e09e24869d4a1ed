"""In what order a group takes its items and how they are cut into chunks: longest prompt first on a GPU, the
questions on one document together (:func:`document_families` finds them, :func:`whole_families` keeps a family in
one chunk), each prompt's prefix shared with another (:func:`shared_prefix`)."""
from __future__ import annotations

from typing import Sequence

from snapeval.memory_plan.records import Item

def longest_first(device: str) -> bool:
    """Whether a group on ``device`` takes its items longest prompt first, each chunk planned for the items left
    (:meth:`~snapeval.branching.BranchSet.generate`): on a GPU, where a chunk's rows are what fits the device at its
    largest prompt, so a chunk of shorter prompts decodes in more rows (LongBench-v2: prompts of 4k to 128k tokens
    in one group). Elsewhere the items go in input order under one plan (the CPU's rows are the run's batch)."""
    return device.startswith("cuda")


def shares_documents(device: str) -> bool:
    """Whether a group on ``device`` prefills once the document that several items of one call open with
    (LongBench-v2's questions on one document; samples of one long prompt), each item then computing only its own
    suffix (:meth:`~snapeval.branching.BranchSet.generate`, :func:`~snapeval.memory_plan.document_families`): on a
    GPU, where a 70k-token prefill takes seconds. Elsewhere every item is prefilled whole, the reference path (a
    continued prefill equals a whole one up to float rounding)."""
    return device.startswith("cuda")


def chunk_order(items: Sequence[Item], by_length: bool, families: Sequence[int | None] | None = None) -> list[int]:
    """The indices of ``items`` in the order a group takes them: longest prompt first when ``by_length`` (ties in
    input order), else input order. ``families``: per item, its document family (:func:`document_families`) or None; the members of a family go together, in input order, where its first member (by
    length: its longest) would go."""
    order = list(range(len(items)))
    if by_length:
        order = sorted(order, key=lambda i: -items[i].prompt)
    if not families or all(f is None for f in families):
        return order
    members: dict[int, list[int]] = {}
    for i in range(len(items)):
        if families[i] is not None:
            members.setdefault(families[i], []).append(i)
    out, placed = [], set()
    for i in order:
        family = families[i]
        if family is None:
            out.append(i)
        elif family not in placed:
            placed.add(family)
            out += members[family]
    return out


#: Prompts of one call that open with the same document share its prefill when they share at least this many tokens.
MIN_SHARED_DOCUMENT = 1024


def document_families(prompts: Sequence[Sequence[int]], minimum: int | None = None
                      ) -> tuple[list[int | None], list[int]]:
    """The items of one call that open with one document, each family's shared prefix to be prefilled once.

    Prompts longer than ``minimum`` tokens (default :data:`MIN_SHARED_DOCUMENT`) are sorted; neighbours share a
    prefix (:func:`shared_prefix`, so each keeps a suffix). A run of neighbours is one family with the shortest shared
    prefix among them, or splits where that prefix is shortest into families with longer ones, whichever prefills
    fewer tokens (a family of ``m`` members and prefix ``h`` saves ``(m - 1) h``); a family's prefix is at least
    ``minimum`` tokens. So LongBench-v2's questions on one document share the document (the answer and
    chain-of-thought prompts of one question do not: pred.py's templates differ in their first sentence), samples
    of one long prompt all but its last token, and a preamble shared by every prompt is not mistaken for a
    document. Returns per prompt its family (numbered by its first member; None: alone) and the
    family's shared prefix (0 alone)."""
    minimum = MIN_SHARED_DOCUMENT if minimum is None else minimum
    rows = [p if isinstance(p, list) else list(p) for p in prompts]  # lists compare lazily: no copy of a prompt
    order = sorted((i for i, p in enumerate(rows) if len(p) > minimum), key=rows.__getitem__)
    # between sorted neighbours; 0 where their first ``minimum`` tokens differ (no family has a border there)
    shared = [shared_prefix([rows[a], rows[b]]) if rows[a][:minimum] == rows[b][:minimum] else 0
              for a, b in zip(order, order[1:])]
    best: dict[tuple[int, int], tuple[int, list]] = {}  # (first, last) sorted member -> (tokens saved, families)
    stack = [(0, len(order) - 1, False)] if order else []
    while stack:  # post-order over the splits at the shortest shared prefix (a Cartesian tree of ``shared``)
        lo, hi, expanded = stack.pop()
        if lo >= hi:
            best[lo, hi] = (0, [])
            continue
        k = min(range(lo, hi), key=shared.__getitem__)
        if not expanded:
            stack += [(lo, hi, True), (lo, k, False), (k + 1, hi, False)]
            continue
        left, right = best.pop((lo, k)), best.pop((k + 1, hi))
        whole = (hi - lo) * shared[k] if shared[k] >= minimum else 0
        best[lo, hi] = ((whole, [(lo, hi, shared[k])]) if whole and whole >= left[0] + right[0]
                        else (left[0] + right[0], left[1] + right[1]))
    families: list[int | None] = [None] * len(prompts)
    heads = [0] * len(prompts)
    for lo, hi, head in (best[0, len(order) - 1][1] if order else []):
        members = sorted(order[lo:hi + 1])
        for i in members:
            families[i], heads[i] = members[0], head
    return families, heads


def whole_families(pending: Sequence[int], chunk: int, families: Sequence[int | None] | None) -> list[int]:
    """The next chunk of ``pending`` (item indices in the order they run): its first ``chunk`` items, ending before a
    document family it would split when an earlier item starts the chunk (:func:`document_families`)."""
    part = list(pending[:chunk])
    if not families or len(part) == len(pending):
        return part
    last, following = families[part[-1]], families[pending[len(part)]]
    if last is None or last != following:
        return part
    start = len(part) - 1
    while start > 0 and families[part[start - 1]] == last:
        start -= 1
    return part[:start] if start > 0 else part


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Leading tokens ``a`` and ``b`` (token ids) share (compared as arrays: documents of 100k tokens)."""
    import numpy as np  # not at import: a sweep's parse reads byte sizes from this package

    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of ``prompts`` (token ids), less one token when it covers the shortest
    prompt, so that every prompt keeps a suffix to compute (its last position's logits)."""
    shortest = min(len(p) for p in prompts)
    length = min((common_prefix(prompts[0], p) for p in prompts[1:]), default=shortest)
    return min(length, shortest - 1)
