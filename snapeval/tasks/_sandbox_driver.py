"""Child side of :mod:`snapeval.tasks.sandbox` (run as a script: ``python -I -S -B _sandbox_driver.py SPEC``).

Standard library only, no snapeval imports: it runs under ``python -I -S``, possibly under another interpreter, as
PID 1 of fresh mount, PID, network, IPC and UTS namespaces (``unshare``). Order matters:

1. read the spec, the program and the test inputs from the harness's private (root-only) run directory;
2. build a new root and pivot into it (:func:`enter_new_root`): a size-limited tmpfs holding only the interpreter's
   tree and the system libraries it loads (bind mounts, read-only, no setuid, no devices), ``/dev/null``,
   ``/dev/zero``, ``/dev/urandom``, a new ``/proc`` of this PID namespace, and two private size-limited tmpfs
   ``/work`` (the working directory: inputs, outputs) and ``/tmp``. The old root is detached: no path, socket or
   file of the host (benchmark data, checkout, virtual environment, other runs) exists any more;
3. resource limits, then the privilege drop to ``nobody`` (as root), then ``no_new_privs`` and the parent-death
   signal re-armed (a credential change clears it): if the harness's ``unshare`` dies, this process dies, and as
   PID 1 its death kills every process of the namespace;
4. the official LiveCodeBench import header, the audit hook (a convenience that stops Python-level misuse early
   with clear errors; the layers above hold without it), and only then the untrusted program.

``SPEC --probe`` performs steps 1-3 and exits 0: how the harness checks that isolation works here.

Control protocol on the inherited pipe ``ctl_fd`` (one line each): ``S <i>`` when test ``i`` starts,
``D <i> <json>`` when it ends (``{"status": "ok"|"error", "error": str, "cpu": s, "result": json-text}``).
"""
import builtins
import ctypes
import json
import os
import resource
import signal
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


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41}
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None):
    enc = (lambda v: None if v is None else v.encode())
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _mount_point(root, path, is_dir):
    target = root + path
    os.makedirs(target if is_dir else os.path.dirname(target), mode=0o755, exist_ok=True)
    if not is_dir and not os.path.exists(target):
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    return target


def bind_readonly(root, path, extra=MS_NOSUID | MS_NODEV):
    """Bind ``path`` (a file or a directory tree) at the same place under ``root``, read-only. A symlink (such as
    ``/lib -> usr/lib`` on merged-/usr systems) is recreated as the same symlink."""
    if os.path.islink(path):
        os.makedirs(os.path.dirname(root + path), mode=0o755, exist_ok=True)
        if not os.path.lexists(root + path):
            os.symlink(os.readlink(path), root + path)
        return
    target = _mount_point(root, path, os.path.isdir(path))
    mount(path, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | extra)


def enter_new_root(spec):
    """Pivot into a new root holding only what the interpreter needs (see the module docstring)."""
    root = spec["root_dir"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    mount("tmpfs", root, "tmpfs", MS_NOSUID, "size=16m,mode=755")
    for path in spec["ro_paths"]:
        if os.path.lexists(path):
            bind_readonly(root, path)
    for dev in ("null", "zero", "urandom", "random"):
        target = _mount_point(root, "/dev/" + dev, False)
        mount("/dev/" + dev, target, None, MS_BIND)
        mount(None, target, None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC | (0 if dev == "null" else MS_RDONLY))
    proc = _mount_point(root, "/proc", True)
    mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    size = f"size={int(spec['disk_bytes'])},nr_inodes=4096"
    for path, mode in (("/work", "0755"), ("/tmp", "1777")):
        mount("tmpfs", _mount_point(root, path, True), "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode={mode}")
    os.chdir(root)
    os.makedirs(".oldroot", exist_ok=True)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"pivot_root: unknown machine {os.uname().machine}")
    _check(_libc.syscall(number, b".", b".oldroot"), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.oldroot", MNT_DETACH), "umount old root")
    os.rmdir("/.oldroot")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)  # the root tmpfs itself: read-only
    os.chdir("/work")


def drop_privileges(uid):
    if os.getuid() == 0 and uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")  # cleared by setuid
    if os.getppid() == 0 and os.getpid() != 1:  # the parent died before the signal was armed
        os._exit(1)


def cpu_time():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    run_dir = os.path.dirname(os.path.abspath(sys.argv[1]))
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    with open(os.path.join(run_dir, "solution.py"), encoding="utf-8") as f:
        code = f.read()
    inputs = []
    for i in range(spec["n_tests"]):
        with open(os.path.join(run_dir, f"in_{i}"), encoding="utf-8") as f:
            inputs.append(f.read())
    ctl, ack = spec["ctl_fd"], spec["ack_fd"]
    os.set_inheritable(ctl, False)
    os.set_inheritable(ack, False)
    if spec["isolate_fs"]:
        enter_new_root(spec)
        for i, text in enumerate(inputs):
            with open(f"in_{i}", "w", encoding="utf-8") as f:
                f.write(text)
        if spec["drop_uid"] is not None:
            os.chown("/work", spec["drop_uid"], spec["drop_uid"])
            os.chown("/tmp", spec["drop_uid"], spec["drop_uid"])
    set_limits(spec)
    drop_privileges(spec["drop_uid"])
    if "--probe" in sys.argv:
        import fractions  # noqa: F401  (the stdlib must be readable after the drop)

        os.write(ctl, b"P ok\n")
        return
    header = compile(IMPORT_HEADER, "<header>", "exec")
    exec(header, {"__builtins__": builtins})  # import the header's modules before the hook and the program

    def namespace(name):
        ns = {"__name__": name, "__builtins__": builtins}
        exec(header, ns)  # binds sys.stdin/stdout as they are now (``from sys import *``)
        return ns

    real_stdout, real_stdin = sys.stdout, sys.stdin

    def send(line):
        os.write(ctl, (line + "\n").encode("utf-8"))
        if line.startswith("D "):  # lockstep: wait until the harness has read this test's output
            if not os.read(ack, 1):
                os._exit(0)

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
