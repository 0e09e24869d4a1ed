"""AIME 2024 (Maxwell-Jia/AIME_2024): 30 problems with integer answers 0-999, reasoning-model protocol.

The prompt is the DeepSeek-R1 model cards' instruction (sent through the chat template by the harness). Scoring
follows the official evaluation of QwQ (``QwenLM/QwQ``, ``eval/eval/eval.py`` and ``math_opensource.py``, which use
Qwen2.5-Math's ``parser.extract_answer`` and ``grader.math_equal``): the published R1-style AIME evaluation with
exactly this prompt and this data file (``../shared/data/aime24`` holds both copies). In order:

1. **Where**: the text after the first ``"\\n</think>\\n\\n"``; without it, the whole generation (so a generation
   cut off while thinking is still read; ``truncated_in_thinking`` counts those, apart from the score).
2. **Which answer** (:func:`extract_answer`): the content of the last ``boxed`` (braces balanced; ``\\boxed 5``
   up to a ``$``), else what follows the last "he answer is" / "final answer is", else the last number of the text
   (commas removed); then normalised (:func:`normalize`: ``$``, ``\\text{}``, ``\\left``, ``^\\circ``, ``\\%``,
   ``x=``, trailing zeros of decimals, fractions written ``a/b``, a unit after a number).
3. **Equal** (:func:`math_equal`): the same string (case folded); else both numbers (commas removed, ``x%`` read
   as ``x/100``) and equal within a relative 1e-4 to the answer, the answer / 100 or the answer x 100 (the grader's
   percentage rule); else LaTeX arithmetic (``\\frac``, ``^{}``, ``\\sqrt``, ``\\cdot``, ``\\times``, brackets)
   evaluated exactly and equal within 1e-4; else not equal. As in the official grader, a brace-less ``5^2`` is
   Python's XOR (sympy's ``parse_expr`` reads it before latex2sympy would): 7, not 25.

What the official grader does and this one does not (``docs/tasks.md``): it removes a fixed list of MathQA unit
words and converts number words ("twenty five"), and it hands anything else to sympy and latex2sympy (matrices,
intervals, equations, symbolic expressions; it ``eval``s the model's text to do so, which this harness never does).
For AIME's integer answers these differ only on answers no reasonable reading would accept or on spelled-out numbers.

Per problem with ``n`` samples: ``pass@1`` (mean correctness over the samples), unbiased ``pass@k`` for every power of
two ``k <= n`` (Chen et al., 2021), ``cons@n`` (the majority answer among the samples that have one: DeepSeek-R1's
consensus score), ``exact_match`` (the first sample: greedy pass@1 when ``n = 1``).
"""
from __future__ import annotations

import ast
import math
import operator
import os
import re
from fractions import Fraction

from snapeval.errors import SnapevalError
from snapeval.tasks.data import DatasetSpec, LoadedData, Schema, load_dataset_rows
from snapeval.tasks.families import TaskFamily
from snapeval.tasks.metrics import pass_at_k
from snapeval.tasks.reasoning import split_thinking

SCHEMA = Schema({"ID": (str,), "Problem": (str,), "Solution": (str,), "Answer": (int, str)})
SPEC = DatasetSpec("aime24", "Maxwell-Jia/AIME_2024", "train", ("aime24/aime_2024.jsonl",), SCHEMA)
#: The task family this folder is (snapeval.tasks.families): its tasks' prefix, its data and the mean (prompt,
#: generated) tokens per sample of DeepSeek-R1-0528 with SnapStream (arXiv 2511.03092, Table 3; restated in
#: shared/reference/benchmarks.md), which the SN40L pricing of a results row deploys.
FAMILY = TaskFamily("aime24", data=SPEC, typical_lengths=(140, 15_424), hooks="snapeval.tasks.aime.hooks",
                    reference_reply=lambda doc: "\\boxed{%s}" % doc["Answer"])

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
#: DeepSeek-R1 model cards: temperature 0.6, top-p 0.95 for sampled (averaged) pass@1.
SAMPLING = {"temperature": 0.6, "top_p": 0.95}
#: QwQ's eval.py reads the answer after this separator (its first occurrence), else the whole generation.
THINK_END = "\n</think>\n\n"
#: The grader's numeric tolerance (``math.isclose(reference, prediction, rel_tol=1e-4)``).
REL_TOL = 1e-4


def load(data_dir: str | os.PathLike | None = None) -> LoadedData:
    """All validated rows (hub ``Maxwell-Jia/AIME_2024`` or ``<data_dir>/aime24/aime_2024.jsonl``)."""
    data = load_dataset_rows(SPEC, data_dir)
    for where, row in zip(data.where, data.rows):
        if not re.fullmatch(r"\s*\d+\s*", str(row["Answer"])):
            raise SnapevalError(f"{where}: field 'Answer'={row['Answer']!r} is not an integer")
    return data


def build_prompt(doc: dict) -> str:
    """``<problem>\\nPlease reason step by step, and put your final answer within \\boxed{}.``"""
    return f"{doc['Problem'].strip()}\n{INSTRUCTION}"


# ------------------------------------------------------------------------------------------------------ extraction

def answer_text(response: str) -> str:
    """The part of a generation the answer is read from: after the first ``"\\n</think>\\n\\n"``, else all of it."""
    head, sep, tail = response.partition(THINK_END)
    return tail if sep else response


def _boxed_content(text: str) -> str:
    """What follows the last ``boxed``: balanced braces' content (all of the rest when they never close), or, for
    ``\\boxed 5``, the rest up to the first ``$``."""
    rest = text.rsplit("boxed", 1)[-1]
    if not rest:
        return ""
    if rest[0] != "{":
        return rest.split("$")[0].strip()
    depth, out = 1, []
    for ch in rest[1:]:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        out.append(ch)
    return "".join(out)


_NUMBER = re.compile(r"-?\d*\.?\d+")


def extract_answer(response: str) -> str:
    """The normalised answer of one generation (``""`` when it states none), read as the official grader reads it."""
    text = answer_text(response).replace("\u043a\u0438", "")
    if "final answer is $" in text and "$. I hope" in text:  # Minerva's phrasing
        pred = text.split("final answer is $", 1)[1].split("$. I hope", 1)[0].strip()
    elif "boxed" in text:
        pred = _boxed_content(text)
    elif "he answer is" in text:
        pred = text.rsplit("he answer is", 1)[-1].strip()
    elif "final answer is" in text:
        pred = text.rsplit("final answer is", 1)[-1].strip()
    else:
        numbers = _NUMBER.findall(text.replace(",", ""))
        pred = numbers[-1] if numbers else ""
    pred = re.sub(r"\n\s*", "", pred)
    if pred.startswith(":"):
        pred = pred[1:]
    for end in (".", "/"):
        if pred.endswith(end):
            pred = pred[:-1]
    return normalize(pred)


_STRIPPED = ("\\!", "\\left", "\\right", "^{\\circ}", "^\\circ", "\\$", "$", "\\(", "\\)", "\\%", "%", "\\mathbf")
_VARIABLES = ("x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to")
_NUMBER_THEN_UNIT = re.compile(r"^(-?\d[\d,]*(?:\.\d+)?)\s+[A-Za-z][A-Za-z .]*$")


_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_SCALES = {"thousand": 10 ** 3, "million": 10 ** 6, "billion": 10 ** 9}


def number_words(text: str) -> str | None:
    """The number an answer spells out ("twenty-five", "one hundred and four", "seventy three point five"), read from
    its number words alone as the grader's word-to-number step reads it; None when it has no number word."""
    words = [w for w in text.lower().replace("-", " ").split() if w in _UNITS or w in _TENS or w in _SCALES
             or w in ("hundred", "point")]
    if not words or words == ["point"]:
        return None
    whole, _, fraction = " ".join(words).partition("point")
    total = current = 0
    for word in whole.split():
        if word == "hundred":
            current = (current or 1) * 100
        elif word in _SCALES:
            total, current = total + (current or 1) * _SCALES[word], 0
        else:
            current += _UNITS.get(word, _TENS.get(word, 0))
    digits = "".join(str(_UNITS[w]) for w in fraction.split() if w in _UNITS and _UNITS[w] < 10)
    return f"{total + current}.{digits}" if digits else str(total + current)


def normalize(answer: str) -> str:
    """The grader's normalisation of an answer string, for the forms a numeric answer takes (see the module doc)."""
    s = str(answer).strip().replace("\n", "").rstrip(".")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac").replace("\\{", "{").replace("\\}", "}")
    trailing_text = re.sub(r"\\text{.*?}$", "", s).strip()
    if trailing_text and trailing_text != s:  # "25 \text{ minutes}" -> "25"
        s = trailing_text
    for piece in _STRIPPED:
        s = s.replace(piece, "")
    s = number_words(s) or s
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    s = re.sub(r"\\mbox{.*?}", "", s)
    for piece in _VARIABLES:
        s = s.replace(piece, "")
    unit = _NUMBER_THEN_UNIT.match(s.strip())
    if unit:  # a unit word after a number ("25 minutes"); the grader drops a list of such words
        s = unit.group(1)
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if len(s) >= 2 and s[0] + s[-1] in ("{}", "()", "[]") and s[1:-1].isalnum():
        s = s[1:-1]
    s = s.replace("and", "")
    s = re.sub(r"(\d+)\.0*([^\d])", r"\1\2", s)
    s = re.sub(r"(\d+)\.0*$", r"\1", s)
    if s.startswith("."):
        s = "0" + s
    if len(s.split("=")) == 2 and len(s.split("=")[0]) <= 2:
        s = s.split("=")[1]
    s = re.sub(r"\\sqrt(\w+)", r"\\sqrt{\1}", s).replace(" ", "")
    a_over_b = re.fullmatch(r"(-?\d+)/(\d+)", s)
    if a_over_b:
        s = f"\\frac{{{a_over_b.group(1)}}}{{{a_over_b.group(2)}}}"
    return s


# ------------------------------------------------------------------------------------------------------ comparison

def _number(text: str) -> float | None:
    """A plain number (commas removed; ``x%`` is ``x/100``), else None."""
    text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        pass
    if text.endswith("%"):
        try:
            return float(text[:-1].rstrip("\\")) / 100
        except ValueError:
            return None
    return None


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Pow: operator.pow, ast.BitXor: lambda a, b: Fraction(int(a) ^ int(b))}


def _latex_arithmetic(expr: str) -> str | None:
    """LaTeX arithmetic as a Python arithmetic expression (or None): ``\\frac{a}{b}``, ``a^{b}``, ``\\sqrt{a}``,
    ``\\cdot``/``\\times``, braces and brackets."""
    s = expr.replace("\\cdot", "*").replace("\\times", "*").replace("\\left", "").replace("\\right", "")
    for _ in range(8):  # nested fractions and roots, innermost first
        new = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
        new = re.sub(r"\\sqrt\{([^{}]*)\}", r"((\1)**(1/2))", new)
        if new == s:
            break
        s = new
    # ``a^{b}`` is a power; a bare ``a^b`` is Python's XOR, as the official grader reads it (sympy's parse_expr
    # accepts it before latex2sympy is tried): 5^2 is 7 there, so it is here
    s = s.replace("^{", "**{").replace("{", "(").replace("}", ")").replace("[", "(").replace("]", ")")
    return s if re.fullmatch(r"[\d.+\-*/()^ ]+", s) else None


def _evaluate(node) -> Fraction | float:
    """Numbers and + - * / ** only (never ``eval``: the text is a model's output)."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(node.value) if isinstance(node.value, int) else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (abs(float(right)) > 64 or abs(float(left)) > 1e6):
            raise ValueError("power too large")
        if isinstance(node.op, ast.BitXor) and not all(isinstance(v, Fraction) and v.denominator == 1
                                                       for v in (left, right)):
            raise ValueError("XOR of non-integers")
        value = _OPS[type(node.op)](left, right)
        if isinstance(value, complex):
            raise ValueError("complex")
        return value
    raise ValueError("not arithmetic")


def arithmetic_value(expr: str) -> float | None:
    """The value of a LaTeX arithmetic answer (``\\frac{408}{2}``, ``2^{3}``, ``\\sqrt{16}``), else None."""
    python = _latex_arithmetic(expr)
    if python is None or len(python) > 200:
        return None
    try:
        return float(_evaluate(ast.parse(python, mode="eval")))
    except (ValueError, SyntaxError, ZeroDivisionError, OverflowError, TypeError, RecursionError):
        return None


_BRACKETS = {"[": "]", "(": ")"}
_OTHER_OPEN = {"[": "(", "(": "["}
_NO_BRACES = str.maketrans("", "", "{}()")


def math_equal(prediction: str, reference: str) -> bool:
    """Whether a normalised predicted answer equals the reference answer (the grader's rules, module doc item 3)."""
    if not prediction:
        return False
    if prediction.strip().lower() == reference.strip().lower():
        return True
    pred, ref = _number(prediction), _number(reference)
    if pred is not None and ref is not None:
        return any(math.isclose(candidate, pred, rel_tol=REL_TOL) for candidate in (ref / 100, ref, ref * 100))
    pred_text, ref_text = prediction, reference
    if _BRACKETS.get(prediction[:1]) == prediction[-1:] and not reference.startswith(_OTHER_OPEN[prediction[0]]):
        pred_text, ref_text = prediction.strip("[]()"), reference.strip("[]()")  # "[25]" for 25; not "(2,5)" vs "[2,5]"
    if pred_text.translate(_NO_BRACES).lower() == ref_text.translate(_NO_BRACES).lower():
        return True
    if prediction.count("=") == 1 and len(prediction.split("=")[0].strip()) <= 2 and "=" not in reference:
        return math_equal(prediction.split("=")[1], reference)
    value = arithmetic_value(prediction)
    return value is not None and ref is not None and math.isclose(ref, value, rel_tol=REL_TOL)


# --------------------------------------------------------------------------------------------------------- scores

def _grouping_key(answer: str):
    """Answers that are the same number vote together (``25``, ``025``, ``25.0``)."""
    value = _number(answer)
    if value is None:
        value = arithmetic_value(answer)
    return ("number", round(value, 9)) if value is not None else ("text", answer.lower())


def consensus(answers: list[str]) -> str:
    """The majority answer among the samples that state one (ties: the one reached first); ``""`` if none does."""
    votes: dict = {}
    for answer in answers:
        if answer:
            key = _grouping_key(answer)
            count, first = votes.get(key, (0, answer))
            votes[key] = (count + 1, first)
    if not votes:
        return ""
    return max(votes.values(), key=lambda vote: vote[0])[1]  # max keeps the first of equal counts


def score(doc: dict, responses: list[str], *, assume_thinking: bool = False) -> dict[str, float]:
    """Per-problem metrics over its ``n = len(responses)`` samples (module doc): ``exact_match`` (the first sample),
    ``pass@1`` (their mean), ``pass@k`` for powers of two ``2 <= k <= n``, ``cons@n`` (only when ``n > 1``), and the
    diagnostics ``unparsable`` (no answer stated) and ``truncated_in_thinking`` (cut off inside the thinking section;
    ``assume_thinking``: the chat template opened it), as fractions of the samples."""
    if not responses:
        raise SnapevalError(f"AIME problem {doc.get('ID')!r}: no generation to score")
    reference = normalize(str(doc["Answer"]))
    answers = [extract_answer(r) for r in responses]
    correct = [math_equal(a, reference) for a in answers]
    n = len(responses)
    out = {
        "exact_match": float(correct[0]),
        "pass@1": sum(correct) / n,
        "unparsable": sum(not a for a in answers) / n,
        "truncated_in_thinking": sum(split_thinking(r, assume_thinking=assume_thinking)[2] for r in responses) / n,
    }
    k = 2
    while k <= n:
        out[f"pass@{k}"] = pass_at_k(n, sum(correct), k)
        k *= 2
    if n > 1:
        out[f"cons@{n}"] = float(math_equal(consensus(answers), reference))
    return out
