"""Run a sweep: expand the grid, skip finished cells, run the rest, write each result atomically, build the table.

Work units. Cells of one group (same model, task, seed and items; :attr:`Cell.group_id`) run together as one unit:
each item is prefilled once and every method and budget of the group branches from that prefill
(:mod:`snapeval.branching`). A cell whose method cannot branch, or a model with ``share_prefill: false``
(``--per-cell``), runs alone as its own lm-eval run: the reference path. With item shards
(:mod:`snapeval.sweep.shards`: ``shards``/``shard_size`` in the config, default one per executor worker) a unit is
one shard of a group: its items, every configuration; each cell is the merge of its shards.

Resumability: a cell's result file is its proof of completion, named by the cell's identity hash. Re-running the
same command finds them and runs only what is missing; a config change that alters a cell's meaning changes its
hash, so an old result is never reused for a new question. A finished shard is written at once, so ``kill -9``
loses at most the units that were running, and a resumed sweep redoes only the missing shards (with the partition
already on disk).
"""
from __future__ import annotations

import datetime as _dt
import math
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from snapeval.errors import SnapevalError
from snapeval.results.schema import CellResult, from_lm_eval
from snapeval.results.store import ResultsStore
from snapeval.sweep.config import SweepConfig
from snapeval.sweep.executors import InProcessExecutor
from snapeval.sweep.grid import Cell, expand_grid
from snapeval.sweep.shards import Shard, ShardResult, finished_shards, merge_shards

EvaluateFn = Callable[..., dict]
#: ``models(cells) -> one lm-eval model per cell`` (or ``None`` entries: each cell then loads its own).
GroupModelsFn = Callable[[list], list]


def harness_evaluate(**kwargs) -> dict:
    """The real evaluation: one lm-eval run through the ``snapeval`` model (imported lazily: torch, lm-eval)."""
    from snapeval.harness import evaluate

    return evaluate(**kwargs)


def harness_group_models(cells: list) -> list:
    """The real shared-prefill models of a group (imported lazily: torch, lm-eval)."""
    from snapeval.harness.shared import group_models

    return group_models(cells)


@dataclass(frozen=True)
class WorkUnit:
    """What an executor runs at once: the pending cells of one shared-prefill group, or one cell alone; with
    ``shard``, only that item shard of them."""

    cells: tuple[Cell, ...]
    shared: bool
    shard: Shard | None = None

    @property
    def label(self) -> str:
        first = self.cells[0]
        label = first.label if not self.shared else (
            f"{first.model.name} | {first.task.name} | {len(self.cells)} configurations (one prefill) | seed {first.seed}")
        return label if self.shard is None else f"{label} | shard {self.shard.name}"


#: ``shard_count(cells)``: how many item shards the unit of these cells (a group, or one cell) splits into.
ShardCount = Callable[[list], int]


def work_units(cells: list[Cell], shard_count: ShardCount | None = None, done: Callable[[Cell, Shard], bool] | None = None
               ) -> list[WorkUnit]:
    """Group ``cells`` (in grid order) into shared-prefill units; cells that cannot branch run alone. With
    ``shard_count``, each unit becomes one unit per item shard, holding the cells whose shard is not ``done``."""
    groups: dict[str, list[Cell]] = {}
    alone: list[tuple[Cell, ...]] = []
    for cell in cells:
        if cell.shares_prefill:
            groups.setdefault(cell.group_id, []).append(cell)
        else:
            alone.append((cell,))
    units = []
    for members in [tuple(group) for group in groups.values()] + alone:
        count = shard_count(list(members)) if shard_count is not None else 1
        if count == 1:
            units.append(WorkUnit(members, shared=len(members) > 1))
            continue
        for index in range(count):
            shard = Shard(index, count)
            todo = tuple(c for c in members if done is None or not done(c, shard))
            if todo:
                units.append(WorkUnit(todo, shared=len(todo) > 1, shard=shard))
    return units


@dataclass(frozen=True)
class CellRunner:
    """Picklable unit function: evaluate the cells of a unit, yielding ``(cell, CellResult | None, traceback)``.

    A shared unit builds its lm-eval models once (``group_models``: one prefill per item for all of them); a failing
    cell is reported and does not stop the others.
    """

    evaluate: EvaluateFn = harness_evaluate
    group_models: GroupModelsFn | None = harness_group_models

    def run_cell(self, cell: Cell, lm=None, shard: Shard | None = None) -> CellResult | ShardResult:
        start = time.perf_counter()
        kwargs = cell.evaluate_kwargs()
        if shard is not None:
            kwargs["shard"] = (shard.index, shard.count)
        out = self.evaluate(**kwargs, lm=lm) if lm is not None else self.evaluate(**kwargs)
        wall = time.perf_counter() - start
        finished = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        if shard is not None:
            return ShardResult.from_lm_eval(cell.cell_id, cell.identity(), out, wall_s=round(wall, 3),
                                            finished_at=finished)
        return from_lm_eval(cell.cell_id, cell.identity(), out, wall_s=round(wall, 3), finished_at=finished)

    def __call__(self, unit: WorkUnit):
        models = [None] * len(unit.cells)
        if unit.shared and self.group_models is not None:
            try:
                models = self.group_models(list(unit.cells))
            except Exception:
                error = traceback.format_exc()
                for cell in unit.cells:
                    yield cell, None, error
                return
        for cell, lm in zip(unit.cells, models):
            try:
                result = self.run_cell(cell, lm, unit.shard)
            except KeyboardInterrupt:
                raise
            except Exception:  # a failing cell must not stop the sweep: it is reported and retried next time
                yield cell, None, traceback.format_exc()
            else:
                yield cell, result, None


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


class ShardPlanner:
    """How many item shards each unit of a sweep splits into: the partition already on disk for a resumed cell; else
    ``shards``; else ``ceil(items / shard_size)``; else enough to give every worker of the executor a unit (one in
    process). A task group or tag is never sharded by default (lm-eval aggregates its subtasks itself)."""

    def __init__(self, config: SweepConfig, executor, pending: list[Cell], on_disk: dict[str, dict]):
        self.config, self.executor, self.on_disk = config, executor, on_disk
        self.units = len(work_units(pending))
        self._groups: dict[str, set[str]] = {}

    def __call__(self, cells: list[Cell]) -> int:
        resumed = {s.count for c in cells for s in self.on_disk.get(c.cell_id, {}).values()}
        if resumed:
            return max(resumed)
        cell = cells[0]
        if self.config.shards is not None:
            return self.config.shards
        if self.config.shard_size is not None:
            from snapeval.sweep.shards import count_items

            return max(1, math.ceil(count_items(cell) / self.config.shard_size))
        workers = self.executor.workers(cell.model.resources)
        if workers <= 1 or self._is_group(cell):
            return 1
        return max(1, math.ceil(workers / self.units))

    def _is_group(self, cell: Cell) -> bool:
        if cell.include_path not in self._groups:
            from snapeval.tasks.folders import include_folders, task_manager

            manager = task_manager(include_folders(cell.include_path))
            self._groups[cell.include_path] = {*manager.all_groups, *manager.all_tags}
        return cell.task.name in self._groups[cell.include_path]


def resolve_out(config: SweepConfig, out: str | Path | None) -> Path:
    return Path(out) if out is not None else Path(config.out or f"results/{config.name}")


def plan(config: SweepConfig, out: str | Path | None = None) -> list[tuple[Cell, str]]:
    """Every cell of the grid with its state in the output directory (:func:`cell_states`)."""
    cells = expand_grid(config)
    states = cell_states(ResultsStore(resolve_out(config, out)), cells)
    return [(cell, states[cell.cell_id]) for cell in cells]


def cell_states(store: ResultsStore, cells: list[Cell]) -> dict[str, str]:
    """``{cell_id: state}``, each cell's file read once: ``"done"`` (a finished result that a run reuses),
    ``"stale"`` (finished under other task files than its task's now,
    :func:`snapeval.sweep.grid.task_source_sha256`; ``--rerun-stale`` redoes it) or ``"todo"``. A cell stored
    without a task-source hash (written before snapeval recorded it) or of a task with none (an lm-eval built-in)
    is never stale."""
    states = {}
    for cell in cells:
        stored = store.finished_or_none(cell.cell_id)
        if stored is None:
            states[cell.cell_id] = "todo"
        elif cell.task_source is not None and stored.task_source_sha256 not in (None, cell.task_source):
            states[cell.cell_id] = "stale"
        else:
            states[cell.cell_id] = "done"
    return states


def check_tasks(names: list[str], include_path: str, *, include_defaults: bool = True) -> None:
    """Fail fast, before any model loads, on a task name that lm-eval cannot resolve.

    The sweep's own task folder is indexed first (fast); lm-eval's built-in tasks (about 20 s to index) only when
    a name is not found there and ``include_defaults`` is set.
    """
    import difflib

    from snapeval.tasks.folders import include_folders, task_manager

    known = set(task_manager(include_folders(include_path)).all_tasks)
    if include_defaults and not set(names) <= known:
        known |= set(task_manager(include_folders(include_path), defaults=True).all_tasks)
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SnapevalError(f"tasks: {name!r} is not an lm-eval task here (include_path {include_path}){hint}")


def run_sweep(config: SweepConfig, out: str | Path | None = None, *, executor=None,
              evaluate: EvaluateFn | None = None, stream: TextIO | None = None, simulate: Any = "default",
              report: bool = True, group_models: GroupModelsFn | None | str = "default",
              rerun_stale: bool = False) -> SweepSummary:
    """Run every unfinished cell of ``config``; write results, the tidy table and (optionally) the report.

    ``evaluate`` replaces :func:`snapeval.harness.evaluate` (same signature; used by tests); ``group_models``
    replaces the shared-prefill models of a group (default: the real ones, or none with a replaced ``evaluate``).
    ``simulate`` is passed to :func:`snapeval.report.results_table.build_table`. One sweep at a time writes a results
    directory (a lock; a second one fails with one line naming the holder).
    """
    out_dir = resolve_out(config, out)
    with ResultsStore(out_dir).lock():
        return _run_sweep(config, out_dir, executor=executor, evaluate=evaluate, stream=stream, simulate=simulate,
                          report=report, group_models=group_models, rerun_stale=rerun_stale)


def _run_sweep(config: SweepConfig, out_dir: Path, *, executor, evaluate, stream, simulate, report,
               group_models, rerun_stale) -> SweepSummary:
    from snapeval.report.results_table import build_table

    t0 = time.monotonic()
    store = ResultsStore(out_dir)
    cells = expand_grid(config)
    if evaluate is None:
        check_tasks(sorted({c.task.name for c in cells}), config.include_dir)
    store.clean_tmp()
    views = [cell.view().to_dict() for cell in cells]
    sim_settings = {"hardware": config.simulate.hardware, "batch": config.simulate.batch,
                    "batch_cap": config.simulate.batch_cap, "enabled": config.simulate.enabled}
    store.write_manifest(config.name, views, sim_settings, config.decision.to_dict())

    states = cell_states(store, cells)
    stale = [c for c in cells if states[c.cell_id] == "stale"]
    if stale and not rerun_stale:
        names = ", ".join(sorted({c.task.name for c in stale}))
        raise SnapevalError(f"{len(stale)} finished cell(s) in {out_dir} ran under other files of task(s) {names} "
                            "(a YAML, template or hook of the task, or a base config it includes, changed since); "
                            "run again with --rerun-stale to redo them, or restore the task's files")
    pending = [c for c in cells if states[c.cell_id] != "done"]
    waiting = {c.cell_id for c in pending}
    for cell in cells:  # a finished cell's shards were merged; a crash between the two writes may have left them
        if cell.cell_id not in waiting:
            store.clear_shards(cell.cell_id)
    summary = SweepSummary(name=config.name, out=out_dir, total=len(cells), skipped=len(cells) - len(pending))
    progress = Progress(len(cells), summary.skipped, stream)
    executor = executor if executor is not None else InProcessExecutor()
    if group_models == "default":
        group_models = harness_group_models if evaluate is None else None
    cell_fn = CellRunner(evaluate or harness_evaluate, group_models)
    status: dict[str, tuple[str, str]] = {}
    shards = {c.cell_id: {s.index: s for s in finished_shards(store, c.cell_id)  # shards of other task files: redone
                          if s.run.get("task_source_sha256") == c.task_source} for c in pending}
    counts = ShardPlanner(config, executor, pending, shards)
    units = work_units(pending, counts, lambda cell, shard: shard.index in shards[cell.cell_id]
                       and shards[cell.cell_id][shard.index].count == shard.count)

    def finish(cell: Cell, result: CellResult | None, error: str | None) -> None:
        if result is not None:
            result.task_source_sha256 = cell.task_source
            store.write(result)
            store.clear_shards(cell.cell_id)
            summary.ran.append(cell.cell_id)
            status[cell.cell_id] = ("ran", headline(result, cell.task.metric))
        elif cell.cell_id not in status:  # one line per failed cell, however many of its shards failed
            path = store.write_error(cell.cell_id, cell.label, error or "")
            summary.failed.append((cell.label, str(path)))
            status[cell.cell_id] = ("FAILED", last_line(error))
        else:
            return
        progress.ended(cell, result, error)

    for cell, result, error in executor.run(units, cell_fn, progress.started):
        if not isinstance(result, ShardResult):
            finish(cell, result, error)
            continue
        result.run["task_source_sha256"] = cell.task_source
        store.write_shard(cell.cell_id, result.index, result.count, result.to_json())
        mine = shards[cell.cell_id] = {i: s for i, s in shards[cell.cell_id].items() if s.count == result.count}
        mine[result.index] = result
        progress.shard_done(cell, result.shard, len(mine))
        if len(mine) == result.count:
            try:
                merged = merge_shards(cell.cell_id, cell.identity(), list(mine.values()))
            except SnapevalError as exc:
                finish(cell, None, f"SnapevalError: {exc}")
            else:
                finish(cell, merged, None)

    finished = {c.cell_id: store.read(c.cell_id) for c in cells if store.cell_path(c.cell_id).is_file()}
    for cell in cells:
        if cell.cell_id not in status and cell.cell_id in finished:
            status[cell.cell_id] = ("skipped", headline(finished[cell.cell_id], cell.task.metric))
        summary.rows.append((cell.label, *status.get(cell.cell_id, ("missing", ""))))
    if finished:
        summary.table = store.write_table(build_table(views, finished, sim_settings, simulate=simulate,
                                                             decision=config.decision))
        if report:
            from snapeval.report import build_report

            summary.report = build_report(out_dir, rebuild=False).markdown
    summary.wall_s = time.monotonic() - t0
    return summary

