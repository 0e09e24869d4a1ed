"""AIME 2024 scored as QwQ's evaluation (QwenLM/QwQ 620a5ea) scores it, item by item, against a golden table the
official code made: ``tests/golden/aime/qwq_620a5ea.json`` (crafted generations and references; the verdict and
the extracted answer of ``eval.py``'s ``get_after_think`` then ``math_opensource.work``, run outside this repository
with the pinned sympy, latex2sympy2 and word2number; its header records how)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from snapeval.tasks import aime

TABLE = json.loads((Path(__file__).parent / "golden" / "aime" / "qwq_620a5ea.json").read_text())
CASES = TABLE["cases"]
#: Where snapeval's verdict differs from the official one, and why (docs/tasks.md lists them).
DEPARTURES = {
    "\\boxed{33 triangles}": "latex2sympy 1.9.1 reads the letters 'tr' as a trace and returns 33 for '33triangles'; "
                             "snapeval reads no number in an answer with words left in it",
}


def test_the_table_covers_the_edge_classes():
    texts = [c["generation"] for c in CASES]
    assert len(CASES) >= 150
    for needle in ("m+n=33", "a+b=33", "33 dollars", "because it works", "0x21", "</think>", "\\frac", "thirty"):
        assert any(needle in t for t in texts), needle
    assert TABLE["header"]["packages"]["sympy"] == "1.12" and TABLE["header"]["packages"]["latex2sympy2"] == "1.9.1"


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['generation'][:50]!r}->{c['answer']!r}")
def test_verdict_and_extraction_equal_qwq(case):
    official = case["official"]
    assert aime.extract_answer(case["generation"]) == official["extracted"]
    verdict = aime.score({"ID": "case", "Answer": case["answer"]}, [case["generation"]])["exact_match"] == 1.0
    if case["generation"] in DEPARTURES:
        assert verdict != official["correct"]
    else:
        assert verdict == official["correct"]


def test_departures_are_in_the_table():
    assert set(DEPARTURES) <= {c["generation"] for c in CASES}


def test_the_model_text_is_never_evaluated():
    assert aime.symbolic_value("__import__('os').system('false')") is None
    assert aime.symbolic_value("(lambda: 1)()") is None
    assert aime.arithmetic_value("9**9**9") is None and aime.arithmetic_value("factorial(10**9)") is None
    assert aime.arithmetic_value("0x21") == 33.0 and aime.arithmetic_value("4!+9") == 33.0


@pytest.mark.parametrize("reply, reference", [
    (r"\boxed{{033}}", "33"),             # a brace group around leading zeros (scored 1.0 on e0309bf, then 0.0)
    (r"\boxed{2+0031}", "33"),            # leading zeros inside an expression
    (r"\boxed{\frac{066}{2}}", "33"),
    (r"\boxed{(033)}", "33"),
    (r"\boxed{\frac{2^{3}}{1}}", "8"),    # a power's brace group inside a \frac argument
    (r"\boxed{\sqrt{3^{2}}}", "3"),       # ... inside a \sqrt argument
    (r"\boxed{2^{1+1}}", "4"),
    (r"\boxed{\lfloor 33.5 \rfloor}", "33"),
    (r"\boxed{\lceil 32.5 \rceil}", "33"),
    (r"\boxed{|-33|}", "33"),
    (r"\boxed{\gcd(66, 99)}", "33"),
    (r"\boxed{33^{0}}", "1"),
])
def test_latex_arithmetic_latex2sympy_reads(reply, reference):
    """Forms latex2sympy reads as numbers (issue 46): leading zeros, brace groups inside \\frac and \\sqrt arguments,
    floor, ceiling, absolute value, gcd. Expectations derived by hand from latex2sympy's grammar (the official grader
    was not run on these: docs/tasks.md)."""
    assert aime.math_equal(aime.extract_answer(reply), reference)
    assert not aime.math_equal(aime.extract_answer(reply), str(int(reference) + 1))
