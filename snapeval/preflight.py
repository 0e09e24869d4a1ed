"""Checks of what a command reads and writes, run before anything heavy loads (no torch, no lm-eval, no model).

Each entry point (``snapeval run``, ``sweep`` with or without ``--dry-run``, ``simulate``, ``report``, ``regress``,
``snapeval-lm-eval``) calls the checks of the inputs it has, first: task names (with "did you mean" suggestions,
read from the task folders' YAML, not from lm-eval's task index), the task folder variables, the data files of the
chosen tasks, output paths (writable, not another sweep's results folder), results folders to read and the Ray
address (one connection attempt with a bounded wait). The run arguments themselves (dtype, device, batch size, ...)
are checked where they are declared. Every failure is one :class:`~snapeval.errors.SnapevalError` line naming the
field, the value and what is allowed (exit 2).
"""
from __future__ import annotations

import difflib
import functools
import json
import os
import re
from pathlib import Path

from snapeval.errors import SnapevalError

#: The names a YAML file of lm-eval can define: ``task:``, ``group:`` and ``tag:`` (a name or a list of names).
_NAME_LINE = re.compile(r"^(?:task|group|tag):\s*(?:\[(?P<inline>[^\]]*)\]|(?P<one>[A-Za-z0-9_.\-]+))\s*(?:#.*)?$",
                        re.MULTILINE)
_LIST_BLOCK = re.compile(r"^(?:task|group|tag):\s*\n((?:[ \t]*-[ \t]*[A-Za-z0-9_.\-]+[ \t]*\n)+)", re.MULTILINE)
_LIST_ITEM = re.compile(r"-[ \t]*([A-Za-z0-9_.\-]+)")

#: Seconds one connection to a Ray address may take before ``--ray-address`` is refused.
RAY_CONNECT_TIMEOUT_S = 5.0


# task folders and task names ----------------------------------------------------------------------------------------
def check_task_folder_env() -> None:
    """``SNAPEVAL_TASKS_DIR`` and each folder of ``SNAPEVAL_TASKS_PATH``, where set: existing folders."""
    from snapeval.paths import TASKS_DIR_ENV, TASKS_PATH_ENV

    given = os.environ.get(TASKS_DIR_ENV)
    if given is not None:
        _check_folder(TASKS_DIR_ENV, given)
    for part in os.environ.get(TASKS_PATH_ENV, "").split(os.pathsep):
        if part:
            _check_folder(TASKS_PATH_ENV, part)


def _check_folder(field: str, value: str) -> None:
    path = Path(value).expanduser()
    if not path.exists():
        raise SnapevalError(f"{field}={value!r} does not exist; allowed: a folder of lm-eval task YAML")
    if not path.is_dir():
        raise SnapevalError(f"{field}={value!r} is not a folder; allowed: a folder of lm-eval task YAML")


def yaml_task_names(folders) -> set[str]:
    """Every task, group and tag name the ``*.yaml`` files under ``folders`` define (read as text, not loaded)."""
    names: set[str] = set()
    for folder in folders:
        for path in Path(folder).rglob("*.yaml"):
            if not path.is_file():  # a FIFO would block the read (and lm-eval's): refused, never opened
                raise SnapevalError(f"{path} is not a regular file (a FIFO, a device or a folder named *.yaml); "
                                    "allowed: task YAML files in a task folder (move it away)")
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            for match in _NAME_LINE.finditer(text):
                if match["one"]:
                    names.add(match["one"])
                else:
                    names.update(n.strip().strip("'\"") for n in match["inline"].split(",") if n.strip())
            for block in _LIST_BLOCK.finditer(text):
                names.update(_LIST_ITEM.findall(block.group(1)))
    return names


@functools.lru_cache(maxsize=1)
def lm_eval_builtin_task_names() -> frozenset[str]:
    """The names lm-eval's own task folder defines, read from its YAML without importing lm-eval (empty when it is
    not installed)."""
    import importlib.util

    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    return frozenset(yaml_task_names([Path(next(iter(spec.submodule_search_locations))) / "tasks"]))


def check_task_names(names, include: str | os.PathLike | None = None, field: str = "--tasks") -> None:
    """Each of ``names`` is defined by a YAML of the task folders a run reads (``include``, else
    :func:`snapeval.tasks.folders.task_folders`), or by lm-eval's own tasks; otherwise one line with the closest names."""
    from snapeval.tasks.folders import task_folders

    folders = [f for f in task_folders(include) if f.is_dir()]
    known = yaml_task_names(folders)
    if set(names) <= known:
        return
    known |= lm_eval_builtin_task_names()
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            where = ", ".join(str(f) for f in folders) or "none"
            raise SnapevalError(f"{field}={name!r} is not an lm-eval task of the task folders ({where}) or of "
                                f"lm-eval{hint} (allowed: `snapeval tasks` lists them)")


# data ------------------------------------------------------------------------------------------------------------
def check_task_data(names, data_dir: str | os.PathLike | None = None, field: str = "--data-dir") -> None:
    """The local data files of each task's family exist where the run will read them: in the chosen data folder
    (``data_dir`` or ``$SNAPEVAL_DATA_DIR``), or in the default one when the hub cannot be reached."""
    from snapeval.tasks.data import hub_offline, resolve_data_dir
    from snapeval.tasks.families import task_data_files

    directory, explicit = resolve_data_dir(data_dir)
    if explicit and not directory.is_dir():
        raise SnapevalError(f"{field}={str(directory)!r} is not a folder; allowed: a folder of the tasks' data files "
                            "(see docs/tasks.md)")
    missing = [(name, rel) for name in names for rel in task_data_files(name) if not (directory / rel).is_file()]
    if missing and (explicit or hub_offline()):
        name, rel = missing[0]
        raise SnapevalError(f"task {name!r} reads {rel}, which is not in {directory} ({field}: "
                            f"{'given' if explicit else 'the default, and the hub is offline'}); allowed: a data "
                            "folder that holds it (--data-dir or SNAPEVAL_DATA_DIR)")


# outputs ---------------------------------------------------------------------------------------------------------
def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _writable(folder: Path) -> str | None:
    """None when a file can be created in ``folder`` (tried: a temporary file made and removed at once; permission
    bits say nothing to root or on a read-only mount), else why not."""
    import tempfile

    try:
        fd, probe = tempfile.mkstemp(prefix=".snapeval-write-check.", dir=folder)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    os.close(fd)
    os.unlink(probe)
    return None


def check_output_file(path: str | os.PathLike, field: str = "--output") -> None:
    """``path`` can be written: not a folder, and in a folder that exists or can be created, and is writable."""
    path = Path(path)
    if path.is_dir():
        raise SnapevalError(f"{field}={str(path)!r} is a folder; allowed: a file path (e.g. results.json)")
    base = _nearest_existing(path.parent)
    if not base.is_dir():
        raise SnapevalError(f"{field}={str(path)!r} cannot be written: {base} is not a folder; allowed: a file path "
                            "in a writable folder")
    why = _writable(base)
    if why is None and path.exists():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK))
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
    if why is not None:
        raise SnapevalError(f"{field}={str(path)!r} cannot be written ({why} in {base}); allowed: a file path in a "
                            "writable folder")


def check_output_folder(path: str | os.PathLike, field: str) -> None:
    """``path`` is, or can be made, a folder to write in (``report --out``)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise SnapevalError(f"{field}={str(path)!r} is not a folder; allowed: a new folder or a writable one")
    base = _nearest_existing(path)
    why = _writable(base) if base.is_dir() else f"{base} is not a folder"
    if why is not None:
        raise SnapevalError(f"{field}={str(path)!r} cannot be written ({why} in {base}); allowed: a folder you can "
                            "write")


#: What a sweep writes at the top of its results folder besides ``manifest.json`` and ``cells/``.
_SWEEP_OUTPUTS = ("results.csv", "results.parquet", "report")


def check_results_folder(out: str | os.PathLike, sweep: str, field: str = "--out", *, config: str | None = None,
                         cells: list[str] | None = None) -> None:
    """``out`` can hold sweep ``sweep``'s results without replacing anyone else's: a new or writable folder, and
    either no results folder yet or one of the same sweep (its ``manifest.json`` names it). Refused, in one line
    naming the folder: a folder of another sweep (its manifest would be replaced and its report would lose its
    cells: give each sweep its own folder); a ``manifest.json`` that is not a sweep's (damaged, not a file, another
    format, no sweep name: it is never replaced, move it away); one that another config file of the same name
    wrote with another grid (``config``: this config's path as :func:`manifest_config` writes it, ``cells``: its
    cell ids); a folder without a manifest that already holds a results table or a report."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SnapevalError(f"{field}={str(out)!r} is not a folder; allowed: a new folder or this sweep's results "
                            "folder")
    base = _nearest_existing(out)
    why = _writable(base) if base.is_dir() else f"{base} is not a folder"
    if why is not None:
        raise SnapevalError(f"{field}={str(out)!r} cannot be written ({why} in {base}); allowed: a folder you can "
                            "write")
    manifest = out / "manifest.json"
    keep = (f"allowed: a new folder, or this one once its manifest.json is moved away (a sweep writes it again and "
            "keeps every finished cell)")
    if manifest.exists() or manifest.is_symlink():
        from snapeval.results.store import MANIFEST_FORMAT

        if not manifest.is_file():  # a FIFO, a folder, a dangling link: never opened
            raise SnapevalError(f"{field}={str(out)!r}: its manifest.json is not a regular file; {keep}")
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
            raise SnapevalError(f"{field}={str(out)!r}: its manifest.json is damaged ({reason}); {keep}") from None
        owner = data.get("sweep") if isinstance(data, dict) else None
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or not isinstance(owner, str):
            raise SnapevalError(f"{field}={str(out)!r}: its manifest.json is not a snapeval sweep's (format "
                                f"{MANIFEST_FORMAT!r} with a sweep name); {keep}")
        if owner != sweep:
            raise SnapevalError(f"{field}={str(out)!r} holds the results of sweep {owner!r} (its manifest.json); "
                                f"allowed: a new folder or one of sweep {sweep!r} (give this sweep another --out)")
        theirs, listed = data.get("config"), data.get("cells")
        if config is not None and cells is not None and isinstance(theirs, str) and theirs != config \
                and isinstance(listed, list):
            ids = {c.get("cell_id") for c in listed if isinstance(c, dict)}
            if ids != set(cells):
                raise SnapevalError(f"{field}={str(out)!r} holds the results of sweep {sweep!r} from {theirs}, with "
                                    f"another grid than {config}'s; allowed: a new folder (give this sweep another "
                                    "--out), or that config")
    elif out.is_dir():
        theirs = [name for name in _SWEEP_OUTPUTS if (out / name).exists()]
        if theirs:
            raise SnapevalError(f"{field}={str(out)!r} is not a results folder (no manifest.json) but holds "
                                f"{', '.join(theirs)}, which a sweep would replace; allowed: a new folder or a "
                                "sweep's results folder")


def manifest_config(source: str | None) -> str | None:
    """A config's path as a manifest records it: relative to the checkout when inside it (the same in every clone),
    else absolute; None for a config built in Python."""
    if not source or source == "<config>":
        return None
    from snapeval.paths import repo_root

    path = Path(source).resolve()
    try:
        return path.relative_to(repo_root().resolve()).as_posix()
    except ValueError:
        return str(path)


def check_results_to_read(path: str | os.PathLike, field: str) -> None:
    """A results folder given to read (``report``, ``regress --current``): an existing folder."""
    path = Path(path)
    if not path.is_dir():
        why = "it does not exist" if not path.exists() else "it is not a folder"
        raise SnapevalError(f"{field}={str(path)!r} is not a results directory ({why}); allowed: a folder written by "
                            "`snapeval sweep`")


# Ray -------------------------------------------------------------------------------------------------------------
def check_ray_address(address: str | None, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """``--ray-address`` (or ``$RAY_ADDRESS``): ``auto``/``local``, or ``[ray://]HOST:PORT`` that accepts a TCP
    connection within ``timeout_s`` (Ray's own client retries for minutes)."""
    import socket

    field = "--ray-address"
    if address is None:
        address, field = os.environ.get("RAY_ADDRESS"), "RAY_ADDRESS"
    if address is None or address.strip() in ("auto", "local"):
        return
    allowed = "allowed: auto, local, or [ray://]HOST:PORT of a running Ray head"
    text = address.strip()
    host, sep, port = text.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SnapevalError(f"{field}={address!r} is invalid; {allowed}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise SnapevalError(f"{field}={address!r}: no Ray head answers there ({reason} within {timeout_s:g} s); "
                            f"{allowed}") from None
