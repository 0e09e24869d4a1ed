"""What every task family's lm-eval hooks share (each family's own are in its folder,
``snapeval/tasks/<family>/hooks.py``, called from its YAML as ``!function snapeval.tasks.<family>.hooks.<name>``).

Dataset hooks follow lm-eval's RULER convention: ``custom_dataset`` receives the task's ``metadata`` merged with
``--metadata`` and (on the CLI and in ``simple_evaluate`` without a task manager) the ``--model_args``. Keys read:

- ``data_dir``: folder with the local copies (else ``SNAPEVAL_DATA_DIR``, the hub, ``../shared/data``);
- ``tokenizer`` / ``pretrained``: the evaluated model's tokenizer (synthetic lengths, LongBench truncation), loaded
  with ``snapeval.models.load_tokenizer`` (falling back to ``transformers.AutoTokenizer``);
- ``max_seq_lengths``, ``num_samples``, ``seed``: synthetic tasks;
- ``max_input_tokens`` or ``max_length`` (the model's context): LongBench-v2 middle truncation (pred.py's 120,000
  for the models it lists; ``snapeval.tasks.longbench.hooks.prompt_limit``); ``strip_thinking``: LongBench-v2's
  named variant that reads the answer after the thinking section (pred.py reads the raw reply);
- ``release_version``, ``start_date``, ``end_date``, ``sandbox_timeout_s``, ``sandbox_memory_mb``: LiveCodeBench;
- ``reasoning``: the model writes a thinking section opened by its chat template (a cut-off generation without
  ``</think>`` is then unfinished thinking); not LiveCodeBench, whose official code extraction reads the whole
  response.

Unknown keys (model arguments such as ``batch_size``) are ignored.
"""
from __future__ import annotations

import json
import threading
from functools import lru_cache
from typing import Any

from snapeval.errors import SnapevalError
from snapeval.tasks.data import READ_KEPT, rows_read_for
from snapeval.tasks.metrics import mean_present

#: HF's "no limit" ``model_max_length`` is about 1e30: anything above this is no limit.
NO_LIMIT = 10_000_000


def flag(md: dict, key: str) -> bool:
    value = md.get(key, False)
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


def reasoning(md: dict) -> bool:
    """Whether the evaluated model writes a thinking section: ``reasoning`` where the metadata says it, else what
    the model says of itself (a preset's ``reasoning``, or a model folder whose tokenizer holds the ``</think>`` that
    ends the section: the R1 distills' own files), so ``snapeval run``, a sweep and ``snapeval-lm-eval`` (whose
    metadata holds ``pretrained`` from its model_args) read a model alike."""
    if "reasoning" in md:
        return flag(md, "reasoning")
    name = tokenizer_name(md)
    if not name:
        return False
    from snapeval.models.presets import get_preset, list_presets

    if name in list_presets():
        return get_preset(name).reasoning
    try:
        return "</think>" in get_tokenizer(name).get_vocab()
    except Exception:  # noqa: BLE001 - no tokenizer to ask: not a reasoning model
        return False


def int_value(md: dict, key: str, default: int | None) -> int | None:
    value = md.get(key)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SnapevalError(f"metadata {key}={value!r} must be an integer") from None


def tokenizer_name(md: dict) -> str | None:
    for key in ("tokenizer", "pretrained", "model"):
        value = md.get(key)
        if isinstance(value, str) and value:
            return value
    return None


@lru_cache(maxsize=8)
def get_tokenizer(name: str):
    """The evaluated model's tokenizer (``snapeval.models.load_tokenizer`` resolves presets such as
    ``smollm2-135m-instruct``; any other name or path goes to ``transformers.AutoTokenizer``)."""
    try:
        from snapeval.models import load_tokenizer
    except ImportError:
        load_tokenizer = None
    if load_tokenizer is not None:
        return load_tokenizer(name)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def as_dataset(rows: list[dict]) -> dict[str, Any]:
    """``{"test": datasets.Dataset.from_list(rows)}``. Where ``rows`` are the rows of a data file this process read,
    each with the task's own columns after the file's (:func:`snapeval.tasks.data.rows_read_for`: the file's values,
    the same objects), the file's columns are converted once per process and the task's added to that table (not
    copied): LongBench-v2's 137 MB of documents take seconds to convert, and a sweep builds its tasks once per cell.
    The same dataset either way: columns, their order and types, values (``tests/test_tasks_data.py``)."""
    import datasets

    base = rows_read_for(rows) if rows else None
    keys = list(rows[0]) if rows else []
    if base is None or any(list(row) != keys for row in rows) or any(list(own) != keys[:len(base[0])] for own in base):
        return {"test": datasets.Dataset.from_list(rows, split=datasets.Split.TEST)}
    with _CONVERTED_LOCK:
        known = _CONVERTED.get(id(base))
        if known is None:
            known = _CONVERTED[id(base)] = (base, datasets.Dataset.from_list(base, split=datasets.Split.TEST))
            while len(_CONVERTED) > READ_KEPT:  # as many as the files kept read
                del _CONVERTED[next(iter(_CONVERTED))]
    table = known[1]
    for name in keys[len(base[0]):]:  # the task's own columns, after the file's
        table = table.add_column(name, [row[name] for row in rows])
    return {"test": table}


#: Data files' rows converted to a ``datasets.Dataset`` (:func:`as_dataset`), by the identity of the rows read (kept
#: beside their table, so that the identity is not reused).
_CONVERTED: dict[int, tuple[list[dict], Any]] = {}
_CONVERTED_LOCK = threading.Lock()


def provenance(data) -> dict[str, Any]:
    return {"data_source": data.source, "data_sha256": data.sha256, "data_rows_used": data.rows_used}


def cluster_of(*parts: Any) -> str:
    """A doc's cluster label (:attr:`snapeval.results.schema.SampleRecord.cluster`): docs that are not independent
    share one (questions on one document, the samples of one problem), and paired statistics resample them whole."""
    import hashlib

    return hashlib.sha256(json.dumps(parts, ensure_ascii=True).encode()).hexdigest()[:16]


def all_samples(resps: list[list[str]], docs: list[dict]) -> list[list[str]]:
    """lm-eval filter that keeps every sample of every doc (lm-eval's default, ``take_first``, keeps only the first
    of a task's ``repeats``)."""
    return [list(r) for r in resps]


def samples_of(results: list) -> list[str]:
    """A doc's samples as ``process_results`` receives them: one per request (``take_first``), or, behind a filter
    that keeps every sample (:func:`all_samples`), one list of them."""
    return [text for result in results for text in (result if isinstance(result, (list, tuple)) else [result])]


def aggregate_present(values: list[float | None]) -> float:
    """lm-eval aggregation for breakdown metrics: mean over the docs the metric applies to (NaN if none)."""
    return mean_present(values)
