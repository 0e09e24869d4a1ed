"""Child side of :mod:`snapeval.tasks.sandbox` (run as a script: ``python -I -S -B _sandbox_driver.py spec.json``).

Standard library only, no snapeval imports: it runs under ``python -I -S`` in the sandbox's working directory,
possibly under another interpreter. Order matters: limits and the privilege drop come first, then the official
LiveCodeBench import header, then the audit hook, and only then the untrusted program.

Control protocol on the inherited pipe ``ctl_fd`` (one line each): ``S <i>`` when test ``i`` starts,
``D <i> <json>`` when it ends (``{"status": "ok"|"error", "error": str, "cpu": s, "result": json-text}``).
"""
import builtins
import json
import os
import resource
import sys

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

BLOCKED_IMPORTS = frozenset({
    "_socket", "socket", "_ssl", "ssl", "select", "selectors", "_ctypes", "ctypes", "_posixsubprocess",
    "subprocess", "multiprocessing", "_multiprocessing", "pty", "asyncio", "urllib.request", "http.client",
})
BLOCKED_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen",
    "os.kill", "os.killpg", "signal.pthread_kill", "os.chdir", "os.fchdir", "os.chroot", "os.setuid", "os.setgid",
    "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto",
    "resource.setrlimit", "resource.prlimit", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
    "sys.settrace", "sys.setprofile", "os.startfile", "webbrowser.open",
})
# events whose first argument is a path that is written or removed
PATH_EVENTS = frozenset({
    "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink", "os.truncate",
    "os.utime", "os.rename", "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copytree", "os.setxattr",
    "os.removexattr", "shutil.chown", "shutil.make_archive", "shutil.unpack_archive",
})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def make_audit_hook(root, own_pid):
    root = os.path.realpath(root)
    realpath, join, fspath = os.path.realpath, os.path.join, os.fspath

    def inside(path):
        if isinstance(path, int):
            return True
        p = realpath(join(root, fspath(path)))
        return p == root or p.startswith(root + os.sep)

    def proc_ok(path):  # /proc/<other pid>/... (environment, memory, command line) is off limits
        if isinstance(path, int):
            return True
        p = os.path.abspath(join(root, fspath(path)))
        if not p.startswith("/proc/"):
            return True
        part = p.split("/")[2]
        return not part.isdigit() or int(part) == own_pid

    def hook(event, args):
        if event == "import":
            if args[0] in BLOCKED_IMPORTS:
                raise ImportError(f"sandbox: import of {args[0]} is not allowed")
        elif event in BLOCKED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        elif event == "open":
            path, mode, flags = (list(args) + [None, None])[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            if (writing and not inside(path)) or not proc_ok(path):
                raise PermissionError(f"sandbox: opening {path!r} is not allowed")
        elif event in PATH_EVENTS:
            for arg in args[:2]:
                if isinstance(arg, (str, bytes, os.PathLike)) and not inside(arg):
                    raise PermissionError(f"sandbox: {event} outside the working directory is not allowed")

    return hook


def set_limits(spec):
    def lim(res, value):
        try:
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError):
            soft, hard = resource.getrlimit(res)
            resource.setrlimit(res, (min(value, hard) if hard != resource.RLIM_INFINITY else value, hard))

    lim(resource.RLIMIT_AS, spec["memory_bytes"])
    lim(resource.RLIMIT_CPU, spec["cpu_total_s"])
    lim(resource.RLIMIT_FSIZE, spec["max_file_bytes"])
    lim(resource.RLIMIT_NOFILE, spec["max_open_files"])
    lim(resource.RLIMIT_NPROC, spec["max_processes"])
    lim(resource.RLIMIT_CORE, 0)


def drop_privileges(uid):
    if os.getuid() == 0 and uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def cpu_time():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    with open("solution.py", encoding="utf-8") as f:
        code = f.read()
    inputs = []
    if spec["mode"] == "functional":
        for i in range(spec["n_tests"]):
            with open(f"in_{i}", encoding="utf-8") as f:
                inputs.append(f.read())
    ctl = spec["ctl_fd"]
    os.set_inheritable(ctl, False)
    set_limits(spec)
    drop_privileges(spec["drop_uid"])
    header = compile(IMPORT_HEADER, "<header>", "exec")
    exec(header, {"__builtins__": builtins})  # import the header's modules before the hook and the program

    def namespace(name):
        ns = {"__name__": name, "__builtins__": builtins}
        exec(header, ns)  # binds sys.stdin/stdout as they are now (``from sys import *``)
        return ns

    real_stdout, real_stdin = sys.stdout, sys.stdin

    def send(line):
        os.write(ctl, (line + "\n").encode("utf-8"))

    sys.addaudithook(make_audit_hook(os.getcwd(), os.getpid()))
    try:
        compiled = compile(code, "solution.py", "exec")
    except BaseException as exc:  # syntax error: every test fails the same way
        send("S 0")
        send("D 0 " + json.dumps({"status": "error", "error": f"{type(exc).__name__}: {exc}", "cpu": 0.0}))
        return
    func_namespace = None
    for i in range(spec["n_tests"]):
        send(f"S {i}")
        start = cpu_time()
        report = {"status": "ok", "error": ""}
        out = open(f"out_{i}", "w", encoding="utf-8")
        os.dup2(out.fileno(), 1)
        sys.stdout = out
        try:
            if spec["mode"] == "stdin":
                sys.stdin = open(f"in_{i}", encoding="utf-8")
                os.dup2(sys.stdin.fileno(), 0)
                try:
                    exec(compiled, namespace("__main__"))
                except SystemExit:
                    pass
            else:
                if func_namespace is None:
                    func_namespace = namespace("solution")
                    exec(compiled, func_namespace)
                args = [json.loads(line) for line in inputs[i].split("\n")]
                name = spec["func_name"]
                target = func_namespace["Solution"]() if "Solution" in func_namespace else func_namespace
                fn = getattr(target, name) if not isinstance(target, dict) else target[name]
                value = fn(*args)
                report["result"] = json.dumps(list(value) if isinstance(value, tuple) else value)
        except BaseException as exc:  # the program's failure is this test's result
            report = {"status": "error", "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        finally:
            try:
                sys.stdout.flush()
            except BaseException:
                pass
            if sys.stdin is not real_stdin:
                sys.stdin.close()
            sys.stdout, sys.stdin = real_stdout, real_stdin
            out.close()
        report["cpu"] = cpu_time() - start
        send(f"D {i} " + json.dumps(report))
        if report["status"] != "ok":
            return


if __name__ == "__main__":
    main()
    os._exit(0)
