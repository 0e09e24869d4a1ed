"""The typed sweep configuration: what a validated sweep YAML becomes (:mod:`snapeval.sweep.parse` reads the YAML).

Every object here is frozen and already valid; a :class:`MethodSpec` resolves its budgets into method configuration
objects (:func:`snapeval.cache.resolve_method`) that travel unchanged to the caches.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapeval.cache import MethodConfig
from snapeval.errors import SnapevalError
from snapeval.paths import default_data_dir
from snapeval.run_args import DTYPES as _RUN_DTYPES, RunArgs
from snapeval.tasks.folders import include_path, task_folders
from snapeval.stats.decision import DecisionRule
from snapeval.tasks.families import task_data_files

__all__ = ["DTYPES", "EXECUTORS", "SIM_HARDWARE_DEFAULT", "MethodSpec", "ModelSpec", "Resources", "SimLengths",
           "SimulateSpec", "SweepConfig", "TaskSpec", "data_files_for"]

DTYPES = ("auto", *_RUN_DTYPES)
EXECUTORS = ("inprocess", "ray")
SIM_HARDWARE_DEFAULT = "sn40l-16"




@dataclass(frozen=True)
class Resources:
    """What one cell asks a Ray cluster for (ignored by the in-process executor)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0

    def __post_init__(self):
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise SnapevalError(f"resources: num_cpus and num_gpus must be >= 0; got {self.num_cpus}, {self.num_gpus}")


@dataclass(frozen=True)
class ModelSpec:
    """One model of the grid: what the ``snapeval`` lm-eval model loads, how it runs, and how the simulator sizes it.

    ``run_args`` are the run arguments of its entry (:class:`snapeval.run_args.RunArgs`: dtype, batching, the
    generation budget, the engine, the decode kernel, capture, ...), parsed once as declared and handed unchanged to
    the lm-eval model, its engines and its caches; its placement (``device``/``device_map``) is resolved from
    ``resources`` when the spec is built (:meth:`placement`). ``simulate_as`` names the preset whose full-size
    deployment the simulator prices (default: ``pretrained`` when it is a preset name; otherwise no simulated
    columns unless given).
    """

    pretrained: str
    run_args: RunArgs = RunArgs()
    simulate_as: str | None = None
    resources: Resources = Resources()
    #: One prefill per item for every method and budget of a (model, task, seed) group (snapeval.branching); false
    #: runs every cell as its own lm-eval run (the reference path). Not part of the identity: results are the same.
    share_prefill: bool = True
    #: The memory budget of a shared group (snapeval.memory_plan), weights included: ``(device, bytes)`` pairs, the
    #: device ``"*"`` for every device. None: what is in use plus what is free, less a margin. Not part of the
    #: identity: the plan only changes how many items are in flight, never a result.
    max_memory: tuple[tuple[str, int], ...] | None = None

    def __post_init__(self) -> None:
        # Placement, resolved once: the entry's own device map, else ``balanced`` over the GPUs its resources give
        # (more than one), else one device (cuda with a GPU, the CPU without). Not part of the identity.
        from snapeval.models.devices import gpu_device_map

        device_map = self.run_args.device_map
        if device_map is None:
            device_map = gpu_device_map(self.resources.num_gpus)
        device = "cuda" if self.resources.num_gpus >= 1 else "cpu"
        if (device, device_map) != (self.run_args.device, self.run_args.device_map):
            object.__setattr__(self, "run_args", self.run_args.replace(device=device, device_map=device_map))

    # the run arguments the sweep reads by name
    @property
    def dtype(self) -> str:
        return self.run_args.dtype

    @property
    def batch_size(self) -> int:
        return self.run_args.batch_size

    @property
    def max_gen_toks(self) -> int | None:
        return self.run_args.max_gen_toks

    @property
    def engine(self) -> str:
        return self.run_args.engine

    @property
    def device_map(self):
        return self.run_args.device_map

    def memory_for(self, device) -> int | None:
        """The budget in bytes for ``device`` (``cuda:1``, ``cuda``, ``cpu``): its own entry, else its type's, else
        ``"*"``; None when none applies."""
        budgets = dict(self.max_memory or ())
        device = str(device)
        for key in (device, device.split(":")[0], "*"):
            if key in budgets:
                return budgets[key]
        return None

    def placement(self) -> dict[str, Any]:
        """Where the model is loaded: ``{"device_map": ...}`` or ``{"device": ...}`` (keyword arguments of
        :func:`snapeval.load_model`). Not part of the identity: placement does not change results."""
        if self.run_args.device_map is not None:
            return {"device_map": self.run_args.device_map_value}
        return {"device": self.run_args.device}

    @property
    def name(self) -> str:
        return self.pretrained

    def identity(self) -> dict[str, Any]:
        """The model and every run argument that changes what is measured: ``dtype``, ``batch_size`` and
        ``max_gen_toks`` always (as cells have always been hashed), any other only when it is not at its default
        (:meth:`snapeval.run_args.RunArgs.identity`), so that cells hashed before it existed keep their ids."""
        identity = {"pretrained": self.pretrained, "dtype": self.dtype, "batch_size": self.batch_size,
                    "max_gen_toks": self.max_gen_toks}
        identity.update({k: v for k, v in self.run_args.identity().items() if k not in identity})
        return identity


@dataclass(frozen=True)
class SimLengths:
    """Prompt and output lengths (tokens) of the simulated full-size deployment for a task."""

    prompt_len: int | None = None
    gen_len: int | None = None


@dataclass(frozen=True)
class TaskSpec:
    """One lm-eval task of the grid.

    ``metadata`` goes to lm-eval's task ``metadata`` (task parameters such as a synthetic context length);
    ``generation`` is lm-eval's ``gen_kwargs`` for this task; ``metric`` picks the headline metric
    (``name`` or ``name,filter``; default: the first one the task reports); ``data_files`` lists the files, relative
    to the data directory, whose hashes enter the cell identity (default: the benchmark's files, see
    :func:`data_files_for`).
    """

    name: str
    limit: int | None = None
    metadata: tuple[tuple[str, Any], ...] = ()
    generation: tuple[tuple[str, Any], ...] = ()
    metric: str | None = None
    data_files: tuple[str, ...] | None = None
    sim: SimLengths = SimLengths()

    @property
    def metadata_dict(self) -> dict[str, Any]:
        return dict(self.metadata)

    @property
    def generation_dict(self) -> dict[str, Any]:
        return dict(self.generation)


def data_files_for(task: TaskSpec) -> tuple[str, ...]:
    """The data files (relative to the data directory) a task reads; synthetic tasks read none."""
    if task.data_files is not None:
        return task.data_files
    return task_data_files(task.name)


@dataclass(frozen=True)
class MethodSpec:
    """A method entry of the config: a method, the budgets it is swept over, and the settings it sets.

    ``settings``: ``(name, value)`` pairs of the method's own declared settings (:class:`~snapeval.cache.config.
    Setting`: ``sink``, ``recent``, ...); those left out take the method's defaults (a SnapStream or StreamingLLM
    ``recent`` may be tokens or a float fraction of the budget). ``press``: a kvpress press's own arguments.
    """

    method: str
    budgets: tuple[int, ...] = ()
    settings: tuple[tuple[str, Any], ...] = ()
    press: tuple[tuple[str, Any], ...] = ()  # a kvpress press's own arguments (``method: kvpress:<Press>``)

    def points(self) -> list[MethodConfig]:
        """One resolved configuration per budget (:func:`snapeval.cache.resolve_method`): what the cell carries,
        unchanged, to the cache."""
        from snapeval.cache import METHOD_TABLE, resolve_method

        if METHOD_TABLE.is_reference(self.method):
            return [resolve_method(self.method)]
        given = {**dict(self.settings), **dict(self.press)}
        return [resolve_method(self.method, budget=budget, **given) for budget in self.budgets]


@dataclass(frozen=True)
class SimulateSpec:
    """How the SN40L simulator prices each cell's full-size deployment (see :mod:`snapeval.report.results_table`).

    ``batch``: ``"max"`` (the largest batch that fits, capped at ``batch_cap``) or a fixed batch size.
    """

    hardware: str = SIM_HARDWARE_DEFAULT
    batch: int | str = "max"
    batch_cap: int = 1024
    enabled: bool = True


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep: the grid's axes and the settings shared by every cell."""

    name: str
    models: tuple[ModelSpec, ...]
    tasks: tuple[TaskSpec, ...]
    methods: tuple[MethodSpec, ...]
    seeds: tuple[int, ...] = (0,)
    description: str = ""
    out: str | None = None
    data_dir: str | None = None
    include_path: str | None = None
    simulate: SimulateSpec = SimulateSpec()
    #: The report's non-inferiority margin and test level (``decision: {margin, alpha}``; snapeval.stats.decision).
    decision: DecisionRule = DecisionRule()
    source: str = "<config>"
    #: Item shards per (model, task, seed) group (snapeval.sweep.shards): ``shards`` of them, or as many as
    #: ``shard_size`` items each need; neither: one per worker the executor has (one in process).
    shards: int | None = None
    shard_size: int | None = None

    @property
    def data_path(self) -> Path:
        if self.data_dir is None:
            return default_data_dir()
        path = Path(self.data_dir)
        return path if path.is_absolute() else (Path(self.source).parent / path).resolve()

    @property
    def include_dir(self) -> str:
        if self.include_path is None:  # the shipped task folder and those installed packages and the tasks path add
            return include_path(task_folders())
        path = Path(self.include_path)
        return str(path if path.is_absolute() else (Path(self.source).parent / path).resolve())

    def per_cell(self) -> "SweepConfig":
        """The same sweep with every cell run alone (no shared prefill): ``--per-cell``."""
        return dataclasses.replace(self, models=tuple(dataclasses.replace(m, share_prefill=False) for m in self.models))

    def with_limit(self, limit: int | None) -> "SweepConfig":
        """The same sweep with every task's sample limit replaced (``--limit``); a new limit is a new identity."""
        if limit is None:
            return self
        if limit < 1:
            raise SnapevalError(f"--limit must be >= 1; got {limit}")
        return dataclasses.replace(self, tasks=tuple(dataclasses.replace(t, limit=limit) for t in self.tasks))
