"""Make ``latex_forms_620a5ea.json``: a seeded space of LaTeX answer forms scored by QwQ's official AIME grader.

This script is not part of the test suite and never runs inside this repository's environment: it imports the
official grader, which needs its own pins. To regenerate the table (the same cases for one seed, and the same file
unless a job's time crosses 3 s or 60 s on another machine; see ``official_results``)::

    git clone https://github.com/QwenLM/QwQ && git -C QwQ checkout 620a5eadc89ff464d339367dd9c9973a93215c81
    python3.11 -m venv /tmp/qwqenv
    /tmp/qwqenv/bin/pip install sympy==1.12 latex2sympy2==1.9.1 word2number==1.1 antlr4-python3-runtime==4.7.2 \\
        regex numpy tqdm pebble timeout-decorator
    /tmp/qwqenv/bin/python tests/golden/aime/make_latex_forms.py --qwq-eval QwQ/eval/eval \\
        --out tests/golden/aime/latex_forms_620a5ea.json

Each case is a generation (a LaTeX answer form inside a reply, ``"... \\boxed{FORM}"``) and an AIME reference (an
integer 0-999): the value the form was built to have, and for each form also a reference it does not have (the
value plus or minus one), so both verdicts occur. The forms are built from the classes of issue 46: nested brace
groups, ``\\frac``/``\\dfrac``/``\\tfrac`` with nested groups, ``\\sqrt`` and ``\\sqrt[n]``, powers ``^{...}``
(nested too), leading zeros, ``\\cdot``/``\\times``/juxtaposed factors, floor and ceiling brackets, absolute-value
bars, ``\\gcd``, ``\\binom``, spacing commands, ``\\left(``/``\\right)``, text units, degrees, percent signs,
negative numbers, decimals, a constant to the power zero, and random combinations of these.

The official verdict of a case is what the QwQ evaluation does to it: ``eval.py``'s ``get_after_think`` (its source
read from ``eval.py`` and run as written; importing ``eval.py`` would import the LiveCodeBench and IFEval graders'
dependencies), then ``math_opensource.work`` on the job ``{gen: [generation], answer, task:
'math_opensource/aime24'}``, unmodified. ``compute_scores`` runs that same function in a process pool with a 10 s
timeout; this script runs it the same way, and records a job that runs past 60 s as ``compute_scores`` records a
timeout (wrong, extracted answer "Timeout") and leaves out a job that ends after 3 s but within 60 s (whether it
ends within the 10 s depends on the machine's speed); the header counts both."""
from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import math
import random
import sys
import time
from pathlib import Path

COMMIT = "620a5eadc89ff464d339367dd9c9973a93215c81"
TIMEOUT_S = 10
#: A job is recorded when it ends within FAST_S seconds, or as a timeout when it runs past LONG_S; one in between is
#: left out (its official result would depend on the machine's speed).
FAST_S, LONG_S = 3, 60
#: The reason a case past the timeout is a departure of snapeval's (tests/test_protocols_aime_forms.py counts them).
TIMEOUT_DEPARTURE = ("compute_scores' 10 s timeout per job (math_opensource.py, pebble's map(timeout=10)) ended the "
                     "official run (it ran past 60 s), which records the job as wrong with the answer 'Timeout'; "
                     "latex2sympy returns gcd and lcm as an UnevaluatedExpr, and sympy's equals() on a product "
                     "holding one runs for minutes (grader.py symbolic_equal, 'a.equals(b)'); snapeval reads the "
                     "value at once")
UNEVALUATED_DEPARTURE = ("latex2sympy returns gcd and lcm as an UnevaluatedExpr (latex2sympy2.py handle_gcd_lcm); "
                         "in a product or power sympy 1.12's equals() and simplify() raise RecursionError and N() "
                         "'Cannot convert complex to float' (grader.py symbolic_equal), so the official grader "
                         "scores the expression's right value wrong; snapeval reads the value")

# ------------------------------------------------------------------------------------------------------ the forms
#: A form is (latex, value): the LaTeX text and the integer it was built to have.

SPACES = ("\\,", "\\;", "\\:", "\\quad", "\\qquad", "~", "\\!", "\\ ", " ")
UNITS = ("\\text{ cm}", "\\text{cm}", "\\,\\text{cm}", "\\ \\text{cm}", "\\mbox{ cm}", "\\text{ units}",
         "\\text{ degrees}", "\\text{ dollars}", "\\text{ ways}", "\\mathrm{cm}", "\\textbf{}", " \\text{m}^2",
         "\\text{ square units}", "^\\circ", "^{\\circ}", "\\%", "%", "\\text{ minutes}", " cm", " ways")
WRAPPERS = ("\\boxed{%s}", "The answer is $\\boxed{%s}$.", "Therefore, the final answer is $\\boxed{%s}$.",
            "So $\\boxed{%s}$ is the answer.", "\\[\n\\boxed{%s}\n\\]")


class Forms:
    """Random LaTeX forms of a target integer (``rng``: the seeded generator; each maker's ``depth``: how many more
    compositions it nests)."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def number(self, n: int) -> str:
        """An integer as written: plain, with leading zeros, or as a decimal with trailing zeros."""
        r = self.rng.random()
        sign, digits = ("-" if n < 0 else ""), str(abs(n))
        if r < 0.2:
            return sign + "0" * self.rng.randint(1, 2) + digits
        if r < 0.28:
            return sign + digits + "." + "0" * self.rng.randint(1, 2)
        return sign + digits

    def group(self, latex: str) -> str:
        """A form wrapped in brackets or braces that keep its value."""
        return self.rng.choice(("{%s}", "{{%s}}", "(%s)", "\\left(%s\\right)", "{(%s)}", "\\left({%s}\\right)",
                                "[%s]", "\\left[%s\\right]", "\\{%s\\}")) % latex

    def space(self) -> str:
        return self.rng.choice(SPACES)

    def of(self, n: int, depth: int) -> str:
        """A form whose value is the integer ``n`` (``depth`` 0: a number)."""
        if depth <= 0:
            return self.number(n) if self.rng.random() < 0.85 else self.group(self.number(n))
        makers = [self.sum, self.difference, self.fraction, self.root, self.floor_ceiling, self.absolute,
                  self.power_zero, self.grouped, self.spaced]
        if n >= 0:
            makers += [self.gcd]
        if n > 1 and any(n % d == 0 for d in range(2, int(math.isqrt(n)) + 1)):
            makers += [self.product, self.product]
        if perfect_power(n):
            makers += [self.power, self.power]
        if n >= 1:
            makers += [self.binomial]
        if 0 <= n <= 10 ** 4 and n in SMALL_FACTORIALS:
            makers += [self.factorial]
        return self.rng.choice(makers)(n, depth - 1)

    def atom(self, n: int, depth: int) -> str:
        """A form of ``n`` safe as a factor or an exponent: a number or a bracketed composition."""
        inner = self.of(n, depth)
        if inner.lstrip("-0123456789.") == "" and not inner.startswith("-"):
            return inner
        return self.group(inner) if self.rng.random() < 0.8 else "{" + inner + "}"

    def sum(self, n: int, depth: int) -> str:
        a = self.rng.randint(0, max(abs(n), 3))
        return f"{self.of(a, depth)}{self.rng.choice(('+', ' + ', '+'))}{self.atom(n - a, depth)}"

    def difference(self, n: int, depth: int) -> str:
        b = self.rng.randint(1, 40)
        return f"{self.of(n + b, depth)}-{self.atom(b, depth)}"

    def product(self, n: int, depth: int) -> str:
        divisors = [d for d in range(2, int(math.isqrt(n)) + 1) if n % d == 0]
        d = self.rng.choice(divisors)
        a, b = (d, n // d) if self.rng.random() < 0.5 else (n // d, d)
        joint = self.rng.choice(("\\cdot", "\\cdot ", " \\cdot ", "\\times", " \\times ", "*", "", " ", "\\,",
                                 "\\;"))
        left = self.atom(a, depth)
        right = self.atom(b, depth)
        if joint in ("", " ", "\\,", "\\;") and not right.startswith(("(", "\\left", "{(", "[")):
            right = "(" + right + ")"  # juxtaposition: a bracketed second factor
        return f"{left}{joint}{right}"

    def fraction(self, n: int, depth: int) -> str:
        k = self.rng.randint(2, 12)
        command = self.rng.choice(("\\frac", "\\frac", "\\dfrac", "\\tfrac"))
        numerator, denominator = self.of(n * k, depth), self.of(k, depth)
        if self.rng.random() < 0.15 and 0 <= n * k < 10 and k < 10:
            return f"{command}{n * k}{k}"  # \frac62, as strip_string rewrites it
        if self.rng.random() < 0.15:
            return f"{command}{{{numerator}}}{{{denominator}}}".replace("}{", "} {", 1)
        return f"{command}{{{numerator}}}{{{denominator}}}"

    def root(self, n: int, depth: int) -> str:
        if n < 0:
            return "-" + self.root(-n, depth)
        if n <= 99 and self.rng.random() < 0.4:
            return f"\\sqrt[3]{{{self.of(n ** 3, depth)}}}"
        if self.rng.random() < 0.3:
            return f"\\sqrt{{{self.atom(n, depth)}^{{2}}}}"
        if self.rng.random() < 0.15:
            return f"\\sqrt[2]{{{self.of(n * n, depth)}}}"
        return f"\\sqrt{{{self.of(n * n, depth)}}}"

    def power(self, n: int, depth: int) -> str:
        base, exponent = self.rng.choice(perfect_power(n))
        b, e = self.atom(base, depth), self.of(exponent, depth)
        if len(e) == 1 and self.rng.random() < 0.5:
            return f"{b}^{e}"
        return f"{b}^{{{e}}}"

    def floor_ceiling(self, n: int, depth: int) -> str:
        floor = self.rng.random() < 0.5
        half = self.rng.choice((f"{n}.5" if n >= 0 else f"{n + 1}.5" if floor else None,
                                f"\\frac{{{2 * n + 1}}}{{2}}"))
        if half is None or not floor:
            half = f"\\frac{{{2 * n - 1}}}{{2}}" if not floor else f"\\frac{{{2 * n + 1}}}{{2}}"
            if not floor and self.rng.random() < 0.5 and n > 0:
                half = f"{n - 1}.5"
        left, right = ("\\lfloor", "\\rfloor") if floor else ("\\lceil", "\\rceil")
        if self.rng.random() < 0.3:
            left, right = "\\left" + left, "\\right" + right
        return f"{left} {half} {right}" if self.rng.random() < 0.5 else f"{left}{half}{right}"

    def absolute(self, n: int, depth: int) -> str:
        if n < 0:
            return "-" + self.absolute(-n, depth)
        a = self.rng.randint(0, 30)
        inner = self.rng.choice((f"-{self.atom(n, depth)}", f"{a}-{self.atom(n + a, depth)}", self.of(n, depth)))
        bars = self.rng.choice((("|", "|"), ("\\left|", "\\right|"), ("\\lvert ", "\\rvert"), ("\\vert", "\\vert")))
        return bars[0] + inner + bars[1]

    def gcd(self, n: int, depth: int) -> str:
        a, b = self.rng.choice(((2, 3), (3, 4), (5, 7), (4, 9), (1, 2), (3, 5)))
        command = self.rng.choice(("\\gcd", "\\gcd", "\\operatorname{gcd}", "\\text{gcd}"))
        sep = self.rng.choice((",", ", ", ",\\,"))
        return f"{command}({self.of(n * a, depth)}{sep}{self.of(n * b, depth)})"

    def binomial(self, n: int, depth: int) -> str:
        pairs = [(m, k) for m in range(2, 50) for k in range(2, m // 2 + 1) if math.comb(m, k) == n]
        command = self.rng.choice(("\\binom", "\\binom", "\\dbinom", "\\tbinom"))
        if pairs and self.rng.random() < 0.7:
            m, k = self.rng.choice(pairs)
        else:
            m, k = n, self.rng.choice((1, n - 1))
        return f"{command}{{{self.of(m, depth)}}}{{{self.of(k, depth)}}}"

    def factorial(self, n: int, depth: int) -> str:
        return f"{SMALL_FACTORIALS[n]}!"

    def power_zero(self, n: int, depth: int) -> str:
        constant = self.rng.randint(2, 40)
        zero = self.rng.choice(("^0", "^{0}", "^{ 0 }"))
        if n == 1:
            return f"{constant}{zero}"
        joint = self.rng.choice(("\\cdot", "\\times", " \\cdot "))
        return f"{self.atom(n, depth)}{joint}{constant}{zero}" if self.rng.random() < 0.5 else \
            f"{constant}{zero}{joint}{self.atom(n, depth)}"

    def grouped(self, n: int, depth: int) -> str:
        return self.group(self.of(n, depth))

    def spaced(self, n: int, depth: int) -> str:
        inner = self.of(n, depth)
        at = self.rng.choice(("before", "after", "both"))
        return (self.space() if at != "after" else "") + inner + (self.space() if at != "before" else "")


SMALL_FACTORIALS = {math.factorial(k): k for k in range(3, 7)}


def perfect_power(n: int) -> list[tuple[int, int]]:
    """(base, exponent) pairs with base ** exponent == n, exponent >= 2 (n >= 4); n^1 otherwise."""
    pairs = [(b, e) for e in range(2, 11) for b in range(2, 32) if b ** e == n]
    return pairs or ([(n, 1)] if n >= 0 else [])


def targeted_forms() -> list[tuple[str, int]]:
    """Hand-written forms of each class (the random ones below combine them)."""
    out: list[tuple[str, int]] = []
    for n in (33, 8, 1, 0, 204, 999):
        out += [(f"0{n}", n), (f"00{n}", n), (f"{{0{n}}}", n), (f"{{{{0{n}}}}}", n), (f"(0{n})", n),
                (f"[0{n}]", n), (f"{n}.0", n), (f"{n}.00", n), (f"0{n}.0", n), (f"-{n}", -n), (f"-(-{n})", n),
                (f"--{n}", n), (f"+{n}", n), (f"{n}^\\circ", n), (f"{n}^{{\\circ}}", n), (f"{n}\\%", n),
                (f"{n}%", n), (f"{n}\\text{{ cm}}", n), (f"{n}\\mbox{{ cm}}", n), (f"{n}\\,\\text{{cm}}", n),
                (f"{n}\\ \\text{{cm}}", n), (f"\\text{{{n}}}", n), (f"\\textbf{{{n}}}", n), (f"\\mathbf{{{n}}}", n),
                (f"\\mathrm{{{n}}}", n), (f"{n}^0", 1), (f"{n}^{{0}}", 1), (f"({n})^0", 1), (f"{n}^1", n),
                (f"{n}^{{1}}", n), (f"\\left({n}\\right)", n), (f"\\left[{n}\\right]", n), (f"\\{{{n}\\}}", n),
                (f"|{n}|", n), (f"|-{n}|", n), (f"\\left|-{n}\\right|", n), (f"\\lfloor {n}.5 \\rfloor", n),
                (f"\\lceil {n}.5 \\rceil", n + 1), (f"\\lfloor {n} \\rfloor", n), (f"\\gcd({n}, {n})", n),
                (f"\\binom{{{n}}}{{1}}", n), (f"{n}\\cdot 1", n), (f"1\\times {n}", n), (f"{n}(1)", n),
                (f"({n})(1)", n), (f"{n}\\,(1)", n), (f"\\frac{{{2 * n}}}{{2}}", n), (f"\\dfrac{{{3 * n}}}{{3}}", n),
                (f"\\tfrac{{0{2 * n}}}{{02}}", n), (f"\\frac{{{n}}}{{1}}", n), (f"\\sqrt{{{n * n}}}", n),
                (f"\\sqrt{{{n}^2}}", n), (f"\\sqrt{{{n}^{{2}}}}", n), (f"\\sqrt[3]{{{n ** 3}}}", n),
                (f"{n}\\!", n), (f"\\!{n}", n), (f"{n}\\,", n), (f"\\,{n}", n), (f"{n}\\;", n), (f"\\;{n}", n),
                (f"{n}\\:", n), (f"{n}\\quad", n), (f"\\quad {n}", n), (f"{n}~", n), (f"~{n}", n),
                (f"{n}\\ ", n), (f"\\displaystyle {n}", n), (f"{n}\\qquad", n)]
        for space in SPACES:
            out += [(f"{n}{space}+{space}0", n), (f"1{space}{n}", int(f"1{n}")), (f"{n}{space}\\cdot{space}1", n)]
    out += [("2^{1+1}", 4), ("2^{2^{2}}", 16), ("{2}^{5}", 32), ("(2)^{5}", 32), ("2^5", 32), ("3^2", 9),
            ("3^{2}", 9), ("2^{10}", 1024), ("5^3", 125), ("5^{3}-2", 123),
            ("\\frac{2^{3}}{1}", 8), ("\\frac{2^{5}}{2^{2}}", 8), ("\\sqrt{3^{2}}", 3), ("\\sqrt{{9}}", 3),
            ("\\frac{\\frac{66}{2}}{1}", 33), ("\\frac{{66}}{{2}}", 33), ("\\frac{066}{2}", 33),
            ("\\frac{1}{2}\\cdot 66", 33), ("\\frac12 \\cdot 66", 33), ("2\\frac{1}{2}", 5), ("\\sqrt{\\sqrt{16}}", 2),
            ("\\sqrt[3]{27}", 3), ("\\sqrt[3]{{27}}", 3), ("\\sqrt[{3}]{27}", 3), ("\\sqrt{1089}", 33),
            ("\\sqrt 1089", 33), ("\\sqrt1089", 33), ("\\binom{12}{2}", 66), ("\\dbinom{12}{2}", 66),
            ("\\tbinom{12}{2}", 66), ("\\binom{{12}}{{2}}", 66), ("{12 \\choose 2}", 66), ("\\gcd(66, 99)", 33),
            ("\\gcd(66,99)", 33), ("\\operatorname{lcm}(3, 11)", 33), ("\\text{lcm}(3,11)", 33),
            ("\\max(33, 2)", 33), ("\\min(33, 40)", 33), ("\\lfloor 33.5 \\rfloor", 33),
            ("\\left\\lfloor 33.5 \\right\\rfloor", 33), ("\\lceil 32.5 \\rceil", 33),
            ("\\lfloor\\frac{67}{2}\\rfloor", 33), ("|3-36|", 33), ("|-33|", 33), ("||-33||", 33),
            ("3\\cdot 11", 33), ("3\\times 11", 33), ("3 \\times 11", 33), ("3(11)", 33), ("(3)(11)", 33),
            ("3\\,11", 33), ("3 11", 33), ("3\\;11", 33), ("3\\quad 11", 33), ("3~11", 33), ("3\\!11", 311),
            ("4!+9", 33), ("3!", 6), ("(3!)!", 720), ("33.3", 33), ("32.9999", 33), ("33.5", 33), ("0.33", 33),
            ("3300\\%", 33), ("1e3", 999), ("33 \\pmod{1000}", 33), ("1033 \\mod 1000", 33), ("33\\pmod{1000}", 33),
            ("\\pi", 3), ("e^0", 1), ("\\infty", 0), ("\\emptyset", 0), ("x^0", 1), ("33x^0", 33),
            ("2+0031", 33), ("0031+2", 33), ("2+{0031}", 33), ("{2}^{5}", 32), ("{33}^{0}", 1), ("[33]", 33),
            ("[33]+[0]", 33), ("(33,)", 33), ("33, 34", 33),
            ("[33, 34]", 33), ("\\{33, 34\\}", 33), ("33;34", 33), ("x<33", 33), ("33\\le 34", 33),
            ("33\\pmod{1000}", 33), ("2^(5)", 32), ("(2^(5))", 32), ("2^33", 33), ("2^3^2", 64), ("33)", 33),
            ("33]", 33), ("33}", 33), ("{33", 33), ("33+", 33), ("33tr", 33), ("33 triangles", 33), ("33\\\\", 33),
            ("33\\\\;", 33), ("33 \\choose 2", 33), ("|2|3|", 6), ("2|3|", 6), ("\\sqrt{4}[3]", 6),
            ("\\gcd(66,990)", 66), ("\\gcd(\\gcd(66,99),33)", 33), ("\\max(3,\\min(33,34))", 33),
            ("\\lcm(3,11)", 33), ("\\operatorname{floor}(33.5)", 33), ("\\floor(33.5)", 33), ("\\ceil(32.5)", 33),
            ("\\mleft(33\\mright)", 33), ("\\text{33}", 33), ("33\\text{cm}\\cdot 1", 33), ("1,000", 999),
            ("1{,}000", 999), ("33.", 33), ("3\\div\\frac{1}{11}", 33), ("66:2", 33), ("133\\mod 100", 33),
            ("-3^2+42", 33), ("2^{-1}\\cdot 66", 33), ("2^-1", 33), ("\\frac{1}{2}66", 33), ("3!!", 720),
            ("\\lfloor 33.5\\rfloor!", 720), ("\\sqrt[3]{35937}", 33), ("\\sqrt[3]{{35937}}", 33),
            ("e^{0}\\cdot 33", 33), ("33e^{0}", 33), ("33E", 33), ("3.3E1", 33), ("33\\times10^0", 33),
            ("x^{0}\\cdot33", 33), ("33x^{0}y^{0}", 33), ("\\alpha^0\\cdot 33", 33), ("33\\pi^0", 33),
            ("26^{0}\\cdot\\gcd(33, 66)", 33), ("\\gcd(33,66)\\cdot 1", 33), ("3\\cdot\\gcd(11,22)", 33),
            ("\\lcm(3,11)\\cdot 2^{0}", 33), ("\\binom{57121}{57120}", 57121), ("\\binom{1000}{999}", 1000),
            ("\\binom{1000}{2}", 499500), ("(\\gcd(33,66))^{1}", 33), ("\\sqrt{\\gcd(33,66)^{2}}", 33),
            ("\\gcd(33^1,66^1)", 33), ("\\max(33^1,2)", 33)]
    return out


def cases(seed: int, random_forms: int) -> list[dict]:
    """The table's cases: each targeted form and ``random_forms`` random ones, with the reference they equal (where
    it is 0-999) and one they do not, each inside a reply."""
    rng = random.Random(seed)
    forms = Forms(rng)
    pairs = targeted_forms()
    while len(pairs) < len(targeted_forms()) + random_forms:
        n = rng.randint(0, 999) if rng.random() < 0.7 else rng.randint(0, 40)
        latex = forms.of(n, rng.choice((1, 1, 2, 2, 3)))
        if len(latex) > 160:
            continue
        if rng.random() < 0.2:
            latex += rng.choice(UNITS)
        if rng.random() < 0.08:
            latex = rng.choice(("x = ", "n=", "m+n=", "k = ", "N = ", "r=")) + latex
        pairs.append((latex, n))
    out, seen = [], set()
    for latex, value in pairs:
        references = []
        if 0 <= value <= 999:
            references.append(str(value))
        wrong = value + rng.choice((1, -1))
        if not 0 <= wrong <= 999:
            wrong = value - 1 if value > 0 else 1
        references.append(str(min(max(wrong, 0), 999)))
        for reference in references:
            generation = rng.choice(WRAPPERS) % latex
            if (generation, reference) not in seen:
                seen.add((generation, reference))
                out.append({"generation": generation, "answer": reference})
    return out


# ------------------------------------------------------------------------------------------------- the official run

def official_functions(eval_dir: Path):
    """``get_after_think`` (eval.py's source, as written) and ``math_opensource.work``."""
    sys.path.insert(0, str(eval_dir))
    import math_opensource  # noqa: E402 (the official module, unmodified)

    source = (eval_dir / "eval.py").read_text()
    tree = ast.parse(source)
    definition = next(node for node in tree.body if isinstance(node, ast.FunctionDef)
                      and node.name == "get_after_think")
    namespace: dict = {}
    exec(compile(ast.Module([definition], type_ignores=[]), str(eval_dir / "eval.py"), "exec"), namespace)
    return namespace["get_after_think"], math_opensource.work


def unevaluated_product_equal(prediction: str, reference: str) -> bool:
    """Whether latex2sympy reads ``prediction`` (``parse_expr`` failing first) as an expression that holds an
    ``UnevaluatedExpr`` (its gcd or lcm) inside a product, power or other operation, and whose value, once
    evaluated, is the reference."""
    import sympy
    from latex2sympy2 import latex2sympy
    from sympy.parsing.sympy_parser import parse_expr

    try:
        parse_expr(prediction)
        return False
    except Exception:
        pass
    try:
        expr = latex2sympy(prediction)
    except Exception:
        return False
    if not isinstance(expr, sympy.Basic) or isinstance(expr, sympy.UnevaluatedExpr) or not expr.has(
            sympy.UnevaluatedExpr):
        return False
    value = expr.replace(lambda node: isinstance(node, sympy.UnevaluatedExpr), lambda node: node.args[0]).doit()
    return value == sympy.Integer(int(reference))


def timed_work(args):
    """``math_opensource.work`` and its wall time in seconds."""
    import math_opensource

    started = time.perf_counter()
    return (*math_opensource.work(args), time.perf_counter() - started)


def official_results(jobs: list[dict], workers: int) -> list[tuple[bool, str] | None]:
    """(correct, extracted) per job, as ``compute_scores`` records them: ``work`` in a pebble process pool with a
    timeout per job; a job past it is wrong with the extracted answer "Timeout". So that the table does not depend
    on this machine's speed, a job is recorded only when it ends well inside compute_scores' 10 s (within
    ``FAST_S``) or runs past ``LONG_S`` (a timeout on any machine); None for a job in between (left out).
    ``compute_scores`` uses 20 workers; fewer here, which changes no result: each job runs alone in its worker."""
    from concurrent.futures import TimeoutError

    import math_opensource
    from pebble import ProcessPool

    results: list[tuple[bool, str] | None] = []
    with ProcessPool(max_workers=workers, initializer=math_opensource.init_fn) as pool:
        iterator = pool.map(timed_work, list(enumerate(jobs)), timeout=LONG_S).result()
        while True:
            try:
                _, result, prediction, seconds = next(iterator)
                results.append((result == 1.0, prediction) if seconds <= FAST_S else None)
            except StopIteration:
                break
            except TimeoutError:
                results.append((False, "Timeout"))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--qwq-eval", type=Path, required=True, help="QwQ's eval/eval folder at commit " + COMMIT)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--random-forms", type=int, default=700)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    get_after_think, _ = official_functions(args.qwq_eval)
    table = cases(args.seed, args.random_forms)
    jobs = [{"gen": [get_after_think(case["generation"])], "answer": case["answer"], "task": "math_opensource/aime24"}
            for case in table]
    recorded, near_timeout = [], 0
    for case, result in zip(table, official_results(jobs, args.workers)):
        if result is None:
            near_timeout += 1
            continue
        correct, extracted = result
        case["official"] = {"correct": correct, "extracted": extracted}
        if extracted == "Timeout":
            case["departure"] = TIMEOUT_DEPARTURE
        elif not correct and unevaluated_product_equal(extracted, case["answer"]):
            case["departure"] = UNEVALUATED_DEPARTURE
        recorded.append(case)
    table = recorded
    timed_out = sum(case["official"]["extracted"] == "Timeout" for case in table)
    packages = {name: importlib.metadata.version(name) for name in
                ("sympy", "latex2sympy2", "word2number", "antlr4-python3-runtime", "regex")}
    header = {
        "official_repo": "QwenLM/QwQ",
        "official_commit": COMMIT,
        "official_code": "eval/eval/eval.py get_after_think; eval/eval/math_opensource.py work (parse_ground_truth, "
                         "extract_answer(gen, 'aime24'), strip_string, math_equal_process) with "
                         "math_opensource_utils/{parser,grader}.py",
        "packages": packages,
        "python": sys.version.split()[0],
        "generator": f"tests/golden/aime/make_latex_forms.py --seed {args.seed} --random-forms {args.random_forms}",
        "procedure": "eval/ extracted at the commit into a scratch environment with eval/requirements.txt's math pins "
                     "(sympy==1.12, latex2sympy2==1.9.1, word2number; antlr4-python3-runtime as latex2sympy2 pins "
                     "it); each case is one job {gen: [get_after_think(generation)], answer, task: "
                     "'math_opensource/aime24'} passed to math_opensource.work in a pebble process pool, as "
                     f"compute_scores runs it with a {TIMEOUT_S} s timeout per job; a job that ran past {LONG_S} s is "
                     f"recorded as compute_scores records a timeout: wrong, extracted 'Timeout' ({timed_out} cases); "
                     f"a job that ended after {FAST_S} s but within {LONG_S} s is left out, its result depending on "
                     f"the machine's speed ({near_timeout} cases). 'extracted' is work's returned prediction.",
        "cases": len(table),
        "official_correct": sum(c["official"]["correct"] for c in table),
        "official_timeouts": timed_out,
        "left_out_near_the_timeout": near_timeout,
    }
    args.out.write_text(json.dumps({"header": header, "cases": table}, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(table)} cases, {header['official_correct']} right officially, {timed_out} over the timeout")


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"{time.time() - started:.0f} s", file=sys.stderr)
