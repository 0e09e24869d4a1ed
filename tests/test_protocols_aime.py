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
#: Where snapeval's verdict differs from the official one, and why (docs/tasks.md lists them). None since the
#: LaTeX reader follows latex2sympy's lexer: "33triangles" is 33 to both ("tr" is the trace function's name, which
#: ends the reading).
DEPARTURES: dict[str, str] = {}


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
