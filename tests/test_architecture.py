"""The import graph of ``snapeval/`` has no cycle, at file level and at folder level, and the ground modules
(``snapeval/paths.py``, ``snapeval/errors.py``) import nothing of snapeval.

The rule (the strict one): every ``import``/``from ... import`` of a ``snapeval``
module is an edge, at the top of a module and inside a function alike (a lazy import still makes the importer depend
on the imported module; it only defers the cost), and those under ``if TYPE_CHECKING:`` too (never run, but a
type a module names from another ties the two as an import does).
``importlib.import_module("snapeval....")`` with a literal name is an import too (a module ``__getattr__`` shim is
one). A ``"module:Class"`` entry of the method table is not: it is data that names a module for its users to load,
and the table itself imports nothing of what it names. A relative import is resolved against its package.
``from snapeval.x import y`` is an edge to ``snapeval/x/y.py`` when ``y`` is a module there, else to ``snapeval/x``. A package's ``__init__.py`` is its folder's file. At folder level each file is
its sub-package of ``snapeval/`` (the files directly in ``snapeval/`` stay one node each: the top level is no room of
its own), and an edge between two files of one folder is no edge. Importing ``snapeval.a.b`` also runs
``snapeval/a/__init__.py`` first; the rule leaves that implicit edge out (a package's ``__init__`` re-exporting its
children is the package's own business and shows up as its own edges).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "snapeval"
GROUND = ("snapeval.paths", "snapeval.errors")
#: Cycles another change removes (file-level edges, importer -> imported); each is a strict xfail naming it.
KNOWN: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py")) if "task_yaml" not in path.parts}


def import_graph() -> dict[str, set[str]]:
    """``{module: {snapeval modules it imports}}`` over every file of ``snapeval/`` (the rule: module docstring)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets = []
            if (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                targets = [node.args[0].value]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith("snapeval") and target != name:
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def _folder(name: str, modules: dict[str, Path]) -> str:
    """A file's node at folder level: its sub-package of ``snapeval/`` (e.g. ``snapeval.cache``), or the module itself
    for a file directly in ``snapeval/`` (``snapeval.paths``: the top-level modules are no folder of their own)."""
    path = modules[name]
    folder = _module_name(path.parent / "__init__.py")
    return name if folder == "snapeval" else folder


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    modules = _modules()
    out: dict[str, set[str]] = {}
    for name, targets in graph.items():
        here = _folder(name, modules)
        out.setdefault(here, set())
        for target in targets:
            there = _folder(target, modules)
            # Importing a package's child imports the package itself; the child's folder is the edge, not its parents.
            if there != here:
                out[here].add(there)
    return out


def _without_known(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {name: {t for t in targets if (name, t) not in KNOWN} for name, targets in graph.items()}


def test_the_rule_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_files():
    assert _cycles(_without_known(import_graph())) == []


def test_no_import_cycle_between_folders():
    assert _cycles(folder_graph(_without_known(import_graph()))) == []


@pytest.mark.parametrize("ground", GROUND)
def test_ground_modules_import_nothing_of_snapeval(ground):
    assert import_graph()[ground] == set()


def test_no_test_imports_benchmarks():
    """A benchmark or a study is tested as its docs run it (``python -m benchmarks.<name> ...`` in a subprocess), and
    a function a test needs belongs to ``snapeval/``: no test file imports ``benchmarks`` (at the top or inside a
    function)."""
    importing = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            importing += [f"{path.relative_to(ROOT)}:{node.lineno}" for name in names
                          if name == "benchmarks" or name.startswith("benchmarks.")]
    assert importing == []


#: The most places in ``snapeval/`` that pass ``decode_kernel=`` by hand: the run's choices travel as one
#: :class:`~snapeval.run_args.DecodeChoices` (``decoding=``), and one builder hands its kernel to a cache
#: (``snapeval.cache.methods.build_cache``).
HAND_PASSED_KERNEL_LIMIT = 5


def hand_passed(keyword: str, root: Path = PACKAGE) -> list[str]:
    """``path:line`` of every call in ``root`` that passes ``keyword=`` (or stores it by hand into an options
    mapping, ``options["keyword"] = ...``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            passed = isinstance(node, ast.Call) and any(k.arg == keyword for k in node.keywords)
            stored = (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
                      and isinstance(node.slice, ast.Constant) and node.slice.value == keyword)
            if passed or stored:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return sorted(found)


def test_the_rule_sees_a_hand_passed_keyword(tmp_path):
    (tmp_path / "a.py").write_text("f(decode_kernel='auto')\noptions['decode_kernel'] = k\ng(kernel=1)\n")
    assert hand_passed("decode_kernel", tmp_path) == [f"{tmp_path.name}/a.py:1", f"{tmp_path.name}/a.py:2"]


def test_the_decode_kernel_is_passed_by_hand_in_a_handful_of_places():
    """A run's decode kernel reaches its caches inside its :class:`~snapeval.run_args.DecodeChoices`, not as a
    keyword every builder passes on: ``decode_kernel=`` is written by hand in at most
    :data:`HAND_PASSED_KERNEL_LIMIT` places."""
    places = hand_passed("decode_kernel")
    assert len(places) <= HAND_PASSED_KERNEL_LIMIT, places
