"""AIME 2024 scored as QwQ's evaluation (QwenLM/QwQ 620a5ea) scores it, item by item, against a golden table the
official code made: ``tests/golden/aime/qwq_620a5ea.json`` (crafted generations and references; the verdict and
the extracted answer of ``eval.py``'s ``get_after_think`` then ``math_opensource.work``, run outside this repository
with the pinned sympy, latex2sympy2 and word2number; its header records how)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from snapeval.tasks import aime
from tests.case_chunks import check_each, chunk_id, starts

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


#: Cases per test (tests/case_chunks.py).
CHUNK = 50


def _check_case(case: dict) -> None:
    official = case["official"]
    extracted = aime.extract_answer(case["generation"])
    assert extracted == official["extracted"], f"extracted {extracted!r}, official {official['extracted']!r}"
    verdict = aime.score({"ID": "case", "Answer": case["answer"]}, [case["generation"]])["exact_match"] == 1.0
    if case["generation"] in DEPARTURES:
        assert verdict != official["correct"], "the departure is not real"
    else:
        assert verdict == official["correct"], f"verdict {verdict}, official {official['correct']}"


@pytest.mark.parametrize("start", starts(CASES, CHUNK), ids=chunk_id(CASES, CHUNK))
def test_verdict_and_extraction_equal_qwq(start):
    check_each(CASES, start, CHUNK, _check_case, lambda c: f"{c['generation'][:50]!r}->{c['answer']!r}")


def test_departures_are_in_the_table():
    assert set(DEPARTURES) <= {c["generation"] for c in CASES}


def test_the_model_text_is_never_evaluated():
    assert aime.symbolic_value("__import__('os').system('false')") is None
    assert aime.symbolic_value("(lambda: 1)()") is None
    assert aime.arithmetic_value("9**9**9") is None and aime.arithmetic_value("factorial(10**9)") is None
    assert aime.arithmetic_value("0x21") == 33.0 and aime.arithmetic_value("4!+9") == 33.0


def test_sets_are_compared_as_the_graders_symbolic_equal_compares_them():
    """Issue #60: ``\\boxed{\\{2, 1\\}}`` against ``\\{1, 2\\}`` is right for QwQ's grader (``grader.py:273-300``:
    ``parse_expr`` reads both as Python sets of sympy integers, then ``str(a) == str(b) or a == b``) and was wrong here
    (a set was no number). Lists and tuples compare in order."""
    from snapeval.tasks.aime import extract_answer, math_equal, normalize

    def right(reply, reference):
        return math_equal(normalize(extract_answer(reply)), normalize(reference))

    assert right("so \\boxed{\\{2, 1\\}}", "\\{1, 2\\}")
    assert right("\\boxed{\\{3,1,2\\}}", "\\{1,2,3\\}")
    assert not right("\\boxed{\\{2, 1\\}}", "\\{1, 3\\}")
    assert not right("\\boxed{[2, 1]}", "[1, 2]") and right("\\boxed{[1, 2]}", "[1, 2]")
    assert right("\\boxed{\\{33\\}}", "33")  # braces dropped first (grader.py's rule), as there


def test_cons_at_n_groups_answers_with_the_equality_pass_at_1_uses():
    """Issue #60: cons@n grouped answers by value while pass@1 grades with ``math_equal``, whose percentage rule makes
    80, 0.8 and 8000 each right for a reference of 80: an 8-sample vote flipped. They vote together now."""
    from snapeval.tasks.aime import consensus, score

    answers = ["0.8", "8000", "80", "5", "5", "5", "0.8", "7"]
    assert consensus(answers) == "0.8"  # 4 votes for the group of 80 against 3 for 5
    replies = [f"\\boxed{{{a}}}" for a in answers]
    metrics = score({"ID": "x", "Answer": "80"}, replies)
    assert metrics["cons@8"] == 1.0 and metrics["pass@1"] == 4 / 8
    assert consensus(["25", "025", "25.0", "7", "7"]) == "25" and consensus(["", ""]) == ""
    assert consensus(["\\frac{1}{2}", "0.5", "3", "3"]) in ("\\frac{1}{2}", "3")  # a tie goes to the first group
    assert consensus(["\\frac{1}{2}", "0.5", "3", "3"]) == "\\frac{1}{2}"
