"""Where cells run: in this process (default) or as Ray tasks on a Ray cluster (``--executor ray``).

An executor takes the pending work units (:class:`~snapeval.sweep.planning.WorkUnit`: one shared-prefill group, or one
cell, or one item shard of either) and a unit function that yields ``(cell, result, error)`` per cell of the unit (``error`` is a formatted
traceback, ``result`` a :class:`~snapeval.results.schema.CellResult`), and yields them as cells finish. The runner, in
the driver process, writes each result atomically as it arrives, so a crash loses only the units still running.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Iterator

from snapeval.errors import SnapevalError
from snapeval.sweep.grid import Cell

Outcome = tuple[Cell, "CellResult | None", "str | None"]
UnitFn = Callable[[object], Iterator[Outcome]]


class InProcessExecutor:
    """Runs cells one after the other in this process (the model stays cached between cells by the harness)."""

    name = "inprocess"
    parallelism = 1

    def workers(self, resources) -> int:
        """Units this executor runs at once with ``resources`` each: one."""
        return 1

    def run(self, units: list, unit_fn: UnitFn, on_start: Callable[[object], None]) -> Iterator[Outcome]:
        for unit in units:
            on_start(unit)
            yield from unit_fn(unit)  # the unit function reports each failing cell itself


def _ray_unit(unit_fn: UnitFn, unit) -> tuple[list[Outcome], int]:
    """Body of a Ray task: run one unit in a worker with as many torch threads as CPUs it asked for, return its
    cells' outcomes and the worker's pid."""
    threads = max(1, int(unit.cells[0].model.resources.num_cpus))
    os.environ["OMP_NUM_THREADS"] = str(threads)  # read by torch when it is first imported here
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    return list(unit_fn(unit)), os.getpid()


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

    def workers(self, resources) -> int:
        """Units the cluster runs at once with ``resources`` each (its GPUs or its CPUs, whichever the model asks
        for); starts or joins Ray first."""
        self._ensure_init()
        cluster = self.ray.cluster_resources()
        if resources.num_gpus > 0:
            return max(1, int(cluster.get("GPU", 0) // resources.num_gpus))
        return max(1, int(cluster.get("CPU", 1) // max(resources.num_cpus, 1e-9)))

    def _ensure_init(self) -> None:
        if self.ray.is_initialized():
            return
        kwargs = {"ignore_reinit_error": True, "log_to_driver": True, **self.init_kwargs}
        if self.address:
            kwargs["address"] = self.address
        self.ray.init(**kwargs)

    def run(self, units: list, unit_fn: UnitFn, on_start: Callable[[object], None]) -> Iterator[Outcome]:
        ray = self.ray
        self._ensure_init()
        remote = ray.remote(_ray_unit)
        fn_ref = ray.put(unit_fn)
        refs = {}
        for unit in units:
            res = unit.cells[0].model.resources
            ref = remote.options(num_cpus=res.num_cpus, num_gpus=res.num_gpus, max_retries=0).remote(fn_ref, unit)
            refs[ref] = unit
            on_start(unit)
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                unit = refs[ready[0]]
                try:
                    outcomes, pid = ray.get(ready[0])
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # RayTaskError carries the worker's traceback in its message
                    for cell in unit.cells:
                        yield cell, None, f"{type(exc).__name__}: {exc}"
                else:
                    for cell, result, error in outcomes:
                        if result is not None:
                            self.worker_pids[cell.cell_id] = pid
                        yield cell, result, error
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)


def make_executor(name: str, *, ray_address: str | None = None):
    from snapeval.errors import check_choice
    from snapeval.sweep.config import EXECUTORS

    check_choice("--executor", name, EXECUTORS)
    return InProcessExecutor() if name == "inprocess" else RayExecutor(ray_address)
