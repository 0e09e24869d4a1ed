"""The official LiveCodeBench runner's execution model (``lcb_runner/evaluation/testing_util.py`` at
LiveCodeBench/LiveCodeBench 28fef95), as the sandbox's driver runs a program: the import header, the guard it switches
on, how a stdin program is unwrapped and called with its input, how a functional one is loaded. Part of the driver
(``driver.py`` loads this file by its path before its set-up; standard library only, no snapeval imports).
"""
import ast
import builtins
import errno
import io
import os
import sys
import types

# The official LiveCodeBench import header (lcb_runner/evaluation/testing_util.py), prepended to every program.
IMPORT_HEADER = """\
from string import *
from re import *
from datetime import *
from collections import *
from heapq import *
from bisect import *
from copy import *
from math import *
from random import *
from statistics import *
from itertools import *
from functools import *
from operator import *
from io import *
from sys import *
from json import *
from builtins import *
from typing import *
import string
import re
import datetime
import collections
import heapq
import bisect
import copy
import math
import random
import statistics
import itertools
import functools
import operator
import io
import sys
import json
sys.setrecursionlimit(50000)
"""


# ------------------------------------------------------------------------ the official runner's execution model
OFFICIAL_DISABLED = {  # testing_util.reliability_guard: set to None before a program runs
    "builtins": ("quit", "help"),
    "os": ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
           "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
           "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"),
    "shutil": ("rmtree", "move", "chown"),
}
OFFICIAL_HIDDEN_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter")


def disable_like_official():
    """What the official runner switches off in the process that runs a program (``reliability_guard``), so that a
    program calling one of these fails here as it fails there. (Its ``subprocess.Popen = None`` is not repeated:
    importing ``subprocess`` is refused here, and ``exec`` by the kernel.)"""
    import shutil

    os.environ["OMP_NUM_THREADS"] = "1"  # before os.putenv goes (os.environ calls it)
    modules = {"builtins": builtins, "os": os, "shutil": shutil}
    for module, names in OFFICIAL_DISABLED.items():
        for name in names:
            setattr(modules[module], name, None)
    for name in OFFICIAL_HIDDEN_MODULES:
        sys.modules[name] = None


def unwrap_main_guard(code):
    """``clean_if_name``: a last top-level ``if __name__ == '__main__':`` is replaced by its body."""
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            code = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except BaseException:  # the official catches everything here and keeps the code as it was
        pass
    return code


def wrap_in_function(code):
    """``make_function``: the import header, then the program's top-level imports, then every other top-level
    statement as the body of ``wrapped_function()``; code that does not parse is returned unchanged."""
    try:
        tree = ast.parse(code)
        is_import = [isinstance(s, (ast.Import, ast.ImportFrom)) for s in tree.body]
        imports = [s for s, imp in zip(tree.body, is_import) if imp]
        body = [s for s, imp in zip(tree.body, is_import) if not imp]
        signature = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
        function = ast.FunctionDef(name="wrapped_function", args=signature, body=body, decorator_list=[], lineno=-1)
        return IMPORT_HEADER + "\n" + ast.unparse(imports) + "\n" + ast.unparse(function)
    except Exception:
        return code


class OfficialStdin:
    """``sys.stdin`` during a stdin test, behaving as the official runner's replacement does
    (``MockStdinWithBuffer``): ``read()`` is always the whole input, ``readline()`` the next line (newline kept,
    ``''`` at the end), ``readlines()`` the input split on newlines (newlines dropped); ``buffer.read()`` the input as
    bytes and ``buffer.readline()`` always the first line; anything else is that of a text stream over the input. It
    is not iterable (``for line in sys.stdin`` raises ``TypeError`` there too)."""

    def __init__(self, text):
        self._text = text
        self._lines = io.StringIO(text)
        self.buffer = _OfficialStdinBuffer(text)

    def read(self, *args):
        return self._text

    def readline(self, *args):
        return self._lines.readline(*args)

    def readlines(self, *args):
        return self._text.split("\n")

    def __getattr__(self, name):
        return getattr(self._lines, name)


class _OfficialStdinBuffer:
    def __init__(self, text):
        self._data = text.encode("utf-8")

    def read(self, *args):
        return self._data

    def readline(self, *args):
        return self._data.split(b"\n")[0] + b"\n"


class PatchedRealStdin:
    """The official ``call_method`` stacks five ``unittest.mock.patch`` decorators; ``mock`` enters them bottom-up, so
    ``sys.stdin.read``, ``sys.stdin.readlines`` and ``sys.stdin.readline`` are patched on the process's *real*
    standard input object before ``sys.stdin`` itself is replaced. A program holding that object (``from sys import
    stdin``, or the bare ``stdin`` the import header's ``from sys import *`` binds) therefore reads the test input
    through those three methods: ``read()`` the whole input, ``readlines()`` the input split on newlines, and
    ``readline()`` the next line *without* its newline, raising ``StopIteration`` once the lines (one more than the
    newlines) are used up. Everything else of that object (``buffer``, iteration, ``fileno``) is still the real,
    empty standard input. This context manager sets the same three instance attributes and, as ``mock`` does on
    exit, restores an instance attribute that was there before or deletes the new one."""

    NAMES = ("read", "readlines", "readline")

    def __init__(self, stream, text):
        lines = iter(text.split("\n"))
        self.stream = stream
        self.values = {"read": lambda *args: text, "readlines": lambda *args: text.split("\n"),
                       "readline": lambda *args: next(lines)}
        self.saved = {}

    def __enter__(self):
        own = getattr(self.stream, "__dict__", {})
        for name in self.NAMES:
            if name in own:
                self.saved[name] = own[name]
            setattr(self.stream, name, self.values[name])
        return self

    def __exit__(self, *exc):
        for name in reversed(self.NAMES):
            try:
                if name in self.saved:
                    setattr(self.stream, name, self.saved[name])
                else:
                    delattr(self.stream, name)
            except (AttributeError, TypeError):  # the program removed or froze it: nothing left to undo
                pass
        return False


def like_official_worker_stdin():
    """Standard input as the official runner's worker has it: each program runs in a ``multiprocessing.Process``,
    whose start-up (``BaseProcess._bootstrap``) closes ``sys.stdin`` and replaces it with ``open(os.devnull)``. So
    ``sys.__stdin__`` is a closed file there (reading it is a ``ValueError``) and the ``stdin`` object the import
    header binds is an empty file whose ``read``/``readline``/``readlines`` each test patches
    (:class:`PatchedRealStdin`)."""
    if sys.stdin is not None:
        try:
            sys.stdin.close()
            sys.stdin = open(os.devnull, encoding="utf-8")
        except (OSError, ValueError):
            pass


class OfficialOpen:
    """``builtins.open`` during a stdin test (the official runner patches it with ``unittest.mock.mock_open`` over
    the input): every call, whatever the path and mode, rewinds one shared handle over the input text; ``read``,
    ``readline``, ``readlines`` and iteration read it, ``write`` and ``close`` do nothing, any other attribute is an
    inert stand-in."""

    def __init__(self, text):
        self._text = text
        self._handle = _InputHandle()

    def __call__(self, *args, **kwargs):
        self._handle._stream = io.StringIO(self._text)
        return self._handle


class _Inert:
    def __call__(self, *args, **kwargs):
        return self

    def __getattr__(self, name):
        return self


class _InputHandle:
    _stream = None

    def read(self, *args):
        return self._stream.read(*args)

    def readline(self, *args):
        return self._stream.readline(*args)

    def readlines(self, *args):
        return self._stream.readlines(*args)

    def __iter__(self):
        return iter(self._stream)

    def __next__(self):
        return next(self._stream)

    def write(self, *args, **kwargs):
        return None

    def writelines(self, *args, **kwargs):
        return None

    def close(self, *args, **kwargs):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __getattr__(self, name):
        return _Inert()


def load_program(spec, code):
    """Execute the program as ``compile_code`` does and return the callable each test calls: ``wrapped_function``
    (stdin) or the function named ``func_name`` (functional), on ``Solution()`` when the text contains
    ``class Solution``. Raises what the program raises."""
    like_official_worker_stdin()
    if spec["mode"] == "stdin":
        text, name = wrap_in_function(unwrap_main_guard(code)), "wrapped_function"
    else:
        text, name = IMPORT_HEADER + "\n\n" + code, spec["func_name"]
    module = types.ModuleType("tmp_sol", "")
    exec(compile(text, "<string>", "exec"), module.__dict__)
    target = module.Solution() if "class Solution" in text else module
    if not hasattr(target, name):
        raise AttributeError(f"the program defines no {name}")
    return getattr(target, name)


class BoundedCapture(io.StringIO):
    """The official ``Capturing`` text buffer (its ``close`` takes one argument) that stops a test as soon as it
    holds more characters than ``max_chars``: every character is at least one byte, so it never stops output
    within the byte cap, and a program printing without end fails with ``output_limit`` in the time it takes to
    write the cap, not after filling its memory or its time. Once over, it stays over even if the program catches
    the error."""

    def __init__(self, max_chars=None):
        super().__init__()
        self.max_chars, self.written, self.exceeded = max_chars, 0, False

    def write(self, text):
        self.written += len(text)
        if self.max_chars is not None and self.written > self.max_chars:
            self.exceeded = True
            raise OSError(errno.EFBIG, f"more than {self.max_chars} bytes of output")
        return super().write(text)

    def close(self, *args):
        return 1


def run_stdin_test(method, text, max_bytes=None):
    """One stdin test: standard output captured in a ``BoundedCapture`` (at most ``max_bytes``), the real standard
    input's ``read``/``readlines``/``readline`` patched (:class:`PatchedRealStdin`), then ``sys.stdin`` and
    ``builtins.open`` replaced, as the official ``call_method`` does; ``SystemExit`` ends the test normally."""
    capture = BoundedCapture(max_bytes)
    saved_stdout, saved_stdin, saved_open = sys.stdout, sys.stdin, builtins.open
    sys.stdout = capture
    try:
        with PatchedRealStdin(saved_stdin, text):
            sys.stdin, builtins.open = OfficialStdin(text), OfficialOpen(text)
            try:
                method()
            except SystemExit:
                pass
            finally:
                sys.stdin, builtins.open = saved_stdin, saved_open
    finally:
        sys.stdout = saved_stdout
    if capture.exceeded:
        raise OSError(errno.EFBIG, f"more than {capture.max_chars} bytes of output")
    return capture.getvalue().encode("utf-8", "surrogatepass")
