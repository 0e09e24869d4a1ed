"""A results directory: one JSON file per finished cell, a manifest of the sweep's grid, and the tidy table.

Layout::

    <dir>/cells/<cell_id>.json         finished cells (written atomically: tmp file, fsync, rename)
    <dir>/cells/<cell_id>.error.txt    the traceback of a cell that failed (it is retried on the next run)
    <dir>/cells/<cell_id>.shards/<k>-of-<S>.json   finished item shards of a cell not yet merged (atomic too; merged
                                       into the cell file, then removed: snapeval.sweep.shards)
    <dir>/manifest.json                the last sweep's cells, in grid order, with what the table needs to describe them
    <dir>/results.parquet, results.csv the tidy table (one row per cell and metric)

A crash (even ``kill -9``) can only lose the cell being written: a cell file either exists complete or not at all,
and a stray ``*.tmp`` file from an interrupted write is ignored and cleaned up.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from snapeval.errors import SnapevalError
from snapeval.results.schema import CellResult

MANIFEST_FORMAT = "snapeval-manifest/1"
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the complete new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; results are ordinary files
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def open_lock_file(path: Path) -> int:
    """Open (creating it if absent) a lock file that is snapeval's own and nothing else: created with ``O_EXCL``, an
    existing one opened with ``O_NOFOLLOW`` (a symbolic link is refused, its target never opened) and ``O_NONBLOCK``
    (a FIFO never blocks), then refused unless it is a regular file with one name (a hard link to a user's file is
    never truncated). One-line :class:`SnapevalError` naming the path otherwise."""
    import stat

    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    remedy = "allowed: a regular file snapeval created (remove it, or give another --out)"
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        try:
            fd = os.open(path, flags)
        except OSError as exc:  # ELOOP: a symbolic link (never followed); ENXIO: a FIFO with no reader
            kind = "a symbolic link" if os.path.islink(path) else f"not a regular file ({exc.strerror})"
            raise SnapevalError(f"{path} is {kind}; {remedy}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        kind = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"a file with {info.st_nlink} hard links"
        raise SnapevalError(f"{path} is {kind}; {remedy}")
    return fd


class SweepLock:
    """``with SweepLock(dir):`` one sweep at a time per results directory (``fcntl`` lock on ``<dir>/.sweep.lock``,
    released by the kernel if the process dies, even by ``kill -9``). A second sweep fails at once with one line
    naming the process that holds it."""

    def __init__(self, root: Path):
        self.path = Path(root) / ".sweep.lock"
        self.fd = -1

    def __enter__(self) -> "SweepLock":
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = open_lock_file(self.path)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 64, 0).decode("ascii", "replace").strip() or "?"
            os.close(self.fd)
            self.fd = -1
            raise SnapevalError(f"{self.path.parent}: another sweep (pid {holder}) is writing this results directory; "
                                "wait for it to finish, or give this one another --out") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing releases the lock
            self.fd = -1


class ResultsStore:
    """Read and write one results directory."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.cells_dir = self.root / "cells"

    # cells ---------------------------------------------------------------------------------------------------------
    def cell_path(self, cell_id: str) -> Path:
        return self.cells_dir / f"{cell_id}.json"

    def error_path(self, cell_id: str) -> Path:
        return self.cells_dir / f"{cell_id}.error.txt"

    def has(self, cell_id: str) -> bool:
        """True if a complete, readable result for this cell exists (a corrupt file counts as absent)."""
        return self.finished_or_none(cell_id) is not None

    def finished_or_none(self, cell_id: str) -> CellResult | None:
        """This cell's complete, readable result, or None (no file, a corrupt one, or another cell's)."""
        if not self.cell_path(cell_id).is_file():
            return None
        try:
            result = self.read(cell_id)
        except SnapevalError:
            return None
        return result if result.cell_id == cell_id else None

    def read(self, cell_id: str) -> CellResult:
        """A finished cell, validated as it is read (:func:`snapeval.results.schema.validate_cell_dict`). Anything
        wrong is one line naming the file, the cell, the field and the remedy."""
        path = self.cell_path(cell_id)
        remedy = (f"re-run the sweep with --out {self.root} to recompute this cell (a sweep redoes every cell whose "
                  "file it cannot read)")
        if path.exists() and not path.is_file():  # a folder, a FIFO, a device: never opened (a FIFO would block)
            raise SnapevalError(f"{path}: cell {cell_id}: not a regular file; move it away and {remedy}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise SnapevalError(f"{path}: cell {cell_id}: cannot read the result ({why}); {remedy}") from None
        try:
            return CellResult.from_json(text)
        except SnapevalError as exc:
            what = str(exc) if str(exc).startswith("cell ") else f"cell {cell_id}: {exc}"
            raise SnapevalError(f"{path}: {what}; {remedy}") from None

    def write(self, result: CellResult) -> Path:
        path = self.cell_path(result.cell_id)
        atomic_write_text(path, result.to_json())
        self.error_path(result.cell_id).unlink(missing_ok=True)
        return path

    def write_error(self, cell_id: str, label: str, text: str) -> Path:
        path = self.error_path(cell_id)
        atomic_write_text(path, f"{label}\n\n{text}")
        return path

    # item shards of a cell ----------------------------------------------------------------------------------------
    def shard_dir(self, cell_id: str) -> Path:
        return self.cells_dir / f"{cell_id}.shards"

    def shard_path(self, cell_id: str, index: int, count: int) -> Path:
        return self.shard_dir(cell_id) / f"{index + 1}-of-{count}.json"

    def write_shard(self, cell_id: str, index: int, count: int, text: str) -> Path:
        """Write one finished shard's JSON (:class:`snapeval.sweep.shards.ShardResult`) atomically."""
        path = self.shard_path(cell_id, index, count)
        atomic_write_text(path, text)
        return path

    def shard_texts(self, cell_id: str) -> dict[str, str]:
        """``{file name: JSON}`` of a cell's shard files (an unreadable file is left out)."""
        out = {}
        for path in sorted(self.shard_dir(cell_id).glob("*-of-*.json")):
            try:
                out[path.name] = path.read_text(encoding="utf-8")
            except OSError:
                continue
        return out

    def clear_shards(self, cell_id: str) -> None:
        """Remove a merged cell's shard files."""
        folder = self.shard_dir(cell_id)
        if folder.is_dir():
            for path in folder.iterdir():
                path.unlink(missing_ok=True)
            folder.rmdir()

    def clean_tmp(self) -> int:
        """Remove temporary files left by an interrupted write; returns how many there were."""
        if not self.cells_dir.is_dir():
            return 0
        stale = list(self.cells_dir.glob(".*.tmp")) + list(self.cells_dir.glob("*.shards/.*.tmp"))
        for path in stale:
            path.unlink(missing_ok=True)
        return len(stale)

    # manifest ------------------------------------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def write_manifest(self, name: str, cells: list[dict[str, Any]], simulate: dict[str, Any],
                       decision: dict[str, Any] | None = None, config: str | None = None) -> None:
        """The grid's cells, the simulator settings and the sweep's decision rule (margin, alpha) for its report;
        ``config``: the config file that wrote it (:func:`snapeval.preflight.manifest_config`), so that another file
        of the same sweep name with another grid is refused instead of replacing it."""
        manifest = {"format": MANIFEST_FORMAT, "sweep": name, "simulate": simulate, "cells": cells}
        if decision is not None:
            manifest["decision"] = decision
        if config is not None:
            manifest["config"] = config
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=1, sort_keys=True))

    def read_manifest(self) -> dict[str, Any]:
        rerun = (f"re-run `snapeval sweep CONFIG --out {self.root}` with the config that wrote it (it writes the "
                 "manifest again and keeps every finished cell)")
        remedy = f"move it away and {rerun}"  # a sweep never replaces a manifest it cannot read
        if self.manifest_path.exists() and not self.manifest_path.is_file():  # a FIFO or a folder: never opened
            raise SnapevalError(f"{self.manifest_path} is not a regular file; {remedy}")
        if not self.manifest_path.is_file():
            if self.cells_dir.is_dir():
                raise SnapevalError(f"{self.manifest_path} is missing; {rerun}")
            raise SnapevalError(f"{self.root} is not a results directory (no manifest.json); "
                                f"run `snapeval sweep CONFIG --out {self.root}` first")
        try:
            data = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SnapevalError(f"{self.manifest_path} is not valid JSON ({exc}); {remedy}") from None
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
            raise SnapevalError(f"{self.manifest_path}: format must be {MANIFEST_FORMAT!r}; {remedy}")
        cells = data.get("cells")
        if not isinstance(cells, list) or not all(isinstance(c, dict) and isinstance(c.get("cell_id"), str)
                                                  for c in cells):
            raise SnapevalError(f"{self.manifest_path}: cells must be a list of objects with a cell_id; {remedy}")
        ids = [c["cell_id"] for c in cells]
        if len(set(ids)) != len(ids):
            twice = next(i for i in ids if ids.count(i) > 1)
            raise SnapevalError(f"{self.manifest_path}: cell {twice} is listed {ids.count(twice)} times; allowed: "
                                f"each cell once; {remedy}")
        return data

    def finished(self) -> list[CellResult]:
        """The finished cells of the manifest's grid, in grid order (unfinished ones, with no file, are left out:
        :meth:`unfinished` names them). A cell's path that is not a regular file, or a file holding another cell
        (a swapped or copied file), is a one-line error."""
        out = []
        for entry in self.read_manifest()["cells"]:
            cell_id, path = entry["cell_id"], self.cell_path(entry["cell_id"])
            if not (path.exists() or path.is_symlink()):
                continue
            result = self.read(cell_id)
            if result.cell_id != cell_id:
                raise SnapevalError(f"{path}: holds cell {result.cell_id}, not cell {cell_id} (a file renamed or "
                                    f"copied?); move it away and re-run the sweep with --out {self.root} to "
                                    "recompute this cell")
            out.append(result)
        return out

    def unfinished(self) -> list[str]:
        """The manifest's cells with no result file (a sweep stopped before them, or a file removed)."""
        return [e["cell_id"] for e in self.read_manifest()["cells"]
                if not (self.cell_path(e["cell_id"]).exists() or self.cell_path(e["cell_id"]).is_symlink())]

    # table ---------------------------------------------------------------------------------------------------------
    @property
    def table_paths(self) -> tuple[Path, Path]:
        return self.root / "results.parquet", self.root / "results.csv"

    def write_table(self, table) -> tuple[Path, Path]:
        """Write the tidy table as Parquet and CSV (each atomically)."""
        parquet, csv = self.table_paths
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = parquet.with_name(f".{parquet.name}.tmp")
        table.to_parquet(tmp, index=False)
        os.replace(tmp, parquet)
        atomic_write_text(csv, table.to_csv(index=False))
        return parquet, csv

    def foreign_cells(self) -> list[str]:
        """Finished cell files in ``cells/`` that the manifest does not list (another configuration wrote them)."""
        listed = {v["cell_id"] for v in self.read_manifest()["cells"]}
        return sorted(p.stem for p in self.cells_dir.glob("*.json") if p.stem not in listed)

    def lock(self) -> "SweepLock":
        """An exclusive lock on this directory for one sweep process (see :class:`SweepLock`)."""
        return SweepLock(self.root)
