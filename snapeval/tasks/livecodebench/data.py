"""LiveCodeBench's data: the hub rows and the local copy, release versions and contest-date windows as
``lcb_runner/benchmarks/code_generation.py`` selects problems, and each problem's tests (public and private, the
private ones base64+zlib+pickle compressed and read by an unpickler that admits plain data only)."""
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
from datetime import date, datetime, timedelta
from typing import Any

from snapeval.errors import SnapevalError, check_choice
from snapeval.sandbox import MODES
from snapeval.tasks.data import DatasetSpec, LoadedData, Schema, load_dataset_rows, register_loaded
from snapeval.tasks.livecodebench.grading import load_json

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


def parse_version(tag: str) -> tuple[int, int]:
    """The shards of a version tag, as the dataset's loader (``code_generation_lite.py``, ``ALLOWED_FILES``) maps
    them: ``release_vN`` -> shards 1..N; ``release_latest`` -> all; ``vN`` -> shard N; ``vA_vB`` with A < B ->
    shards A..B. Returns the inclusive 1-based shard range."""
    n = len(SHARDS)
    if tag == "release_latest":
        return 1, n
    m = re.fullmatch(r"(release_)?v([1-9]\d*)", tag)
    if m and int(m.group(2)) <= n:
        k = int(m.group(2))
        return (1, k) if m.group(1) else (k, k)
    m = re.fullmatch(r"v([1-9]\d*)_v([1-9]\d*)", tag)
    if m and int(m.group(1)) < int(m.group(2)) <= n:
        return int(m.group(1)), int(m.group(2))
    allowed = [f"release_v{i}" for i in range(1, n + 1)] + ["release_latest", f"v1..v{n}", f"vA_vB (1 <= A < B <= {n})"]
    raise SnapevalError(f"release_version={tag!r} is not allowed; choose one of: {', '.join(allowed)}")


def _date(value: str | date | None, field: str) -> datetime | None:
    """A window bound as the official runner reads it: ``YYYY-MM-DD`` at midnight (``datetime.strptime``)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    try:
        return datetime.strptime(str(value), "%Y-%m-%d")
    except ValueError:
        raise SnapevalError(f"{field}={value!r} is not a date; use YYYY-MM-DD") from None


#: The local copy's contest dates are the hub's plus one day. Its rows (``release_shard`` ``refined_*``) took
#: ``contest_date`` from the LiveCodeBench leaderboard's epoch-millisecond dates, which are the hub's naive dates
#: read one day later: for all 279 problems the local copy shares with QwQ's copy of the hub rows
#: (``livecodebench_v5.jsonl``) the difference is exactly 24 hours, and shifted back the AtCoder Beginner Contests fall
#: on Saturdays (ABC 365: 2024-08-03) and LeetCode's weekly contests on Saturday evenings, US Pacific time, as held.
LOCAL_COPY_DATE_LAG = timedelta(hours=24)


def contest_time(row: dict, where: str = "problem") -> datetime:
    """The contest date and time as the hub has it (``datetime.fromisoformat``, as ``CodeGenerationProblem`` reads
    it), the local copy's one-day lag (:data:`LOCAL_COPY_DATE_LAG`) taken back."""
    try:
        when = datetime.fromisoformat(row["contest_date"])
    except ValueError:
        raise SnapevalError(f"{where}: field 'contest_date' must be an ISO date and time, got "
                            f"{row['contest_date']!r}") from None
    return when - LOCAL_COPY_DATE_LAG if row.get("release_shard") in _LOCAL_SHARD else when


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
    """Validated problems of ``release_version`` whose contest time ``t`` (the hub's: :func:`contest_time`)
    satisfies ``start_date <= t <= end_date``, the bounds being midnight of those days (as
    ``load_code_generation_dataset``: a contest at 18:30 on ``end_date`` is outside the window). The version and
    window are recorded with the data's provenance."""
    first, last = parse_version(release_version)
    lo, hi = _date(start_date, "start_date"), _date(end_date, "end_date")
    data = load_dataset_rows(SPEC, data_dir)
    rows, where, corrected = [], [], 0
    for at, row in zip(data.where, data.rows):
        when = contest_time(row, at)
        if not (first <= shard_index(row) + 1 <= last):
            continue
        if (lo and when < lo) or (hi and when > hi):
            continue
        tests_of(row, where=at)  # every test case is checked now, not at grading after all generation
        if when.isoformat() != row["contest_date"]:  # every doc carries the hub's date
            row, corrected = {**row, "contest_date": when.isoformat()}, corrected + 1
        rows.append(row)
        where.append(at)
    if not rows:
        raise SnapevalError(f"no LiveCodeBench problems in {release_version} between {lo} and {hi}")
    data.rows, data.where = rows, where
    data.rows_used = len(rows)
    data.notes.update(window(release_version, lo, hi))
    data.notes["private_tests"] = any(r["private_test_cases"] for r in rows)
    data.notes["contest_dates_corrected"] = corrected  # rows of the local copy, one day earlier: the hub's dates
    register_loaded(data)
    return data


def window(release_version: str, start: datetime | None, end: datetime | None) -> dict[str, Any]:
    """The selection that guards against contamination, as recorded with every run."""
    return {"release_version": release_version, "start_date": start.date().isoformat() if start else None,
            "end_date": end.date().isoformat() if end else None}


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
class TestCase:
    """One test: ``input`` (stdin text, or one JSON value per line for ``functional``) and expected ``output``."""

    __test__ = False  # not a pytest class

    input: str
    output: str
    testtype: str

    def __post_init__(self) -> None:
        check_choice("testtype", self.testtype, MODES)


@dataclass(frozen=True)
class Tests:
    __test__ = False  # not a pytest class

    cases: tuple[TestCase, ...]
    func_name: str | None
    private_used: bool

    @property
    def mode(self) -> str:
        """How the program is called: ``functional`` when the problem names a function, else ``stdin`` (the
        official ``run_test`` decides by ``fn_name`` alone, so a problem without tests has a mode too)."""
        return "functional" if self.func_name is not None else "stdin"


def _cases(raw, where: str, field_name: str) -> list[TestCase]:
    if not isinstance(raw, list):
        raise SnapevalError(f"{where}: field {field_name!r} must be a list of test cases, got {type(raw).__name__}")
    cases = []
    for k, t in enumerate(raw):
        if not isinstance(t, dict) or not all(isinstance(t.get(key), str) for key in ("input", "output", "testtype")):
            raise SnapevalError(f"{where}: {field_name}[{k}] must have string fields input, output and testtype")
        if t["testtype"] not in MODES:
            raise SnapevalError(f"{where}: {field_name}[{k}].testtype={t['testtype']!r} is not allowed; choose one "
                                f"of: {', '.join(MODES)}")
        if t["testtype"] == "functional":  # the sandbox passes one JSON argument per input line
            for part, text in [("input", line) for line in t["input"].split("\n")] + [("output", t["output"])]:
                try:
                    load_json(text)
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
    if func is not None and not isinstance(func, str):
        raise SnapevalError(f"{where}: metadata.func_name must be a string, got {type(func).__name__}")
    if cases and cases[0].testtype == "stdin" and func is not None:
        raise SnapevalError(f"{where}: stdin tests with metadata.func_name={func!r} (the official runner would call "
                            f"the function); remove func_name or make the tests functional")
    private = len(cases) > len(public)
    return Tests(tuple(cases), func, private)
