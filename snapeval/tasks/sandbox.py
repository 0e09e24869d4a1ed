"""Run untrusted programs (LiveCodeBench solutions) against their tests, contained by the kernel.

One child process per program runs all of its tests in order and stops at the first failure (the official
LiveCodeBench rule). The layers, each of which holds without the others (the red-team tests switch the audit hook
off first, and check the PID namespace with the seccomp filter off):

- **Namespaces** (``setpriv --pdeathsig KILL unshare --mount --pid --net --ipc --uts --fork --kill-child``; through a
  user namespace when the harness is not root): the child is PID 1 of its own PID namespace (when it dies the kernel
  kills every process of the run), has no network (a down loopback; abstract Unix sockets are per network namespace)
  and its own mount table; ``unshare`` dies with the harness thread that started it, and the child with ``unshare``.
- **A new root** (``pivot_root`` into a tmpfs, the old root detached; see ``_sandbox_driver.py``): read-only, only
  the interpreter binary, its standard library and extension modules, the directories of the shared libraries they
  load (found with ``ldd`` once per process) and the loader's cache; the base interpreter's ``site-packages`` is
  hidden under an empty read-only tmpfs. Then ``/dev/{null,zero,urandom,random}``, a ``/proc`` of the run's own PID
  namespace, and private tmpfs ``/work`` (the working directory: inputs, outputs) and ``/tmp``, capped at
  ``disk_mb`` and 4,096 files each, ``noexec``. The benchmark's data, the checkout, the virtual environment, home
  directories, the host's ``/tmp``, host Unix sockets and every other run's files do not exist for it.
- **Privileges**: as root (CI) the child becomes a uid of its own (``SANDBOX_UID_BASE`` + its host PID: no two live
  runs share one, so ``RLIMIT_NPROC`` and signals are per run) after building its root, drops every capability, sets
  ``no_new_privs`` and re-arms the parent-death signal.
- **A seccomp filter**: no new process (threads only), no exec, no namespace, mount, ``chroot``, ``ptrace``,
  ``bpf``, ``io_uring``, keyring, kernel log or file-handle call (x86-64 and arm64; elsewhere it is reported off).
  One process per run also makes the CPU time exact.
- **Resource limits** (``setrlimit``): address space, total CPU, file size, open files, threads, no core dumps. Per
  test the harness enforces the wall-clock limit and measures CPU time itself (``/proc/<pid>/stat`` of the run's PID
  1, all threads; without the filter, plus every live process of the namespace), never trusting the child.
- **Audit hook** (PEP 578): a convenience that refuses sockets, fork/exec and writes outside ``/work`` with clear
  errors; a program can switch it off, and nothing above depends on it.

The harness keeps each run's inputs in a root-only directory the child reads before it pivots, and reads outputs
through an open ``/proc/<pid>`` directory (so a reused PID can never point it at another run) into ``root/work``:
without following links, without blocking, only regular files, at most the cap. Anything odd is that program's
``runtime_error``, never the run's. After a run it checks, holding the namespace open so that its identity cannot be
reused, that no process of the run's PID namespace is left. Where the mount namespace cannot be built, executing
generated code is refused with one line naming what is missing, unless the user accepts weaker isolation
(``SNAPEVAL_ALLOW_UNSAFE_CODE=1``, lm-eval's ``--confirm_run_unsafe_code`` convention: that flag itself never reaches
a task's code).

Programs of different problems run in parallel (:func:`run_programs`, one thread per worker, each waiting on its
own child).
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from snapeval.errors import SnapevalError, check_choice

DRIVER = Path(__file__).with_name("_sandbox_driver.py")
NOBODY_UID = 65534
TEST_TYPES = ("stdin", "functional")
STATUSES = ("passed", "wrong_answer", "runtime_error", "time_limit", "output_limit", "sandbox_error")
_STARTUP_S = 10.0  # interpreter start + import header, before the first test starts


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one program run. ``timeout_s`` is both the wall-clock and the CPU limit of each test."""

    timeout_s: float = 6.0
    memory_mb: int = 2048
    output_bytes: int = 32 << 20
    max_open_files: int = 64
    max_processes: int = 64
    disk_mb: int = 64  # each of the run's private /work and /tmp (RAM-backed tmpfs)

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "output_bytes", "max_open_files", "max_processes", "disk_mb"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise SnapevalError(f"{name}={value!r} is not allowed; it must be a positive number")


@dataclass(frozen=True)
class TestCase:
    """One test: ``input`` (stdin text, or one JSON value per line for ``functional``) and expected ``output``."""

    __test__ = False  # not a pytest class

    input: str
    output: str
    testtype: str

    def __post_init__(self) -> None:
        check_choice("testtype", self.testtype, TEST_TYPES)


@dataclass
class TestOutcome:
    index: int
    status: str
    detail: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0


@dataclass
class ProgramResult:
    """``passed`` only when every test passed. ``outcomes`` stops at the first failing test."""

    status: str
    outcomes: list[TestOutcome] = field(default_factory=list)
    detail: str = ""
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass(frozen=True)
class ProgramJob:
    code: str
    tests: Sequence[TestCase]
    func_name: str | None = None


# ----------------------------------------------------------------------------------------------- isolation probe

UNSAFE_ENV = "SNAPEVAL_ALLOW_UNSAFE_CODE"


@dataclass(frozen=True)
class Isolation:
    """What this machine gives: the command prefix (``setpriv`` + ``unshare``), whether the child builds its own root
    (and from which paths), whether it drops privileges (to a uid of its own per run), whether the seccomp filter is
    in place, the interpreter, and (when the new root cannot be built) what is missing."""

    prefix: tuple[str, ...]
    isolate_fs: bool
    drop_uid: int | None
    python: str
    missing: str = ""
    expose: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    seccomp: bool = False

    def describe(self) -> dict[str, Any]:
        return {
            "namespaces": "mount+pid+net+ipc+uts" if self.isolate_fs else ("net+pid" if self.prefix else "none"),
            "new_root": self.isolate_fs,
            "visible_read_only": list(self.expose) if self.isolate_fs else "the whole file system",
            "hidden_inside_them": list(self.hide),
            "user_namespace": "--map-root-user" in self.prefix,
            "runs_as": ("a uid of its own per run" if self.drop_uid is not None and self.isolate_fs
                        else "nobody" if self.drop_uid is not None else "the harness user"),
            "seccomp": self.seccomp,
            "python": self.python,
            "audit_hook": True,
            "rlimits": ["AS", "CPU", "FSIZE", "NOFILE", "NPROC", "CORE"],
            "missing": self.missing,
        }


_TREE_SCRIPT = """
import json, os, sys, sysconfig
paths = sysconfig.get_paths()
print(json.dumps({"executable": os.path.realpath(sys.executable), "stdlib": paths["stdlib"],
                  "platstdlib": paths["platstdlib"], "purelib": paths["purelib"], "platlib": paths["platlib"],
                  "dynload": [p for p in sys.path if p.endswith("lib-dynload")]}))
"""
_FALLBACK_LIB_DIRS = ("/lib", "/lib64", "/lib32", "/usr/lib64", "/usr/lib32", "/usr/lib/x86_64-linux-gnu",
                      "/usr/lib/aarch64-linux-gnu", "/usr/lib/arm-linux-gnueabihf")


def _shared_libraries(files: Sequence[str]) -> list[str] | None:
    """Every shared library ``files`` load, as the dynamic loader names them (``ldd``); ``None`` without ``ldd``."""
    ldd = shutil.which("ldd")
    if not ldd or not files:
        return None
    try:
        out = subprocess.run([ldd, *files], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    libs = []
    for line in out.splitlines():
        for token in line.replace("=>", " ").split():
            if token.startswith("/") and not token.endswith(":"):
                libs.append(token)
    return libs


def _interpreter_tree(python: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(expose, hide)``: what a run's new root shows of the host, read-only (the interpreter binary, its standard
    library and extension modules, the directories of the shared libraries they load, the loader's cache), and the
    directories inside those that it hides (``site-packages``: third-party code of the base interpreter)."""
    try:
        info = json.loads(subprocess.run([python, "-I", "-S", "-c", _TREE_SCRIPT], stdin=subprocess.DEVNULL,
                                         capture_output=True, text=True, timeout=60, check=True).stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise OSError(f"cannot ask {python} where its standard library is ({exc})") from None
    dynload = [d for d in info["dynload"] if os.path.isdir(d)]
    modules = [str(p) for d in dynload for p in sorted(Path(d).glob("*.so"))]
    libs = _shared_libraries([info["executable"], *modules])
    lib_dirs = ({os.path.dirname(p) for lib in libs for p in (lib, os.path.realpath(lib))} if libs is not None
                else set(_FALLBACK_LIB_DIRS))
    expose = {info["executable"], info["stdlib"], info["platstdlib"], *dynload, *lib_dirs, "/etc/ld.so.cache"}
    expose = sorted((p for p in expose if os.path.lexists(p)), key=lambda p: (p.count("/"), p))
    real_exposed = [os.path.realpath(p) for p in expose]
    hide = set()
    for candidate in (info["purelib"], info["platlib"], *(os.path.join(info[k], n) for k in ("stdlib", "platstdlib")
                                                           for n in ("site-packages", "dist-packages"))):
        real = os.path.realpath(candidate)
        if os.path.isdir(real) and any(real == e or real.startswith(e + "/") for e in real_exposed):
            hide.add(real)
    return tuple(expose), tuple(sorted(hide))


def _start(prefix: Sequence[str], python: str, run_dir: str, spec: dict, *, extra: Sequence[str] = ()):
    """Write the spec and start the child; returns ``(process, control pipe read end, acknowledgement pipe write
    end)``. The child reports ``S i`` / ``D i`` on the control pipe and, after each ``D``, waits for one byte on the
    acknowledgement pipe: its outputs stay as they were until the harness has graded them."""
    read_fd, write_fd = os.pipe()
    ack_read, ack_write = os.pipe()
    spec = {**spec, "ctl_fd": write_fd, "ack_fd": ack_read}
    Path(run_dir, "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    work = "/work" if spec["isolate_fs"] else str(Path(run_dir, "work"))
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": work,
           "TMPDIR": "/tmp" if spec["isolate_fs"] else work}
    cwd = "/" if spec["isolate_fs"] else work
    cmd = [*prefix, python, "-I", "-S", "-B", str(DRIVER), str(Path(run_dir, "spec.json")), *extra]
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=(write_fd, ack_read), start_new_session=True,
                                close_fds=True)
    finally:
        os.close(write_fd)
        os.close(ack_read)
    return proc, read_fd, ack_write


def _probe_new_root(prefix: tuple[str, ...], python: str, drop_uid: int | None, expose: Sequence[str],
                    hide: Sequence[str]) -> tuple[str, bool]:
    """Build a run's root once with the probe flag: ``('', seccomp filter installed)`` when it worked, else
    ``(what failed, False)``."""
    run_dir = tempfile.mkdtemp(prefix="snapeval-sandbox-probe-")
    try:
        os.mkdir(Path(run_dir, "root"))
        Path(run_dir, "solution.py").write_text("", encoding="utf-8")
        spec = {"mode": "stdin", "n_tests": 0, "isolate_fs": True, "root_dir": str(Path(run_dir, "root")),
                "expose": list(expose), "hide": list(hide), "disk_bytes": 1 << 20, "seccomp": True,
                **_uid_spec(drop_uid, True), "memory_bytes": 1 << 30, "cpu_total_s": 10, "max_file_bytes": 1 << 20,
                "max_open_files": 64, "max_processes": 64}
        proc, fd, ack = _start(prefix, python, run_dir, spec, extra=("--probe",))
        try:
            proc.wait(timeout=20)
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            answer = os.read(fd, 64) if poller.poll(0) else b""
        finally:
            os.close(fd)
            os.close(ack)
            _kill(proc)
        if not answer.startswith(b"P ok"):
            return "a private mount namespace with a new root (mount, pivot_root)", False
        return "", answer.startswith(b"P ok seccomp")
    except (OSError, subprocess.SubprocessError) as exc:
        return f"a private mount namespace with a new root ({exc})", False
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


SANDBOX_UID_BASE = 0x58000000  # + the driver's host PID: a uid of its own for every live run (no account uses it)


def _uid_spec(drop_uid: int | None, isolate_fs: bool) -> dict[str, Any]:
    """How the child picks its uid: per run (new root, as root) or the fixed ``drop_uid`` (weaker isolation)."""
    return {"uid_base": SANDBOX_UID_BASE if drop_uid is not None and isolate_fs else None, "fallback_uid": drop_uid}


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Probe once per process which layers work here (no root assumed; CI is root)."""
    python = os.path.realpath(sys.executable)  # the real interpreter: no virtual environment inside the sandbox
    unshare = shutil.which("unshare")
    if not unshare:
        return Isolation((), False, None, python, "the unshare command (util-linux)")
    root = os.geteuid() == 0
    setpriv = shutil.which("setpriv")  # unshare dies with the harness thread that started it (and so the run)
    guard = (setpriv, "--pdeathsig", "KILL", "--") if setpriv and _probe([setpriv, "--pdeathsig", "KILL", "true"]) \
        else ()
    base = (unshare, "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child")
    prefix = guard + (base if root else base[:1] + ("--map-root-user",) + base[1:])
    drop_uid = NOBODY_UID if root else None
    try:
        expose, hide = _interpreter_tree(python)
        missing, seccomp = _probe_new_root(prefix, python, drop_uid, expose, hide)
    except OSError as exc:
        expose, hide, missing, seccomp = (), (), f"a private mount namespace with a new root ({exc})", False
    if not missing:
        return Isolation(prefix, True, drop_uid, python, expose=expose, hide=hide, seccomp=seccomp)
    weak = (unshare, "--net", "--pid", "--fork", "--kill-child", "--mount-proc")
    weak = guard + (weak if root else weak[:1] + ("--map-root-user",) + weak[1:])
    if not _probe(weak + ("true",)):
        weak = ()
    return Isolation(weak, False, drop_uid if root else None, python, missing,
                     seccomp=os.uname().machine in ("x86_64", "aarch64"))


def require_isolation(allow_unsafe: bool | None = None) -> Isolation:
    """The isolation of this machine, or a one-line :class:`SnapevalError` when generated code cannot be contained
    and the user has not accepted weaker isolation (``SNAPEVAL_ALLOW_UNSAFE_CODE=1`` or ``allow_unsafe``)."""
    iso = isolation()
    if iso.isolate_fs:
        return iso
    if allow_unsafe is None:
        allow_unsafe = os.environ.get(UNSAFE_ENV, "") in ("1", "true", "yes")
    if not allow_unsafe:
        raise SnapevalError(
            f"refusing to execute generated code: this machine lacks {iso.missing}; run as root or where user "
            f"namespaces are allowed, or accept weaker isolation with {UNSAFE_ENV}=1 (lm-eval: --confirm_run_unsafe_code)")
    return iso


def _probe(cmd: Sequence[str], **kw: Any) -> bool:
    try:
        return subprocess.run(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=20, **kw).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


# ------------------------------------------------------------------------------------------------------ grading

def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(tok) for tok in line.split()]
    except (InvalidOperation, ValueError):
        return None


def stdout_matches(got: str, expected: str) -> bool:
    """Official stdin grading: same number of stripped lines; each line equal, or equal as lists of decimals."""
    a, b = _stripped_lines(got), _stripped_lines(expected)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        dx, dy = _decimals(x), _decimals(y)
        try:
            if dx is None or dy is None or dx != dy:
                return False
        except ArithmeticError:  # a signaling NaN cannot even be compared: not equal
            return False
    return True


def functional_matches(result_json: str, expected: str) -> bool:
    """Official call-based grading: the returned value (tuples as lists) equals the expected JSON value (a value
    too deeply nested to parse is simply wrong)."""
    try:
        return json.loads(result_json) == json.loads(expected)
    except (ValueError, TypeError, RecursionError):
        return False


# ---------------------------------------------------------------------------------------------------- execution

def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()


def _death_status(returncode: int | None) -> tuple[str, str]:
    sig = -returncode if returncode is not None and returncode < 0 else (
        returncode - 128 if returncode is not None and returncode > 128 else None)
    if sig == signal.SIGXCPU:
        return "time_limit", "CPU time limit"
    if sig == signal.SIGXFSZ:
        return "output_limit", "file size limit"
    return "runtime_error", f"the program ended the sandbox (exit status {returncode})"


def _child_pid(proc: subprocess.Popen) -> int | None:
    """The run's PID 1 (``unshare --fork``'s child), from the host's view."""
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        return int(children[0]) if children else None
    except (OSError, ValueError):
        return None


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(proc_fd: int | None) -> float:
    """CPU time of the process whose ``/proc/<pid>`` directory ``proc_fd`` holds, its threads and its reaped
    children (utime + stime + cutime + cstime), read by the harness; 0.0 once the process is gone."""
    if proc_fd is None:
        return 0.0
    try:
        fd = os.open("stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
        try:
            text = os.read(fd, 4096).decode("ascii", "replace")
        finally:
            os.close(fd)
        return sum(int(x) for x in text.rsplit(")", 1)[1].split()[11:15]) / _TICK
    except (OSError, ValueError, IndexError):
        return 0.0


def _cpu_of_pid(pid: int) -> float:
    try:
        fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return 0.0
    try:
        return _cpu_seconds(fd)
    finally:
        os.close(fd)


def _namespace_members(namespace: tuple[int, int]) -> list[int]:
    """Host PIDs of the processes in the PID namespace with this ``(st_dev, st_ino)``."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                st = os.stat(f"/proc/{entry}/ns/pid")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == namespace:
                members.append(int(entry))
    return members


def _reap_namespace(namespace: tuple[int, int] | None, grace_s: float = 2.0) -> int:
    """Check that the run's PID namespace is empty once its PID 1 is dead (the kernel kills the rest); whatever is
    still there after ``grace_s`` is killed here and counted (0 after every run so far: the check is the point).
    The caller holds the namespace open, so its inode number cannot be reused by another run meanwhile."""
    if namespace is None:
        return 0
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _namespace_members(namespace):
            return 0
        time.sleep(0.01)
    left = _namespace_members(namespace)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(left)


class _Run:
    """One program's child: where its outputs are, what CPU it used. The run's PID 1 is pinned by an open
    ``/proc/<pid>`` directory and its PID namespace by an open ``ns/pid``: once the process is gone, reads through
    them fail instead of reaching a process that reused the PID (another run's, say)."""

    def __init__(self, proc: subprocess.Popen, work_dir: str, isolate_fs: bool, ack_fd: int, one_process: bool):
        self.proc, self.work_dir, self.isolate_fs, self.ack_fd = proc, work_dir, isolate_fs, ack_fd
        self.one_process = one_process  # the seccomp filter refuses new processes: all CPU is PID 1's
        self.pid: int | None = None
        self.proc_fd: int | None = None
        self.ns_fd: int | None = None
        self.namespace: tuple[int, int] | None = None

    def attach(self) -> None:
        if self.pid is not None:
            return
        pid = _child_pid(self.proc)
        if pid is None:
            return
        try:
            self.proc_fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            if _child_pid(self.proc) != pid:  # it died and the PID went elsewhere between the two reads
                raise ProcessLookupError(pid)
            self.ns_fd = os.open("ns/pid", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.proc_fd)
            st = os.fstat(self.ns_fd)
            self.namespace, self.pid = (st.st_dev, st.st_ino), pid
        except OSError:
            self.close()

    def read_output(self, index: int, cap: int) -> bytes:
        """This test's stdout file, read safely (see :func:`read_capped`)."""
        if self.isolate_fs:
            if self.proc_fd is None:
                raise OSError("the run's process is gone")
            return read_capped(f"root/work/out_{index}", cap, dir_fd=self.proc_fd)
        return read_capped(str(Path(self.work_dir, f"out_{index}")), cap)

    def cpu(self) -> float:
        """PID 1's CPU time (threads and reaped children included); without the seccomp filter, plus that of every
        other live process of the run's PID namespace."""
        total = _cpu_seconds(self.proc_fd)
        if not self.one_process and self.namespace is not None:
            total += sum(_cpu_of_pid(p) for p in _namespace_members(self.namespace) if p != self.pid)
        return total

    def next_test(self) -> None:
        """Let the child go on to its next test (it waits after each report)."""
        try:
            os.write(self.ack_fd, b"\n")
        except OSError:  # the child is gone: the control pipe says so next
            pass

    def close(self) -> None:
        for name in ("proc_fd", "ns_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)


def run_program(code: str, tests: Sequence[TestCase], *, func_name: str | None = None,
                limits: SandboxLimits | None = None) -> ProgramResult:
    """Run ``code`` against ``tests`` in a fresh sandbox; never raises for anything the program does (a machine
    that cannot contain it raises :class:`SnapevalError` before anything runs, see :func:`require_isolation`)."""
    limits = limits or SandboxLimits()
    if not tests:
        return ProgramResult("sandbox_error", detail="no tests")
    mode = tests[0].testtype
    if any(t.testtype != mode for t in tests):
        return ProgramResult("sandbox_error", detail="tests mix stdin and functional types")
    if mode == "functional" and not func_name:
        return ProgramResult("sandbox_error", detail="functional tests need func_name")
    iso = require_isolation()
    start = time.perf_counter()
    run_dir = tempfile.mkdtemp(prefix="snapeval-sandbox-")  # 0700, the harness's: the program never sees it
    work_dir = str(Path(run_dir, "work"))  # the working directory without a new root (weaker isolation only)
    proc, read_fd, ack_fd, run = None, -1, -1, None
    result = ProgramResult("sandbox_error", detail="the sandbox did not start")
    try:
        spec = {
            "mode": mode, "func_name": func_name, "n_tests": len(tests), "isolate_fs": iso.isolate_fs,
            "root_dir": str(Path(run_dir, "root")), "expose": list(iso.expose), "hide": list(iso.hide),
            "seccomp": iso.seccomp, "disk_bytes": int(limits.disk_mb) << 20,
            "memory_bytes": int(limits.memory_mb) << 20,
            "cpu_total_s": int(len(tests) * limits.timeout_s + _STARTUP_S) + 1,
            "max_file_bytes": int(limits.output_bytes), "max_open_files": int(limits.max_open_files),
            "max_processes": int(limits.max_processes), **_uid_spec(iso.drop_uid, iso.isolate_fs),
        }
        os.mkdir(Path(run_dir, "root"))
        Path(run_dir, "solution.py").write_text(code, encoding="utf-8")
        for i, t in enumerate(tests):
            Path(run_dir, f"in_{i}").write_text(t.input, encoding="utf-8")
        if not iso.isolate_fs:  # weaker isolation, accepted by the user: an empty directory of the program's own
            os.mkdir(work_dir, 0o700)  # inside the root-only run directory, so it cannot be moved or replaced
            if iso.drop_uid is not None:
                os.chown(work_dir, iso.drop_uid, iso.drop_uid, follow_symlinks=False)  # just made, still empty
        proc, read_fd, ack_fd = _start(iso.prefix, iso.python, run_dir, spec)
        run = _Run(proc, work_dir, iso.isolate_fs, ack_fd, iso.seccomp)
        result = _supervise(run, read_fd, tests, limits)
    except OSError as exc:
        result = ProgramResult("sandbox_error", detail=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a program must never take down the run: it is this program's error
        result = ProgramResult("runtime_error", detail=f"{type(exc).__name__}: {str(exc)[:200]}")
    finally:
        if ack_fd >= 0:  # a driver waiting for the next test exits on its own (and unshare with it)
            os.close(ack_fd)
            ack_fd = -1
        if proc is not None:
            try:
                proc.wait(timeout=0.0 if result.status == "time_limit" else 0.5)
            except subprocess.TimeoutExpired:  # still running the program (a time limit): kill its PID 1 first,
                if run is not None and run.pid is not None:  # so that unshare reaps it, then unshare itself
                    try:
                        os.kill(run.pid, signal.SIGKILL)
                        proc.wait(timeout=2)
                    except (OSError, subprocess.TimeoutExpired):
                        pass
            _kill(proc)
        if run is not None:
            left = _reap_namespace(run.namespace)
            run.close()
            if left:
                result.detail = (result.detail + f"; {left} leftover process(es) killed").lstrip("; ")
        for fd in (read_fd, ack_fd):
            if fd >= 0:
                os.close(fd)
        _remove_run_dir(run_dir)
    result.wall_s = time.perf_counter() - start
    return result


def _remove_run_dir(run_dir: str) -> None:
    """Remove a run directory without following any link inside it (``rmtree`` uses ``dir_fd`` and no-follow)."""
    root = Path(run_dir, "root")
    try:
        os.rmdir(root)  # an unused mount point; still mounted only if the child's namespace leaked (it cannot)
    except OSError:
        pass
    shutil.rmtree(run_dir, ignore_errors=True)


def _supervise(run: _Run, fd: int, tests: Sequence[TestCase], limits: SandboxLimits) -> ProgramResult:
    outcomes: list[TestOutcome] = []
    buf, scanned = bytearray(), 0  # bytes received; how many of them hold no newline (each byte is scanned once)
    current, started, cpu_start = -1, time.perf_counter(), 0.0
    deadline = started + _STARTUP_S
    ctl_cap = int(limits.output_bytes) + (64 << 10)  # a functional test's return value travels on this channel
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        while (newline := buf.find(b"\n", scanned)) >= 0:
            line = bytes(buf[:newline])
            del buf[:newline + 1]
            scanned = 0
            parts = line.decode("utf-8", "replace").split(" ", 2)
            if parts[0] == "S" and len(parts) == 2 and parts[1] == str(current + 1):
                run.attach()
                current, started, cpu_start = current + 1, time.perf_counter(), run.cpu()
                deadline = started + limits.timeout_s
            elif parts[0] == "D" and len(parts) == 3 and parts[1] == str(current):
                cpu = run.cpu() - cpu_start
                outcome = _grade(current, parts[2], tests[current], limits, run, time.perf_counter() - started, cpu)
                outcomes.append(outcome)
                if outcome.status != "passed":
                    return ProgramResult(outcome.status, outcomes, outcome.detail)
                if current == len(tests) - 1:
                    return ProgramResult("passed", outcomes)
                run.next_test()
                deadline = time.perf_counter() + _STARTUP_S  # until the next "S"
            else:
                return ProgramResult("runtime_error", outcomes, "the program wrote to the sandbox control channel")
        remaining = deadline - time.perf_counter()
        if remaining <= 0:  # run_program kills the run
            idx = max(current, 0)
            outcomes.append(TestOutcome(idx, "time_limit", f"wall-clock limit {limits.timeout_s} s", limits.timeout_s))
            return ProgramResult("time_limit", outcomes, f"test {idx}: wall-clock limit {limits.timeout_s} s")
        if not poller.poll(max(1, int(remaining * 1000))):  # poll, not select: fd numbers may exceed 1023
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:  # the child is gone before finishing (unshare, which holds the pipe too, has exited)
            try:
                run.proc.wait(timeout=max(0.1, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:  # it closed the pipe but lives on: run_program kills it
                pass
            status, detail = _death_status(run.proc.returncode)
            idx = max(current, 0)
            outcomes.append(TestOutcome(idx, status, detail, time.perf_counter() - started))
            return ProgramResult(status, outcomes, f"test {idx}: {detail}")
        scanned = len(buf)
        buf += chunk
        if len(buf) > ctl_cap:
            return ProgramResult("output_limit", outcomes, "control channel flooded")


def read_capped(path: str, cap: int, *, dir_fd: int | None = None) -> bytes:
    """At most ``cap`` + 1 bytes of a regular file, opened without following a link and without blocking (a FIFO,
    a device or a link planted by the program is an ``OSError``, never a hang or an unbounded read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{os.path.basename(path)} is not a regular file")
        chunks, size = [], 0
        while size <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _grade(index: int, payload: str, test: TestCase, limits: SandboxLimits, run: _Run, wall: float,
           cpu: float) -> TestOutcome:
    """Grade one test; the CPU time is the harness's own measurement. Any failure is this test's outcome."""
    if cpu > limits.timeout_s:
        return TestOutcome(index, "time_limit", f"CPU limit {limits.timeout_s} s", wall, cpu)
    try:
        report = json.loads(payload)
        if not isinstance(report, dict):
            raise TypeError("report is not an object")
    except (ValueError, TypeError, RecursionError):
        return TestOutcome(index, "runtime_error", "malformed report", wall, cpu)
    if report.get("status") != "ok":
        status = "output_limit" if report.get("limit") == "file size" else "runtime_error"
        return TestOutcome(index, status, str(report.get("error", ""))[:500], wall, cpu)
    try:
        if test.testtype == "functional":
            ok = functional_matches(str(report.get("result", "")), test.output)
            return TestOutcome(index, "passed" if ok else "wrong_answer", "", wall, cpu)
        data = run.read_output(index, limits.output_bytes)
        if len(data) > limits.output_bytes:
            return TestOutcome(index, "output_limit", f"more than {limits.output_bytes} bytes of output", wall, cpu)
        ok = stdout_matches(data.decode("utf-8", errors="replace"), test.output)
    except OSError as exc:
        return TestOutcome(index, "runtime_error", f"no readable output ({exc.strerror or exc})", wall, cpu)
    except Exception as exc:  # noqa: BLE001 - output the grader cannot handle is this program's failure
        return TestOutcome(index, "runtime_error", f"ungradable output ({type(exc).__name__})", wall, cpu)
    return TestOutcome(index, "passed" if ok else "wrong_answer", "", wall, cpu)


def run_programs(jobs: Sequence[ProgramJob], *, limits: SandboxLimits | None = None,
                 workers: int | None = None) -> list[ProgramResult]:
    """Run many programs in parallel (``workers`` defaults to the usable cores); results in ``jobs`` order."""
    if not jobs:
        return []
    workers = workers or len(os.sched_getaffinity(0))
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
        return list(pool.map(lambda j: run_program(j.code, j.tests, func_name=j.func_name, limits=limits), jobs))
