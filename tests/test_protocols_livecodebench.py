"""LiveCodeBench graded as the official ``lcb_runner`` grades it (issue #20, item 4), proven against a re-implementation
of the official rules written here from reading LiveCodeBench/LiveCodeBench at 28fef95 (our own code; each function
names the official file and function it mirrors). Offline: crafted programs, outputs and problems only.

- a corpus of programs run by snapeval's sandbox and by the reference runner (in a forked process, as the official
  runs each program in a ``multiprocessing.Process``): equal verdict by verdict (passed, failure kind, failing test);
- the comparison rules alone on generated outputs and returned values (hypothesis), the pass@k estimator, the code
  extraction, the release version and the contest-date window;
- the ``livecodebench`` task end to end through lm-eval with a stub model whose generations are known programs.
"""
from __future__ import annotations

import ast
import faulthandler
import json
import math
import multiprocessing
import os
import signal
import sys
import time
from datetime import datetime
from decimal import Decimal
from io import StringIO
from pathlib import Path
from types import ModuleType
from unittest.mock import mock_open, patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapeval.errors import SnapevalError
from snapeval.sandbox import ProgramJob, SandboxLimits, driver, isolation, run_programs
from snapeval.sandbox.protocol import decode_value
from snapeval.tasks import livecodebench
from snapeval.tasks.livecodebench import TestCase, Tests, functional_matches, load_json, stdout_matches
from snapeval.tasks.metrics import pass_at_k

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SNAPEVAL_DATA_DIR") or REPO.parent / "shared" / "data")
TIMEOUT = 2  # seconds: the official --timeout is an integer (signal.alarm)
executes = pytest.mark.skipif(not isolation().isolate_fs, reason="no mount namespace here: execution is refused")

# ============================================================================================ the reference
# lcb_runner/evaluation/testing_util.py: import_string (the modules, in the official order)
_FROM = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
         "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing")
REF_IMPORT_STRING = ("".join(f"from {m} import *\n" for m in _FROM)
                     + "".join(f"import {m}\n" for m in _FROM[:-2]) + "sys.setrecursionlimit(50000)\n")


class TimeoutException(Exception):  # testing_util.TimeoutException (its name matters: see grade_*)
    pass


def _ref_alarm(signum, frame):  # testing_util.timeout_handler
    raise TimeoutException


class RefCapture(list):  # testing_util.Capturing: sys.stdout into a StringIO whose close takes one argument
    def __enter__(self):
        self._saved = sys.stdout
        self._buffer = sys.stdout = StringIO()
        self._buffer.close = lambda x: 1
        return self

    def __exit__(self, *exc):
        self.append(self._buffer.getvalue())
        sys.stdout = self._saved


class RefStdin:  # testing_util.MockStdinWithBuffer / MockBuffer
    def __init__(self, text):
        self.text, self.stream = text, StringIO(text)
        self.buffer = type("RefBuffer", (), {"read": lambda _, *a: text.encode("utf-8"),
                                             "readline": lambda _, *a: text.encode("utf-8").split(b"\n")[0] + b"\n"})()

    def read(self, *args):
        return self.text

    def readline(self, *args):
        return self.stream.readline(*args)

    def readlines(self, *args):
        return self.text.split("\n")

    def __getattr__(self, name):
        return getattr(self.stream, name)


def ref_clean_if_name(code):  # testing_util.clean_if_name
    try:
        body = ast.parse(code).body
        if isinstance(body[-1], ast.If) and ast.unparse(body[-1].test).strip() == "__name__ == '__main__'":
            code = ast.unparse(body[:-1]) + "\n" + ast.unparse(body[-1].body)
    except BaseException:
        pass
    return code


def ref_make_function(code):  # testing_util.make_function
    try:
        body = ast.parse(code).body
        imports = [s for s in body if isinstance(s, (ast.Import, ast.ImportFrom))]
        rest = [s for s in body if not isinstance(s, (ast.Import, ast.ImportFrom))]
        fn = ast.FunctionDef(name="wrapped_function", body=rest, decorator_list=[], lineno=-1,
                             args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]))
        return REF_IMPORT_STRING + "\n" + ast.unparse(imports) + "\n" + ast.unparse(fn)
    except Exception:
        return code


def ref_compile_code(code, timeout):  # testing_util.compile_code
    signal.alarm(timeout)
    try:
        module = ModuleType("tmp_sol", "")
        exec(code, module.__dict__)
        return module.Solution() if "class Solution" in code else module
    finally:
        signal.alarm(0)


def ref_call_method(method, text):  # testing_util.call_method: the patches, entered bottom-up as mock enters them
    lines = iter(text.split("\n"))

    @patch("builtins.open", mock_open(read_data=text))
    @patch("sys.stdin", RefStdin(text))
    @patch("sys.stdin.readline", lambda *a: next(lines))
    @patch("sys.stdin.readlines", lambda *a: text.split("\n"))
    @patch("sys.stdin.read", lambda *a: text)
    def inner(m):
        try:
            return m()
        except SystemExit:
            pass

    return inner(method)


def ref_lines(text):  # testing_util.get_stripped_lines
    return [line.strip() for line in text.strip().split("\n")]


def ref_decimals(line):  # testing_util.convert_line_to_decimals
    try:
        return True, [Decimal(x) for x in line.split()]
    except BaseException:
        return False, []


def ref_stdio_verdict(prediction, expected):
    """The comparison part of testing_util.grade_stdio: True, or -2 (wrong answer); raises what it raises."""
    got, want = ref_lines(prediction), ref_lines(expected)
    if len(got) != len(want):
        return -2
    for a, b in zip(got, want):
        if a == b:
            continue
        ok_a, da = ref_decimals(a)
        ok_b, db = ref_decimals(b)
        if not ok_a or not ok_b or da != db:
            return -2
    return True


def ref_grade_stdio(code, inputs, outputs, timeout):  # testing_util.grade_stdio
    sol = ref_compile_code(ref_make_function(ref_clean_if_name(code)), timeout)
    method = getattr(sol, "wrapped_function", None)
    if method is None:
        return None
    results = []
    for text, expected in zip(inputs, outputs):
        signal.alarm(timeout)
        with RefCapture() as captured:
            try:
                ref_call_method(method, text)
                signal.alarm(0)
            except Exception as exc:
                signal.alarm(0)
                return results + [-3 if "timeoutexception" in repr(exc).lower() else -4]
            finally:
                signal.alarm(0)
        verdict = ref_stdio_verdict(captured[0], expected)
        results.append(verdict)
        if verdict is not True:
            return results
    return results


def ref_grade_call_based(code, inputs, outputs, fn_name, timeout):  # testing_util.grade_call_based
    sol = ref_compile_code(REF_IMPORT_STRING + "\n\n" + code, timeout)
    method = getattr(sol, fn_name, None)
    if method is None:
        return None
    args = [[json.loads(line) for line in text.split("\n")] for text in inputs]
    expected = [json.loads(o) for o in outputs]
    results = []
    for a, want in zip(args, expected):
        signal.alarm(timeout)
        try:
            prediction = method(*a)
            signal.alarm(0)
            if isinstance(prediction, tuple):
                prediction = list(prediction)
            verdict = prediction == want
            results.append(verdict)
            if not verdict:
                return results
        except Exception as exc:
            signal.alarm(0)
            return results + [-3 if "timeoutexception" in repr(exc).lower() else -4]
        finally:
            signal.alarm(0)
    return results


def ref_reliability_guard():  # testing_util.reliability_guard (the parts a crafted program can meet)
    import builtins
    import shutil

    os.environ["OMP_NUM_THREADS"] = "1"
    builtins.quit = None
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
                 "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
                 "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None


def ref_run_test(code, inputs, outputs, fn_name, timeout):  # testing_util.run_test
    signal.signal(signal.SIGALRM, _ref_alarm)
    ref_reliability_guard()
    try:
        if fn_name is None:
            results = ref_grade_stdio(code, inputs, outputs, timeout)
        else:
            results = ref_grade_call_based(code, inputs, outputs, fn_name, timeout)
        if results is None:  # the official unpacks None here: a TypeError, caught below
            raise TypeError("cannot unpack non-iterable NoneType object")
        return results
    except Exception:
        return [-4]
    finally:
        signal.alarm(0)


def _ref_child(conn, *args):
    sys.set_int_max_str_digits(50000)  # compute_code_generation_metrics.py, at import
    faulthandler.disable()
    conn.send(ref_run_test(*args))


def ref_check_correctness(code, inputs, outputs, fn_name, timeout):
    """compute_code_generation_metrics.check_correctness: one process per program, a global timeout of
    ``(timeout + 1) * tests + 5`` s, and every test -1 when it returns nothing."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_ref_child, args=(child, code, inputs, outputs, fn_name, timeout))
    proc.start()
    child.close()
    result = parent.recv() if parent.poll((timeout + 1) * len(inputs) + 5) else None
    if proc.is_alive():
        proc.kill()
    proc.join()
    return result if result is not None else [-1] * len(inputs)


def ref_passed(results):  # pass_k_utils.compute_metrics_from_results
    return bool(np.all(np.array(results) > 0))


def ref_estimate_pass_at_k(n, c, k):  # pass_k_utils.estimate_pass_at_k, for one problem
    if n - c < k:
        return 1.0
    return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))


OFFICIAL_STATUS = {False: "wrong_answer", -2: "wrong_answer", -3: "time_limit", -4: "runtime_error",
                   -1: "time_limit"}


def official_verdict(results):
    if ref_passed(results):
        return ("passed", len(results) - 1)
    return (OFFICIAL_STATUS[results[-1]], len(results) - 1)


def snapeval_verdict(result, n):
    if result.passed:
        return ("passed", n - 1)
    return (result.status, result.outcomes[-1].index)


# ================================================================================================ the corpus
ADD_IN, ADD_OUT = ["2 3\n", "10 20\n"], ["5\n", "30\n"]
READ = "a, b = map(int, input().split())\n"
STDIN_CASES = [  # (name, code, inputs, expected outputs)
    ("exact", READ + "print(a + b)\n", ADD_IN, ADD_OUT),
    ("trailing whitespace", READ + "print(f'{a + b}   \\t')\n", ADD_IN, ADD_OUT),
    ("blank lines around", READ + "print('\\n\\n' + str(a + b) + '\\n\\n')\n", ADD_IN, ADD_OUT),
    ("blank line inside", "print('1\\n\\n2')\n", ["x\n"], ["1\n2\n"]),
    ("crlf", "import sys\n" + READ + "sys.stdout.write(f'{a + b}\\r\\n')\n", ADD_IN, ADD_OUT),
    ("float digits within (1.50 vs 1.5, 5e-1)", "print('1.50 5e-1')\n", ["x\n"], ["1.5 0.5\n"]),
    ("float digits beyond", "print(f'{1 / 3:.6f}')\n", ["x\n"], ["0.3333333\n"]),
    ("zero-padded number", "print('005')\n", ["x\n"], ["5\n"]),
    ("extra line", READ + "print(a + b)\nprint('done')\n", ADD_IN, ADD_OUT),
    ("missing line", "print(1)\n", ["x\n"], ["1\n2\n"]),
    ("True is not 1", "print(True)\n", ["x\n"], ["1\n"]),
    ("spacing between numbers", "print('1  2')\n", ["x\n"], ["1 2\n"]),
    ("spacing between words", "print('a  b')\n", ["x\n"], ["a b\n"]),
    ("timeout on the second test", READ + "import time\nif a == 10:\n    time.sleep(30)\nprint(a + b)\n",
     ADD_IN, ADD_OUT),
    ("runtime error", "raise ValueError('no')\n", ADD_IN, ADD_OUT),
    ("sys.exit after printing", "import sys\n" + READ + "print(a + b)\nsys.exit(0)\nprint(99)\n", ADD_IN, ADD_OUT),
    ("exit() from the header", READ + "print(a + b)\nexit()\n", ADD_IN, ADD_OUT),
    ("quit() is disabled", READ + "print(a + b)\nquit()\n", ADD_IN, ADD_OUT),
    ("main guard last", "def main():\n    " + READ + "    print(a + b)\n\nif __name__ == '__main__':\n    main()\n",
     ADD_IN, ADD_OUT),
    ("main guard not last", "def main():\n    print(5)\nif __name__ == '__main__':\n    main()\nx = 1\n",
     ADD_IN, ADD_OUT),
    ("stdin.read().split()", "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n",
     ADD_IN, ADD_OUT),
    ("stdin.buffer.readline repeats the first line", "import sys\na = int(sys.stdin.buffer.readline())\n"
     "b = int(sys.stdin.buffer.readline())\nprint(a + b)\n", ["2\n3\n"], ["5\n"]),
    ("iterating sys.stdin", "import sys\nfor line in sys.stdin:\n    print(line)\n", ADD_IN, ADD_OUT),
    ("open(0).read()", "a, b = map(int, open(0).read().split())\nprint(a + b)\n", ADD_IN, ADD_OUT),
    ("global statement in a wrapped program", READ + "def f():\n    global a\n    return a + b\nprint(f())\n",
     ADD_IN, ADD_OUT),
    ("signaling NaN", "print('sNaN')\n", ["x\n"], ["5\n"]),
    ("state kept between tests", "import sys\nsys.seen = getattr(sys, 'seen', 0) + 1\n" + READ
     + "print(a + b if sys.seen == 1 else 0)\n", ADD_IN, ADD_OUT),
    ("syntax error", "def f(:\n", ADD_IN, ADD_OUT),
    ("no output", "x = 1\n", ADD_IN, ADD_OUT),
    ("stderr only", "import sys\nprint(5, file=sys.stderr)\n", ["x\n"], ["5\n"]),
    ("os.getcwd is disabled", "import os\nos.getcwd()\nprint(5)\n", ["x\n"], ["5\n"]),
    ("'class Solution' in a stdin program", "s = 'class Solution'\nprint(5)\n", ["x\n"], ["5\n"]),
    ("unicode output", "print('héllo wörld ✓')\n", ["x\n"], ["héllo wörld ✓\n"]),
]

F_CALL = "class Solution:\n    def f(self, {args}):\n        {body}\n"
FUNCTIONAL_CASES = [  # (name, code, inputs, expected outputs, function name)
    ("list", F_CALL.format(args="a", body="return sorted(a)"), ["[3, 1, 2]", "[]"], ["[1, 2, 3]", "[]"], "f"),
    ("tuple at the top", F_CALL.format(args="a", body="return tuple(a)"), ["[1, 2]"], ["[1, 2]"], "f"),
    ("nested tuple", F_CALL.format(args="a", body="return [tuple(a)]"), ["[1, 2]"], ["[[1, 2]]"], "f"),
    ("string '5' is not 5", F_CALL.format(args="a", body="return str(a)"), ["5"], ["5"], "f"),
    ("5.0 equals 5", F_CALL.format(args="a", body="return a * 1.0"), ["5"], ["5"], "f"),
    ("True equals 1", F_CALL.format(args="a", body="return a == 5"), ["5"], ["1"], "f"),
    ("nested JSON", F_CALL.format(args="a, s, m", body="return {'a': a, 's': s * 2, 'm': m}"),
     ["[1, [2, [3]]]\n\"ab\"\n{\"x\": [1, {\"y\": null}]}"],
     ["{\"a\": [1, [2, [3]]], \"s\": \"abab\", \"m\": {\"x\": [1, {\"y\": null}]}}"], "f"),
    ("dict with integer keys", F_CALL.format(args="a", body="return {1: a}"), ["2"], ["{\"1\": 2}"], "f"),
    ("unicode string", F_CALL.format(args="s", body="return s[::-1]"), ["\"ñé✓\""], ["\"✓éñ\""], "f"),
    ("no such method", F_CALL.format(args="a", body="return a"), ["1"], ["1"], "g"),
    ("function without a class", "def f(a):\n    return a + 1\n", ["1", "2"], ["2", "3"], "f"),
    ("'class Solution' in a comment", "# class Solution\ndef f(a):\n    return a\n", ["1"], ["1"], "f"),
    ("instance kept between tests",
     "class Solution:\n    calls = 0\n    def f(self, a):\n        self.calls += 1\n"
     "        return a if self.calls == 1 else -1\n", ["1", "2"], ["1", "2"], "f"),
    ("timeout on the second test", F_CALL.format(args="a", body="import time\n        time.sleep(30 if a == 2 "
                                                 "else 0)\n        return a"), ["1", "2"], ["1", "2"], "f"),
    ("exception", F_CALL.format(args="a", body="return 1 // 0"), ["1"], ["1"], "f"),
    ("a set is not a list", F_CALL.format(args="a", body="return set(a)"), ["[1]"], ["[1]"], "f"),
    ("None is null", F_CALL.format(args="a", body="return None"), ["1"], ["null"], "f"),
    ("no float tolerance", F_CALL.format(args="a", body="return 0.1 + 0.2"), ["1"], ["0.3"], "f"),
    ("integer of 5,000 digits", F_CALL.format(args="a", body="return 10 ** 5000 + a"), ["1"],
     ["1" + "0" * 4999 + "1"], "f"),
    ("Fraction equals 0.5", "from fractions import Fraction\n" + F_CALL.format(args="a", body="return Fraction(1, 2)"),
     ["1"], ["0.5"], "f"),
    ("Decimal equals 0.5", "from decimal import Decimal\n" + F_CALL.format(args="a", body="return Decimal('0.5')"),
     ["1"], ["0.5"], "f"),
    ("a map object", F_CALL.format(args="a", body="return map(int, a)"), ["[1]"], ["[1]"], "f"),
    ("bools inside a list", F_CALL.format(args="a", body="return [x > 0 for x in a]"), ["[1, -1]"], ["[1, 0]"], "f"),
    ("-0.0 equals 0", F_CALL.format(args="a", body="return -0.0"), ["1"], ["0"], "f"),
    ("dict equality ignores order", F_CALL.format(args="a", body="return {'b': 2, 'a': 1}"), ["1"],
     ["{\"a\": 1, \"b\": 2}"], "f"),
]


def _tests(inputs, outputs, mode, fn=None):
    return Tests(tuple(TestCase(i, o, mode) for i, o in zip(inputs, outputs)), fn, False)


def _corpus():
    return ([(name, code, i, o, "stdin", None) for name, code, i, o in STDIN_CASES]
            + [(name, code, i, o, "functional", fn) for name, code, i, o, fn in FUNCTIONAL_CASES])


@executes
def test_the_driver_runs_the_official_import_header():
    assert driver.IMPORT_HEADER == REF_IMPORT_STRING
    assert driver.INT_MAX_STR_DIGITS == livecodebench.INT_MAX_STR_DIGITS == 50000


@executes
def test_corpus_verdicts_equal_the_official_runners():
    """Every crafted program graded by the sandbox and by the reference runner: same verdict, same failing test."""
    corpus = _corpus()
    jobs = [ProgramJob(code, inputs, mode, livecodebench.judge(_tests(inputs, outputs, mode, fn)), fn)
            for _, code, inputs, outputs, mode, fn in corpus]
    ours = run_programs(jobs, limits=SandboxLimits(timeout_s=TIMEOUT, memory_mb=1024), workers=2)
    mismatches = []
    for (name, code, inputs, outputs, mode, fn), result in zip(corpus, ours):
        official = official_verdict(ref_check_correctness(code, inputs, outputs, fn, TIMEOUT))
        mine = snapeval_verdict(result, len(inputs))
        if official != mine:
            mismatches.append((name, official, mine, result.detail))
    assert not mismatches, mismatches
    # the corpus covers every verdict, in both modes
    kinds = {(case[4], snapeval_verdict(result, len(case[2]))[0]) for case, result in zip(corpus, ours)}
    assert {(m, s) for m in ("stdin", "functional") for s in ("passed", "wrong_answer", "runtime_error",
                                                              "time_limit")} <= kinds


# ------------------------------------------------------------------------------------ the comparison rules alone
_TOKENS = st.sampled_from(["5", "5.0", "05", "-0", "0.10", "1e2", "100", "1_000", "1000", "abc", "ABC", "NaN", "nan",
                           "inf", "Infinity", "True", "1", " ", "  ", "\t", "\r", "", "x", "0.1000001", "sNaN",
                           "\u3000", "\x1c", "\x85", "٣"])
_LINE = st.lists(_TOKENS, max_size=5).map("".join)
_TEXT = st.lists(_LINE, max_size=4).map("\n".join)


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - a raise is a verdict too (the official: a runtime error)
        return type(exc).__name__


@settings(max_examples=600, deadline=None)
@given(_TEXT, _TEXT)
def test_stdout_comparison_equals_grade_stdio(got, expected):
    official = _outcome(ref_stdio_verdict, got, expected)
    ours = _outcome(stdout_matches, got, expected)
    assert (official is True) == (ours is True) and isinstance(official, str) == isinstance(ours, str), \
        (got, expected, official, ours)


def test_stdout_comparison_examples():
    assert stdout_matches("5  \r\n\n", "5\n") and stdout_matches("1.50 2", "1.5 2.0") and stdout_matches("005", "5")
    assert not stdout_matches("1\n\n2", "1\n2") and not stdout_matches("0.333333", "0.3333333")
    with pytest.raises(ArithmeticError):  # the official comparison raises too: a runtime error there
        stdout_matches("sNaN", "5")


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                     lambda inner: (st.lists(inner, max_size=3)
                                    | st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                     max_leaves=8)
_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10 ** 60, max_value=10 ** 60) | st.floats() | st.text(max_size=5)
    | st.builds(pow, st.just(10), st.integers(4400, 5200))  # more digits than a str -> int conversion allows
    | st.just(Decimal("0.5")) | st.just(complex(1, 0)) | st.just(b"ab") | st.just(frozenset({1})),
    lambda inner: (st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
                   | st.dictionaries(st.text(max_size=3) | st.integers(0, 3), inner, max_size=3)),
    max_leaves=8)


@settings(max_examples=600, deadline=None)
@given(_VALUE, _JSON)
def test_functional_comparison_equals_grade_call_based(value, expected):
    """The returned value crosses the pipe (driver.encode_value -> protocol.decode_value) and is compared with the
    expected JSON text read back; the official compares the live value with ``json.loads(output)``."""
    text = json.dumps(expected)
    prediction = list(value) if isinstance(value, tuple) else value
    official = prediction == json.loads(text)
    ours = functional_matches(decode_value(driver.encode_value(value)), load_json(text))
    assert official == ours, (value, expected)


@given(_VALUE)
@settings(max_examples=300, deadline=None)
def test_returned_values_cross_the_pipe_unchanged(value):
    back = decode_value(driver.encode_value(value))
    if isinstance(value, frozenset) or (isinstance(value, dict) and any(type(k) is not str for k in value)):
        assert back != value  # types no JSON value can equal arrive as such
    elif not _has_nan(value) and not _has_unequal(value):
        assert back == value and type(back) is type(value)


def _has_nan(v):
    if isinstance(v, float):
        return math.isnan(v)
    if isinstance(v, (list, tuple)):
        return any(_has_nan(x) for x in v)
    if isinstance(v, dict):
        return any(_has_nan(x) for x in v.values())
    return False


def _has_unequal(v):
    if isinstance(v, frozenset):
        return True
    if isinstance(v, (list, tuple)):
        return any(_has_unequal(x) for x in v)
    if isinstance(v, dict):
        return any(type(k) is not str for k in v) or any(_has_unequal(x) for x in v.values())
    return False


def test_pass_at_k_equals_the_official_estimator():
    for n in range(1, 21):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == ref_estimate_pass_at_k(n, c, k), (n, c, k)


# ------------------------------------------------------------------------------------------------ code extraction
def ref_extract_code(output):  # lcb_runner/utils/extraction_utils.extract_code, chat model styles
    lines = output.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return ""
    return "\n".join(lines[fences[-2] + 1:fences[-1]])


@pytest.mark.parametrize("response", [
    "```python\nprint(1)\n```",
    "<think>draft:\n```python\nprint(0)\n```\nbetter</think>\nFinal:\n```python\nprint(1)\n```\nDone.",
    "<think>only a draft in the thinking\n```python\nprint(0)\n```\n",  # truncated: the draft is graded there too
    "Here ```python\nprint(1)\n``` inline fences count as fence lines",
    "```\nprint(1)\n```\nand a sample:\n```text\n5\n```",  # the last block is taken, whatever its tag
    "no code at all", "one fence only ```python\nprint(1)", "```python\n```",
])
def test_code_extraction_equals_the_official(response):
    official = ref_extract_code(response)
    ours = livecodebench.extract_code(response)
    assert (ours if ours is not None else "") == official
    assert (ours is None) == (len([line for line in response.split("\n") if "```" in line]) < 2)


# ---------------------------------------------------------------------------------- release version, date window
# The dataset's own loader (code_generation_lite.py, ALLOWED_FILES) maps a version tag to its shards.
REF_ALLOWED = {f"release_v{i}": list(range(1, i + 1)) for i in range(1, 7)}
REF_ALLOWED["release_latest"] = list(range(1, 7))
REF_ALLOWED.update({f"v{i}": [i] for i in range(1, 7)})
REF_ALLOWED.update({f"v{a}_v{b}": list(range(a, b + 1)) for a in range(1, 7) for b in range(a + 1, 7)})


def ref_select(rows, release_version, start_date=None, end_date=None):
    """lcb_runner/benchmarks/code_generation.load_code_generation_dataset: the version's shards, then
    ``start <= contest_date`` and ``contest_date <= end`` with the bounds at midnight."""
    shards = {f"refined_{'test' if i == 1 else f'test{i}'}.jsonl" for i in REF_ALLOWED[release_version]}
    chosen = [r for r in rows if r["release_shard"] in shards]
    if start_date is not None:
        chosen = [r for r in chosen if datetime.strptime(start_date, "%Y-%m-%d")
                  <= datetime.fromisoformat(r["contest_date"])]
    if end_date is not None:
        chosen = [r for r in chosen if datetime.fromisoformat(r["contest_date"])
                  <= datetime.strptime(end_date, "%Y-%m-%d")]
    return [r["question_id"] for r in chosen]


def _problem(qid, date, shard=1, tests=None, func=None):
    tests = tests or [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]
    return {"question_title": qid, "question_content": f"Question {qid}", "platform": "atcoder", "question_id": qid,
            "contest_id": "c1", "contest_date": date, "starter_code": "", "difficulty": "easy",
            "public_test_cases": json.dumps(tests), "private_test_cases": "",
            "metadata": json.dumps({"func_name": func} if func else {}),
            "release_shard": f"refined_{'test' if shard == 1 else f'test{shard}'}.jsonl"}


def _write_data(folder, rows):
    (folder / "livecodebench").mkdir(parents=True, exist_ok=True)
    (folder / "livecodebench" / "code_generation_lite.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def test_version_and_window_select_as_the_official_loader(tmp_path):
    rows = [_problem("a", "2024-03-01T00:00:00", 1), _problem("b", "2024-03-01T18:30:00", 2),
            _problem("c", "2024-02-29T23:59:59", 3), _problem("d", "2024-03-02T00:00:00", 6),
            _problem("e", "2023-05-08T00:00:00", 1)]
    _write_data(tmp_path, rows)
    for version in REF_ALLOWED:
        for start, end in [(None, None), ("2024-03-01", None), (None, "2024-03-01"), ("2024-03-01", "2024-03-01"),
                           ("2024-02-29", "2024-03-02")]:
            expected = ref_select(rows, version, start, end)
            try:
                got = [r["question_id"] for r in livecodebench.load(tmp_path, release_version=version,
                                                                    start_date=start, end_date=end).rows]
            except SnapevalError as exc:
                assert not expected and "no LiveCodeBench problems" in str(exc), (version, start, end)
                continue
            assert got == expected, (version, start, end)
    for bad in ("v2_v2", "v3_v1", "release_v7", "v0"):
        with pytest.raises(SnapevalError, match=f"release_version='{bad}' is not allowed"):
            livecodebench.parse_version(bad)
    with pytest.raises(SnapevalError, match=r"start_date='2024/03/01' is not a date; use YYYY-MM-DD"):
        livecodebench.load(tmp_path, start_date="2024/03/01")


def test_real_data_windows_select_as_the_official_loader():
    path = DATA / "livecodebench" / "code_generation_lite.jsonl"
    if not path.is_file():
        pytest.skip(f"real data not available under {DATA}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    # 2024-08-31 and 2025-01-04 have contests at 18:30 / 07:30 that an end date of that day leaves out
    for version, start, end in [("release_v5", "2024-08-01", "2025-02-01"),
                                ("release_latest", "2024-10-05", "2025-01-04"), ("v2_v4", None, "2024-08-31"),
                                ("release_v6", "2023-09-01", None)]:
        got = [r["question_id"] for r in livecodebench.load(DATA, release_version=version, start_date=start,
                                                            end_date=end).rows]
        assert got == ref_select(rows, version, start, end), (version, start, end)


# --------------------------------------------------------------------------- end to end through lm-eval (stub)
def _stub_lm(answers):
    from lm_eval.api.model import LM

    class StubLM(LM):
        """Answers each doc's requests with its known responses, in order (one per repeat)."""

        def __init__(self):
            super().__init__()
            self.served: dict[str, int] = {}

        def generate_until(self, requests, disable_tqdm=False):
            out = []
            for request in requests:
                qid = request.doc["question_id"]
                out.append(answers[qid][self.served.get(qid, 0)])
                self.served[qid] = self.served.get(qid, 0) + 1
            return out

        def loglikelihood(self, requests, disable_tqdm=False):
            raise NotImplementedError

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise NotImplementedError

    return StubLM()


FENCE = "```python\n{}```".format
STUB_PROBLEMS = [
    _problem("p_stdin", "2024-06-01T00:00:00", tests=[{"input": "2 3\n", "output": "5\n", "testtype": "stdin"},
                                                      {"input": "4 4\n", "output": "8\n", "testtype": "stdin"}]),
    _problem("p_func", "2024-06-02T00:00:00", func="add",
             tests=[{"input": "1\n2", "output": "3", "testtype": "functional"},
                    {"input": "[1]\n[2]", "output": "[1, 2]", "testtype": "functional"}]),
    _problem("p_late", "2024-06-30T18:30:00"),  # outside a window that ends on 2024-06-30
]
STUB_ANSWERS = {  # per problem, one response per repeat: (response, passes)
    "p_stdin": [(FENCE(READ + "print(a + b)\n"), True), (FENCE(READ + "print(a * 2)\n"), False),
                ("I cannot solve this.", False), (FENCE(READ + "print(a + b + 0)\n"), True)],
    "p_func": [(FENCE("class Solution:\n    def add(self, a, b):\n        return a + b\n"), True),
               (FENCE("class Solution:\n    def add(self, a, b):\n        return a - b\n"), False),
               (FENCE("class Solution:\n    def add(self, a, b):\n        c = a + b\n        return c\n"), True),
               (FENCE("class Solution:\n    def add(self, a, b):\n        raise ValueError\n"), False)],
}


@executes
@pytest.mark.parametrize("repeats", [1, 4])
def test_livecodebench_task_end_to_end_with_a_stub_model(tmp_path, repeats):
    """The task through lm-eval: the exact aggregate pass@1 over all samples (the sandbox filter keeps every repeat),
    every sample's verdict stored, the problem as the cluster, and the version and window in the run's data
    records and so in a sweep cell's JSON."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from snapeval.results.schema import from_lm_eval
    from snapeval.tasks.data import loaded_data_records

    _write_data(tmp_path, STUB_PROBLEMS)
    manager = TaskManager(include_path=str(REPO / "tasks"), include_defaults=False,
                          metadata={"data_dir": str(tmp_path), "release_version": "release_v1",
                                    "end_date": "2024-06-30", "sandbox_timeout_s": 2.0})
    task = manager.load(["livecodebench"])["tasks"]["livecodebench"]
    assert [f["name"] for f in task.config.filter_list] == ["sandbox"]  # not lm-eval's take_first
    task.config.repeats = repeats
    answers = {qid: [text for text, _ in per][:repeats] for qid, per in STUB_ANSWERS.items()}
    out = lm_eval.simple_evaluate(model=_stub_lm(answers), tasks=[task], task_manager=manager, log_samples=True)
    expected = np.mean([ref_estimate_pass_at_k(repeats, sum(ok for _, ok in per[:repeats]), 1)
                        for per in STUB_ANSWERS.values()])
    assert out["results"]["livecodebench"]["pass@1,sandbox"] == pytest.approx(expected, abs=1e-12)
    samples = out["samples"]["livecodebench"]
    assert sorted(s["doc"]["question_id"] for s in samples) == ["p_func", "p_stdin"]  # p_late is outside the window
    for s in samples:
        verdicts = [json.loads(v)["status"] for v in s["filtered_resps"][0]]
        assert len(verdicts) == repeats and len(s["resps"][0]) == repeats
        assert [v == "passed" for v in verdicts] == [ok for _, ok in STUB_ANSWERS[s["doc"]["question_id"]][:repeats]]
        assert s["doc"]["cluster"] == s["doc"]["question_id"]
        assert (s["doc"]["release_version"], s["doc"]["start_date"], s["doc"]["end_date"]) == \
            ("release_v1", None, "2024-06-30")
    out["snapeval"] = {"data": loaded_data_records()}  # what snapeval.harness.evaluate attaches to every run
    cell = json.loads(from_lm_eval("cell", {"task": "livecodebench"}, out).to_json())
    record = cell["data_records"]["livecodebench"]
    assert (record["release_version"], record["start_date"], record["end_date"], record["rows_used"]) == \
        ("release_v1", None, "2024-06-30", 2)
    assert {s["cluster"] for s in cell["samples"]} == {"p_func", "p_stdin"}
