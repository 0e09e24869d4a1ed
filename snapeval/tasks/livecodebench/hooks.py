"""The lm-eval hooks of the LiveCodeBench task (``livecodebench.yaml`` beside this file); its programs run in
:mod:`snapeval.sandbox`."""
from __future__ import annotations

import json
from typing import Any

from snapeval.sandbox import ProgramResult, SandboxLimits
from snapeval.tasks import livecodebench
from snapeval.tasks.hooks import as_dataset, int_value, provenance


def livecodebench_dataset(**md: Any) -> dict[str, Any]:
    """The selected problems; every doc carries the data's provenance, the release version and the contest-date
    window (also in the data records of the run), its sandbox limits, and its problem as ``cluster`` (the samples of
    one problem are not independent)."""
    data = livecodebench.load(md.get("data_dir"), release_version=str(md.get("release_version", "release_latest")),
                              start_date=md.get("start_date"), end_date=md.get("end_date"))
    limits = SandboxLimits(timeout_s=float(md.get("sandbox_timeout_s", 6.0)),
                           memory_mb=int_value(md, "sandbox_memory_mb", 2048))
    window = {k: data.notes[k] for k in ("release_version", "start_date", "end_date")}
    extra = {"sandbox_timeout_s": limits.timeout_s, "sandbox_memory_mb": limits.memory_mb, **window,
             **provenance(data)}
    return as_dataset([{**row, **extra, "cluster": row["question_id"]} for row in data.rows])


def livecodebench_doc_to_text(doc: dict) -> str:
    """The DeepSeek-R1 question text, for the model's chat template (``livecodebench``, ``livecodebench_r1``)."""
    return livecodebench.build_prompt(doc, "deepseek_r1")


def livecodebench_generic_doc_to_text(doc: dict) -> str:
    """The chat styles' user message (``livecodebench_generic``; its system message is the task's description)."""
    return livecodebench.build_prompt(doc, "generic")


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
    repeats it), the filter's list of the doc's sample verdicts. With ``n`` samples, ``pass@k`` for every k of
    lcb_runner's list up to ``n`` (``pass@5`` and ``pass@10`` at its 10 samples; the task declares them)."""
    (verdicts,) = results
    verdicts = [json.loads(v) for v in verdicts]
    programs = [None if v["status"] == "no_code" else ProgramResult(v["status"], detail=v.get("detail", ""))
                for v in verdicts]
    return livecodebench.score(doc, programs, ks=livecodebench.OFFICIAL_PASS_K)
