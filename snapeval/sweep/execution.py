"""Step 2 of a sweep (:mod:`snapeval.sweep.runner`), execution: the picklable function an executor runs on each work
unit (:class:`CellRunner`), through the real harness (imported lazily: torch, lm-eval) or a replacement."""
from __future__ import annotations

import datetime as _dt
import time
import traceback
from dataclasses import dataclass
from typing import Callable

from snapeval.results.schema import CellResult, from_lm_eval
from snapeval.sweep.grid import Cell
from snapeval.sweep.planning import WorkUnit
from snapeval.sweep.shards import Shard, ShardResult

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
