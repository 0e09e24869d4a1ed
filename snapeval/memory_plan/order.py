"""In what order a group takes its items: longest prompt first on a GPU, questions on one document together."""
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
    suffix (:meth:`~snapeval.branching.BranchSet.generate`, :func:`~snapeval.branching.document_families`): on a
    GPU, where a 70k-token prefill takes seconds. Elsewhere every item is prefilled whole, the reference path (a
    continued prefill equals a whole one up to float rounding)."""
    return device.startswith("cuda")


def chunk_order(items: Sequence[Item], by_length: bool, families: Sequence[int | None] | None = None) -> list[int]:
    """The indices of ``items`` in the order a group takes them: longest prompt first when ``by_length`` (ties in
    input order), else input order. ``families``: per item, its document family (:func:`~snapeval.branching.
    document_families`) or None; the members of a family go together, in input order, where its first member (by
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
