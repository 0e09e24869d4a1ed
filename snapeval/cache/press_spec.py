"""What a kvpress press takes, read from kvpress's own source without importing it.

``import kvpress`` costs seconds (torch, transformers and every press), so a misspelt argument would surface only
after that. This module parses the press classes (``kvpress/presses/*.py``, found with ``importlib.util.find_spec``)
with :mod:`ast` and answers, in milliseconds:

- which classes are presses (dataclass subclasses of kvpress's ``BasePress``), which of them are exported and
  take a ``compression_ratio`` (the usable ones, as :func:`snapeval.cache.kvpress.press_names` always said), which
  are abstract (a ``score``/``compress`` that only raises ``NotImplementedError``, or an ``@abstractmethod``) and which
  fetch another model's files (a call to the hub or the network: ``hf_hub_download``, ``from_pretrained``,
  ``load_adapter``, ``requests.get``, ...);
- each press's constructor fields (dataclass fields, inherited ones included, ``init=False`` ones excluded) with the
  type its annotation declares (``int``, ``float``, ``bool``, ``str``, ``Optional[...]``/``X | None``,
  ``Literal[...]`` and ``Enum`` choices; anything else is an object, which no command line can give), its default,
  and the ranges the press itself states: the comparisons of ``self.<field>`` with constants in its
  ``__post_init__`` assertions, the lengths its ``score``/``compress`` assert must exceed a field (``assert
  hidden_states.shape[1] > self.window_size``: the field must be shorter than the prompt), plus two rules read from
  the defaults: a number whose default is not negative cannot be negative, and a size (an ``int`` field named
  ``*_size``, ``*_length`` or ``*_dimension`` with a positive default) is at least 1.

:func:`check_press_args` turns command-line text into the field's type and checks it (one-line errors naming the
field, the value and the allowed values); the classes themselves are imported only when a press is built.
``tests/test_bad_input.py`` checks this reading against the imported classes for every press.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from snapeval.errors import SnapevalError

PREFIX = "kvpress"
#: Arguments snapeval sets itself (from the budget), never taken from the user.
RESERVED_ARGS = ("compression_ratio",)
#: Presses that wrap another press or need extra inputs snapeval does not give (a question, a trained model).
UNSUPPORTED = ("ComposedPress", "KeyRerotationPress", "PerLayerCompressionPress", "ChunkPress", "AdaKVPress",
               "CriticalAdaKVPress", "CriticalKVPress", "PrefillDecodingPress", "DecodingPress", "FinchPress",
               "DMSPress", "KVzapPress", "QFilterPress", "ThinKPress", "DuoAttentionPress", "KVzipPress",
               "FastKVzipPress", "ExpectedAttentionStatsPress", "BlockPress", "CompressionRatioDecodingPress",
               "ObservedAttentionPress")  # the last needs eager attention weights
#: Calls that fetch another model's files (the hub, the network): a press making one is not a compression of the
#: evaluated model alone.
NETWORK_CALLS = ("hf_hub_download", "snapshot_download", "from_pretrained", "load_adapter", "urlopen", "urlretrieve")
NETWORK_MODULES = ("requests", "urllib", "httpx")
SIZE_SUFFIXES = ("_size", "_length", "_dimension")
SCALARS = ("int", "float", "bool", "str")


class _Required:
    """The default of a field that has none (the press must be given it)."""

    def __repr__(self) -> str:
        return "required"


REQUIRED = _Required()


@dataclass(frozen=True)
class PressField:
    """One constructor field of a press: ``kind`` is ``int | float | bool | str | object``; ``choices`` the values a
    ``Literal``/``Enum`` allows; ``minimum`` the smallest value the defaults' rules allow; ``below_prompt`` whether
    the press asserts that the prompt is longer than it."""

    name: str
    annotation: str
    kind: str
    optional: bool = False
    choices: tuple | None = None
    default: Any = REQUIRED
    minimum: float | None = None
    below_prompt: bool = False

    def allowed(self) -> str:
        if self.choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        else:
            text = {"int": "an integer", "float": "a finite number", "bool": "true or false", "str": "a string",
                    "object": f"a {self.annotation} object"}[self.kind]
            if self.minimum is not None and self.kind in ("int", "float"):
                text += f" >= {self.minimum:g}"
        if self.optional:
            text += " or none"
        if self.default is not REQUIRED:
            text += f" (default {self.default!r})"
        return text


@dataclass(frozen=True)
class PressSpec:
    """One press class as its source declares it."""

    name: str
    module: str
    exported: bool
    fields: dict[str, PressField]
    abstract: str | None  # why it cannot be used as it is, or None
    fetches: str | None  # the network call it makes, or None
    checks: tuple[tuple[ast.expr, str], ...] = ()  # __post_init__ assertions over self.<field> and constants
    overrides_call: bool = False  # installs its own hooks (overrides BasePress.__call__)
    overrides_forward_hook: bool = False  # compresses in its own forward hook
    scorer_compress: bool = False  # a ScorerPress that keeps ScorerPress.compress: exactly the budget per layer

    def settable(self) -> list[str]:
        return sorted(n for n in self.fields if n not in RESERVED_ARGS and not n.startswith("_"))


def kvpress_dir() -> Path:
    """kvpress's package folder, found without importing it."""
    try:
        spec = importlib.util.find_spec(PREFIX)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise SnapevalError("kvpress is not installed: pip install 'snapeval[kvpress]' (methods kvpress:<Press>)")
    return Path(list(spec.submodule_search_locations)[0])


# --------------------------------------------------------------------------------------------------------------------
# reading the source


@dataclass
class _Class:
    name: str
    module: str
    node: ast.ClassDef
    tree: ast.Module
    bases: list[str] = field(default_factory=list)


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name(node.func)
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    return ""


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any(_name(d) == "dataclass" for d in node.decorator_list)


def _methods(node: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {f.name: f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _only_raises_not_implemented(fn: ast.FunctionDef) -> bool:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if any(_name(d) == "abstractmethod" for d in fn.decorator_list):
        return True
    return (len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None
            and _name(body[0].exc) == "NotImplementedError")


def _literal(node: ast.expr | None) -> Any:
    if node is None:
        return REQUIRED
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _Unreadable(ast.unparse(node))


class _Unreadable:
    """A default that is an expression (a factory, an object): shown, never compared."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _annotation(node: ast.expr, enums: dict[str, tuple]) -> tuple[str, bool, tuple | None]:
    """``(kind, optional, choices)`` of an annotation node."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return "object", False, None
    if isinstance(node, ast.Constant) and node.value is None:
        return "none", True, None
    if isinstance(node, ast.Name) and node.id in SCALARS:
        return node.id, False, None
    if isinstance(node, ast.Name) and node.id in enums:
        return "str", False, enums[node.id]
    members: list[ast.expr] = []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        members = [node.left, node.right]
    elif isinstance(node, ast.Subscript) and _name(node.value) in ("Optional", "Union", "Literal"):
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if _name(node.value) == "Literal":
            values = tuple(_literal(e) for e in inner)
            kinds = {type(v).__name__ for v in values}
            return (kinds.pop() if len(kinds) == 1 and kinds <= set(SCALARS) else "object"), False, values
        members = list(inner) + ([ast.Constant(None)] if _name(node.value) == "Optional" else [])
    if members:
        parts = [_annotation(m, enums) for m in members]
        optional = any(p[1] for p in parts)
        kinds = [p for p in parts if p[0] != "none"]
        if len(kinds) == 1:
            return kinds[0][0], optional, kinds[0][2]
        if {k for k, _, _ in kinds} == {"int", "float"}:
            return "float", optional, None
        return "object", optional, None
    return "object", False, None


def _enums(tree: ast.Module) -> dict[str, tuple]:
    """The ``Enum`` classes of a module and their member values."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(_name(b).endswith("Enum") for b in node.bases):
            values = [_literal(s.value) for s in node.body if isinstance(s, ast.Assign)]
            out[node.name] = tuple(v for v in values if not isinstance(v, _Unreadable))
    return out


def _self_fields(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "self"}


def _is_length(node: ast.expr) -> bool:
    """An expression reading a tensor's length: ``x.shape[i]``, ``x.size(i)``, ``len(x)``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr == "shape":
            return True
        if isinstance(n, ast.Call) and (_name(n.func) in ("size", "len")):
            return True
    return False


def _below_prompt_fields(fn: ast.FunctionDef) -> set[str]:
    """Fields a method asserts the input is longer than: ``assert length > self.f`` or ``if length <= self.f:
    raise``."""
    out: set[str] = set()
    for node in ast.walk(fn):
        tests = []
        if isinstance(node, ast.Assert):
            tests.append((node.test, (ast.Gt,), (ast.Lt,)))
        elif isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body):
            tests.append((node.test, (ast.LtE,), (ast.GtE,)))
        for test, left_length, right_length in tests:
            if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
                continue
            left, right, op = test.left, test.comparators[0], test.ops[0]
            if isinstance(op, left_length) and _is_length(left):
                out |= _self_fields(right)
            elif isinstance(op, right_length) and _is_length(right):
                out |= _self_fields(left)
    return out


def _fetches(fn: ast.AST, module_functions: dict[str, ast.FunctionDef], seen: set[str] | None = None) -> str | None:
    """The first network call of ``fn`` (or of a function of its module it calls)."""
    seen = set() if seen is None else seen
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        if node.args and ast.unparse(node.args[0]).endswith("config.name_or_path"):
            continue  # the evaluated model's own files (its tokenizer), not another model's
        if name in NETWORK_CALLS:
            return name
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                and node.func.value.id in NETWORK_MODULES:
            return f"{node.func.value.id}.{node.func.attr}"
        if name in module_functions and name not in seen:
            seen.add(name)
            found = _fetches(module_functions[name], module_functions, seen)
            if found:
                return found
    return None


def _check_expression(test: ast.expr, fields: set[str]) -> bool:
    """Whether an assertion only compares ``self.<field>`` values with constants (so it can run on given values)."""
    allowed = (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Constant, ast.Load, ast.cmpop, ast.boolop, ast.unaryop,
               ast.BinOp, ast.operator)
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute):
            if not (isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in fields):
                return False
        elif isinstance(node, ast.Name):
            if node.id != "self":
                return False
        elif not isinstance(node, allowed):
            return False
    return isinstance(test, (ast.Compare, ast.BoolOp))


def _evaluate(node: ast.expr, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute):
        return values[node.attr]
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, values)
        return {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Not: lambda v: not v}[type(node.op)](operand)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, values), _evaluate(node.right, values)
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.Div: lambda a, b: a / b}
        return ops[type(node.op)](left, right)
    if isinstance(node, ast.BoolOp):
        results = [_evaluate(v, values) for v in node.values]
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.Compare):
        ops = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
               ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
        left = _evaluate(node.left, values)
        for op, comparator in zip(node.ops, node.comparators):
            right = _evaluate(comparator, values)
            if not ops[type(op)](left, right):
                return False
            left = right
        return True
    raise ValueError(ast.unparse(node))


@lru_cache(maxsize=None)
def press_specs() -> dict[str, PressSpec]:
    """Every ``@dataclass`` press class of ``kvpress.presses``, by class name."""
    root = kvpress_dir()
    classes: dict[str, _Class] = {}
    module_functions: dict[str, dict[str, ast.FunctionDef]] = {}
    enums: dict[str, dict[str, tuple]] = {}
    for path in sorted((root / "presses").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        module = f"{PREFIX}.presses.{path.stem}"
        module_functions[module] = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
        enums[module] = _enums(tree)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = _Class(node.name, module, node, tree, [_name(b) for b in node.bases])
    exported = set(_exported(root))

    def mro(name: str) -> list[_Class]:
        out, stack = [], [name]
        while stack:
            current = classes.get(stack.pop(0))
            if current is not None and current not in out:
                out.append(current)
                stack.extend(current.bases)
        return out

    specs = {}
    for name, cls in classes.items():
        chain = mro(name)
        if not any(_is_dataclass(c.node) for c in chain) or "BasePress" not in {c.name for c in chain} \
                or name == "BasePress":
            continue  # a press is a dataclass (itself or by inheritance) below BasePress
        fields: dict[str, PressField] = {}
        below: set[str] = set()
        checks: list[tuple[ast.expr, str]] = []
        method_owner: dict[str, _Class] = {}
        for c in chain:
            for method_name in _methods(c.node):
                method_owner.setdefault(method_name, c)
        for c in reversed(chain):  # dataclass order: bases first, a subclass's field replaces its base's
            if not _is_dataclass(c.node):
                continue
            for stmt in c.node.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                if _name(stmt.annotation) in ("ClassVar", "InitVar"):
                    continue
                default, init = _field_default(stmt.value)
                if not init:
                    fields.pop(stmt.target.id, None)
                    continue
                kind, optional, choices = _annotation(stmt.annotation, enums[c.module])
                if default is None:
                    optional = True
                fields[stmt.target.id] = PressField(stmt.target.id, ast.unparse(stmt.annotation), kind, optional,
                                                    choices, default, _minimum(stmt.target.id, kind, default))
        for c in chain:
            for method_name, fn in _methods(c.node).items():
                if method_owner.get(method_name) is not c:
                    continue
                if method_name == "__post_init__":
                    for stmt in ast.walk(fn):
                        if isinstance(stmt, ast.Assert) and _check_expression(stmt.test, set(fields)):
                            message = stmt.msg.value if isinstance(stmt.msg, ast.Constant) else ast.unparse(stmt.test)
                            checks.append((stmt.test, str(message)))
                else:
                    below |= _below_prompt_fields(fn)
        for field_name in below & set(fields):
            fields[field_name] = dataclasses.replace(fields[field_name], below_prompt=True)
        owner_call, owner_hook = method_owner.get("__call__"), method_owner.get("forward_hook")
        overrides_call = owner_call is not None and owner_call.name != "BasePress"
        overrides_hook = owner_hook is not None and owner_hook.name != "BasePress"
        abstract = None
        for method_name in ("score", "compress"):
            if overrides_call or overrides_hook:
                break  # it compresses in its own hooks: BasePress.compress is never called
            owner = method_owner.get(method_name)
            if owner is not None and _only_raises_not_implemented(_methods(owner.node)[method_name]):
                if method_name == "compress" and "score" in method_owner and owner.name == "BasePress":
                    continue  # a scorer compresses with ScorerPress.compress
                abstract = (f"kvpress:{name} is abstract: its {method_name}() raises NotImplementedError "
                            f"({owner.name}); use a press that implements it")
                break
        abstract_methods = [m for c in chain for m, fn in _methods(c.node).items()
                            if any(_name(d) == "abstractmethod" for d in fn.decorator_list)
                            and method_owner.get(m) is c]
        if abstract is None and abstract_methods:
            abstract = (f"kvpress:{name} is abstract: {', '.join(abstract_methods)} not implemented; use a press "
                        "that implements it")
        fetches = None
        for c in chain:
            found = _fetches(c.node, module_functions[c.module])
            if found:
                fetches = (f"kvpress:{name} needs another model's files: it calls {found} ({c.name}), so it is not a "
                           "compression of the evaluated model alone; choose another press")
                break
        owner_compress = method_owner.get("compress")
        specs[name] = PressSpec(
            name=name, module=cls.module, exported=name in exported, fields=fields, abstract=abstract,
            fetches=fetches, checks=tuple(checks),
            overrides_call=overrides_call, overrides_forward_hook=overrides_hook,
            scorer_compress="ScorerPress" in {c.name for c in chain} and owner_compress is not None
            and owner_compress.name == "ScorerPress")
    return specs


def _exported(root: Path) -> list[str]:
    tree = ast.parse((root / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(_name(t) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def _field_default(value: ast.expr | None) -> tuple[Any, bool]:
    """``(default, init)`` of a dataclass field's right-hand side (``x: int = 3`` or ``field(default=...)``)."""
    if isinstance(value, ast.Call) and _name(value.func) == "field":
        keywords = {k.arg: k.value for k in value.keywords}
        init = not (isinstance(keywords.get("init"), ast.Constant) and keywords["init"].value is False)
        if "default" in keywords:
            return _literal(keywords["default"]), init
        if "default_factory" in keywords:
            return _Unreadable(f"{ast.unparse(keywords['default_factory'])}()"), init
        return REQUIRED, init
    return _literal(value), True


def _minimum(name: str, kind: str, default: Any) -> float | None:
    """The rules read from a default: a size with a positive default is at least 1; a number whose default is not
    negative cannot be negative."""
    number = isinstance(default, (int, float)) and not isinstance(default, bool)
    if kind == "int" and number and default >= 1 and name.endswith(SIZE_SUFFIXES):
        return 1
    if kind in ("int", "float") and number and default >= 0:
        return 0
    return None


# --------------------------------------------------------------------------------------------------------------------
# the answers


def press_names() -> list[str]:
    """The presses usable as ``kvpress:<Name>``: kvpress's exported dataclass presses with a ``compression_ratio``,
    neither abstract nor fetching another model, and not among :data:`UNSUPPORTED`."""
    return sorted(n for n, s in press_specs().items() if s.exported and n.endswith("Press") and n not in UNSUPPORTED
                  and "compression_ratio" in s.fields and not s.abstract and not s.fetches)


def press_spec(name: str) -> PressSpec:
    """The spec of ``kvpress:<name>``; a press that cannot be used is one line saying why."""
    spec = press_specs().get(name)
    if spec is not None and spec.exported:
        if spec.abstract:
            raise SnapevalError(spec.abstract)
        if spec.fetches:
            raise SnapevalError(spec.fetches)
    allowed = press_names()
    if name not in allowed:
        raise SnapevalError(f"method='{PREFIX}:{name}' is not allowed; kvpress presses: {', '.join(allowed)}")
    return spec


def convert(method: str, f: PressField, value: Any) -> Any:
    """``value`` (text from a command line, or a YAML/Python value) as field ``f``'s type, or a one-line error."""
    where = f"{method}.{f.name}={value!r}"
    if f.kind == "object":
        raise SnapevalError(f"{where} is invalid: {f.name} takes a {f.annotation} object, which no command line or "
                            f"YAML value can give; allowed: leave it at its default ({f.default!r})")
    if isinstance(value, str) and f.optional and value.strip().lower() in ("none", "null"):
        return None
    if value is None:
        if f.optional:
            return None
        raise SnapevalError(f"{where} is invalid; allowed: {f.allowed()}")
    try:
        out = _as_kind(f.kind, value)
    except ValueError:
        raise SnapevalError(f"{where} is invalid; allowed: {f.allowed()}") from None
    if f.choices is not None and out not in f.choices:
        raise SnapevalError(f"{where} is not allowed; allowed: {f.allowed()}")
    if f.minimum is not None and isinstance(out, (int, float)) and not isinstance(out, bool) and out < f.minimum:
        raise SnapevalError(f"{where} is invalid; allowed: {f.allowed()}")
    return out


def _as_kind(kind: str, value: Any) -> Any:
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ValueError(value)
    if kind == "str":
        if isinstance(value, str):
            return value
        raise ValueError(value)
    if isinstance(value, bool):
        raise ValueError(value)  # a bool is not a number here, though Python's bool is an int
    if kind == "int":
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            return int(value.strip())
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueError(value)
    if isinstance(value, int):
        return value  # kept an int (a cell's identity records it as given)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    number = float(value) if isinstance(value, (float, str)) else None
    if number is None or not math.isfinite(number):
        raise ValueError(value)
    return number


def check_press_args(method: str, args: Mapping[str, Any], *, context: int | None = None) -> dict[str, Any]:
    """Validate ``kvpress:<Press>``'s arguments against the press's own fields; returns them converted to the
    fields' types. ``context``: the longest prompt the model takes (a field the press asserts the prompt must exceed
    has to be below it)."""
    spec = press_spec(method.split(":", 1)[1])
    settable = spec.settable()
    out = {}
    for name, value in args.items():
        if name not in spec.fields or name in RESERVED_ARGS:
            raise SnapevalError(f"{method} takes no argument {name!r}; allowed: {', '.join(settable) or 'none'}")
        if name.startswith("_"):
            raise SnapevalError(f"{method}.{name} is a private field of the press; allowed: "
                                f"{', '.join(settable) or 'none'}")
        f = spec.fields[name]
        out[name] = convert(method, f, value)
        if f.below_prompt and context is not None and isinstance(out[name], int) and out[name] >= context:
            raise SnapevalError(f"{method}.{name}={out[name]} is invalid: the press needs prompts longer than "
                                f"{name}, and the model takes at most {context:,} tokens; allowed: below {context:,}")
    values = {n: f.default for n, f in spec.fields.items()}
    values.update(out)
    for test, message in spec.checks:
        try:
            ok = _evaluate(test, values)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            continue  # a default that is an expression: the press checks it itself when built
        if not ok:
            named = sorted(_self_fields(test))
            given = ", ".join(f"{n}={values[n]!r}" for n in named)
            raise SnapevalError(f"{method}: {given} is invalid; allowed: {ast.unparse(test).replace('self.', '')} "
                                f"(the press's own check: {message})")
    return out


def parse_press_items(items: list[str], option: str = "--press-arg") -> dict[str, str]:
    """``NAME=VALUE`` items from a command line, each name once."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SnapevalError(f"{option}={item!r} is invalid; allowed: NAME=VALUE")
        if name in out:
            raise SnapevalError(f"{option} {name} is given twice ({name}={out[name]!r} and {name}={value!r}); allowed: "
                                "each press argument once")
        out[name] = value
    return out
