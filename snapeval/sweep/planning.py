"""Step 1 of a sweep (:mod:`snapeval.sweep.runner`), planning: where its results go, each cell's state on disk (done,
stale, to do), the task names checked before any model loads, and the work units (shared-prefill groups, item
shards) the pending cells run as."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from snapeval.errors import SnapevalError
from snapeval.results.store import ResultsStore
from snapeval.sweep.config import SweepConfig
from snapeval.sweep.grid import Cell, expand_grid
from snapeval.sweep.shards import Shard


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
