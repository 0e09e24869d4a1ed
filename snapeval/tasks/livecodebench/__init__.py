"""LiveCodeBench code generation (livecodebench/code_generation_lite), graded as the official ``lcb_runner`` grades.

Prompts are the official generation prompts of ``lcb_runner/prompts/code_generation.py`` per model style
(:func:`build_prompt`: the DeepSeek-R1 question text, the one QwQ's ``livecodebench_v5.jsonl`` carries verbatim; the
whole DeepSeekR1-style prompt with its conversation preamble; the chat styles' generic template); the code is
what the official ``extract_code`` takes (the lines between the last two lines holding a code fence); programs run in
:mod:`snapeval.sandbox` against the public tests and, when the data has them, the private ones (hub rows carry them
base64+zlib+pickle compressed), and each test's output is graded here with the official comparison rules
(``lcb_runner/evaluation/testing_util.py``: :func:`stdout_matches`, :func:`functional_matches`). The release version
and contest-date window select problems as ``lcb_runner/benchmarks/code_generation.py`` does. Sources and the
readings chosen where the official code is ambiguous: ``docs/tasks.md``.
"""
from __future__ import annotations

from typing import Sequence

from snapeval.sandbox import ProgramJob, ProgramResult, SandboxLimits, run_programs
from snapeval.tasks.families import TaskFamily
from snapeval.tasks.metrics import pass_at_k
from snapeval.tasks.livecodebench.data import (  # noqa: F401 - the package's names
    SCHEMA, SHARDS, HUB_ID, SPEC, parse_version, LOCAL_COPY_DATE_LAG, contest_time, shard_index, load, window,
    decode_private, TestCase, Tests, tests_of)
from snapeval.tasks.livecodebench.grading import (  # noqa: F401 - the package's names
    INT_MAX_STR_DIGITS, load_json, SPACES, token_count, stdout_matches, functional_matches)
from snapeval.tasks.livecodebench.prompts import (  # noqa: F401 - the package's names
    SYSTEM_INTRO, SYSTEM_MESSAGE_GENERIC, SYSTEM_MESSAGE_DEEPSEEK_R1, ASSISTANT_DEEPSEEK_R1, R1_PREAMBLE,
    FORMAT_WITH_STARTER, FORMAT_STDIN, PROMPT_STYLES, build_prompt, extract_code)

#: The task family this folder is (snapeval.tasks.families): its tasks' prefix, its data and the mean (prompt,
#: generated) tokens per sample of DeepSeek-R1-0528 with SnapStream (arXiv 2511.03092, Table 3; restated in
#: shared/reference/benchmarks.md), which the SN40L pricing of a results row deploys.
FAMILY = TaskFamily("livecodebench", data=SPEC, typical_lengths=(476, 10_634),
                    hooks="snapeval.tasks.livecodebench.hooks")  # no reference reply: solutions are not in the data


def judge(tests: Tests):
    """The judge the sandbox calls with each test's raw output (see :func:`snapeval.sandbox.run_program`)."""
    if tests.mode == "stdin":
        expected = [case.output.encode("utf-8", "surrogatepass") for case in tests.cases]  # encoded once per problem
        return lambda index, output: stdout_matches(output, expected[index])
    expected = [load_json(case.output) for case in tests.cases]  # read once per problem
    return lambda index, value: functional_matches(value, expected[index])


def evaluate(docs: Sequence[dict], responses: Sequence[Sequence[str]], *, limits: SandboxLimits | None = None,
             workers: int | None = None) -> list[list[ProgramResult | None]]:
    """Run every response's program (all problems in parallel). ``None`` where no code block was found. A problem
    without tests passes every program that loads (the official result list is empty and ``np.all([])`` is true)
    and fails one that does not (``[-4]``): the sandbox then only loads the program."""
    jobs, where = [], []
    out: list[list[ProgramResult | None]] = [[None] * len(r) for r in responses]
    for d, (doc, resps) in enumerate(zip(docs, responses)):
        tests = tests_of(doc)
        grade = judge(tests)
        for s, resp in enumerate(resps):
            code = extract_code(resp)
            if code is not None:
                jobs.append(ProgramJob(code, [c.input for c in tests.cases], tests.mode, grade, tests.func_name,
                                       group=d))  # the samples of one problem never run side by side
                where.append((d, s))
    for (d, s), result in zip(where, run_programs(jobs, limits=limits, workers=workers)):
        out[d][s] = result
    return out


#: The k of pass@k lcb_runner reports, those not above the sample count (``codegen_metrics``' ``k_list``,
#: ``compute_code_generation_metrics.py:160``, filtered by ``compute_metrics_from_results``, ``pass_k_utils.py:41-50``).
OFFICIAL_PASS_K = (1, 5, 10, 20, 40, 50, 75, 100, 125, 150, 200, 500, 1000)


def score(doc: dict, results: Sequence[ProgramResult | None], *, k: int | None = None,
          ks: Sequence[int] = ()) -> dict[str, float]:
    """Per-problem metrics from the sandbox results of its ``n`` samples.

    ``pass@1``: the unbiased estimator of Chen et al. (``estimate_pass_at_k`` of ``lcb_runner``), which for k = 1
    is the fraction of samples passing every test; ``pass@k`` for ``k`` and each of ``ks`` with ``1 < k <= n``;
    ``no_code``: fraction of samples without a code block; ``private_tests_used``: 1.0 when private tests were run,
    0.0 when the score rests on the public tests only.
    """
    n = len(results)
    c = sum(bool(r and r.passed) for r in results)
    out = {
        "pass@1": pass_at_k(n, c, 1),
        "no_code": sum(r is None for r in results) / n,
        "private_tests_used": float(tests_of(doc).private_used),
    }
    for each in ([k] if k is not None else []) + list(ks):
        if 1 < each <= n:
            out[f"pass@{each}"] = pass_at_k(n, c, each)
    return out
