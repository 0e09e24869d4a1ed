"""Grid expansion and cell identity.

A cell is one lm-eval run: one model, one task, one method configuration (a method at one budget and split), one
seed. Its identity is the SHA-256 of a canonical JSON of everything that changes what the cell measures: the model
and its loading settings, the task with its parameters, sample limit, generation settings and the hashes of the data
files it reads, the method configuration with its full split (stored under the key "policy", so cell ids stay
stable), the seed, and the snapeval version (the code that produces the number). Paths, output directories and
cluster resources are not part of it: moving the data or running elsewhere reuses results.

The task's own files are not part of the identity either (the shipped tasks change with the snapeval version; a
cell id must not move when a comment in a YAML does), but they are recorded: :func:`task_source_sha256` hashes the
folder that defines the task (its YAML, templates and hooks, and the base configs it includes from elsewhere),
every finished cell and shard stores it, and a resumed sweep refuses to reuse a cell finished under other task
files (``snapeval sweep --rerun-stale`` redoes them) and redoes such shards.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from snapeval.cache import METHOD_TABLE, MethodConfig
from snapeval.errors import SnapevalError
from snapeval.results.schema import group_id_of, identity_hash
from snapeval.sweep.config import ModelSpec, SweepConfig, TaskSpec, data_files_for


_HASH_CACHE: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, memoized on (path, size, mtime) so a sweep hashes each data file once."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _HASH_CACHE:
        from snapeval.tasks.data import sha256_file

        _HASH_CACHE[key] = sha256_file(path)
    return _HASH_CACHE[key]


_TASK_KEY = re.compile(r"^(task|group):[ \t]*['\"]?([^'\"#\s]+)", re.MULTILINE)
_SKIPPED_PARTS = {"__pycache__", ".ipynb_checkpoints"}


def task_source_sha256(name: str, include_dir: str | Path) -> str | None:
    """SHA-256 over the folders under ``include_dir`` whose lm-eval YAML defines ``name`` (a top-level ``task:`` or
    ``group:`` key): every file in them and below (relative path and bytes; caches and hidden files skipped), so an
    edited prompt, template, metric or hook in the task's folder gives another hash. A YAML there that ``include:``s
    a file from another folder (a shared base config, as lm-eval resolves it: relative to the including YAML) brings
    that file in, with the modules its ``!function`` tags name and, in turn, its own includes; the rest of that
    folder does not. None when no YAML under ``include_dir`` defines the task (an lm-eval built-in task: the lm-eval
    version, recorded with every cell, covers it)."""
    return task_source_hashes([name], include_dir)[name]


def task_source_hashes(names: list[str], include_dir: str | Path) -> dict[str, str | None]:
    """:func:`task_source_sha256` of every task in ``names``, reading the YAMLs under ``include_dir`` once for all of
    them (a sweep's tasks against a large task suite)."""
    root = Path(include_dir)
    defining: dict[str, set[Path]] = {name: set() for name in names}
    for path in sorted(root.rglob("*.yaml")):
        if _skipped(path.relative_to(root)):
            continue
        for match in _TASK_KEY.finditer(_read_text(path)):
            if match.group(2) in defining:
                defining[match.group(2)].add(path.parent)
    return {name: _folders_sha256(root, sorted(folders)) if folders else None for name, folders in defining.items()}


def include_source_hashes(names: list[str], include: str) -> dict[str, str | None]:
    """:func:`task_source_hashes` over every folder of an include path
    (:func:`snapeval.tasks.folders.task_folders`): each task hashed in the first folder that defines it."""
    from snapeval.tasks.folders import task_folders

    out: dict[str, str | None] = dict.fromkeys(names)
    for folder in task_folders(include):
        missing = [name for name in names if out[name] is None]
        if missing:
            out.update({k: v for k, v in task_source_hashes(missing, folder).items() if v is not None})
    return out


def _folders_sha256(root: Path, folders: list[Path]) -> str:
    """SHA-256 of the task folders ``folders`` (relative path and bytes of every file), of the code folder of each
    task family whose hooks their YAMLs call (:func:`_family_code_folders`: its files named as if they lay in the
    YAML's folder, so a family reads the same whether its YAML sits beside its code or in ``tasks/``), and of what
    their YAMLs reference outside them (:func:`_referenced_outside`). Each YAML is parsed once."""
    parsed: dict[Path, tuple[list[Path], list[Path], list[str]]] = {}

    def references(path: Path) -> tuple[list[Path], list[Path], list[str]]:
        if path not in parsed:
            parsed[path] = _yaml_references(path)
        return parsed[path]

    digest = hashlib.sha256()
    inside: list[Path] = []
    roots = list(folders)
    for folder in folders:
        named = [(p.relative_to(root), p) for p in _files(folder)]
        for code in _family_code_folders(folder, references):
            roots.append(code)
            named += [(folder.relative_to(root) / p.relative_to(code), p) for p in _files(code)]
        for relative, path in sorted(named):
            digest.update(f"{relative.as_posix()}\0{file_sha256(path)}\0".encode())
            inside.append(path)
    for path in _referenced_outside(inside, roots, references):
        digest.update(f"{Path(os.path.relpath(path, root)).as_posix()}\0{file_sha256(path)}\0".encode())
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not _skipped(p.relative_to(folder)))


def _family_code_folders(folder: Path, references) -> list[Path]:
    """The code folders (``snapeval/tasks/<family>/``) of the task families whose hooks module the YAMLs of
    ``folder`` call with ``!function``, unless ``folder`` holds that hooks file itself (a family whose YAML sits
    beside its code)."""
    from snapeval.tasks.families import families

    hooks = {family.hooks: family.folder.resolve() for family in families()}
    called = {spec.rpartition(".")[0] for path in folder.glob("*.yaml") for spec in references(path.resolve())[2]}
    return sorted({hooks[m] for m in called if m in hooks and not (folder / f"{m.rpartition('.')[2]}.py").is_file()})


def _referenced_outside(files: list[Path], folders: list[Path], references) -> list[Path]:
    """The files outside ``folders`` that the YAMLs among ``files`` include, directly or through other included YAMLs,
    and the modules of the included YAMLs' ``!function`` tags (existing files only, sorted)."""
    roots = [folder.resolve() for folder in folders]

    def outside(path: Path) -> bool:
        return not any(path == r or r in path.parents for r in roots)

    found: set[Path] = set()
    pending = [path.resolve() for path in files if path.suffix in (".yaml", ".yml")]
    seen = set(pending)
    while pending:
        includes, modules, _ = references(pending.pop())
        found.update(path for path in includes + modules if path.is_file() and outside(path))
        for path in includes:
            if path not in seen and path.is_file():  # an included YAML's own includes and modules
                seen.add(path)
                pending.append(path)
    return sorted(found)


def _yaml_references(path: Path) -> tuple[list[Path], list[Path], list[str]]:
    """(the YAML files ``path`` includes, the Python modules its ``!function`` tags name, resolved as lm-eval
    resolves them first: relative to the YAML's folder (``utils.process_docs`` -> ``utils.py``), and the tags
    themselves). A YAML that does not parse names nothing (lm-eval reports it when it loads the task)."""
    functions: list[str] = []

    class Loader(yaml.SafeLoader):
        pass

    def function(loader, node):
        functions.append(str(loader.construct_scalar(node)))
        return functions[-1]

    Loader.add_constructor("!function", function)
    try:
        data = yaml.load(_read_text(path), Loader=Loader)  # noqa: S506 (a SafeLoader with one string tag)
    except yaml.YAMLError:
        return [], [], []
    raw = data.get("include") if isinstance(data, dict) else None
    names = [raw] if isinstance(raw, str) else [x for x in raw if isinstance(x, str)] if isinstance(raw, list) else []
    includes = [Path(n) if Path(n).is_absolute() else path.parent / n for n in names]
    modules = [path.parent / f"{spec.rpartition('.')[0].replace('.', '/')}.py" for spec in functions if "." in spec]
    return [p.resolve() for p in includes], [p.resolve() for p in modules], functions


def _skipped(relative: Path) -> bool:
    return any(part in _SKIPPED_PARTS or part.startswith(".") for part in relative.parts)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def data_hashes(task: TaskSpec, data_dir: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of the data files a task reads; a missing file is a one-line error."""
    out = {}
    for rel in data_files_for(task):
        path = data_dir / rel
        if not path.is_file():
            raise SnapevalError(f"task {task.name!r} reads {rel} but {path} does not exist; set data_dir in the config "
                                f"or SNAPEVAL_DATA_DIR to the folder that holds it")
        out[rel] = file_sha256(path)
    return out


@dataclass(frozen=True)
class CellView:
    """The flat description of a cell that the results table, reports and paired statistics use (stored in the
    manifest, one per cell). ``settings``: the value of snapeval's own methods' settings and of the cell's own method's
    (:meth:`~snapeval.cache.methods.MethodTable.column_settings`; ``None`` for those its configuration lacks),
    flattened into :meth:`to_dict` beside the other fields."""

    cell_id: str
    label: str
    model: str
    dtype: str
    simulate_as: str | None
    task: str
    metric: str | None
    method: str
    budget: int | None
    settings: tuple[tuple[str, Any], ...]
    seed: int
    limit: int | None
    sim_prompt_len: int | None
    sim_gen_len: int | None
    group_id: str | None = None  # cells of one (model, task, seed, items) group: what paired statistics pair

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "settings"}
        out.update(self.settings)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CellView":
        names = {f.name for f in fields(cls)} - {"settings"}
        settings = tuple((k, data.get(k)) for k in METHOD_TABLE.column_settings([data.get("method")]))
        return cls(**{k: v for k, v in data.items() if k in names}, settings=settings)


@dataclass(frozen=True)
class Cell:
    """One run of the grid. ``cell_id`` is stable across processes, machines and key order in the YAML."""

    model: ModelSpec
    task: TaskSpec
    config: MethodConfig  # stored in the identity under its old key, "policy" (cell ids stay stable)
    seed: int
    data: tuple[tuple[str, str], ...] = ()
    snapeval_version: str = ""
    data_dir: str = field(default="", compare=False)
    include_path: str = field(default="", compare=False)
    task_source: str | None = field(default=None, compare=False)  # task_source_sha256: recorded, not identity

    def identity(self) -> dict[str, Any]:
        """Everything that changes the meaning of this cell's numbers (hashed into :attr:`cell_id`)."""
        return {
            "snapeval": self.snapeval_version,
            "model": self.model.identity(),
            "task": {"name": self.task.name, "metadata": self.task.metadata_dict, "limit": self.task.limit,
                     "generation": self.task.generation_dict, "data": dict(self.data)},
            "policy": self.config.identity(),
            "seed": self.seed,
        }

    @property
    def group_id(self) -> str:
        """Everything but the method configuration, hashed (:func:`snapeval.results.schema.group_id_of`): cells of one group
        answer the same items, so they share one prefill per item and are compared item by item."""
        return group_id_of(self.identity())

    @property
    def cell_id(self) -> str:
        return identity_hash(self.identity())

    @property
    def label(self) -> str:
        return f"{self.model.name} | {self.task.name} | {self.config.label} | seed {self.seed}"

    @property
    def shares_prefill(self) -> bool:
        """Whether this cell can be one branch of a shared prefill (its method builds caches from a capture)."""
        from snapeval.cache import method_info

        return self.model.share_prefill and method_info(self.config).branches

    def view(self) -> CellView:
        """The flat description of this cell that the results table and reports use (stored in the manifest)."""
        config = self.config
        names = dict.fromkeys([*METHOD_TABLE.column_settings(), *(s.stored for s in config.settings())])
        return CellView(
            cell_id=self.cell_id, label=self.label, model=self.model.name, dtype=self.model.dtype,
            simulate_as=self.model.simulate_as, task=self.task.name, metric=self.task.metric,
            method=config.method, budget=config.budget,
            settings=tuple((name, config.stored_value(name)) for name in names), seed=self.seed,
            limit=self.task.limit,
            sim_prompt_len=self.task.sim.prompt_len, sim_gen_len=self.task.sim.gen_len, group_id=self.group_id,
        )

    def evaluate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`snapeval.harness.evaluate` for this cell."""
        # the method's configuration and the model's run arguments, both resolved once, handed on unchanged
        model_args: dict[str, Any] = {"pretrained": self.model.pretrained, "config": self.config,
                                      "run_args": self.model.run_args}
        metadata = {**self.task.metadata_dict, "pretrained": self.model.pretrained}
        if self.data_dir:
            metadata["data_dir"] = self.data_dir
        kwargs: dict[str, Any] = {"model_args": model_args, "tasks": [self.task.name], "limit": self.task.limit,
                                  "gen_kwargs": self.task.generation_dict or None, "seed": self.seed,
                                  "metadata": metadata, "log_samples": True}
        if self.include_path:
            kwargs["include_path"] = self.include_path
        return kwargs


def expand_grid(config: SweepConfig) -> list[Cell]:
    """All cells of a sweep, in a stable order: model, task, method (config order), budget, seed.

    ``full`` appears once per (model, task, seed) even if listed with several budgets.
    """
    from snapeval import __version__

    data_dir = config.data_path
    hashes = {task.name: tuple(sorted(data_hashes(task, data_dir).items())) for task in config.tasks}
    sources = include_source_hashes([task.name for task in config.tasks], config.include_dir)
    cells: list[Cell] = []
    seen: set[str] = set()
    for model in config.models:
        for task in config.tasks:
            for spec in config.methods:
                for point in spec.points():  # a resolved method configuration
                    for seed in config.seeds:
                        cell = Cell(model=model, task=task, config=point, seed=seed, data=hashes[task.name],
                                    snapeval_version=__version__, data_dir=str(data_dir),
                                    include_path=config.include_dir, task_source=sources[task.name])
                        if cell.cell_id not in seen:  # e.g. the same budget listed under two entries
                            seen.add(cell.cell_id)
                            cells.append(cell)
    return cells
