"""The lm-eval task folders a run reads and the one builder of lm-eval's ``TaskManager`` over them.

The tasks folder itself (``$SNAPEVAL_TASKS_DIR``, default ``tasks/`` of the checkout) is resolved by
:func:`snapeval.paths.tasks_dir`; what needs the task families (the folders installed packages add) lives here, so
that :mod:`snapeval.paths` imports nothing of snapeval. Nothing here imports lm-eval at module level.
"""
from __future__ import annotations

import os
from pathlib import Path

from snapeval.paths import TASKS_PATH_ENV, tasks_dir


def task_folders(include: str | os.PathLike | None = None) -> list[Path]:
    """Every lm-eval task folder a run reads: ``include`` when given (one folder, or folders joined by
    ``os.pathsep``); else :func:`snapeval.paths.tasks_dir`, then the folder of each task family an installed package
    adds (the ``snapeval.tasks`` entry points, :func:`snapeval.tasks.families.families`), then each folder of
    ``$SNAPEVAL_TASKS_PATH``, each once."""
    if include:
        return [Path(p).expanduser() for p in str(include).split(os.pathsep) if p]
    from snapeval.tasks.families import plugin_families

    folders = [tasks_dir(), *(family.folder for family in plugin_families())]
    folders += [Path(p).expanduser() for p in os.environ.get(TASKS_PATH_ENV, "").split(os.pathsep) if p]
    return list(dict.fromkeys(folders))


def include_path(folders: list[Path]) -> str:
    """``folders`` as one include path (joined by ``os.pathsep``): what a sweep cell records and
    :func:`task_folders` reads back."""
    return os.pathsep.join(str(folder) for folder in folders)


def include_folders(include: str | os.PathLike | None) -> list[str] | None:
    """An include path (:func:`include_path`) as the folder list lm-eval's ``TaskManager`` takes (None: none)."""
    return [str(folder) for folder in task_folders(include)] if include else None


def task_manager(folders: list[str] | None, *, defaults: bool = False, metadata: dict | None = None):
    """lm-eval's ``TaskManager`` over ``folders`` (:func:`include_folders`; None: no folder), with lm-eval's
    built-in tasks only when ``defaults`` is set (indexing them takes seconds; the repository's folders take
    milliseconds), and ``metadata`` handed to every task it loads. The one place snapeval builds one."""
    from lm_eval.tasks import TaskManager

    kwargs = {} if metadata is None else {"metadata": metadata}
    return TaskManager(include_path=folders, include_defaults=defaults, **kwargs)
