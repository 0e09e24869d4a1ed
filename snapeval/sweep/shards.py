"""Item shards: a cell's documents split over several work units, merged back into exactly the unsharded cell.

Shard ``k`` of ``S`` holds the documents ``i`` with ``i % S == k`` among those the task's ``limit`` selects (strided,
so a task ordered by length spreads its long documents over every shard). Every configuration of a shared group is
computed for the shard's documents from their shared prefills (:mod:`snapeval.branching`), and each shard is written
atomically as it finishes (:meth:`snapeval.results.store.ResultsStore.write_shard`); a resumed sweep redoes only the
missing shards.

The merge (:func:`merge_shards`) is what an unsharded lm-eval run reports: the per-document samples of every shard,
in document order, and each metric's aggregate and stderr recomputed from the per-document scores with the task's
own aggregation function and lm-eval's own aggregation code (``_compute_task_aggregations``: the aggregation of
every ``metric,filter`` over its values in document order, the stderr lm-eval pairs with it (closed form for the
mean, bootstrap with the same iterations for the bootstrapped ones), ``"N/A"`` otherwise). Summing in the same order
gives the same floating-point result, so merged and unsharded cells are equal (``tests/test_sweep_shards.py``).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

from snapeval.errors import SnapevalError
from snapeval.results.schema import CellResult, from_lm_eval

SHARD_FORMAT = "snapeval-shard/1"
#: The run measurements a shard carries (counts and seconds, summed by the merge; the KV bytes are a maximum).
RUN_COUNTS = ("requests", "prompt_tokens", "generated_tokens", "prefill_seconds", "compress_seconds",
              "decode_seconds", "decode_token_steps")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: the documents ``i % count == index``."""

    index: int
    count: int

    def __post_init__(self):
        if not (isinstance(self.count, int) and self.count >= 1 and isinstance(self.index, int)
                and 0 <= self.index < self.count):
            raise ValueError(f"shard {self.index!r} of {self.count!r} is invalid; allowed: 0 <= index < count")

    @property
    def name(self) -> str:
        return f"{self.index + 1}-of-{self.count}"


def _plain(value: Any) -> Any:
    """A per-document score as JSON keeps it (a tuple becomes a list; :func:`_restored` turns it back)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _restored(value: Any) -> Any:
    return tuple(_restored(v) for v in value) if isinstance(value, list) else value


@dataclass
class ShardResult:
    """One shard of one cell: its own lm-eval result (None when the shard has no documents), every per-document score
    lm-eval aggregated (``raw[subtask]`` = ``[["metric,filter", [[doc_id, value], ...]], ...]``, in lm-eval's order
    of its metrics, which orders the cell's metrics), each metric's aggregation (``module:name``), the task's document
    count, the bootstrap iterations and the run's counts."""

    cell_id: str
    index: int
    count: int
    cell: CellResult | None
    raw: dict[str, list] = field(default_factory=dict)
    aggregations: dict[str, dict[str, str | None]] = field(default_factory=dict)
    original_documents: dict[str, int] = field(default_factory=dict)
    bootstrap_iters: int = 0
    run: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    finished_at: str = ""

    @property
    def shard(self) -> Shard:
        return Shard(self.index, self.count)

    @classmethod
    def from_lm_eval(cls, cell_id: str, identity: dict, out: dict, *, wall_s: float, finished_at: str) -> "ShardResult":
        """From :func:`snapeval.harness.evaluate` run with ``shard=(index, count)``."""
        snap = out.get("snapeval") or {}
        record = snap.get("shard")
        if not record:
            raise SnapevalError(f"cell {cell_id}: the evaluation of a shard returned no shard record")
        raw: dict[str, dict[str, list]] = {}
        for task, rows in (out.get("samples") or {}).items():
            for row in rows:  # lm-eval's logged samples: one row per document and filter, every metric's score
                for metric in row.get("metrics") or ():
                    raw.setdefault(task, {}).setdefault(f"{metric},{row.get('filter', 'none')}", []).append(
                        [int(row["doc_id"]), _plain(row.get(metric))])
        ordered = {task: [[key, pairs] for key, pairs in keys.items()] for task, keys in raw.items()}
        has_results = bool(out.get("results"))
        return cls(cell_id=cell_id, index=record["index"], count=record["count"],
                   cell=from_lm_eval(cell_id, identity, out, wall_s=wall_s, finished_at=finished_at) if has_results
                   else None,
                   raw=ordered, aggregations=record["aggregations"], original_documents=record["original_documents"],
                   bootstrap_iters=record["bootstrap_iters"], run={k: snap[k] for k in (*RUN_COUNTS, "kv_cache_bytes")
                                                                   if k in snap},
                   wall_s=wall_s, finished_at=finished_at)

    def to_json(self) -> str:
        data = asdict(self)
        data["cell"] = None if self.cell is None else json.loads(self.cell.to_json())
        data["format"] = SHARD_FORMAT
        return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "ShardResult":
        try:
            data = json.loads(text)
            if data.pop("format", None) != SHARD_FORMAT:
                raise SnapevalError(f"shard format must be {SHARD_FORMAT!r}")
            cell = data.pop("cell")
            return cls(**data, cell=None if cell is None else CellResult.from_dict(cell))
        except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as exc:
            raise SnapevalError(f"shard result is malformed: {exc}") from None


def _aggregation(ref: str | None, cell_id: str, task: str, metric: str):
    from snapeval.cache.methods import load_object

    if ref is None:
        raise SnapevalError(f"cell {cell_id}: task {task!r} metric {metric!r} aggregates with a function that cannot be "
                            "imported to merge shards; set shards: 1 for this sweep")
    return load_object(ref)


def merge_shards(cell_id: str, identity: dict, shards: list[ShardResult]) -> CellResult:
    """One cell from all its shards: what an unsharded lm-eval run of the cell reports (see the module docstring)."""
    from lm_eval.evaluator_utils import _compute_task_aggregations

    shards = sorted(shards, key=lambda s: s.index)
    count = shards[0].count if shards else 0
    if [s.index for s in shards] != list(range(count)) or any(s.count != count for s in shards):
        raise SnapevalError(f"cell {cell_id}: shards {[s.shard.name for s in shards]} are not one complete set")
    full = [s for s in shards if s.cell is not None]
    if not full:
        raise SnapevalError(f"cell {cell_id}: no shard evaluated any document")
    iters = full[0].bootstrap_iters
    results, n_samples, higher = {}, {}, {}
    for task in sorted({task for s in full for task in s.raw}):
        per_key: dict[str, list] = {}
        for s in full:
            for key, pairs in s.raw.get(task, []):
                per_key.setdefault(key, []).extend(pairs)
        raw_metrics = {tuple(key.split(",", 1)): [_restored(v) for _, v in sorted(pairs, key=lambda p: p[0])]
                       for key, pairs in per_key.items()}
        refs = next(s.aggregations[task] for s in full if task in s.aggregations)
        functions = {metric: _aggregation(ref, cell_id, task, metric) for metric, ref in refs.items()
                     if any(m == metric for m, _ in raw_metrics)}
        stand_in = SimpleNamespace(task_name=task, aggregation=lambda functions=functions: functions)
        aggregates, sample_len = _compute_task_aggregations(stand_in, raw_metrics, iters)
        results[task] = {"name": task, "alias": task, "sample_len": sample_len, **aggregates}
        n_samples[task] = {"original": full[0].original_documents.get(task), "effective": sample_len}
        higher[task] = {m.metric: m.higher_is_better for s in full for m in s.cell.metrics if m.subtask == task}
    run = {k: sum(s.run.get(k, 0) or 0 for s in full) for k in RUN_COUNTS}
    decode, prefill = run["decode_seconds"], run["prefill_seconds"]
    config = dict(full[0].cell.harness_config)
    config["shards"] = [{"shard": s.shard.name, "wall_s": s.wall_s,
                         "documents": len({(r.subtask, r.doc_id) for r in s.cell.samples}) if s.cell else 0,
                         "shared_prefill": s.cell.harness_config.get("shared_prefill") if s.cell else None}
                        for s in shards]
    snap = {**run, "kv_cache_bytes": max(s.run.get("kv_cache_bytes", 0) or 0 for s in full),
            "decode_tokens_per_s": run["decode_token_steps"] / decode if decode else math.nan,
            "prefill_tokens_per_s": run["prompt_tokens"] / prefill if prefill else math.nan,
            "config": config, "versions": full[0].cell.versions, "data": full[0].cell.data_records}
    out = {"results": results, "n-samples": n_samples, "higher_is_better": higher, "snapeval": snap}
    merged = from_lm_eval(cell_id, identity, out, wall_s=round(sum(s.wall_s for s in shards), 3),
                          finished_at=max(s.finished_at for s in shards))
    merged.samples = sorted((r for s in full for r in s.cell.samples), key=lambda r: (r.subtask, r.doc_id))
    return merged


def finished_shards(store, cell_id: str) -> list[ShardResult]:
    """The readable finished shards of a cell in ``store`` (a torn or foreign file counts as absent)."""
    out = []
    for name, text in store.shard_texts(cell_id).items():
        try:
            shard = ShardResult.from_json(text)
        except SnapevalError:
            continue
        if shard.cell_id == cell_id and name == f"{shard.shard.name}.json":
            out.append(shard)
    return out


def count_items(cell) -> int:
    """The documents a cell evaluates (its task's, up to its ``limit``), read by loading the task as the harness
    does, from a ``TaskManager`` built by the same rule (:func:`snapeval.harness.folder_tasks.task_manager_for`;
    ``shard_size`` needs it before anything runs)."""
    from lm_eval.evaluator_utils import get_sample_size
    from snapeval.harness.folder_tasks import task_manager_for
    from snapeval.tasks.folders import include_folders

    kwargs = cell.evaluate_kwargs()  # lm-eval's built-in tasks indexed only where the folders do not define the task
    manager = task_manager_for(include_folders(kwargs.get("include_path")), [cell.task.name],
                               metadata=kwargs["metadata"])
    loaded = manager.load([cell.task.name])
    if loaded["groups"] or len(loaded["tasks"]) != 1:
        raise SnapevalError(f"task {cell.task.name!r} is a group of tasks; sweep its tasks one by one to shard them")
    (task,) = loaded["tasks"].values()
    size = len(task.eval_docs)
    return size if cell.task.limit is None else min(size, get_sample_size(task, cell.task.limit))
