"""LaTeX arithmetic read as latex2sympy2 1.9.1 reads it (the AIME grader's last reading, QwQ 620a5ea
``grader.py`` ``symbolic_equal``): the same tokens (``PS.g4``'s lexer rules, longest match first), the same grammar
for the arithmetic part of it, and the same values, built by this module from the parse (never by evaluating text).

What the grammar gives, and this reader follows (each one checked against the official grader by
``tests/golden/aime/latex_forms_620a5ea.json``):

* numbers with leading zeros (``033`` is 33), thousands groups (``1,000``), decimals (``33.5`` is 67/2);
* brace, bracket and parenthesis groups of any depth, ``\\left``/``\\right`` and ``\\mleft``/``\\mright`` pairs;
* ``+ -`` (left to right), ``* \\times \\cdot / \\div :`` and ``\\mod``, juxtaposed factors (``3(11)``,
  ``2\\frac{1}{2}`` is 1), signs, ``!``;
* ``^`` followed by one atom or a brace group (``2^33`` is 2**33; ``2^(3)`` is no reading), powers chain to the
  left (``2^3^2`` is 64);
* ``\\frac{a}{b}`` (also ``\\dfrac``, ``\\tfrac``), ``\\binom``/``\\dbinom``/``\\tbinom``, ``{a \\choose b}``,
  ``\\sqrt{x}`` and ``\\sqrt[n]{x}``;
* floor and ceiling brackets, absolute-value bars (``|x|``, ``\\lvert x\\rvert``, ``\\vert x\\vert``), ``\\floor``,
  ``\\ceil``, ``\\operatorname{floor}``;
* ``\\gcd``, ``\\lcm``, ``\\max``, ``\\min`` and ``\\operatorname{gcd|lcm}``, whose arguments latex2sympy splits at
  every comma of their text and reads again one by one (so ``\\gcd(\\gcd(6,4),2)`` is no reading, and ``66,990`` is
  one number to the lexer but two arguments);
* letters as symbols (``x^0`` is 1, ``33x`` is 33x), ``e`` and ``e^{x}`` as the exponential, ``\\pi``, ``\\infty``,
  ``\\text{...}`` and the other accents as a symbol named by their text;
* a reading ends where the next token cannot continue it (``33\\\\;`` is 33, ``33tr`` is 33: ``tr`` is the trace
  function's name, which no term starts with), but a token that commits to a continuation must complete it
  (``33+`` and ``2^(3)`` are no readings); a token the lexer does not know is no reading once it is reached;
* a top-level list (``33, 34``) or relation (``x < 3``) is read as such: never a number.

Matrices, derivatives, integrals, sums, limits, trigonometric and other named functions are not arithmetic: this
reader gives no reading for them (latex2sympy reads them; docs/tasks.md lists it)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: A reading that is no number (a list, a relation, a set): equal to no reference.
NO_NUMBER = type("NoNumber", (), {"__repr__": lambda self: "NO_NUMBER"})()


class NoReading(Exception):
    """latex2sympy raises on this text (or reads it as something this module does not build)."""


# ----------------------------------------------------------------------------------------------------------- lexer

_GREEK = ("alpha beta Gamma gamma Delta delta epsilon varepsilon zeta eta Theta theta vartheta iota kappa Lambda "
          "lambda mu nu Xi xi omicron Pi varpi rho varrho Sigma sigma varsigma tau Upsilon upsilon Phi phi varphi "
          "chi Psi psi Omega omega").split()
_OTHER_SYMBOLS = ("Bbbk wp nabla bigstar angle nexists diagdown measuredangle eth emptyset diagup sphericalangle "
                  "clubsuit varnothing Diamond complement diamondsuit imath Finv triangledown heartsuit jmath Game "
                  "triangle spadesuit ell hbar vartriangle hslash blacklozenge lozenge blacksquare mho blacktriangle "
                  "sharp prime Im flat square backprime Re natural surd circledS").split()
_ACCENTS = ("acute bar overline breve check widecheck dot ddot grave hat tilde widetilde vec overrightarrow bm "
            "boldsymbol text textit mathbb mathbin mathbf mathcal mathclap mathclose mathellipsis mathfrak "
            "mathinner mathit mathnormal mathop mathopen mathord mathpunct mathrel mathring mathrlap mathrm mathscr "
            "mathsf mathsterling mathtt").split()

#: (token type, literal texts) in the lexer's rule order (a tie in length goes to the earlier rule). The implicit
#: literal tokens of the parser rules (accents, transposes) come first, as ANTLR generates them.
_LITERALS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ACCENT", tuple("\\" + a for a in _ACCENTS if a != "mathit")),
    ("TRANSPOSE", ("^T", "^{T}", "^{\\top}", "'")),
    ("SKIP", ("\\$",)),
    ("ADD", ("+",)), ("SUB", ("-",)), ("MUL", ("*",)), ("DIV", ("/", "\\over")),
    ("L_PAREN", ("(",)), ("R_PAREN", (")",)), ("L_GROUP", ("\\lgroup",)), ("R_GROUP", ("\\rgroup",)),
    ("L_BRACE", ("{",)), ("R_BRACE", ("}",)), ("L_BRACE_VISUAL", ("\\{",)), ("R_BRACE_VISUAL", ("\\}",)),
    ("L_BRACE_CMD", ("\\lbrace",)), ("R_BRACE_CMD", ("\\rbrace",)), ("L_BRACKET", ("[",)), ("R_BRACKET", ("]",)),
    ("L_BRACK", ("\\lbrack",)), ("R_BRACK", ("\\rbrack",)),
    ("BAR", ("|",)), ("L_VERT", ("\\lvert",)), ("R_VERT", ("\\rvert",)), ("VERT", ("\\vert",)), ("NORM", ("\\|",)),
    ("L_FLOOR", ("\\lfloor",)), ("R_FLOOR", ("\\rfloor",)), ("LL_CORNER", ("\\llcorner",)),
    ("LR_CORNER", ("\\lrcorner",)), ("L_CEIL", ("\\lceil",)), ("R_CEIL", ("\\rceil",)),
    ("UL_CORNER", ("\\ulcorner",)), ("UR_CORNER", ("\\urcorner",)),
    ("L_LEFT", ("\\left",)), ("R_RIGHT", ("\\right",)), ("ML_LEFT", ("\\mleft",)), ("MR_RIGHT", ("\\mright",)),
    ("FUNC_OTHER", ("\\lim",)),
    ("LIM_APPROACH_SYM", ("\\to", "\\rightarrow", "\\Rightarrow", "\\longrightarrow", "\\Longrightarrow")),
    ("FUNC_OTHER", tuple("\\" + f for f in (
        "int sum prod log ln exp sin cos tan csc sec cot arcsin arccos arctan arccsc arcsec arccot sinh cosh tanh "
        "arsinh arcosh artanh arcsinh arccosh arctanh").split())),
    ("NAME_SINGLE", ("arsinh", "arcsinh", "arcosh", "arccosh", "artanh", "arctanh")),
    ("NAME_MULTI", ("gcd", "lcm")), ("NAME_SINGLE", ("floor", "ceil")),
    ("FUNC_SQRT", ("\\sqrt",)), ("FUNC_MULTI", ("\\gcd", "\\lcm")), ("FUNC_SINGLE", ("\\floor", "\\ceil")),
    ("FUNC_MULTI", ("\\max", "\\min")), ("FUNC_OTHER", ("\\det",)),
    ("NAME_SINGLE", ("eye",)), ("NAME_MULTI", ("zeros", "ones")),
    ("NAME_SINGLE", ("cols", "rows")), ("NAME_MULTI", ("diag",)), ("NAME_SINGLE", ("norm", "rank", "trace", "tr",
                                                                                    "rref")),
    ("NAME_MULTI", ("hstack", "vstack", "orth", "ortho", "orthogonal", "orthogonalize")),
    ("NAME_SINGLE", ("nullspace", "eig", "eigen", "diagonalize", "eigenvals", "eigenvalues", "eigenvects",
                     "eigenvectors", "svd", "SVD")),
    ("CMD_TIMES", ("\\times",)), ("CMD_CDOT", ("\\cdot",)), ("CMD_DIV", ("\\div",)), ("CMD_FRAC", ("\\frac",)),
    ("CMD_BINOM", ("\\binom", "\\tbinom", "\\dbinom")), ("CMD_CHOOSE", ("\\choose",)), ("CMD_MOD", ("\\mod",)),
    ("CMD_MATHIT", ("\\mathit",)), ("CMD_OPERATORNAME", ("\\operatorname",)),
    ("MATRIX_WORD", ("matrix", "pmatrix", "bmatrix", "vmatrix")),
    ("MATRIX", tuple(f"\\{w}{{{m}}}" for w in ("begin", "end") for m in ("matrix", "pmatrix", "bmatrix", "vmatrix"))),
    ("MATRIX_DEL_COL", ("&",)), ("MATRIX_DEL_ROW", ("\\\\",)),
    ("UNDERSCORE", ("_",)), ("CARET", ("^",)), ("COLON", (":",)), ("SEMICOLON", (";",)), ("COMMA", (",",)),
    ("PERIOD", (".",)),
)
#: Tokens given by a pattern, in rule order relative to each other (after the literals above of earlier rules:
#: a tie in length between a pattern and a literal goes to the literal, which every such tie in PS.g4 does).
_PATTERNS: tuple[tuple[str, re.Pattern], ...] = (
    ("SKIP", re.compile(r"[ \t\r\n]+")),
    ("DIFFERENTIAL", re.compile(r"d[ \t\r\n]*?(?:[a-zA-Z]|\\[a-zA-Z]+)")),
    ("EXP_E", re.compile(r"e|\\exponentialE")),
    ("E_NOTATION_E", re.compile(r"E")),
    ("LETTER_NO_E", re.compile(r"[a-df-zA-DF-Z]")),
    ("ARROW", re.compile(r"\\xrightarrow|\\xRightarrow|<->|<=>|\\leftrightarrow|\\Leftrightarrow")),
    ("E_NOTATION", re.compile(r"(?:\d+(?:,\d\d\d)*|\d*(?:,\d\d\d)*\.\d+)E[-+]?\d+")),
    ("RELATION", re.compile(r"\\in|==|=|\\equiv|<|\\leqslant|\\leq|\\le|>|\\geqslant|\\geq|\\ge|!==|!="
                            r"|\\neq|\\ne|\\not\\equiv")),
    ("BANG", re.compile(r"!")),
    ("PERCENT_NUMBER", re.compile(r"(?:\d+(?:,\d\d\d)*|\d*(?:,\d\d\d)*\.\d+)\\%")),
    ("GREEK_CMD", re.compile(r"\\(?:" + "|".join(_GREEK) + r"|char\"[0-9A-F]{6}) ?")),
    ("OTHER_SYMBOL_CMD", re.compile(r"\\(?:" + "|".join(_OTHER_SYMBOLS) + r") ?")),
    ("SYMBOL", re.compile(r"\\pi|\\partial|\\infty\\%|\\\$\\infty|\\infty|\\emptyset")),
    ("VARIABLE", re.compile(r"\\variable\{[^}]*\}(?:\\%)?")),
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


def _longest_number(text: str, at: int) -> int:
    """Length of PS.g4's NUMBER at ``at`` (``DIGIT+ (',' DIGIT{3})* | DIGIT* (',' DIGIT{3})* '.' DIGIT+``)."""
    best = 0
    m = re.compile(r"\d+(?:,\d\d\d)*").match(text, at)
    if m:
        best = m.end() - at
    m = re.compile(r"\d*(?:,\d\d\d)*\.\d+").match(text, at)
    if m:
        best = max(best, m.end() - at)
    return best


def tokens(text: str) -> list[Token]:
    """The lexer's tokens of ``text``, up to the first character no rule matches (then an ``ERROR`` token)."""
    out: list[Token] = []
    at = 0
    while at < len(text):
        best_kind, best_len = "", 0
        for kind, literals in _LITERALS:
            for literal in literals:
                if len(literal) > best_len and text.startswith(literal, at):
                    best_kind, best_len = kind, len(literal)
        number = _longest_number(text, at)
        candidates = [("NUMBER", number)] if number else []
        for kind, pattern in _PATTERNS:
            m = pattern.match(text, at)
            if m:
                candidates.append((kind, m.end() - at))
        for kind, length in candidates:
            if length > best_len:
                best_kind, best_len = kind, length
        if not best_len:
            out.append(Token("ERROR", text[at:]))
            return out
        if best_kind != "SKIP":
            out.append(Token(best_kind, text[at:at + best_len]))
        at += best_len
    return out


def preprocess(text: str) -> str:
    """latex2sympy's rewriting of its input before the lexer (``latex2sympy2.py`` ``latex2sympy``)."""
    s = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\mathrm{T}", "T")
    s = s.replace("\\mathrm{d}", "d").replace("{\\rm d}", "d")
    s = s.replace("\\left[\\begin{matrix}", "\\begin{bmatrix}").replace("\\end{matrix}\\right]", "\\end{bmatrix}")
    s = re.sub(r"\(([a-zA-Z0-9+\-*/\\ ]+?)\)_{([a-zA-Z0-9+\-*/\\ ]+?)}", r"\\frac{(\1)!}{((\1)-(\2))!}", s)
    s = s.replace("\\displaystyle", " ").replace("\\quad", " ").replace("\\qquad", " ").replace("~", " ")
    return s.replace("\\,", " ").replace("$", " ")


# ---------------------------------------------------------------------------------------------------------- parser

_OPENERS = {"L_PAREN": "R_PAREN", "L_GROUP": "R_GROUP", "L_BRACE": "R_BRACE", "L_BRACE_VISUAL": "R_BRACE_VISUAL",
            "L_BRACE_CMD": "R_BRACE_CMD", "L_BRACKET": "R_BRACKET", "L_BRACK": "R_BRACK"}
_BARS = {"BAR": "BAR", "L_VERT": "R_VERT", "VERT": "VERT"}
_FLOORS = {"L_FLOOR": "R_FLOOR", "LL_CORNER": "LR_CORNER"}
_CEILS = {"L_CEIL": "R_CEIL", "UL_CORNER": "UR_CORNER"}
_ATOMS = ("NUMBER", "PERCENT_NUMBER", "E_NOTATION", "LETTER_NO_E", "GREEK_CMD", "OTHER_SYMBOL_CMD", "SYMBOL",
          "DIFFERENTIAL", "ACCENT", "CMD_MATHIT", "VARIABLE")
_COMP_START = (set(_OPENERS) | set(_BARS) | set(_FLOORS) | set(_CEILS) | set(_ATOMS) |
               {"NORM", "L_LEFT", "ML_LEFT", "CMD_FRAC", "CMD_BINOM", "MATRIX"})
_FUNC_START = {"FUNC_SQRT", "FUNC_MULTI", "FUNC_SINGLE", "FUNC_OTHER", "CMD_OPERATORNAME", "EXP_E"}
_MULTIPLY = ("MUL", "CMD_TIMES", "CMD_CDOT", "DIV", "CMD_DIV", "COLON", "CMD_MOD")
#: Powers larger than this many digits are not computed (no reading; the grader would time out on them).
MAX_DIGITS = 2000


class _Parser:
    """Recursive descent over PS.g4's arithmetic rules; values are sympy expressions, evaluated, or (``evaluate``
    False) built unevaluated as latex2sympy builds them (``add_flat``, ``mul_flat``, ``Pow(..., evaluate=False)``):
    the arguments of gcd and lcm, which latex2sympy hands to ``nsimplify`` and ``gcd`` as they are."""

    def __init__(self, toks: list[Token], sympy, evaluate: bool = True):
        self.toks, self.at, self.sp, self.evaluate = toks, 0, sympy, evaluate
        #: inside the arguments of gcd, lcm, max and min, which latex2sympy parses but never converts (it reads their
        #: text again): only the syntax counts, so nothing is computed or refused for its size
        self.syntax_only = False
        self.closers: list[str] = []  # the bar closers of the absolute-value groups open around the parse point

    # -- token access: looking at a token the lexer could not make is latex2sympy's lexer error
    def peek(self, ahead: int = 0) -> str:
        i = self.at + ahead
        if i >= len(self.toks):
            return "EOF"
        if self.toks[i].kind == "ERROR":
            raise NoReading("a character the lexer does not know")
        return self.toks[i].kind

    def take(self, kind: str | None = None) -> Token:
        found = self.peek()
        if kind is not None and found != kind:
            raise NoReading(f"expected {kind}, found {found}")
        if found == "EOF":
            raise NoReading("the text ends inside a term")
        self.at += 1
        return self.toks[self.at - 1]

    # -- grammar
    def math(self):
        if self.peek() in ("L_BRACKET", "L_BRACE", "L_BRACE_VISUAL", "L_LEFT", "ML_LEFT"):
            start = self.at  # relation_list's bracketed forms: "[33, 34]" is a list, "[33]" a group
            try:
                self.take()
                if self.peek() in ("L_BRACKET", "L_BRACE_VISUAL"):
                    self.take()
                self.relation()
                if self.peek() in ("COMMA", "SEMICOLON"):
                    return NO_NUMBER
            except NoReading:
                pass
            self.at = start
        value = self.relation()
        if self.peek() in ("COMMA", "SEMICOLON"):
            separator = self.peek()
            while self.peek() == separator:
                self.take()
                self.relation()
            return NO_NUMBER
        return value

    def relation(self):
        value = self.expr()
        while self.peek() == "RELATION":
            self.take()
            self.expr()
            value = NO_NUMBER
        return value

    def expr(self):
        value = self.mp()
        while self.peek() in ("ADD", "SUB"):
            op = self.take().kind
            right = self.mp()
            value = self.add(value, right if op == "ADD" else self.negative(right))
        return value

    # -- latex2sympy's constructors (convert_add, convert_mp, convert_unary, convert_frac)
    def add(self, left, right):
        if self.evaluate:
            return left + right
        args = [*(left.args if left.is_Add else [left]), *(right.args if right.is_Add else [right])]
        return self.sp.Add(*args, evaluate=False)

    def multiply(self, left, right):
        if self.evaluate:
            return left * right
        args = [*(left.args if left.is_Mul else [left]), *(right.args if right.is_Mul else [right])]
        return self.sp.Mul(*args, evaluate=False)

    def negative(self, value):
        return -value if self.evaluate or value.func.is_Number else self.multiply(self.sp.Integer(-1), value)

    def divide(self, upper, lower):
        if self.evaluate:
            return upper / lower
        return self.sp.Mul(upper, self.sp.Pow(lower, -1, evaluate=False), evaluate=False)

    def call(self, function, *args):
        return function(*args) if self.evaluate else function(*args, evaluate=False)

    def mp(self, nofunc: bool = False):
        value = self.unary(nofunc)
        while self.peek() in _MULTIPLY:
            op = self.take().kind
            right = self.unary(nofunc)
            if op in ("MUL", "CMD_TIMES", "CMD_CDOT"):
                value = self.multiply(value, right)
            elif op == "CMD_MOD":
                value = self.call(self.sp.Mod, value, right)
            else:
                value = self.divide(value, right)
        return value

    def unary(self, nofunc: bool = False):
        if self.peek() in ("ADD", "SUB"):
            sign = self.take().kind
            value = self.unary(nofunc)
            return value if sign == "ADD" else self.negative(value)
        terms = [self.postfix(nofunc=False)]
        while self.starts_term(nofunc):
            if self.peek() in self.closers:  # a bar that may close the group around: try it as a new term
                start = self.at
                try:
                    terms.append(self.postfix(nofunc))
                except NoReading:
                    self.at = start
                    break
            else:
                terms.append(self.postfix(nofunc))
        value = terms[-1]
        for term in reversed(terms[:-1]):  # convert_postfix_list: the first term times the product of the rest
            value = self.multiply(term, value)
        return value

    def starts_term(self, nofunc: bool) -> bool:
        kind = self.peek()
        if kind in ("L_LEFT", "ML_LEFT"):
            return self.peek(1) in set(_OPENERS) | set(_BARS) | set(_FLOORS) | set(_CEILS) | {"NORM"}
        return kind in _COMP_START or (not nofunc and kind in _FUNC_START)

    def postfix(self, nofunc: bool):
        value = self.exp(nofunc)
        while True:
            kind = self.peek()
            if kind == "BANG":
                self.take()
                if not self.syntax_only and not (value.is_Integer and 0 <= value <= 1000):
                    raise NoReading("a factorial this reader does not compute")
                value = self.call(self.sp.factorial, value)
            elif kind == "TRANSPOSE" or kind == "BAR" and self.peek(1) in ("CARET", "UNDERSCORE"):
                raise NoReading("a transpose or an evaluation bar")
            else:
                return value

    def exp(self, nofunc: bool):
        value = self.comp(nofunc)
        while self.peek() == "CARET":
            self.take()
            exponent = self.braced_expr() if self.peek() == "L_BRACE" else self.atom()
            if self.peek() == "UNDERSCORE":
                raise NoReading("a subscript after a power")
            value = self.power(value, exponent)
        return value

    def power(self, base, exponent):
        sp = self.sp
        if self.syntax_only:
            return sp.Pow(base, exponent, evaluate=False)
        if base.is_number and exponent.is_number:
            try:
                size = abs(float(exponent)) * float(sp.log(abs(base) + 1, 10)) if base != 0 else 0.0
            except (TypeError, ValueError, OverflowError):
                raise NoReading("a power this reader does not compute") from None
            if size > MAX_DIGITS:
                raise NoReading("a power too large")
        return self.call(sp.Pow, base, exponent)

    def binomial(self, upper, lower):
        """``sympy.binomial`` (latex2sympy's ``convert_binom``, evaluated); no reading where both are integers and
        the result would pass :data:`MAX_DIGITS` digits."""
        if self.syntax_only:
            return self.sp.Symbol("binomial")
        if upper.is_Integer and lower.is_Integer and 0 <= lower <= upper:
            k = min(int(lower), int(upper - lower))
            if k and k * math.log10(int(upper) / k + 1) > MAX_DIGITS:
                raise NoReading("a binomial too large")
        return self.sp.binomial(upper, lower)

    def braced_expr(self):
        self.take("L_BRACE")
        value = self.expr()
        self.take("R_BRACE")
        return value

    def comp(self, nofunc: bool):
        kind = self.peek()
        if kind in ("L_LEFT", "ML_LEFT"):
            right = "R_RIGHT" if kind == "L_LEFT" else "MR_RIGHT"
            self.take()
            return self.bracketed(self.take().kind, right)
        if kind in _OPENERS or kind in _BARS or kind in _FLOORS or kind in _CEILS or kind == "NORM":
            return self.bracketed(self.take().kind, None)
        if kind == "CMD_FRAC":
            self.take()
            upper = self.braced_expr()
            lower = self.braced_expr()
            return self.divide(upper, lower)
        if kind == "CMD_BINOM":
            self.take()
            upper = self.braced_expr()
            return self.binomial(upper, self.braced_expr())
        if kind == "MATRIX":
            raise NoReading("a matrix")
        if kind in _FUNC_START and not nofunc:
            return self.func()
        return self.atom()

    def bracketed(self, opener: str, right: str | None):
        """A group, an absolute value, a floor or a ceiling, opened by ``opener`` (after ``\\left`` when ``right``
        names the closing command)."""
        closer = (_OPENERS.get(opener) or _BARS.get(opener) or _FLOORS.get(opener) or _CEILS.get(opener)
                  or ("NORM" if opener == "NORM" else None))
        if closer is None:
            raise NoReading(f"{opener} opens no group")
        if opener in _BARS:
            self.closers.append(closer)
        try:
            value = self.expr()
            if opener == "L_BRACE" and right is None and self.peek() == "CMD_CHOOSE":
                self.take()
                lower = self.expr()
                self.take("R_BRACE")
                return self.binomial(value, lower)
        finally:
            if opener in _BARS:
                self.closers.pop()
        if right is not None:
            self.take(right)
        self.take(closer)
        if opener in _BARS:
            return self.call(self.sp.Abs, value)
        if opener in _FLOORS:
            return self.call(self.sp.floor, value)
        if opener in _CEILS:
            return self.call(self.sp.ceiling, value)
        if opener == "NORM":
            raise NoReading("a norm")
        return value

    def func(self):
        sp, token = self.sp, self.take()
        if token.kind == "FUNC_SQRT":
            root = None
            if self.peek() == "L_BRACKET":
                self.take()
                root = self.expr()
                self.take("R_BRACKET")
            base = self.braced_expr()
            return self.power(base, sp.Integer(1) / root if root is not None else sp.Rational(1, 2))
        if token.kind == "EXP_E":
            if self.peek() != "CARET":
                return sp.E
            self.take()
            exponent = self.braced_expr() if self.peek() == "L_BRACE" else self.atom()
            return sp.exp(exponent)
        name = token.text[1:]
        if token.kind == "CMD_OPERATORNAME":
            self.take("L_BRACE")
            inner = self.take()
            self.take("R_BRACE")
            if inner.kind not in ("NAME_SINGLE", "NAME_MULTI") or inner.text not in ("gcd", "lcm", "floor", "ceil"):
                raise NoReading(f"operator {inner.text!r}")
            name = inner.text
        elif token.kind == "FUNC_OTHER":
            raise NoReading(f"function {token.text}")
        if self.peek() in ("UNDERSCORE", "CARET"):
            raise NoReading("a function with a sub- or superscript")
        if name in ("floor", "ceil"):
            arg = self.paren_args(single=True)
            return self.call(sp.floor if name == "floor" else sp.ceiling, arg)
        return self.multi(name)

    def paren_args(self, single: bool):
        """A function's parenthesised argument(s): the value (``single``), else the token texts between the
        parentheses. Without parentheses: the argument is a product of terms (``mp_nofunc``)."""
        if self.peek() == "L_LEFT" and self.peek(1) == "L_PAREN" or self.peek() == "L_PAREN":
            if self.peek() == "L_LEFT":
                self.take()
            self.take("L_PAREN")
            start, outer = self.at, (self.syntax_only, self.evaluate)
            if not single:
                self.syntax_only, self.evaluate = True, False
            try:
                value = self.expr()
                while not single and self.peek() == "COMMA":
                    self.take()
                    self.expr()
            finally:
                self.syntax_only, self.evaluate = outer
            text = "".join(t.text for t in self.toks[start:self.at])
            if self.peek() == "R_RIGHT":
                self.take()
            self.take("R_PAREN")
            return value if single else text
        if not single:
            raise NoReading("gcd, lcm, max or min without parentheses")
        return self.mp(nofunc=True)

    def multi(self, name: str):
        """``\\gcd``, ``\\lcm``, ``\\max``, ``\\min``: latex2sympy splits the arguments' text at every comma and reads
        each piece again."""
        sp = self.sp
        text = self.paren_args(single=False)
        if self.syntax_only:
            return sp.Symbol(name)
        pieces = [read(piece, sp, evaluate=False) for piece in text.split(",")]
        if any(p is NO_NUMBER for p in pieces):
            raise NoReading("a list as an argument")
        if name in ("gcd", "lcm"):
            try:  # latex2sympy's handle_gcd_lcm: nsimplify each argument as built, then gcd or lcm of them all
                value = getattr(sp, name)(tuple(sp.nsimplify(p) for p in pieces))
            except (sp.polys.polyerrors.BasePolynomialError, TypeError, ValueError) as error:  # "failed without
                raise NoReading(str(error)) from None                                             # generators"
            return value if self.evaluate else sp.UnevaluatedExpr(value)
        pieces = [p.doit() for p in pieces] if self.evaluate else pieces
        return self.call(sp.Max if name == "max" else sp.Min, *pieces)

    def atom(self):
        sp = self.sp
        token = self.take()
        kind = token.kind
        if kind == "NUMBER":
            return sp.Rational(token.text.replace(",", ""))
        if kind == "E_NOTATION":
            return sp.Rational(token.text.replace(",", ""))
        if kind == "PERCENT_NUMBER":
            return sp.Rational(token.text[:-2].replace(",", "")) / 100
        if kind == "SYMBOL":
            text = token.text.replace("\\$", "").replace("\\%", "")
            return {"\\infty": sp.oo, "\\pi": sp.pi}.get(text) or _no(f"symbol {text}")
        if kind == "DIFFERENTIAL":
            return sp.Symbol("d" + token.text[1:].strip().lstrip("\\"))
        if kind == "CMD_MATHIT":
            raise NoReading("\\mathit")
        if kind in ("LETTER_NO_E", "GREEK_CMD", "OTHER_SYMBOL_CMD", "ACCENT"):
            if kind == "LETTER_NO_E" and self.peek() in ("L_PAREN", "L_BRACKET"):
                raise NoReading("a function of a letter")
            if kind == "ACCENT":
                start = self.at
                self.braced_expr()
                name = token.text + "".join(t.text for t in self.toks[start:self.at])
            else:
                name = token.text.strip().lstrip("\\")
            if kind == "LETTER_NO_E" and name == "I":
                return sp.I
            if self.peek() == "UNDERSCORE":
                raise NoReading("a subscripted symbol")
            symbol = sp.Symbol(name)
            if self.peek() == "CARET":  # atom_expr's own superscript
                self.take()
                exponent = self.braced_expr() if self.peek() == "L_BRACE" else self.atom()
                return self.power(symbol, exponent)
            return symbol
        raise NoReading(f"{kind} starts no term")


def _no(reason: str):
    raise NoReading(reason)


def read(text: str, sympy, evaluate: bool = True):
    """latex2sympy's value of ``text`` (a sympy expression, or :data:`NO_NUMBER`); :class:`NoReading` where it
    raises. ``evaluate`` False: the expression built as latex2sympy builds it, unevaluated."""
    parser = _Parser(tokens(preprocess(text)), sympy, evaluate)
    value = parser.math()
    parser.peek()  # the token after the reading is fetched by the parser's look-ahead: a lexer error there raises
    return value


def latex_value(text: str):
    """The value latex2sympy reads in ``text`` (a sympy expression), :data:`NO_NUMBER` for a list or relation, None
    where latex2sympy raises (or reads something beyond arithmetic)."""
    import sympy

    if len(text) > 400:
        return None
    try:
        return read(text, sympy)
    except Exception:  # the grader's _parse: whatever latex2sympy raises is no reading (a bare except)
        return None
