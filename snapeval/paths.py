"""The one place that resolves where snapeval finds what it does not compute: the repository checkout, the lm-eval
task folder, the benchmark data and the cache of converted models. Each honours its environment variable first.

=================  ======================  ==========================================================================
what               variable                default
=================  ======================  ==========================================================================
tasks folder       ``SNAPEVAL_TASKS_DIR``  ``tasks/`` in a checkout (the task families' lm-eval YAML, one folder each;
                                           their code and hooks in ``snapeval/tasks/<family>/``), or
                                           ``snapeval/task_yaml`` where a wheel installed that folder
more task folders  ``SNAPEVAL_TASKS_PATH`` none (folders joined by ``os.pathsep``, added to the tasks folder by
                                           :func:`snapeval.tasks.folders.task_folders`)
data directory     ``SNAPEVAL_DATA_DIR``   ``shared/data`` beside the repository checkout
cache directory    ``SNAPEVAL_CACHE_DIR``  ``$XDG_CACHE_HOME/snapeval``, else ``~/.cache/snapeval``
=================  ======================  ==========================================================================

This module imports nothing of snapeval (a ground module, ``tests/test_architecture.py``).
"""
from __future__ import annotations

import os
from pathlib import Path

TASKS_DIR_ENV = "SNAPEVAL_TASKS_DIR"
TASKS_PATH_ENV = "SNAPEVAL_TASKS_PATH"
DATA_DIR_ENV = "SNAPEVAL_DATA_DIR"
CACHE_DIR_ENV = "SNAPEVAL_CACHE_DIR"


def repo_root() -> Path:
    """The checkout this package runs from (``snapeval/`` lives directly below it)."""
    return Path(__file__).resolve().parents[1]


def tasks_dir() -> Path:
    """The lm-eval task folder: ``$SNAPEVAL_TASKS_DIR`` if set, else the task families shipped with snapeval
    (:func:`shipped_tasks_dir`)."""
    env = os.environ.get(TASKS_DIR_ENV)
    return Path(env).expanduser() if env else shipped_tasks_dir()


def shipped_tasks_dir() -> Path:
    """The task families' YAML: ``snapeval/task_yaml`` where a wheel installed them, else ``tasks/`` of the checkout
    (``lm_eval --include_path tasks/`` reads the same files)."""
    installed = Path(__file__).resolve().parent / "task_yaml"
    return installed if installed.is_dir() else repo_root() / "tasks"


def data_dir_is_set(given: str | os.PathLike | None = None) -> bool:
    """Whether a data directory was chosen (``given``, or ``$SNAPEVAL_DATA_DIR``) rather than defaulted: a chosen one
    is read alone, never the hub."""
    return bool(given) or bool(os.environ.get(DATA_DIR_ENV))


def default_data_dir(given: str | os.PathLike | None = None) -> Path:
    """The benchmark data: ``given``, else ``$SNAPEVAL_DATA_DIR``, else ``shared/data`` beside the repository
    checkout."""
    if given:
        return Path(given).expanduser()
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env).expanduser() if env else repo_root().parent / "shared" / "data"


def cache_dir() -> Path:
    """Where converted models live: ``$SNAPEVAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/snapeval``, else
    ``~/.cache/snapeval``."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "snapeval"
