"""Run untrusted programs (LiveCodeBench solutions) against their tests, contained.

One child process per program runs all of its tests in order and stops at the first failure (the official
LiveCodeBench rule). Layers, strongest first; :func:`isolation` reports which ones this machine gives:

- **Namespaces** (``unshare``): a new network namespace (no interface but a down loopback: no network at all) and
  a new PID namespace with its own ``/proc`` (the program cannot see or signal any process outside; when the
  sandbox's init dies, the kernel kills everything inside). As root directly, otherwise through a user namespace
  (``--map-root-user``). Without ``unshare`` the other layers still apply.
- **Privilege drop**: when the harness runs as root (CI), the child switches to ``nobody`` (uid 65534) before the
  program runs, so the file system's own permissions protect everything outside the working directory.
- **Resource limits** (``setrlimit``): address space (memory), total CPU time, file size (output cap), open files,
  processes, no core dumps. Per test, the harness enforces a wall-clock limit and checks the test's CPU time.
- **Audit hook** (PEP 578) installed before the program runs: no sockets, no ``ctypes``, no fork/exec/subprocess,
  no signals to other processes, no ``chdir``, no writes/removals outside the working directory, no reads of other
  processes' ``/proc`` entries. It stops Python-level escapes; native code could bypass it, which is why the
  layers above exist. Like the official LiveCodeBench guard, this is a harness for model-written code, not a
  defence against a determined attacker with a kernel exploit.
- **Fresh temporary working directory** per program, removed afterwards; minimal environment (no inherited
  variables, so no secrets); stdout of every test written to a file whose size is capped by ``RLIMIT_FSIZE`` and
  checked again by the harness; the whole process group (``start_new_session``) killed on timeout.

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

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "output_bytes", "max_open_files", "max_processes"):
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

@dataclass(frozen=True)
class Isolation:
    """What this machine gives: the ``unshare`` prefix, whether the child drops to ``nobody``, the interpreter."""

    prefix: tuple[str, ...]
    drop_uid: int | None
    python: str

    def describe(self) -> dict[str, Any]:
        return {
            "namespaces": "net+pid" if self.prefix else "none",
            "user_namespace": "--map-root-user" in self.prefix,
            "runs_as": "nobody" if self.drop_uid is not None else "the harness user",
            "python": self.python,
            "audit_hook": True,
            "rlimits": ["AS", "CPU", "FSIZE", "NOFILE", "NPROC", "CORE"],
        }


def _probe(cmd: Sequence[str], **kw: Any) -> bool:
    try:
        return subprocess.run(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=20, **kw).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Probe once per process which layers work here (no root assumed; CI may be root)."""
    unshare = shutil.which("unshare")
    prefix: tuple[str, ...] = ()
    if unshare:
        base = (unshare, "--net", "--pid", "--fork", "--kill-child", "--mount-proc")
        for candidate in (base, base[:1] + ("--map-root-user",) + base[1:]):
            if _probe(candidate + ("true",)):
                prefix = candidate
                break
    drop_uid = None
    python = sys.executable
    if os.geteuid() == 0 and "--map-root-user" not in prefix:
        # the child will run as nobody: it needs an interpreter (and stdlib) that nobody can read
        for candidate in dict.fromkeys([sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]):
            if candidate and _probe([candidate, "-I", "-S", "-c", "import fractions, json, collections"],
                                    user=NOBODY_UID, group=NOBODY_UID, extra_groups=[], cwd="/"):
                drop_uid, python = NOBODY_UID, candidate
                break
    return Isolation(prefix, drop_uid, python)


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
        if dx is None or dy is None or dx != dy:
            return False
    return True


def functional_matches(result_json: str, expected: str) -> bool:
    """Official call-based grading: the returned value (tuples as lists) equals the expected JSON value."""
    try:
        return json.loads(result_json) == json.loads(expected)
    except (json.JSONDecodeError, TypeError):
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


def run_program(code: str, tests: Sequence[TestCase], *, func_name: str | None = None,
                limits: SandboxLimits | None = None) -> ProgramResult:
    """Run ``code`` against ``tests`` in a fresh sandbox; never raises for anything the program does."""
    limits = limits or SandboxLimits()
    if not tests:
        return ProgramResult("sandbox_error", detail="no tests")
    mode = tests[0].testtype
    if any(t.testtype != mode for t in tests):
        return ProgramResult("sandbox_error", detail="tests mix stdin and functional types")
    if mode == "functional" and not func_name:
        return ProgramResult("sandbox_error", detail="functional tests need func_name")
    iso = isolation()
    start = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="snapeval-sandbox-")
    read_fd, write_fd = os.pipe()
    proc = None
    try:
        spec = {
            "mode": mode, "func_name": func_name, "n_tests": len(tests), "ctl_fd": write_fd,
            "memory_bytes": int(limits.memory_mb) << 20,
            "cpu_total_s": int(len(tests) * limits.timeout_s + _STARTUP_S) + 1,
            "max_file_bytes": int(limits.output_bytes), "max_open_files": int(limits.max_open_files),
            "max_processes": int(limits.max_processes), "drop_uid": iso.drop_uid,
        }
        files = {"spec.json": json.dumps(spec), "solution.py": code}
        files.update({f"in_{i}": t.input for i, t in enumerate(tests)})
        for name, text in files.items():
            Path(workdir, name).write_text(text, encoding="utf-8")
        if iso.drop_uid is not None:
            os.chown(workdir, iso.drop_uid, iso.drop_uid)
            os.chmod(workdir, stat.S_IRWXU)
            for name in files:
                os.chown(Path(workdir, name), iso.drop_uid, iso.drop_uid)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}
        cmd = [*iso.prefix, iso.python, "-I", "-S", "-B", str(DRIVER), "spec.json"]
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=(write_fd,), start_new_session=True,
                                close_fds=True)
        os.close(write_fd)
        write_fd = -1
        result = _supervise(proc, read_fd, tests, limits, workdir)
    except OSError as exc:
        result = ProgramResult("sandbox_error", detail=f"{type(exc).__name__}: {exc}")
    finally:
        if proc is not None:
            _kill(proc)
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
    result.wall_s = time.perf_counter() - start
    return result


def _supervise(proc: subprocess.Popen, fd: int, tests: Sequence[TestCase], limits: SandboxLimits,
               workdir: str) -> ProgramResult:
    outcomes: list[TestOutcome] = []
    buf = b""
    current, started = -1, time.perf_counter()
    deadline = started + _STARTUP_S
    ctl_cap = limits.output_bytes + (1 << 20)
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            parts = line.decode("utf-8", "replace").split(" ", 2)
            if parts[0] == "S" and len(parts) == 2 and parts[1] == str(current + 1):
                current, started = current + 1, time.perf_counter()
                deadline = started + limits.timeout_s
            elif parts[0] == "D" and len(parts) == 3 and parts[1] == str(current):
                outcome = _grade(current, parts[2], tests[current], limits, workdir, time.perf_counter() - started)
                outcomes.append(outcome)
                if outcome.status != "passed":
                    return ProgramResult(outcome.status, outcomes, outcome.detail)
                if current == len(tests) - 1:
                    return ProgramResult("passed", outcomes)
                deadline = time.perf_counter() + _STARTUP_S  # until the next "S"
            else:
                return ProgramResult("runtime_error", outcomes, "the program wrote to the sandbox control channel")
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            _kill(proc)
            idx = max(current, 0)
            outcomes.append(TestOutcome(idx, "time_limit", f"wall-clock limit {limits.timeout_s} s", limits.timeout_s))
            return ProgramResult("time_limit", outcomes, f"test {idx}: wall-clock limit {limits.timeout_s} s")
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:  # the child is gone before finishing
            proc.wait()
            status, detail = _death_status(proc.returncode)
            idx = max(current, 0)
            outcomes.append(TestOutcome(idx, status, detail, time.perf_counter() - started))
            return ProgramResult(status, outcomes, f"test {idx}: {detail}")
        buf += chunk
        if len(buf) > ctl_cap:
            return ProgramResult("output_limit", outcomes, "control channel flooded")


def _grade(index: int, payload: str, test: TestCase, limits: SandboxLimits, workdir: str,
           wall: float) -> TestOutcome:
    try:
        report = json.loads(payload)
        cpu = float(report.get("cpu", 0.0))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        return TestOutcome(index, "runtime_error", "malformed report", wall)
    if cpu > limits.timeout_s:
        return TestOutcome(index, "time_limit", f"CPU limit {limits.timeout_s} s", wall, cpu)
    if report.get("status") != "ok":
        return TestOutcome(index, "runtime_error", str(report.get("error", ""))[:500], wall, cpu)
    if test.testtype == "functional":
        ok = functional_matches(str(report.get("result", "")), test.output)
        return TestOutcome(index, "passed" if ok else "wrong_answer", "", wall, cpu)
    out_path = Path(workdir, f"out_{index}")
    try:
        size = out_path.stat().st_size
        if size > limits.output_bytes:
            return TestOutcome(index, "output_limit", f"{size} bytes of output", wall, cpu)
        got = out_path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return TestOutcome(index, "runtime_error", f"no output ({exc.strerror})", wall, cpu)
    ok = stdout_matches(got, test.output)
    return TestOutcome(index, "passed" if ok else "wrong_answer", "", wall, cpu)


def run_programs(jobs: Sequence[ProgramJob], *, limits: SandboxLimits | None = None,
                 workers: int | None = None) -> list[ProgramResult]:
    """Run many programs in parallel (``workers`` defaults to the usable cores); results in ``jobs`` order."""
    if not jobs:
        return []
    workers = workers or len(os.sched_getaffinity(0))
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
        return list(pool.map(lambda j: run_program(j.code, j.tests, func_name=j.func_name, limits=limits), jobs))
