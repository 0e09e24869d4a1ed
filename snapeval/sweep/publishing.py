"""Step 3 of a sweep (:mod:`snapeval.sweep.runner`), publishing: the progress lines while it runs and the summary
it returns (each cell's headline, the failures and where their tracebacks are, the table and the report)."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from snapeval.results.schema import CellResult
from snapeval.sweep.grid import Cell
from snapeval.sweep.planning import WorkUnit
from snapeval.sweep.shards import Shard


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def last_line(error: str | None) -> str:
    """The last line of a traceback: the exception and its message."""
    lines = (error or "").strip().splitlines()
    return lines[-1] if lines else "unknown error"


def headline(result: CellResult, metric: str | None = None) -> str:
    """``exact_match=0.850 ± 0.080 (n=20)`` for a cell's headline metric."""
    mine = [m for m in result.metrics if metric in (m.metric, m.key)] if metric else []
    m = (mine or result.metrics)[0]
    value = "n/a" if m.value is None else f"{m.value:.3f}"
    stderr = "" if m.stderr is None else f" ± {m.stderr:.3f}"
    return f"{m.metric}={value}{stderr} (n={m.n})"


class Progress:
    """Overall progress over cells (count, percentage, elapsed, ETA) and one line per cell as it starts and ends.

    Per-cell progress inside a run (requests done / total) is lm-eval's own progress bar, printed by the harness.
    The ETA is the elapsed time per cell finished in this session times the cells left (skipped cells do not
    count), so it also holds for parallel executors.
    """

    def __init__(self, total: int, skipped: int, stream: TextIO | None = None, clock=time.monotonic):
        self.total, self.skipped = total, skipped
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.t0 = clock()
        self.done = 0
        self.failed = 0
        self._shown = False  # the bar is printed once before the first cell, then after each cell

    @property
    def finished(self) -> int:
        return self.skipped + self.done + self.failed

    def eta(self) -> float | None:
        ran = self.done + self.failed
        if ran == 0:
            return None
        return (self.clock() - self.t0) / ran * (self.total - self.finished)

    def bar(self, width: int = 24) -> str:
        frac = self.finished / self.total if self.total else 1.0
        fill = int(round(frac * width))
        return (f"[{'#' * fill}{'.' * (width - fill)}] {self.finished}/{self.total} cells {frac:4.0%} | "
                f"elapsed {_fmt_duration(self.clock() - self.t0)} | ETA {_fmt_duration(self.eta())}")

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def started(self, unit: WorkUnit) -> None:
        if not self._shown:
            self._shown = True
            self._print(f"snapeval sweep {self.bar()}")
        ids = ", ".join(c.cell_id for c in unit.cells)
        self._print(f"  -> running {unit.label} [{ids}]")

    def shard_done(self, cell: Cell, shard: Shard, finished: int) -> None:
        self._print(f"  <- shard   {shard.name} of {cell.label} ({finished}/{shard.count} shards written)")

    def ended(self, cell: Cell, result: CellResult | None, error: str | None) -> None:
        if result is not None:
            self.done += 1
            self._print(f"  <- done    {cell.label}: {headline(result, cell.task.metric)} "
                        f"in {_fmt_duration(result.wall_s)}")
        else:
            self.failed += 1
            self._print(f"  !! FAILED  {cell.label}: {last_line(error)}")
        self._print(f"snapeval sweep {self.bar()}")


@dataclass
class SweepSummary:
    """What a sweep did: cells run, skipped and failed, and where its outputs are."""

    name: str
    out: Path
    total: int
    skipped: int
    ran: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (label, error file)
    wall_s: float = 0.0
    table: tuple[Path, Path] | None = None
    report: Path | None = None
    rows: list[tuple[str, str, str]] = field(default_factory=list)  # (label, status, headline)

    @property
    def ok(self) -> bool:
        return not self.failed

    def render(self) -> str:
        lines = [f"sweep {self.name!r}: {self.total} cells, {len(self.ran)} run, {self.skipped} already done, "
                 f"{len(self.failed)} failed, in {_fmt_duration(self.wall_s)}"]
        width = max((len(label) for label, _, _ in self.rows), default=0)
        lines += [f"  {label.ljust(width)}  {status:<7} {text}" for label, status, text in self.rows]
        for label, path in self.failed:
            lines.append(f"  failed: {label} (traceback in {path}); re-run the same command to retry it")
        if self.table:
            lines.append(f"table:  {self.table[0]}  and  {self.table[1]}")
        if self.report:
            lines.append(f"report: {self.report}  (plots beside it)")
        return "\n".join(lines)
