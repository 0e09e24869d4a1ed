"""The functions lm-eval's task YAML in ``tasks/`` calls (``!function utils.<name>``; each ``utils.py`` re-exports).

Dataset hooks follow lm-eval's RULER convention: ``custom_dataset`` receives the task's ``metadata`` merged with
``--metadata`` and (on the CLI and in ``simple_evaluate`` without a task manager) the ``--model_args``. Keys read:

- ``data_dir``: folder with the local copies (else ``SNAPEVAL_DATA_DIR``, the hub, ``../shared/data``);
- ``tokenizer`` / ``pretrained``: the evaluated model's tokenizer (synthetic lengths, LongBench truncation), loaded
  with ``snapeval.models.load_tokenizer`` (falling back to ``transformers.AutoTokenizer``);
- ``max_seq_lengths``, ``num_samples``, ``seed``: synthetic tasks;
- ``max_input_tokens`` or ``max_length`` (the model's context): LongBench-v2 middle truncation;
- ``release_version``, ``start_date``, ``end_date``, ``sandbox_timeout_s``, ``sandbox_memory_mb``: LiveCodeBench;
- ``reasoning``: the model writes a thinking section opened by its chat template (a cut-off generation without
  ``</think>`` is then unfinished thinking); not LiveCodeBench, whose official code extraction reads the whole
  response.

Unknown keys (model arguments such as ``batch_size``) are ignored.
"""
from __future__ import annotations

import json
import logging
from functools import lru_cache
from typing import Any

from snapeval.errors import SnapevalError
from snapeval.tasks import aime, livecodebench, longbench, synthetic
from snapeval.tasks.metrics import mean_present
from snapeval.sandbox import ProgramResult, SandboxLimits

log = logging.getLogger(__name__)

DEFAULT_SYNTHETIC_LENGTHS = (1024, 2048, 4096)
DEFAULT_SYNTHETIC_SAMPLES = 20
_HUGE = 10_000_000  # HF's "no limit" model_max_length is ~1e30


def _flag(md: dict, key: str) -> bool:
    value = md.get(key, False)
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


def _int(md: dict, key: str, default: int | None) -> int | None:
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


def _as_dataset(rows: list[dict]) -> dict[str, Any]:
    import datasets

    return {"test": datasets.Dataset.from_list(rows, split=datasets.Split.TEST)}


def _provenance(data) -> dict[str, Any]:
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


# --------------------------------------------------------------------------------------------------- LongBench-v2

def _longbench(md: dict, cot: bool) -> dict[str, Any]:
    data = longbench.load(md.get("data_dir"))
    gen = _int(md, "max_gen_toks", longbench.MAX_NEW_TOKENS_COT if cot else longbench.MAX_NEW_TOKENS)
    name = tokenizer_name(md)
    limit = _int(md, "max_input_tokens", None)
    if limit is None and name:
        context = _int(md, "max_length", None)
        if context is None:
            model_max = getattr(get_tokenizer(name), "model_max_length", None)
            context = int(model_max) if isinstance(model_max, (int, float)) and model_max < _HUGE else None
        limit = context - gen if context else None
    if limit is None:
        log.warning("longbench_v2: no tokenizer or context length in metadata; prompts are not truncated")
    extra = {"cot": cot, "max_input_tokens": limit or 0, "tokenizer_name": name or "",
             "reasoning": _flag(md, "reasoning"), **_provenance(data)}
    # questions on one document are one cluster (38 of the 395 local questions share 10 documents)
    return _as_dataset([{**row, **extra, "cluster": cluster_of("longbench_v2", row["context"])} for row in data.rows])


def longbench_v2_dataset(**md: Any) -> dict[str, Any]:
    return _longbench(md, cot=False)


def longbench_v2_cot_dataset(**md: Any) -> dict[str, Any]:
    return _longbench(md, cot=True)


def _fit(prompt: str, doc: dict) -> str:
    """``prompt`` cut in the middle to ``max_input_tokens``, as pred.py's ``query_llm`` cuts every prompt it sends."""
    if doc["max_input_tokens"] and doc["tokenizer_name"]:
        prompt, _, _ = longbench.truncate_middle(prompt, get_tokenizer(doc["tokenizer_name"]), doc["max_input_tokens"])
    return prompt


def longbench_v2_doc_to_text(doc: dict) -> str:
    """The official prompt (``0shot.txt``, or ``0shot_cot.txt``: the first of the two chain-of-thought passes), cut in
    the middle to ``max_input_tokens`` (done lazily: only for the docs used)."""
    return _fit(longbench.build_prompt(doc, cot=doc["cot"]), doc)


def longbench_v2_cot_answer_prompt(doc: dict, first_output: str) -> str:
    """The official second pass (``0shot_cot_ans.txt``: the question, the choices and the first pass's stripped
    reasoning; the document omitted), cut like every prompt pred.py sends."""
    return _fit(longbench.build_cot_answer_prompt(doc, first_output), doc)


def longbench_v2_process_results(doc: dict, results: list[str]) -> dict[str, float | None]:
    """Scores the answer: the reply itself, or, for the two-pass chain of thought, the second pass's reply."""
    from snapeval.harness.followup import read_two_pass

    response = read_two_pass(results[0])["second_pass"] if doc["cot"] else results[0]
    return longbench.score(doc, response, assume_thinking=doc["reasoning"])


# ------------------------------------------------------------------------------------------------------- AIME 24

def aime24_dataset(**md: Any) -> dict[str, Any]:
    data = aime.load(md.get("data_dir"))
    extra = {"reasoning": _flag(md, "reasoning"), **_provenance(data)}
    # one record per problem holds all its samples: the problem is the cluster
    return _as_dataset([{**row, "Answer": str(row["Answer"]), **extra, "cluster": cluster_of("aime24", str(row["ID"]))}
                        for row in data.rows])


def aime24_doc_to_text(doc: dict) -> str:
    return aime.build_prompt(doc)


def samples_of(results: list) -> list[str]:
    """A doc's samples as ``process_results`` receives them: one per request (``take_first``), or, behind a filter
    that keeps every sample (:func:`all_samples`), one list of them."""
    return [text for result in results for text in (result if isinstance(result, (list, tuple)) else [result])]


def aime24_process_results(doc: dict, results: list) -> dict[str, float]:
    return aime.score(doc, samples_of(results), assume_thinking=doc["reasoning"])


# ------------------------------------------------------------------------------------------------ LiveCodeBench

def livecodebench_dataset(**md: Any) -> dict[str, Any]:
    """The selected problems; every doc carries the data's provenance, the release version and the contest-date
    window (also in the data records of the run), its sandbox limits, and its problem as ``cluster`` (the samples of
    one problem are not independent)."""
    data = livecodebench.load(md.get("data_dir"), release_version=str(md.get("release_version", "release_latest")),
                              start_date=md.get("start_date"), end_date=md.get("end_date"))
    limits = SandboxLimits(timeout_s=float(md.get("sandbox_timeout_s", 6.0)),
                           memory_mb=_int(md, "sandbox_memory_mb", 2048))
    window = {k: data.notes[k] for k in ("release_version", "start_date", "end_date")}
    extra = {"sandbox_timeout_s": limits.timeout_s, "sandbox_memory_mb": limits.memory_mb, **window,
             **_provenance(data)}
    return _as_dataset([{**row, **extra, "cluster": row["question_id"]} for row in data.rows])


def livecodebench_doc_to_text(doc: dict) -> str:
    return livecodebench.build_prompt(doc)


def livecodebench_execute(resps: list[list[str]], docs: list[dict]) -> list[list[str]]:
    """lm-eval filter: run every sample's program, all problems in parallel; each response becomes the JSON verdict
    (status, detail, tests run) that :func:`livecodebench_process_results` scores. Every sample is kept (this
    filter replaces lm-eval's default ``take_first``)."""
    if not docs:
        return []
    limits = SandboxLimits(timeout_s=float(docs[0]["sandbox_timeout_s"]), memory_mb=int(docs[0]["sandbox_memory_mb"]))
    results = livecodebench.evaluate(docs, resps, limits=limits)
    return [[_verdict(r) for r in per_doc] for per_doc in results]


def _verdict(result: ProgramResult | None) -> str:
    if result is None:
        return json.dumps({"status": "no_code"})
    return json.dumps({"status": result.status, "detail": result.detail[:300],
                       "tests_run": len(result.outcomes), "wall_s": round(result.wall_s, 4)})


def livecodebench_process_results(doc: dict, results: list[list[str]]) -> dict[str, float]:
    """``results``: one entry per request of this doc (one: ``generate_until`` makes one request per doc and
    repeats it), the filter's list of the doc's sample verdicts."""
    (verdicts,) = results
    verdicts = [json.loads(v) for v in verdicts]
    programs = [None if v["status"] == "no_code" else ProgramResult(v["status"], detail=v.get("detail", ""))
                for v in verdicts]
    return livecodebench.score(doc, programs)


# ---------------------------------------------------------------------------------------------------- synthetic

def _synthetic(task: str, md: dict) -> dict[str, Any]:
    name = tokenizer_name(md)
    if not name:
        raise SnapevalError(
            f"snapeval_{task} needs the evaluated model's tokenizer to size its prompts; pass it with "
            "--model_args pretrained=<model> or --metadata '{\"tokenizer\": \"<name or path>\"}'")
    lengths = md.get("max_seq_lengths", DEFAULT_SYNTHETIC_LENGTHS)
    if isinstance(lengths, (int, str)):
        lengths = str(lengths).replace(";", ",").split(",")
    try:
        lengths = [int(x) for x in lengths if str(x).strip()]
        if not lengths or min(lengths) < 1:
            raise ValueError
    except (TypeError, ValueError):
        raise SnapevalError(f"metadata.max_seq_lengths={md.get('max_seq_lengths')!r} is invalid; allowed: positive "
                            "integers (a list, or comma-separated)") from None
    samples = synthetic.generate(task, get_tokenizer(name), lengths,
                                 _int(md, "num_samples", DEFAULT_SYNTHETIC_SAMPLES), seed=_int(md, "seed", 0))
    reasoning = _flag(md, "reasoning")
    docs = [s.to_doc() for s in samples]
    # every generated haystack carries one question: each doc is its own cluster (the haystack's identity)
    return _as_dataset([{**d, "reasoning": reasoning, "tokenizer_name": name,
                         "cluster": cluster_of(task, d["length"], d["seed"], d["index"])} for d in docs])


def passkey_dataset(**md: Any) -> dict[str, Any]:
    return _synthetic("passkey", md)


def kv_needle_dataset(**md: Any) -> dict[str, Any]:
    return _synthetic("kv_needle", md)


def kv_needle_multi_dataset(**md: Any) -> dict[str, Any]:
    return _synthetic("kv_needle_multi", md)


def variable_tracking_dataset(**md: Any) -> dict[str, Any]:
    return _synthetic("variable_tracking", md)


def synthetic_process_results(doc: dict, results: list[str]) -> dict[str, float | None]:
    return synthetic.score(doc, results[0], assume_thinking=doc["reasoning"])


def aggregate_present(values: list[float | None]) -> float:
    """lm-eval aggregation for breakdown metrics: mean over the docs the metric applies to (NaN if none)."""
    return mean_present(values)
