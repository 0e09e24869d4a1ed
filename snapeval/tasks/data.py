"""Benchmark data: hub datasets when reachable, otherwise local JSON Lines files in the hub schema.

Every row is validated on load against a :class:`Schema` (field name -> allowed Python types). A missing file, a
line that is not JSON, a missing field or a wrong type raises a one-line :class:`~snapeval.errors.SnapevalError`
naming the file, the line and the field. Every load is recorded (file, sha256, rows) in a process-wide registry
that results writers read with :func:`loaded_data_records`.

Resolution order for a dataset:

1. an explicit data directory (``data_dir`` argument, lm-eval ``--metadata '{"data_dir": ...}'``, or
   ``SNAPEVAL_DATA_DIR``): local files only;
2. the Hugging Face hub, unless ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` is set or a 2-second TCP probe of the hub
   endpoint fails (so an offline machine never sits in the hub's retry loop);
3. ``../shared/data`` beside the repository checkout.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import urlparse

from snapeval.errors import SnapevalError
from snapeval.paths import DATA_DIR_ENV, data_dir_is_set, default_data_dir

_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


@dataclass(frozen=True)
class Schema:
    """Required fields of a row and the Python types each may hold (``None`` is never accepted)."""

    fields: dict[str, tuple[type, ...]]

    def validate(self, row: Any, source: str, line: int) -> dict:
        """Return ``row`` if it matches, else raise a one-line error naming ``source``, ``line`` and the field."""
        if not isinstance(row, dict):
            raise SnapevalError(f"{source}:{line}: a row must be a JSON object, got {type(row).__name__}")
        for name, types in self.fields.items():
            if name not in row:
                raise SnapevalError(f"{source}:{line}: missing field {name!r}")
            value = row[name]
            # bool is an int subclass: never accept it where a number is expected
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                allowed = "/".join(t.__name__ for t in types)
                raise SnapevalError(
                    f"{source}:{line}: field {name!r} must be {allowed}, got {type(value).__name__}"
                )
        return row


@dataclass(frozen=True)
class DatasetSpec:
    """Where a benchmark lives: its hub id and split, and its local file(s) relative to the data directory."""

    name: str
    hub_id: str
    hub_split: str
    local_files: tuple[str, ...]
    schema: Schema
    #: Optional loader for the hub (default: ``datasets.load_dataset(hub_id, split=hub_split)``).
    hub_loader: Callable[[], Iterable[dict]] | None = None


@dataclass
class LoadedData:
    """Rows of one dataset and where they came from.

    ``source`` is a local path or ``hub:<id>``; ``sha256`` hashes the bytes of the local file(s) read (for the
    hub: the hash of the rows' canonical JSON, since the hub's own files are not kept).
    """

    name: str
    rows: list[dict]
    source: str
    sha256: str
    rows_total: int
    rows_used: int = -1
    notes: dict[str, Any] = field(default_factory=dict)
    #: ``file:line`` of every row (``hub:<id>:<n>`` for the hub), for errors found after loading
    where: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.rows_used < 0:
            self.rows_used = len(self.rows)
        if not self.where:
            self.where = [f"{self.source}:{i}" for i in range(1, len(self.rows) + 1)]

    def record(self) -> dict[str, Any]:
        """The JSON-able description that results keep."""
        return {
            "dataset": self.name,
            "source": self.source,
            "sha256": self.sha256,
            "rows_total": self.rows_total,
            "rows_used": self.rows_used,
            **self.notes,
        }


_REGISTRY: dict[str, dict[str, Any]] = {}
_REGISTRY_LOCK = threading.Lock()


def register_loaded(data: LoadedData) -> None:
    """Remember ``data`` (by dataset name; a later load replaces an earlier one)."""
    with _REGISTRY_LOCK:
        _REGISTRY[data.name] = data.record()


def loaded_data_records() -> dict[str, dict[str, Any]]:
    """Everything loaded in this process: ``{dataset: {source, sha256, rows_total, rows_used, ...}}``."""
    with _REGISTRY_LOCK:
        return {k: dict(v) for k, v in _REGISTRY.items()}


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def read_jsonl(path: Path, schema: Schema) -> list[dict]:
    """Read and validate every line of a JSON Lines file (blank lines are skipped, but counted)."""
    return read_jsonl_located(path, schema)[0]


def _existing(path: Path) -> Path:
    """``path``, or a one-line error naming it and the setting that points at its folder."""
    if not path.is_file():
        raise SnapevalError(f"{path}: data file not found (set --data-dir or {DATA_DIR_ENV} to the folder holding it)")
    return path


def read_jsonl_located(path: Path, schema: Schema) -> tuple[list[dict], list[str]]:
    """:func:`read_jsonl` plus the ``file:line`` of every row (blank lines counted, so numbers are the file's)."""
    path = _existing(Path(path))
    rows, where = [], []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SnapevalError(f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                                    f"{exc.start + 1}); data files must be UTF-8 JSON Lines") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SnapevalError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            except RecursionError:
                raise SnapevalError(f"{path}:{lineno}: not valid JSON (nested too deeply)") from None
            rows.append(schema.validate(row, str(path), lineno))
            where.append(f"{path}:{lineno}")
    if not rows:
        raise SnapevalError(f"{path}: no rows")
    return rows, where


def hub_offline() -> bool:
    """True when the environment says offline, or the hub endpoint does not answer a TCP connect in 2 s."""
    if any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on") for k in _OFFLINE_ENV):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=2.0):
            return False
    except OSError:
        return True


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> tuple[Path, bool]:
    """Return ``(directory, explicit)``: the given/env directory (explicit) or the default beside the repo
    (:mod:`snapeval.paths`)."""
    return default_data_dir(data_dir), data_dir_is_set(data_dir)


def _rows_digest(rows: list[dict]) -> str:
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()


def load_dataset_rows(spec: DatasetSpec, data_dir: str | os.PathLike | None = None) -> LoadedData:
    """Load and validate ``spec``'s rows following the module's resolution order, and register the load."""
    directory, explicit = resolve_data_dir(data_dir)
    if not explicit and not hub_offline():
        rows_iter = spec.hub_loader() if spec.hub_loader else _hub_rows(spec)
        source = f"hub:{spec.hub_id}"
        rows = [spec.schema.validate(dict(r), source, i) for i, r in enumerate(rows_iter, start=1)]
        data = LoadedData(spec.name, rows, source, _rows_digest(rows), len(rows))
    else:
        rows, where, digests = [], [], []
        for rel in spec.local_files:
            part, located, digest = _read_local(spec, directory / rel)
            rows.extend(part)
            where.extend(located)
            digests.append(digest)
        source = ",".join(str(directory / rel) for rel in spec.local_files)
        data = LoadedData(spec.name, rows, source, digests[0] if len(digests) == 1 else "+".join(digests), len(rows),
                          where=where)
    register_loaded(data)
    return data


#: Local data files this process has read and validated, by (dataset, path, SHA-256 of the bytes): their rows and
#: ``file:line`` of each. A sweep builds a task once per cell; LongBench-v2's file (137 MB) takes seconds to parse
#: and validate and a fraction of that to hash, so a file is hashed at every load and parsed once per content. The
#: :data:`READ_KEPT` last read are kept.
_READ: dict[tuple[str, str, str], tuple[list[dict], list[str]]] = {}
_READ_LOCK = threading.Lock()
READ_KEPT = 8


def _read_local(spec: DatasetSpec, path: Path) -> tuple[list[dict], list[str], str]:
    """``path``'s validated rows (each a copy: a caller may set its keys, not change the objects they hold),
    ``file:line`` of each, and its SHA-256."""
    digest = sha256_file(_existing(path))
    key = (spec.name, str(path), digest)
    with _READ_LOCK:
        known = _READ.get(key)
    if known is None:
        known = read_jsonl_located(path, spec.schema)
        with _READ_LOCK:
            _READ[key] = known
            while len(_READ) > READ_KEPT:
                del _READ[next(iter(_READ))]
    rows, where = known
    return [dict(r) for r in rows], list(where), digest


def rows_read_for(rows: list[dict]) -> list[dict] | None:
    """The validated rows of a local file this process read (:func:`_read_local`) that ``rows`` copy: as many, each
    row of ``rows`` opening with that file's row, its keys in the same order and its values the same objects (a copy
    from :func:`load_dataset_rows`, a task's own keys after them); None if no file's rows are."""
    with _READ_LOCK:
        candidates = [read for read, _ in _READ.values() if len(read) == len(rows)]
    for read in candidates:
        if all(len(row) >= len(own) and list(row)[:len(own)] == list(own) and all(row[k] is v for k, v in own.items())
               for row, own in zip(rows, read)):
            return read
    return None


def _hub_rows(spec: DatasetSpec) -> Iterable[dict]:
    import datasets

    try:
        return datasets.load_dataset(spec.hub_id, split=spec.hub_split)
    except Exception as exc:  # the hub answered the probe but the load failed: say where to point instead
        raise SnapevalError(
            f"could not load {spec.hub_id} from the hub ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
            f"set --data-dir or {DATA_DIR_ENV} to a folder with {', '.join(spec.local_files)}"
        ) from None
