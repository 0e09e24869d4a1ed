"""AIME 2024 (Maxwell-Jia/AIME_2024): 30 problems with integer answers 0-999, reasoning-model protocol.

The prompt is the DeepSeek-R1 model cards' instruction (sent through the chat template by the harness). Scoring
follows the official evaluation of QwQ (``QwenLM/QwQ``, ``eval/eval/eval.py`` and ``math_opensource.py``, which use
Qwen2.5-Math's ``parser.extract_answer`` and ``grader.math_equal``): the published R1-style AIME evaluation with
exactly this prompt and this data file (``../shared/data/aime24`` holds both copies). In order:

1. **Where**: the text after the first ``"\\n</think>\\n\\n"``; without it, the whole generation (so a generation
   cut off while thinking is still read; ``truncated_in_thinking`` counts those, apart from the score).
2. **Which answer** (:func:`extract_answer`): the content of the last ``boxed`` (braces balanced; ``\\boxed 5``
   up to a ``$``), else what follows the last "he answer is" / "final answer is", else the last number of the text
   (commas removed); then normalised twice, as the grader does (:func:`normalize`, QwQ's ``strip_string``:
   ``\\text{...}`` at the end, the fixed list of MathQA unit words :data:`UNIT_WORDS` (so ``\\boxed{m+n=33}`` loses
   its ``m`` and is read as 33, while ``33 dollars`` keeps its word and is no number), ``$``, ``^\\circ``, number
   words as word2number reads them, ``x=``, ``\\%``, trailing zeros of decimals, ``k=`` prefixes of two characters or
   fewer, ``\\frac12`` and ``a/b`` as fractions).
3. **Equal** (:func:`math_equal`): the same string (case folded); else both numbers (commas removed, ``x%`` read
   as ``x/100``) and equal within a relative 1e-4 to the answer, the answer / 100 or the answer x 100 (the grader's
   percentage rule); else equal once brackets and braces are dropped; else ``k=`` with the part after ``=`` equal;
   else the grader's last resort (:func:`symbolic_equal`): the answer read as sympy's ``parse_expr`` reads it
   (:func:`python_value`: Python syntax, ``0x21`` is 33, ``4!``, ``sqrt(...)``, a bare ``5^2`` is XOR: 7, ``{2}^{5}``
   a set), else as latex2sympy 1.9.1 reads LaTeX (:func:`latex_value`, :mod:`snapeval.tasks.aime.latex`: its lexer's
   tokens and its grammar's arithmetic), equal to the reference exactly or within a relative 1e-4.

The grader ``eval``s the model's text through sympy; this harness never does: it parses the text with Python's
``ast`` (or with the LaTeX grammar) and builds the value from numbers, names and a short list of functions.
``tests/test_protocols_aime.py`` and ``tests/test_protocols_aime_forms.py`` check it against two golden tables made by
the official code and count every difference (docs/tasks.md lists them).

Per problem with ``n`` samples: ``pass@1`` (mean correctness over the samples), unbiased ``pass@k`` for every power of
two ``k <= n`` (Chen et al., 2021), ``cons@n`` (the majority answer among the samples that have one: DeepSeek-R1's
consensus score), ``exact_match`` (the first sample: greedy pass@1 when ``n = 1``).
"""
from __future__ import annotations

import ast
import math
import os
import re
import warnings

from snapeval.errors import SnapevalError
from snapeval.tasks.aime.latex import NO_NUMBER, latex_value
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
    # normalised twice, as the grader does (``extract_answer`` ends with ``strip_string``; ``work`` applies it again):
    # the second pass finishes what the first exposed ("\\sqrt 1089" -> "\\sqrt1089" -> "\\sqrt{1089}")
    return normalize(normalize(pred))


#: Unit words removed from an answer (QwQ's ``parser.py`` ``unit_texts``, "units mainly from MathQA", and each with an
#: ``s``): each is a regular expression matched between non-word characters (so ``"q ."`` matches ``"q x"`` too), and
#: only these go: ``33 dollars`` keeps its word and is no number.
UNIT_WORDS = (
    "east", "degree", "mph", "kmph", "ft", "m sqaure", " m east", "sq m", "deg", "mile", "q .", "monkey", "prime",
    "ratio", "profit of rs", "rd", "o", "gm", "p . m", "lb", "tile", "per", "dm", "lt", "gain", "ab", "way", "west",
    "a .", "b .", "c .", "d .", "e .", "f .", "g .", "h .", "t", "a", "h", "no change", "men", "soldier", "pie", "bc",
    "excess", "st", "inches", "noon", "percent", "by", "gal", "kmh", "c", "acre", "rise", "a . m", "th", "π r 2", "sq",
    "mark", "l", "toy", "coin", "sq . m", "gallon", "° f", "profit", "minw", "yr", "women", "feet", "am", "pm", "hr",
    "cu cm", "square", "v â € ™", "are", "rupee", "rounds", "cubic", "cc", "mtr", "s", "ohm", "number", "kmph", "day",
    "hour", "minute", "min", "second", "man", "woman", "sec", "cube", "mt", "sq inch", "mp", "∏ cm ³", "hectare",
    "more", "sec", "unit", "cu . m", "cm 2", "rs .", "rs", "kg", "g", "month", "km", "m", "cm", "mm", "apple", "liter",
    "loss", "yard", "pure", "year", "increase", "decrease", "d", "less", "Surface", "litre", "pi sq m", "s .", "metre",
    "meter", "inch")
UNIT_WORDS = UNIT_WORDS + tuple(w + "s" for w in UNIT_WORDS)
_UNIT_RES = tuple(re.compile(r"(^|\W)" + w + r"($|\W)") for w in UNIT_WORDS)
_VARIABLES = ("x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to")

#: The number words of the grader's word-to-number step (word2number 1.1's ``american_number_system``).
_WORD_VALUES = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen".split())}
_WORD_VALUES.update({w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(),
                                                         start=2)})
_WORD_VALUES.update({"hundred": 100, "thousand": 10 ** 3, "million": 10 ** 6, "billion": 10 ** 9})
_SCALE_WORDS = ("billion", "million", "thousand")


def _group_value(words: list[str]) -> int:
    """word2number's value of a group of number words: four words ``a*b+c+d``, three ``a*b+c``, two ``a*b`` when one
    is a hundred else ``a+b``, otherwise the first word alone."""
    v = [_WORD_VALUES[w] for w in words]
    if len(v) == 4:
        return v[0] * v[1] + v[2] + v[3]
    if len(v) == 3:
        return v[0] * v[1] + v[2]
    if len(v) == 2:
        return v[0] * v[1] if 100 in v else v[0] + v[1]
    return v[0]


def number_words(text: str) -> str | None:
    """The number an answer spells out, read as the grader's word-to-number step (word2number 1.1) reads it: a string
    of digits is that integer (``"033"`` is 33); otherwise its number words alone ("twenty-five", "one hundred and
    four", "three point five"); None where that step fails (no number word, a scale word twice, scales out of
    order), so the answer is kept as written."""
    sentence = text.replace("-", " ").lower()
    if sentence.isdigit():
        return str(int(sentence))
    words = [w for w in sentence.strip().split() if w in _WORD_VALUES or w == "point"]
    if not words or any(words.count(w) > 1 for w in (*_SCALE_WORDS, "point")):
        return None
    decimals: list[str] = []
    if "point" in words:
        at = words.index("point")
        words, decimals = words[:at], words[at + 1:]
    at = {w: (words.index(w) if w in words else -1) for w in _SCALE_WORDS}
    if (at["thousand"] > -1 and (at["thousand"] < at["million"] or at["thousand"] < at["billion"])) or \
            (at["million"] > -1 and at["million"] < at["billion"]):
        return None
    total: int | float = 0
    if len(words) == 1:
        total = _WORD_VALUES[words[0]]
    elif words:
        if at["billion"] > -1:
            total += _group_value(words[:at["billion"]]) * 10 ** 9
        if at["million"] > -1:
            total += _group_value(words[at["billion"] + 1 if at["billion"] > -1 else 0:at["million"]]) * 10 ** 6
        if at["thousand"] > -1:
            start = at["million"] + 1 if at["million"] > -1 else (at["billion"] + 1 if at["billion"] > -1 else 0)
            total += _group_value(words[start:at["thousand"]]) * 1000
        last = next((at[w] for w in ("thousand", "million", "billion") if at[w] > -1), None)
        if last is None:
            total += _group_value(words)
        elif last != len(words) - 1:
            total += _group_value(words[last + 1:])
    if decimals:
        digits = [w for w in decimals if w in _WORD_VALUES and _WORD_VALUES[w] < 10]
        total += float("0." + "".join(str(_WORD_VALUES[w]) for w in decimals)) if len(digits) == len(decimals) else 0
    return str(total)


def _fix_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{7}`` -> ``\\frac{1}{7}`` (a ``\\frac`` followed by fewer than two
    characters leaves the whole answer unchanged)."""
    head, *parts = s.split("\\frac")
    out = head
    for part in parts:
        out += "\\frac"
        if part[:1] == "{":
            out += part
        elif len(part) < 2:
            return s
        elif part[1] != "{":
            out += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
        else:
            out += "{" + part[0] + "}" + part[1:]
    return out


def _fix_a_slash_b(s: str) -> str:
    """``a/b`` of two integers written plainly -> ``\\frac{a}{b}``."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a = parts[0] if "sqrt" in parts[0] else int(parts[0])
        b = parts[1] if "sqrt" in parts[1] else int(parts[1])
    except ValueError:
        return s
    return "\\frac{%s}{%s}" % (a, b) if s == f"{a}/{b}" else s


def _normalize_once(answer) -> str:
    s = str(answer).strip().replace("\n", "").rstrip(".").replace("\\!", "")
    s = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{array\}", r"\\end{pmatrix}", s).replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\{", "{").replace("\\}", "}")
    without_text = re.sub(r"\\text{.*?}$", "", s).strip()  # "25 \text{ minutes}" -> "25"
    if without_text and without_text != s:
        s = without_text
    for _ in range(2):
        for unit in _UNIT_RES:
            removed = unit.sub(r"\1\2", s)
            if removed:
                s = removed
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\(", "").replace("\\)", "")
    s = number_words(s) or s
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    for key in _VARIABLES:
        s = s.replace(key, "")
    s = s.replace("\\emptyset", "{}").replace("(-\\infty,\\infty)", "\\mathbb{R}")
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    # (the grader's unwrapping of "{x}", "(x)", "[x]" requires the whole string, brackets included, to be
    # alphanumeric, so it never applies)
    s = s.replace("infinity", "\\infty")
    if "\\infty" not in s:
        s = s.replace("inf", "\\infty")
    s = s.replace("+\\inity", "\\infty").replace("and", "").replace("\\mathbf", "")
    s = re.sub(r"\\mbox{.*?}", "", s)
    if "j" in s and "i" not in s:
        s = s.replace("j", "i")
    s = re.sub(r"(\d+)\.0*([^\d])", r"\1\2", s)
    s = re.sub(r"(\d+)\.0*$", r"\1", s)
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    if len(s.split("=")) == 2 and len(s.split("=")[0]) <= 2:  # "k = 5" -> "5"; after the unit words went,
        s = s.split("=")[1]                                      # "m+n=33" is "+n=33", so it is 33 too
    s = re.sub(r"\\sqrt(\w+)", r"\\sqrt{\1}", s).replace(" ", "")
    return _fix_a_slash_b(_fix_fracs(s))


def normalize(answer) -> str:
    """The grader's normalisation of an answer string (QwQ's ``strip_string``, module doc item 2)."""
    return _normalize_once(answer)


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


def _sympy_functions() -> dict:
    import sympy

    return {"sqrt": sympy.sqrt, "cbrt": sympy.cbrt, "factorial": sympy.factorial, "factorial2": sympy.factorial2,
            "binomial": sympy.binomial,
            "Abs": sympy.Abs, "abs": sympy.Abs, "gcd": sympy.gcd, "lcm": sympy.lcm, "max": sympy.Max,
            "min": sympy.Min, "Max": sympy.Max, "Min": sympy.Min, "floor": sympy.floor, "ceiling": sympy.ceiling,
            "Rational": sympy.Rational, "Integer": sympy.Integer}


_FACTORIAL = re.compile(r"(\d+|\))!(?!=)")
#: sympy's factorial notation reads ``!!`` as the double factorial (``3!!`` is 3).
_DOUBLE_FACTORIAL = re.compile(r"(\d+)!!(?!=)")


def _build(node):
    """The value of a parsed Python expression as ``parse_expr`` makes it: numbers (sympy's), names (symbols; ``pi``,
    ``E``, ``I``, ``oo``), sets, lists and tuples (Python's), + - * / **, ``^`` as XOR and ``~`` as bitwise not, the
    functions of :func:`_sympy_functions`. Never ``eval``."""
    import sympy

    if isinstance(node, ast.Expression):
        return _build(node.body)
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
        if isinstance(node.value, int):
            return sympy.Integer(node.value)
        if isinstance(node.value, float):
            return sympy.Float(node.value)
        if isinstance(node.value, complex):
            imag = node.value.imag
            return (sympy.Float(imag) if imag % 1 else sympy.Integer(int(imag))) * sympy.I
        raise ValueError("not a number")
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)):  # Python's containers: "{00}" is the set {0}
        items = [_build(item) for item in node.elts]
        return {ast.Set: set, ast.List: list, ast.Tuple: tuple}[type(node)](items)
    if isinstance(node, ast.Name):
        return {"pi": sympy.pi, "E": sympy.E, "I": sympy.I, "oo": sympy.oo}.get(node.id) or sympy.Symbol(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _build(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):  # Python's "~33" is -34
        value = _build(node.operand)
        if not value.is_Integer:
            raise ValueError("~ of a non-integer")
        return sympy.Integer(~int(value))
    if isinstance(node, ast.BinOp):
        left, right = _build(node.left), _build(node.right)
        if isinstance(left, _CONTAINERS) or isinstance(right, _CONTAINERS):
            return _container_operation(node.op, left, right)
        if isinstance(node.op, ast.BitXor):
            if not (left.is_Integer and right.is_Integer):
                raise ValueError("XOR of non-integers")
            return sympy.Integer(int(left) ^ int(right))
        if isinstance(node.op, ast.Pow):
            if right.is_number and abs(right) > 64 or left.is_number and abs(left) > 10 ** 6:
                raise ValueError("power too large")
            return left ** right
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.Div: lambda a, b: a / b}
        if type(node.op) in ops:
            return ops[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _sympy_functions().get(node.func.id)
        args = [_build(a) for a in node.args]
        if function is not None and len(args) <= 4:
            if function in (sympy.factorial, sympy.factorial2) and not (args[0].is_Integer and 0 <= args[0] <= 1000):
                raise ValueError("factorial too large")
            return function(*args)
    raise ValueError("not arithmetic")


_CONTAINERS = (set, list, tuple)
_PYTHON_OPERATORS = {ast.Add: "__add__", ast.Sub: "__sub__", ast.Mult: "__mul__", ast.Div: "__truediv__",
                     ast.BitXor: "__xor__", ast.BitOr: "__or__", ast.BitAnd: "__and__"}


def _container_operation(op, left, right):
    """Python's operator on a set, list or tuple (``{2}^{5}`` is the set {2, 5}; ``[2]+[3]`` a list); an operation
    Python refuses raises ``TypeError`` (the grader's ``parse_expr`` then fails and latex2sympy reads the text)."""
    import operator

    name = _PYTHON_OPERATORS.get(type(op))
    if name is None:
        raise ValueError("not arithmetic")
    if name == "__mul__":
        count = right if isinstance(left, _CONTAINERS) else left
        if getattr(count, "is_Integer", False) and abs(int(count)) > 10 ** 4:
            raise ValueError("a repetition too long")
    return getattr(operator, name)(left, right)


def _value(python: str, containers: bool = False):
    if len(python) > 200:
        return None
    try:
        with warnings.catch_warnings():  # "33x" is an invalid decimal literal to Python: no reading, no warning
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(python, mode="eval")
        value = _build(tree)
        if isinstance(value, _CONTAINERS):
            return value if containers else NO_NUMBER
        return value if getattr(value, "is_Number", False) or getattr(value, "free_symbols", None) is not None else None
    except Exception:  # the grader's _parse: whatever parse_expr raises is no reading (a bare except)
        return None


def python_value(text: str, containers: bool = False):
    """The answer read as sympy's ``parse_expr`` reads it (the grader's first reading that can succeed: Python syntax,
    integer literals in any base, ``4!``, names as symbols, ``^`` as XOR, ``{...}`` a set and ``[...]`` a list, which
    are :data:`NO_NUMBER`, or with ``containers`` the Python set, list or tuple itself); None where that fails."""
    return _value(_FACTORIAL.sub(r"factorial(\1)", _DOUBLE_FACTORIAL.sub(r"factorial2(\1)", text)), containers)


def python_container(text: str):
    """The set, list or tuple the grader's ``_parse`` makes of an answer when its first reading that succeeds is
    ``parse_expr``'s and is one (``{2,1}`` is the Python set {1, 2} of sympy integers); None otherwise."""
    for candidate in dict.fromkeys((text.replace("\\\\", "\\"), text)):
        value = python_value(candidate, containers=True)
        if value is not None:
            return value if isinstance(value, _CONTAINERS) else None
    return None


def symbolic_value(text: str):
    """What the grader's last resort (``_parse``) makes of an answer: :func:`python_value`, else :func:`latex_value`,
    each tried first on the text with ``\\\\`` read as ``\\`` and then as written; :data:`NO_NUMBER` where a
    reading succeeds with something that is no number (a set, a list, a relation); None where none succeeds."""
    texts = dict.fromkeys((text.replace("\\\\", "\\"), text))
    for reader in (python_value, latex_value):
        for candidate in texts:
            value = reader(candidate)
            if value is not None:
                return value
    return None


def arithmetic_value(expr: str) -> float | None:
    """The numeric value of an answer (:func:`symbolic_value`), else None (symbols, no reading)."""
    value = symbolic_value(expr)
    if value is NO_NUMBER:
        return None
    try:
        return float(value) if value is not None and value.is_number and value.is_real else None
    except (TypeError, ValueError, OverflowError):
        return None


def symbolic_equal(prediction: str, reference: str) -> bool:
    """The grader's last resort: both read (:func:`symbolic_value`), then equal as expressions, or their difference
    simplifies to 0, or their numeric values are within a relative 1e-4."""
    import sympy

    a, b = symbolic_value(prediction), symbolic_value(reference)
    if a is None or b is None:
        return a is None and b is None and prediction == reference
    if a is NO_NUMBER or b is NO_NUMBER:  # a set, list or relation equals no number; two containers parse_expr
        left, right = python_container(prediction), python_container(reference)  # read compare with Python's ==
        return left is not None and right is not None and _containers_equal(left, right)  # ({2,1} == {1,2})
    try:
        if a == b or sympy.simplify(a - b) == 0:
            return True
        return math.isclose(float(sympy.N(a)), float(sympy.N(b)), rel_tol=REL_TOL)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return False


def _containers_equal(left, right) -> bool:
    """``str(a) == str(b) or a == b`` of the grader's ``symbolic_equal`` on two Python containers (its later tests
    raise on them: ``a.equals``, ``simplify(a - b)`` of two sets is a set, ``N``)."""
    try:
        return str(left) == str(right) or bool(left == right)
    except Exception:  # noqa: BLE001 - the grader's bare except
        return False


_BRACKETS = {"[": "]", "(": ")"}
_OTHER_OPEN = {"[": "(", "(": "["}
_NO_BRACES = str.maketrans("", "", "{}()")


def math_equal(prediction: str, reference: str) -> bool:
    """Whether a normalised predicted answer equals the reference answer (the grader's rules, module doc item 3)."""
    if prediction.strip().lower() == reference.strip().lower():
        return True
    pred, ref = _number(prediction), _number(reference)
    if pred is not None and ref is not None:
        return any(math.isclose(candidate, pred, rel_tol=REL_TOL) for candidate in (ref / 100, ref, ref * 100))
    if not prediction:
        return False
    prediction, reference = prediction.strip(), reference.strip()
    pred_text, ref_text = prediction, reference
    if _BRACKETS.get(prediction[:1]) == prediction[-1:] and not reference.startswith(_OTHER_OPEN[prediction[0]]):
        pred_text, ref_text = prediction.strip("[]()"), reference.strip("[]()")  # "[25]" for 25; not "(2,5)" vs "[2,5]"
    if pred_text.translate(_NO_BRACES).lower() == ref_text.translate(_NO_BRACES).lower():
        return True
    if prediction.count("=") == 1 and len(prediction.split("=")[0].strip()) <= 2 and "=" not in reference:
        if math_equal(prediction.split("=")[1], reference):
            return True
    return symbolic_equal(prediction, reference)


# --------------------------------------------------------------------------------------------------------- scores

def _grouping_key(answer: str):
    """Answers written alike vote together at once (``25``, ``025``, ``25.0``: one number); others are compared with
    :func:`math_equal` (:func:`consensus`)."""
    value = _number(answer)
    return ("number", round(value, 9)) if value is not None else ("text", answer.lower())


def consensus(answers: list[str]) -> str:
    """The majority answer among the samples that state one (ties: the group reached first; ``""`` if none does).
    Answers vote together when :func:`math_equal` (the equality ``pass@1`` grades with) holds between one and the
    first answer of a group, either way round: so ``80``, ``0.8`` and ``8000`` are one vote, as the grader's
    percentage rule makes each of them right for a reference of 80 (issue #60; no official cons@n code exists:
    docs/tasks.md). A group is named by its first answer."""
    groups: list[list] = []  # [first answer, votes, keys seen]
    for answer in answers:
        if not answer:
            continue
        key = _grouping_key(answer)
        for group in groups:
            if key in group[2] or math_equal(answer, group[0]) or math_equal(group[0], answer):
                group[1] += 1
                group[2].add(key)
                break
        else:
            groups.append([answer, 1, {key}])
    if not groups:
        return ""
    return max(groups, key=lambda group: group[1])[0]  # max keeps the first of equal counts


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
