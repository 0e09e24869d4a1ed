"""The task families: one folder each under ``snapeval/tasks/``, found by looking (no list to edit), and those that
installed packages add through the ``snapeval.tasks`` entry point group.

A family's folder holds its code (data loading, prompts, scoring) and its lm-eval hooks (``hooks.py``); its lm-eval
task YAML lives in the folder of the same name under the top-level ``tasks/`` (where lm-eval users look:
``--include_path tasks/``; :func:`snapeval.paths.shipped_tasks_dir`). Its ``__init__.py`` declares, in one place, a :class:`TaskFamily` named ``FAMILY``: the prefix of
its task names, the data it reads (a :class:`~snapeval.tasks.data.DatasetSpec`, whose files are hashed into a sweep
cell's identity) and the typical lengths of its samples (what the SN40L pricing of a results row deploys). A new task
is one folder (``CONTRIBUTING.md``). Nothing here imports torch or lm-eval.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from snapeval.errors import SnapevalError
from snapeval.tasks.data import DatasetSpec

_TASK_LINE = re.compile(r"^task:\s*([A-Za-z0-9_.\-]+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class TaskFamily:
    """One benchmark's declaration (``FAMILY`` in its folder's ``__init__.py``).

    Attributes:
        name: the prefix its lm-eval task names share (``longbench_v2`` for ``longbench_v2`` and
            ``longbench_v2_cot``).
        data: the dataset it reads, with its local files relative to the data directory (None: it generates its
            items, as the synthetic tasks do).
        typical_lengths: mean (prompt, generated) tokens per sample of the benchmark's typical deployment, priced by
            the simulator for a results row (None: the run's own lengths).
        hooks: the module of its lm-eval hooks (``snapeval.tasks.<folder>.hooks``), which its YAML calls as
            ``!function <hooks>.<name>``.
        reference_reply: what a model that knows a doc's answer replies (``doc -> text``), in the form the family
            scores as right: its answer format, and the known answers of the task-family contract tests. None where
            no reply can be written from the doc (LiveCodeBench's programs).
        cluster: the cluster key of a data row (rows with one key are not independent: questions on one document);
            None: every row is its own cluster. Its hooks label samples with it, and the report plans the items a
            decision needs with the design effect of this layout (:func:`layout_cluster_sizes`).
    """

    name: str
    data: DatasetSpec | None
    typical_lengths: tuple[int, int] | None
    hooks: str
    reference_reply: Callable[[dict], str] | None = None
    cluster: Callable[[dict], Any] | None = None

    def __post_init__(self) -> None:
        if self.typical_lengths is not None and (len(self.typical_lengths) != 2 or min(self.typical_lengths) < 1):
            raise SnapevalError(f"TaskFamily({self.name!r}).typical_lengths={self.typical_lengths!r} is invalid; "
                                "allowed: None or (prompt tokens, generated tokens), both >= 1")

    def matches(self, task: str) -> bool:
        """Whether ``task`` (an lm-eval task name) is one of this family's."""
        return task == self.name or task.startswith(self.name + "_")

    @property
    def data_files(self) -> tuple[str, ...]:
        """The local files (relative to the data directory) it reads; none for a generated family."""
        return tuple(self.data.local_files) if self.data is not None else ()

    @property
    def folder(self) -> Path:
        """Its code folder: the code and the hooks (``snapeval/tasks/<family>/``)."""
        return Path(importlib.import_module(self.hooks.rpartition(".")[0]).__file__).parent

    @property
    def yaml_folder(self) -> Path:
        """Its lm-eval task YAML: for a shipped family the folder of the same name in the shipped tasks folder
        (``tasks/<family>/``); for a family an installed package adds (``snapeval.tasks`` entry points), its own
        folder, which holds its YAML beside its code."""
        from snapeval.paths import shipped_tasks_dir

        if self.folder.parent != Path(__file__).resolve().parent:
            return self.folder
        return shipped_tasks_dir() / self.folder.name

    def task_names(self) -> tuple[str, ...]:
        """The lm-eval tasks its YAML files define (groups excluded), read from its YAML folder."""
        names = []
        for path in sorted(self.yaml_folder.glob("*.yaml")):
            names += _TASK_LINE.findall(path.read_text(encoding="utf-8"))
        return tuple(names)


#: The entry-point group of task families added by installed packages (each names a :class:`TaskFamily`).
TASKS_GROUP = "snapeval.tasks"


@functools.lru_cache(maxsize=1)
def families() -> tuple[TaskFamily, ...]:
    """Every family: the ``FAMILY`` of each package below ``snapeval.tasks`` (in name order), then those of installed
    packages (:func:`plugin_families`)."""
    import snapeval.tasks as package

    found = []
    for module in pkgutil.iter_modules(package.__path__):
        if module.ispkg:
            declared = getattr(importlib.import_module(f"{package.__name__}.{module.name}"), "FAMILY", None)
            if isinstance(declared, TaskFamily):
                found.append(declared)
    return (*found, *plugin_families())


@functools.lru_cache(maxsize=1)
def plugin_families() -> tuple[TaskFamily, ...]:
    """The families installed packages add: each entry point of :data:`TASKS_GROUP` names a :class:`TaskFamily`
    (its folder, the one of its hooks module, holds its lm-eval YAML), in name order; one-line error for an entry
    point that names something else."""
    from importlib.metadata import entry_points

    import sys

    found = []
    for entry in sorted(entry_points(group=TASKS_GROUP), key=lambda ep: ep.name):
        try:  # a plugin that raises or exits is named in one warning and skipped: the others keep working
            declared = entry.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            why = str(exc).splitlines()[0] if str(exc) else ""
            print(f"snapeval: warning: task family {entry.name!r} (entry point {entry.value!r} of {TASKS_GROUP}) "
                  f"cannot be loaded: {type(exc).__name__}: {why}; skipped", file=sys.stderr)
            continue
        if not isinstance(declared, TaskFamily):
            print(f"snapeval: warning: entry point {entry.name!r} of {TASKS_GROUP} ({entry.value}) must name a "
                  f"TaskFamily; got {type(declared).__name__}; skipped", file=sys.stderr)
            continue
        found.append(declared)
    return tuple(found)


def task_family(task: str) -> TaskFamily | None:
    """The family an lm-eval task name belongs to, or None (a task of another folder)."""
    return next((family for family in families() if family.matches(task)), None)


@functools.lru_cache(maxsize=16)
def layout_cluster_sizes(task: str, data_dir: str | None = None) -> tuple[int, ...] | None:
    """The cluster sizes of a task's whole item set (one entry per cluster, from its family's
    :attr:`TaskFamily.cluster` over the rows of its local data files), read from the data directory only (never the
    hub); None for a task of no family, a family without clusters or data, or data files that are not there."""
    from snapeval.tasks.data import read_jsonl, resolve_data_dir

    family = task_family(task)
    if family is None or family.cluster is None or family.data is None:
        return None
    directory, _ = resolve_data_dir(data_dir)
    paths = [directory / rel for rel in family.data.local_files]
    if not all(path.is_file() for path in paths):
        return None
    counts: dict[Any, int] = {}
    for path in paths:
        for row in read_jsonl(path, family.data.schema):
            key = family.cluster(row)
            counts[key] = counts.get(key, 0) + 1
    return tuple(counts.values())


def typical_lengths(task: str) -> tuple[int, int] | None:
    """(prompt, generated) tokens typical of the benchmark a task name belongs to; None for a family that generates
    its items (its lengths are set by its configuration) or a task of no family."""
    family = task_family(task)
    return family.typical_lengths if family is not None else None


def task_data_files(task: str) -> tuple[str, ...]:
    """The local files (relative to the data directory) a task reads: its family's; none for a generated family or a
    task of no family."""
    family = task_family(task)
    return family.data_files if family is not None else ()


def __getattr__(name: str):
    if name == "TYPICAL_LENGTHS":  # {family: (prompt, generated)} of the families that declare them
        return {f.name: f.typical_lengths for f in families() if f.typical_lengths is not None}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
