"""AIME's LaTeX arithmetic read as QwQ's grader reads it (issue 46 item 2), differentially: every case of
``tests/golden/aime/latex_forms_620a5ea.json`` (a seeded space of LaTeX answer forms in replies, each with a reference
it equals and one it does not, scored by QwQ 620a5ea's ``math_opensource.work`` itself, run by
``tests/golden/aime/make_latex_forms.py`` in a scratch environment; its docstring and the table's header say how)
is scored by snapeval, which must agree on the verdict and on the extracted answer. A case where it may not carries a
``departure`` field with the reason (docs/tasks.md lists each class); the count of those is pinned below, so a new
one shows in review."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from snapeval.tasks import aime
from tests.case_chunks import check_each, chunk_id, starts

TABLE = json.loads((Path(__file__).parent / "golden" / "aime" / "latex_forms_620a5ea.json").read_text())
CASES = TABLE["cases"]
#: The departures of the table, by class (docs/tasks.md): the official run timed out on a product holding a gcd
#: (3 cases), and sympy 1.12 failed on such a product within the time (2 cases).
DEPARTURE_COUNTS = {"timeout": 3, "unevaluated gcd or lcm in a product": 2}


def _departure_class(case: dict) -> str:
    if case["departure"].startswith("compute_scores' 10 s timeout"):
        return "timeout"
    if case["departure"].startswith("latex2sympy returns gcd and lcm as an UnevaluatedExpr"):
        return "unevaluated gcd or lcm in a product"
    return case["departure"]


def test_the_table_is_the_official_run_over_every_class():
    header = TABLE["header"]
    assert header["official_commit"] == "620a5eadc89ff464d339367dd9c9973a93215c81"
    assert header["packages"]["sympy"] == "1.12" and header["packages"]["latex2sympy2"] == "1.9.1"
    assert header["packages"]["antlr4-python3-runtime"] == "4.7.2" and header["packages"]["word2number"] == "1.1"
    assert header["cases"] == len(CASES) >= 2000
    right = sum(c["official"]["correct"] for c in CASES)
    assert right == header["official_correct"] and 500 <= right <= len(CASES) - 500  # both verdicts, many times
    assert all(c["answer"].isdigit() and 0 <= int(c["answer"]) <= 999 for c in CASES)
    forms = "\n".join(c["generation"] for c in CASES)
    for needle in ("{{0", "\\frac{", "\\dfrac", "\\tfrac", "\\sqrt{", "\\sqrt[3]", "^{", "}^{", "\\cdot", "\\times",
                   "\\lfloor", "\\lceil", "|-", "\\vert", "\\lvert", "\\gcd", "\\operatorname{gcd}", "\\binom",
                   "\\dbinom", "\\choose", "\\,", "\\;", "\\:", "\\quad", "~", "\\!", "\\left(", "\\text{ cm}",
                   "\\mbox", "^\\circ", "^{\\circ}", "\\%", "^{0}", "^0", ".00", "-(", "3(11)"):
        assert needle in forms, needle


def test_departures_are_counted_by_class():
    counts: dict[str, int] = {}
    for case in CASES:
        if "departure" in case:
            counts[_departure_class(case)] = counts.get(_departure_class(case), 0) + 1
    assert counts == DEPARTURE_COUNTS


#: Cases per test (tests/case_chunks.py): 2,809 one-case tests spent about as long in pytest's per-test work as in
#: the grader.
CHUNK = 100


def _case_id(case: dict) -> str:
    return f"{case['generation'][-60:]!r}->{case['answer']!r}"


def _check_case(case: dict) -> None:
    official = case["official"]
    extracted = aime.extract_answer(case["generation"])
    verdict = aime.score({"ID": "case", "Answer": case["answer"]}, [case["generation"]])["exact_match"] == 1.0
    if "departure" in case:
        assert (extracted, verdict) != (official["extracted"], official["correct"]), "the departure is not real"
    else:
        assert extracted == official["extracted"], f"extracted {extracted!r}, official {official['extracted']!r}"
        assert verdict == official["correct"], f"verdict {verdict}, official {official['correct']}"


@pytest.mark.parametrize("start", starts(CASES, CHUNK), ids=chunk_id(CASES, CHUNK))
def test_verdict_and_extraction_equal_the_official_grader(start):
    check_each(CASES, start, CHUNK, _check_case, _case_id)


def test_the_chunks_cover_every_case_once():
    covered = [i for s in starts(CASES, CHUNK) for i in range(s, min(s + CHUNK, len(CASES)))]
    assert covered == list(range(len(CASES)))
