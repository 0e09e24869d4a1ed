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
from functools import lru_cache
from typing import Any

from snapeval.errors import SnapevalError
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
    import datasets

    return {"test": datasets.Dataset.from_list(rows, split=datasets.Split.TEST)}


#: Each dataset's rows as a ``datasets.Dataset``, converted once per process (by source and digest): LongBench-v2's
#: 137 MB of documents take seconds to convert, and a sweep builds its tasks once per cell.
_ROWS_AS_DATASET: dict[tuple[str, str], Any] = {}


def dataset_with(data, extra: dict[str, Any], per_row: dict[str, list]) -> dict[str, Any]:
    """:func:`as_dataset` of ``[{**row, **extra, name: values[i] for name, values in per_row} for row i of data]``
    (``data``: a :class:`~snapeval.tasks.data.LoadedData`), the rows' own columns converted once per process and
    shared (the task's columns are added to the shared table, which is not copied)."""
    import datasets

    if set(extra) & set(per_row) or (data.rows and (set(extra) | set(per_row)) & set(data.rows[0])):
        return as_dataset([{**row, **extra, **{k: v[i] for k, v in per_row.items()}} for i, row in enumerate(data.rows)])
    key = (data.source, data.sha256)
    table = _ROWS_AS_DATASET.get(key)
    if table is None:
        table = _ROWS_AS_DATASET[key] = datasets.Dataset.from_list(data.rows, split=datasets.Split.TEST)
    for name, value in extra.items():
        table = table.add_column(name, [value] * len(table))
    for name, values in per_row.items():
        table = table.add_column(name, values)
    return {"test": table}


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
