"""Where cells run: in this process (default) or as Ray tasks on a Ray cluster (``--executor ray``).

An executor takes the pending cells and a cell function, and yields ``(cell, result, error)`` as cells finish
(``error`` is a formatted traceback, ``result`` a :class:`~snapeval.results.schema.CellResult`). The runner, in the
driver process, writes each result atomically as it arrives, so a crash loses only the cells still running.
"""
from __future__ import annotations

import os
import traceback
from typing import Callable, Iterator

from snapeval.errors import SnapevalError
from snapeval.results.schema import CellResult
from snapeval.sweep.grid import Cell

CellFn = Callable[[Cell], CellResult]
Outcome = tuple[Cell, "CellResult | None", "str | None"]


class InProcessExecutor:
    """Runs cells one after the other in this process (the model stays cached between cells by the harness)."""

    name = "inprocess"
    parallelism = 1

    def run(self, cells: list[Cell], cell_fn: CellFn, on_start: Callable[[Cell], None]) -> Iterator[Outcome]:
        for cell in cells:
            on_start(cell)
            try:
                result = cell_fn(cell)
            except KeyboardInterrupt:
                raise
            except Exception:  # a failing cell must not stop the sweep: it is reported and retried next time
                yield cell, None, traceback.format_exc()
            else:
                yield cell, result, None


def _ray_cell(cell_fn: CellFn, cell: Cell) -> tuple[CellResult, int]:
    """Body of a Ray task: run one cell in a worker, return its result and the worker's pid."""
    return cell_fn(cell), os.getpid()


class RayExecutor:
    """Runs every pending cell as a Ray task with the cell's declared resources (``num_cpus``, ``num_gpus``).

    Connects to ``address`` (or ``$RAY_ADDRESS``), or starts a local Ray instance when neither is given; an already
    initialized Ray (``ray.init`` called by the user) is used as is. Results come back to the driver, which writes
    them, so workers need no shared filesystem. ``worker_pids`` records which worker process ran each cell.
    """

    name = "ray"

    def __init__(self, address: str | None = None, init_kwargs: dict | None = None):
        try:
            import ray
        except ImportError:
            raise SnapevalError("--executor ray needs Ray: pip install 'snapeval[ray]'") from None
        self.ray = ray
        self.address = address or os.environ.get("RAY_ADDRESS")
        self.init_kwargs = dict(init_kwargs or {})
        self.worker_pids: dict[str, int] = {}

    @property
    def parallelism(self) -> int:
        return max(1, int(self.ray.cluster_resources().get("CPU", 1))) if self.ray.is_initialized() else 1

    def _ensure_init(self) -> None:
        if self.ray.is_initialized():
            return
        kwargs = {"ignore_reinit_error": True, "log_to_driver": True, **self.init_kwargs}
        if self.address:
            kwargs["address"] = self.address
        self.ray.init(**kwargs)

    def run(self, cells: list[Cell], cell_fn: CellFn, on_start: Callable[[Cell], None]) -> Iterator[Outcome]:
        ray = self.ray
        self._ensure_init()
        remote = ray.remote(_ray_cell)
        fn_ref = ray.put(cell_fn)
        refs = {}
        for cell in cells:
            res = cell.model.resources
            ref = remote.options(num_cpus=res.num_cpus, num_gpus=res.num_gpus, max_retries=0).remote(fn_ref, cell)
            refs[ref] = cell
            on_start(cell)
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                cell = refs[ready[0]]
                try:
                    result, pid = ray.get(ready[0])
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # RayTaskError carries the worker's traceback in its message
                    yield cell, None, f"{type(exc).__name__}: {exc}"
                else:
                    self.worker_pids[cell.cell_id] = pid
                    yield cell, result, None
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)


def make_executor(name: str, *, ray_address: str | None = None):
    from snapeval.errors import check_choice
    from snapeval.sweep.config import EXECUTORS

    check_choice("--executor", name, EXECUTORS)
    return InProcessExecutor() if name == "inprocess" else RayExecutor(ray_address)
