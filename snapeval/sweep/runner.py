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

The steps live in their own modules: :mod:`snapeval.sweep.planning` (cell states, task check, work units, shard
counts), :mod:`snapeval.sweep.execution` (the unit function over the harness) and :mod:`snapeval.sweep.publishing`
(progress and summary); this module runs them in order (:func:`run_sweep`) and keeps their public names importable.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TextIO

from snapeval.errors import SnapevalError
from snapeval.results.schema import CellResult
from snapeval.results.store import ResultsStore
from snapeval.sweep.config import SweepConfig
from snapeval.sweep.execution import (CellRunner, EvaluateFn, GroupModelsFn, harness_evaluate,  # noqa: F401
                                    harness_group_models)
from snapeval.sweep.executors import InProcessExecutor
from snapeval.sweep.grid import Cell, expand_grid
from snapeval.sweep.planning import (ShardCount, ShardPlanner, WorkUnit, cell_states, check_tasks, plan,  # noqa: F401
                                 resolve_out, work_units)
from snapeval.sweep.publishing import Progress, SweepSummary, headline, last_line  # noqa: F401
from snapeval.sweep.shards import ShardResult, finished_shards, merge_shards


def run_sweep(config: SweepConfig, out: str | Path | None = None, *, executor=None,
              evaluate: EvaluateFn | None = None, stream: TextIO | None = None, simulate: Any = "default",
              report: bool = True, group_models: GroupModelsFn | None | str = "default",
              rerun_stale: bool = False, search=None) -> SweepSummary:
    """Run every unfinished cell of ``config``; write results, the tidy table and (optionally) the report.

    ``evaluate`` replaces :func:`snapeval.harness.evaluate` (same signature; used by tests); ``group_models``
    replaces the shared-prefill models of a group (default: the real ones, or none with a replaced ``evaluate``).
    ``simulate`` is passed to :func:`snapeval.report.results_table.build_table`. One sweep at a time writes a results
    directory (a lock; a second one fails with one line naming the holder). ``search``: a
    :class:`~snapeval.report.search.SearchSettings` runs the sequential budget search instead of every cell on every
    item (``--until-decided``; its account is written to ``search.md``).
    """
    if evaluate is None and (executor is None or isinstance(executor, InProcessExecutor)):
        for model in config.models:  # this machine runs them: what needs CUDA here is refused before anything
            model.run_args.check_machine()
    out_dir = resolve_out(config, out)
    with ResultsStore(out_dir).lock():
        return _run_sweep(config, out_dir, executor=executor, evaluate=evaluate, stream=stream, simulate=simulate,
                          report=report, group_models=group_models, rerun_stale=rerun_stale, search=search)


def _run_sweep(config: SweepConfig, out_dir: Path, *, executor, evaluate, stream, simulate, report,
               group_models, rerun_stale, search=None) -> SweepSummary:
    from snapeval.preflight import check_results_folder, manifest_config
    from snapeval.report.results_table import build_table

    t0 = time.monotonic()
    store = ResultsStore(out_dir)
    cells = expand_grid(config)
    source = manifest_config(config.source)
    # under the lock: never another sweep's manifest (or a damaged one, or another config's grid) replaced
    check_results_folder(out_dir, config.name, config=source, cells=[c.cell_id for c in cells])
    if evaluate is None:
        check_tasks(sorted({c.task.name for c in cells}), config.include_dir)
    store.clean_tmp()
    views = [cell.view().to_dict() for cell in cells]
    sim_settings = {"hardware": config.simulate.hardware, "batch": config.simulate.batch,
                    "batch_cap": config.simulate.batch_cap, "enabled": config.simulate.enabled}
    store.write_manifest(config.name, views, sim_settings, config.decision.to_dict(), config=source)

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

    searched: list = []  # the search's account per group
    if search is not None:
        from snapeval.sweep.search import run_live

        produced = run_live(search, config.decision, cells, waiting, cell_fn, executor, progress.started, store,
                            searched)
    else:  # nothing to run (every cell done): no executor started (a Ray instance would take seconds for nothing)
        produced = executor.run(units, cell_fn, progress.started) if units else iter(())
    for cell, result, error in produced:
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

    if searched:
        from snapeval.sweep.search import write_account

        write_account(out_dir / "search.md", searched, config.decision, search)
        for group in searched:  # cells the search stopped early have no result file: their line says what it decided
            for cell_id, line in group.cell_lines().items():
                status.setdefault(cell_id, ("search", line))
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
