"""Run a sweep: expand the grid, skip finished cells, run the rest, write each result atomically, build the table.

Resumability: a cell's result file is its proof of completion, named by the cell's identity hash. Re-running the
same command finds them and runs only what is missing; a config change that alters a cell's meaning changes its
hash, so an old result is never reused for a new question. ``kill -9`` loses at most the cells that were running.
"""
from __future__ import annotations

import datetime as _dt
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from snapeval.errors import SnapevalError
from snapeval.results.schema import CellResult, from_lm_eval
from snapeval.results.store import ResultsStore
from snapeval.sweep.config import SweepConfig
from snapeval.sweep.executors import InProcessExecutor
from snapeval.sweep.grid import Cell, expand_grid

EvaluateFn = Callable[..., dict]


def harness_evaluate(**kwargs) -> dict:
    """The real evaluation: one lm-eval run through the ``snapstream`` model (imported lazily: torch, lm-eval)."""
    from snapeval.harness import evaluate

    return evaluate(**kwargs)


@dataclass(frozen=True)
class CellRunner:
    """Picklable cell function: evaluate one cell and wrap lm-eval's output into a :class:`CellResult`."""

    evaluate: EvaluateFn = harness_evaluate

    def __call__(self, cell: Cell) -> CellResult:
        start = time.perf_counter()
        out = self.evaluate(**cell.evaluate_kwargs())
        wall = time.perf_counter() - start
        finished = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        return from_lm_eval(cell.cell_id, cell.identity(), out, wall_s=round(wall, 3), finished_at=finished)


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

    def started(self, cell: Cell) -> None:
        if not self._shown:
            self._shown = True
            self._print(f"snapeval sweep {self.bar()}")
        self._print(f"  -> running {cell.label} [{cell.cell_id}]")

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


def resolve_out(config: SweepConfig, out: str | Path | None) -> Path:
    return Path(out) if out is not None else Path(config.out or f"results/{config.name}")


def plan(config: SweepConfig, out: str | Path | None = None) -> list[tuple[Cell, bool]]:
    """Every cell of the grid with whether a finished result already exists in the output directory."""
    store = ResultsStore(resolve_out(config, out))
    return [(cell, store.has(cell.cell_id)) for cell in expand_grid(config)]


def check_tasks(names: list[str], include_path: str, *, include_defaults: bool = True) -> None:
    """Fail fast, before any model loads, on a task name that lm-eval cannot resolve.

    The sweep's own task folder is indexed first (fast); lm-eval's built-in tasks (about 20 s to index) only when
    a name is not found there and ``include_defaults`` is set.
    """
    import difflib

    from lm_eval.tasks import TaskManager

    known = set(TaskManager(include_path=include_path, include_defaults=False).all_tasks)
    if include_defaults and not set(names) <= known:
        known |= set(TaskManager(include_path=include_path).all_tasks)
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SnapevalError(f"tasks: {name!r} is not an lm-eval task here (include_path {include_path}){hint}")


def run_sweep(config: SweepConfig, out: str | Path | None = None, *, executor=None,
              evaluate: EvaluateFn | None = None, stream: TextIO | None = None, simulate: Any = "default",
              report: bool = True) -> SweepSummary:
    """Run every unfinished cell of ``config``; write results, the tidy table and (optionally) the report.

    ``evaluate`` replaces :func:`snapeval.harness.evaluate` (same signature; used by tests). ``simulate`` is passed
    to :func:`snapeval.results.table.build_table`.
    """
    from snapeval.results.table import build_table

    t0 = time.monotonic()
    out_dir = resolve_out(config, out)
    store = ResultsStore(out_dir)
    cells = expand_grid(config)
    if evaluate is None:
        check_tasks(sorted({c.task.name for c in cells}), config.include_dir)
    store.clean_tmp()
    views = [cell.view() for cell in cells]
    sim_settings = {"hardware": config.simulate.hardware, "batch": config.simulate.batch,
                    "batch_cap": config.simulate.batch_cap, "enabled": config.simulate.enabled}
    store.write_manifest(config.name, views, sim_settings)

    pending = [c for c in cells if not store.has(c.cell_id)]
    summary = SweepSummary(name=config.name, out=out_dir, total=len(cells), skipped=len(cells) - len(pending))
    progress = Progress(len(cells), summary.skipped, stream)
    executor = executor if executor is not None else InProcessExecutor()
    cell_fn = CellRunner(evaluate or harness_evaluate)
    status: dict[str, tuple[str, str]] = {}
    for cell, result, error in executor.run(pending, cell_fn, progress.started):
        if result is not None:
            store.write(result)
            summary.ran.append(cell.cell_id)
            status[cell.cell_id] = ("ran", headline(result, cell.task.metric))
        else:
            path = store.write_error(cell.cell_id, cell.label, error or "")
            summary.failed.append((cell.label, str(path)))
            status[cell.cell_id] = ("FAILED", last_line(error))
        progress.ended(cell, result, error)

    finished = {c.cell_id: store.read(c.cell_id) for c in cells if store.cell_path(c.cell_id).is_file()}
    for cell in cells:
        if cell.cell_id not in status and cell.cell_id in finished:
            status[cell.cell_id] = ("skipped", headline(finished[cell.cell_id], cell.task.metric))
        summary.rows.append((cell.label, *status.get(cell.cell_id, ("missing", ""))))
    if finished:
        summary.table = store.write_table(build_table(views, finished, sim_settings, simulate=simulate))
        if report:
            from snapeval.report import build_report

            summary.report = build_report(out_dir, rebuild=False).markdown
    summary.wall_s = time.monotonic() - t0
    return summary

