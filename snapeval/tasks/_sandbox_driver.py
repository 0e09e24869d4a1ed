"""Child side of :mod:`snapeval.tasks.sandbox` (run as a script: ``python -I -S -B _sandbox_driver.py SPEC``).

Standard library only, no snapeval imports: it runs under ``python -I -S``, possibly under another interpreter, as
PID 1 of fresh mount, PID, network, IPC and UTS namespaces (``unshare``). Order matters:

1. read the spec, the program and the test inputs from the harness's private (root-only) run directory;
2. build a new root and pivot into it (:func:`enter_new_root`): a tmpfs holding only the paths the harness lists
   (the interpreter binary, its standard library, the directories of the shared libraries it loads; bind mounts,
   read-only, ``nosuid``, ``nodev``, symlinks on the way recreated), ``site-packages`` hidden, ``/dev/null``,
   ``/dev/zero``, ``/dev/urandom``, a new ``/proc`` of this PID namespace, and two private size-limited ``noexec``
   tmpfs ``/work`` (the working directory: inputs, outputs) and ``/tmp``. The old root is detached: no path, socket
   or file of the host (benchmark data, checkout, virtual environment, other runs) exists any more;
3. the official import header's modules, resource limits, then the privilege drop to a uid of the run's own (as
   root), every capability dropped, ``no_new_privs`` and the parent-death signal re-armed (a credential change clears
   it): if ``unshare`` dies, this process dies, and as PID 1 its death kills every process of the namespace; then the
   seccomp filter (:func:`seccomp_program`);
4. the audit hook (a convenience that stops Python-level misuse early with clear errors; the layers above hold
   without it), and only then the untrusted program.

``SPEC --probe`` performs steps 1-3 and exits 0: how the harness checks that isolation works here.

Control protocol on the inherited pipe ``ctl_fd`` (one line each): ``S <i>`` when test ``i`` starts,
``D <i> <json>`` when it ends (``{"status": "ok"|"error", "error": str, "limit": "file size" (optional),
"result": json-text}``). The harness measures time and CPU itself: nothing here reports them.
"""
import builtins
import ctypes
import errno
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
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 38, 22, 2
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


def expose(root, path, bound, depth=0):
    """Show the host's ``path`` (a file or a directory tree) at the same place under ``root``, read-only, ``nosuid``,
    ``nodev``. Symlinks on the way (``/lib -> usr/lib`` on merged-/usr systems) are recreated as the same symlinks
    and followed, so that every name the dynamic loader or the interpreter uses resolves as on the host; ``bound``
    collects the link-free paths bound so far (a path inside one of them is already visible)."""
    if depth > 16:
        raise OSError(f"expose {path}: too many levels of symbolic links")
    parts = [p for p in path.split("/") if p]
    current = ""
    for i, part in enumerate(parts):
        current += "/" + part
        if any(current == b or current.startswith(b + "/") for b in bound):
            return
        if os.path.islink(current):
            link = os.readlink(current)
            if not os.path.lexists(root + current):
                os.makedirs(os.path.dirname(root + current), mode=0o755, exist_ok=True)
                os.symlink(link, root + current)
            rest = "".join("/" + p for p in parts[i + 1:])
            expose(root, os.path.normpath(os.path.join(os.path.dirname(current), link)) + rest, bound, depth + 1)
            return
    if not os.path.exists(current):
        return
    target = _mount_point(root, current, os.path.isdir(current))
    mount(current, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    bound.append(current)


def enter_new_root(spec):
    """Pivot into a new root holding only what the interpreter needs (see the module docstring)."""
    root = spec["root_dir"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    bound = []
    for path in spec["expose"]:
        expose(root, path, bound)
    for path in spec["hide"]:  # site-packages inside the interpreter's tree: an empty read-only directory
        if os.path.isdir(root + path) and not os.path.islink(root + path):
            mount("tmpfs", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "size=4k,nr_inodes=2,mode=555")
    for dev in ("null", "zero", "urandom", "random"):
        target = _mount_point(root, "/dev/" + dev, False)
        mount("/dev/" + dev, target, None, MS_BIND)
        mount(None, target, None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC | (0 if dev == "null" else MS_RDONLY))
    proc = _mount_point(root, "/proc", True)
    mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    size = f"size={int(spec['disk_bytes'])},nr_inodes=4096"
    for path, mode in (("/work", "0755"), ("/tmp", "1777")):
        mount("tmpfs", _mount_point(root, path, True), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              f"{size},mode={mode}")
    os.chdir(root)
    os.makedirs(".oldroot", exist_ok=True)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"pivot_root: unknown machine {os.uname().machine}")
    _check(_libc.syscall(number, b".", b".oldroot"), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.oldroot", MNT_DETACH), "umount old root")
    os.rmdir("/.oldroot")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)  # the root tmpfs: read-only
    os.chdir("/work")


def run_uid(spec):
    """The uid this run drops to: ``uid_base`` plus the driver's PID as the host sees it (read from the host's
    ``/proc`` before the new root hides it), so that no two live runs share a uid (``RLIMIT_NPROC`` counts per uid;
    signals and ``ptrace`` need the same uid). Without a new root: ``fallback_uid`` (``nobody`` as root, else
    ``None``: the harness is not root and the run is already unprivileged)."""
    if spec.get("uid_base") is None:
        return spec["fallback_uid"]
    try:
        return int(spec["uid_base"]) + int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return int(spec["fallback_uid"])


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges(uid):
    """Become ``uid`` (as root) and give up every capability (what is left of "root" in a user namespace when the
    harness is not root), then ``no_new_privs`` and the parent-death signal, re-armed (a credential change clears
    it)."""
    if os.getuid() == 0 and uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    _check(_libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)()), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")  # cleared by setuid
    if os.getppid() == 0 and os.getpid() != 1:  # the parent died before the signal was armed
        os._exit(1)


# --------------------------------------------------------------------------------------------- seccomp filter
# Syscalls the program never needs, refused with EPERM: new processes (threads are allowed: ``clone`` with
# CLONE_THREAD and no namespace flag), exec, namespaces and mounts, ptrace and cross-process memory access, kernel keyrings, bpf,
# userfaultfd, perf, io_uring (its operations bypass this filter), module and kexec loading, the kernel log, file
# handles. ``clone3`` answers
# ENOSYS so that the C library falls back to ``clone``, whose flags the filter can read. Any other architecture
# (x32, i386 through ``int 0x80``) kills the process.
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7, "arm64": 0xC00000B7}
_COMMON = {"clone": (56, 220), "clone3": (435, 435), "execve": (59, 221), "execveat": (322, 281),
           "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
           "pivot_root": (155, 41), "chroot": (161, 51), "ptrace": (101, 117), "process_vm_readv": (310, 270),
           "process_vm_writev": (311, 271), "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
           "bpf": (321, 280), "userfaultfd": (323, 282), "perf_event_open": (298, 241), "kexec_load": (246, 104),
           "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
           "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
           "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
           "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442), "pidfd_getfd": (438, 438),
           "process_madvise": (440, 440), "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89),
           "quotactl": (179, 60), "sethostname": (170, 161), "setdomainname": (171, 162), "syslog": (103, 116),
           "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264)}
_X86_ONLY = {"fork": 57, "vfork": 58}
CLONE_THREAD = 0x00010000
CLONE_NAMESPACES = 0x7E020080  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
EPERM, ENOSYS = 1, 38


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program(machine):
    """The BPF program as ``(code, jt, jf, k)`` tuples, or ``None`` for an unknown architecture."""
    arch = _AUDIT_ARCH.get(machine)
    if arch is None:
        return None
    column = 0 if machine == "x86_64" else 1
    refused = sorted({nr[column] for name, nr in _COMMON.items() if name not in ("clone", "clone3")}
                     | (set(_X86_ONLY.values()) if machine == "x86_64" else set()))
    ld, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06
    allow, eperm, enosys, kill = 0x7FFF0000, 0x00050000 | EPERM, 0x00050000 | ENOSYS, 0x80000000
    body = [(ld, 0, 0, 0)]  # nr
    if machine == "x86_64":
        body.append((jge, "KILL", 0, 0x40000000))  # x32 system calls
    body.append((jeq, "CLONE", 0, _COMMON["clone"][column]))
    body.append((jeq, "ENOSYS", 0, _COMMON["clone3"][column]))
    for nr in refused:
        body.append((jeq, "EPERM", 0, nr))
    body.append((ret, 0, 0, allow))
    labels = {"CLONE": len(body)}
    body += [(ld, 0, 0, 16), (jset, "EPERM", 0, CLONE_NAMESPACES),  # args[0] (flags), low 32 bits (little endian)
             (jset, "ALLOW", "EPERM", CLONE_THREAD)]
    for name, value in (("ALLOW", allow), ("EPERM", eperm), ("ENOSYS", enosys), ("KILL", kill)):
        labels[name] = len(body)
        body.append((ret, 0, 0, value))
    head = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill)]  # seccomp_data.arch
    program = head[:]
    for at, (code, jt, jf, k) in enumerate(body, start=len(head)):
        def offset(target):
            return target if isinstance(target, int) else labels[target] + len(head) - at - 1
        program.append((code, offset(jt), offset(jf), k))
    return program


def install_seccomp():
    """Install the filter (``no_new_privs`` must be set); False on an architecture it does not know or a kernel
    without seccomp filters."""
    program = seccomp_program(os.uname().machine)
    if program is None:
        return False
    filters = (_SockFilter * len(program))(*[_SockFilter(*ins) for ins in program])
    prog = _SockFprog(len(program), filters)
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        if ctypes.get_errno() == 22:  # EINVAL: a kernel without seccomp filters (the probe says so)
            return False
        _check(-1, "seccomp")
    return True


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
    uid = run_uid(spec)
    if spec["isolate_fs"]:
        enter_new_root(spec)
        if uid is not None:  # fresh, empty file systems: nothing in them can be a planted link yet
            os.chown("/work", uid, uid)
            os.chown("/tmp", uid, uid)
    for i, text in enumerate(inputs):  # into the working directory, which only this run can see
        fd = os.open(f"in_{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
    header = compile(IMPORT_HEADER, "<header>", "exec")
    if "--probe" not in sys.argv:  # import the header's modules before the drop (weaker isolation: an interpreter
        exec(header, {"__builtins__": builtins})  # under /root is unreadable to nobody), the hook and the program
    set_limits(spec)
    drop_privileges(uid)
    filtered = install_seccomp() if spec["seccomp"] else False
    if "--probe" in sys.argv:
        import fractions  # noqa: F401  (the stdlib must be readable after the drop)
        import decimal  # noqa: F401  (and its extension modules loadable)

        os.write(ctl, b"P ok seccomp\n" if filtered else b"P ok\n")
        return

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
        send("D 0 " + json.dumps({"status": "error", "error": f"{type(exc).__name__}: {exc}"}))
        return
    func_namespace = None
    for i in range(spec["n_tests"]):
        send(f"S {i}")
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
            if isinstance(exc, OSError) and exc.errno == errno.EFBIG:  # RLIMIT_FSIZE (Python ignores SIGXFSZ)
                report["limit"] = "file size"
        finally:
            try:
                sys.stdout.flush()
            except BaseException:
                pass
            if sys.stdin is not real_stdin:
                sys.stdin.close()
            sys.stdout, sys.stdin = real_stdout, real_stdin
            out.close()
        send(f"D {i} " + json.dumps(report))
        if report["status"] != "ok":
            return


if __name__ == "__main__":
    main()
    os._exit(0)
