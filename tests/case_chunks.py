"""A golden table's cases checked in chunks: one test per ``size`` cases instead of one per case (pytest's own
per-test work was as long as a cheap case's check). A chunk runs every one of its cases and names each that fails,
with its index, its id and the error, so no case hides behind a first failure."""
from __future__ import annotations

from typing import Callable, Sequence


def starts(cases: Sequence, size: int) -> range:
    """The first index of each chunk: with ``range(start, start + size)`` they cover every case once."""
    return range(0, len(cases), size)


def chunk_id(cases: Sequence, size: int) -> Callable[[int], str]:
    return lambda start: f"cases{start}-{min(start + size, len(cases)) - 1}"


def check_each(cases: Sequence, start: int, size: int, check: Callable, case_id: Callable[[object], str]) -> None:
    """``check(case)`` on each case of the chunk at ``start``; one AssertionError naming every case that failed."""
    failures = []
    for index in range(start, min(start + size, len(cases))):
        try:
            check(cases[index])
        except Exception as error:  # noqa: BLE001 - an assertion or a crash: each case is named
            failures.append(f"case {index} {case_id(cases[index])}: {type(error).__name__}: {error}")
    assert not failures, f"{len(failures)} of the chunk's cases failed:\n" + "\n".join(failures)
