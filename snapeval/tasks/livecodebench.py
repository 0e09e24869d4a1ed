"""LiveCodeBench code generation (livecodebench/code_generation_lite), official-style prompts and grading.

Prompts follow the official generation prompt (the one QwQ's ``livecodebench_v5.jsonl`` carries verbatim); the code
is the last fenced Python block of the answer (after the thinking section); programs run in
:mod:`snapeval.tasks.sandbox` against the public tests and, when the data has them, the private ones (hub rows carry
them base64+zlib+pickle compressed). Results say which tests were used.
"""
from __future__ import annotations

import base64
import binascii
import io
import json
import os
import pickle
import re
import zlib
from dataclasses import dataclass
from datetime import date, datetime
from typing import Sequence

from snapeval.errors import SnapevalError
from snapeval.tasks.data import DatasetSpec, LoadedData, Schema, load_dataset_rows, register_loaded
from snapeval.tasks.metrics import pass_at_k
from snapeval.tasks.reasoning import split_thinking
from snapeval.tasks.sandbox import TEST_TYPES, ProgramJob, ProgramResult, SandboxLimits, TestCase, run_programs

SCHEMA = Schema({
    "question_title": (str,), "question_content": (str,), "platform": (str,), "question_id": (str,),
    "contest_id": (str,), "contest_date": (str,), "starter_code": (str,), "difficulty": (str,),
    "public_test_cases": (str,), "private_test_cases": (str,), "metadata": (str,),
})
#: Upstream shards: release_vN is the union of shards 1..N (400/511/612/713/880/1055 problems).
SHARDS = ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl", "test6.jsonl")
_LOCAL_SHARD = {f"refined_{s}": i for i, s in enumerate(SHARDS)}  # release_shard values of the local copy
HUB_ID = "livecodebench/code_generation_lite"


def _hub_rows():
    import datasets

    for i, shard in enumerate(SHARDS):
        for row in datasets.load_dataset(HUB_ID, data_files=shard, split="train"):
            yield {**row, "release_shard": shard, "_shard_index": i}


SPEC = DatasetSpec("livecodebench", HUB_ID, "test", ("livecodebench/code_generation_lite.jsonl",), SCHEMA,
                   hub_loader=_hub_rows)

SYSTEM_INTRO = ("You will be given a question (problem specification) and will generate a correct Python program "
                "that matches the specification and passes all tests.")
FORMAT_WITH_STARTER = ("You will use the following starter code to write the solution to the problem and enclose "
                       "your code within delimiters.")
FORMAT_STDIN = ("Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test "
                "on the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python "
                "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.")


def parse_version(tag: str) -> tuple[int, int]:
    """``release_vN`` -> shards 1..N; ``vN`` -> shard N; ``vA_vB`` -> shards A..B; ``release_latest`` -> all.

    Returns the inclusive 1-based shard range.
    """
    n = len(SHARDS)
    if tag == "release_latest":
        return 1, n
    m = re.fullmatch(r"release_v(\d+)", tag) or re.fullmatch(r"v(\d+)", tag)
    if m and 1 <= int(m.group(1)) <= n:
        k = int(m.group(1))
        return (1, k) if tag.startswith("release") else (k, k)
    m = re.fullmatch(r"v(\d+)_v(\d+)", tag)
    if m and 1 <= int(m.group(1)) <= int(m.group(2)) <= n:
        return int(m.group(1)), int(m.group(2))
    allowed = [f"release_v{i}" for i in range(1, n + 1)] + ["release_latest", "vN", "vA_vB"]
    raise SnapevalError(f"release_version={tag!r} is not allowed; choose one of: {', '.join(allowed)}")


def _date(value: str | date | None, field: str) -> date | None:
    if value is None or value == "":
        return None
    if isinstance(value, date):
        return value
    try:
        return datetime.fromisoformat(str(value)).date()
    except ValueError:
        raise SnapevalError(f"{field}={value!r} is not an ISO date (YYYY-MM-DD)") from None


def shard_index(row: dict) -> int:
    """0-based upstream shard of a row (``release_shard`` of the local copy or the hub loader's shard)."""
    if "_shard_index" in row:
        return int(row["_shard_index"])
    shard = row.get("release_shard", "")
    if shard in _LOCAL_SHARD:
        return _LOCAL_SHARD[shard]
    if shard in SHARDS:
        return SHARDS.index(shard)
    raise SnapevalError(f"question_id={row.get('question_id')!r}: unknown release_shard {shard!r}")


def load(data_dir: str | os.PathLike | None = None, *, release_version: str = "release_latest",
         start_date: str | date | None = None, end_date: str | date | None = None) -> LoadedData:
    """Validated problems of ``release_version`` whose contest date lies in ``[start_date, end_date]``."""
    first, last = parse_version(release_version)
    lo, hi = _date(start_date, "start_date"), _date(end_date, "end_date")
    data = load_dataset_rows(SPEC, data_dir)
    rows, where = [], []
    for at, row in zip(data.where, data.rows):
        day = _date(row["contest_date"], f"{at}: contest_date")
        if not (first <= shard_index(row) + 1 <= last):
            continue
        if (lo and day < lo) or (hi and day > hi):
            continue
        tests_of(row, where=at)  # every test case is checked now, not at grading after all generation
        rows.append(row)
        where.append(at)
    if not rows:
        raise SnapevalError(f"no LiveCodeBench problems in {release_version} between {lo} and {hi}")
    data.rows, data.where = rows, where
    data.rows_used = len(rows)
    data.notes.update({"release_version": release_version, "start_date": str(lo) if lo else None,
                       "end_date": str(hi) if hi else None,
                       "private_tests": any(r["private_test_cases"] for r in rows)})
    register_loaded(data)
    return data


def build_prompt(doc: dict) -> str:
    """The official generation prompt (problem, then the format instruction with starter code or a stub)."""
    prompt = f"{SYSTEM_INTRO}\n\nQuestion: {doc['question_content']}\n\n"
    if doc["starter_code"]:
        prompt += f"{FORMAT_WITH_STARTER}\n```python\n{doc['starter_code']}\n```\n\n"
    else:
        prompt += f"{FORMAT_STDIN}\n```python\n# YOUR CODE HERE\n```\n\n"
    return prompt


_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.S | re.I)


def extract_code(response: str, *, assume_thinking: bool = False) -> str | None:
    """The last fenced code block (``python``/``py``/untagged) after the thinking section, or ``None``."""
    _, answer, _ = split_thinking(response, assume_thinking=assume_thinking)
    blocks = _FENCE.findall(answer)
    return blocks[-1] if blocks else None


class _PlainDataUnpickler(pickle.Unpickler):
    """Admits nothing but plain data (strings, numbers, lists, dicts, tuples, booleans, None: pickle opcodes); any
    global, which is how a pickle runs code, is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: private tests must be plain data")


def decode_private(text: str, where: str = "private_test_cases") -> list[dict]:
    """Private tests as the hub stores them (base64 of zlib of a pickled JSON string), or plain JSON. The pickle is
    read by an unpickler that admits plain data only; anything else is a one-line error naming ``where``."""
    if not text:
        return []
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        raw = zlib.decompress(base64.b64decode(text.encode("utf-8"), validate=True))
        payload = _PlainDataUnpickler(io.BytesIO(raw)).load()
        return json.loads(payload) if isinstance(payload, (str, bytes)) else payload
    except (pickle.UnpicklingError, zlib.error, ValueError, EOFError, TypeError, RecursionError, MemoryError,
            binascii.Error) as exc:
        raise SnapevalError(f"{where}: field 'private_test_cases' is neither JSON nor the official base64/zlib/"
                            f"pickled-JSON encoding ({type(exc).__name__}: {str(exc)[:120]})") from None


@dataclass(frozen=True)
class Tests:
    cases: tuple[TestCase, ...]
    func_name: str | None
    private_used: bool


def _cases(raw, where: str, field_name: str) -> list[TestCase]:
    if not isinstance(raw, list):
        raise SnapevalError(f"{where}: field {field_name!r} must be a list of test cases, got {type(raw).__name__}")
    cases = []
    for k, t in enumerate(raw):
        if not isinstance(t, dict) or not all(isinstance(t.get(key), str) for key in ("input", "output", "testtype")):
            raise SnapevalError(f"{where}: {field_name}[{k}] must have string fields input, output and testtype")
        if t["testtype"] not in TEST_TYPES:
            raise SnapevalError(f"{where}: {field_name}[{k}].testtype={t['testtype']!r} is not allowed; choose one "
                                f"of: {', '.join(TEST_TYPES)}")
        if t["testtype"] == "functional":  # the sandbox passes one JSON argument per input line
            for part, text in [("input", line) for line in t["input"].split("\n")] + [("output", t["output"])]:
                try:
                    json.loads(text)
                except (ValueError, RecursionError):
                    raise SnapevalError(f"{where}: {field_name}[{k}].{part} must be JSON for a functional test "
                                        f"(one value per input line), got {text[:60]!r}") from None
        cases.append(TestCase(t["input"], t["output"], t["testtype"]))
    return cases


def tests_of(doc: dict, where: str = "problem") -> Tests:
    """All tests of a problem (public, then private when present) and the function name of functional ones;
    malformed test cases are a one-line error naming ``where`` and the field."""
    try:
        public = json.loads(doc["public_test_cases"])
        metadata = json.loads(doc["metadata"] or "{}")
    except (json.JSONDecodeError, TypeError, RecursionError):
        raise SnapevalError(f"{where}: fields 'public_test_cases' and 'metadata' must be JSON text") from None
    cases = _cases(public, where, "public_test_cases") + _cases(
        decode_private(doc["private_test_cases"], where), where, "private_test_cases")
    if len({c.testtype for c in cases}) > 1:
        raise SnapevalError(f"{where}: test cases mix stdin and functional types")
    func = metadata.get("func_name") if isinstance(metadata, dict) else None
    if cases and cases[0].testtype == "functional" and not isinstance(func, str):
        raise SnapevalError(f"{where}: functional tests need metadata.func_name (a string)")
    private = len(cases) > len(public)
    return Tests(tuple(cases), func, private)


def evaluate(docs: Sequence[dict], responses: Sequence[Sequence[str]], *, limits: SandboxLimits | None = None,
             workers: int | None = None, assume_thinking: bool = False) -> list[list[ProgramResult | None]]:
    """Run every response's program (all problems in parallel). ``None`` where no code block was found."""
    jobs, where = [], []
    out: list[list[ProgramResult | None]] = [[None] * len(r) for r in responses]
    for d, (doc, resps) in enumerate(zip(docs, responses)):
        tests = tests_of(doc)
        for s, resp in enumerate(resps):
            code = extract_code(resp, assume_thinking=assume_thinking)
            if code is not None and tests.cases:
                jobs.append(ProgramJob(code, tests.cases, tests.func_name))
                where.append((d, s))
    for (d, s), result in zip(where, run_programs(jobs, limits=limits, workers=workers)):
        out[d][s] = result
    return out


def score(doc: dict, results: Sequence[ProgramResult | None], *, k: int | None = None) -> dict[str, float]:
    """Per-problem metrics from the sandbox results of its ``n`` samples.

    ``pass@1``: unbiased pass@1 (= fraction of samples passing); ``pass@k`` when ``1 < k <= n``; ``no_code``:
    fraction of samples without a code block; ``private_tests_used``: 1.0 when private tests were run, 0.0 when the
    score rests on the public tests only.
    """
    n = len(results)
    c = sum(bool(r and r.passed) for r in results)
    out = {
        "pass@1": pass_at_k(n, c, 1),
        "no_code": sum(r is None for r in results) / n,
        "private_tests_used": float(tests_of(doc).private_used),
    }
    if k is not None and 1 < k <= n:
        out[f"pass@{k}"] = pass_at_k(n, c, k)
    return out
