"""Run untrusted programs (LiveCodeBench solutions) against test inputs, contained by the kernel, the harness
driving every test.

**The harness drives the tests, not the program.** One sandboxed process per program; after its trusted set-up it
writes one ready byte and closes that pipe. The harness then writes test 0's input on the input channel (a FIFO of the
run's own tmpfs as root, else a pipe; non-blocking), starts test 0's clock, reads exactly one result frame from the
result channel, grades it with the caller's ``judge``,
and only then writes test 1's input, and so on until a test fails (the official LiveCodeBench rule) or all passed.
A test's input does not exist in the sandbox before its clock starts and the expected outputs never do, so no work
can be moved ahead of a test's clock; the only thing a program can put on the result pipe is its own output for the
test in progress. Bytes before a test's input or behind its frame, a second frame, a malformed one: that test's
runtime error. Each test's limit is ``timeout_s`` of wall clock and of CPU time (every thread, counted by the
kernel, including anything that ran between two tests); test 0's clock also covers loading the program. One
deadline per program (``(timeout_s + 1) x tests + 5`` s after start-up, as the official global timeout) bounds every
wait, and nothing extends it, grading included (a test graded after it is a time limit). The harness's own work per
program is bounded by the program's limits: each output is read once, capped (``output_bytes`` per test,
``program_output_bytes`` per program); a functional result's size and nesting are checked on its bytes before it is
decoded (``protocol.py``), a stdin output's lines and tokens counted before anything is converted (the task's
``stdout_matches``); whatever fails while grading, a ``MemoryError`` of the harness included, is that test's
verdict, never an exception.

**Nothing outlives the run**: once the verdict is known the run's PID 1 and its cgroup are killed, and the result
is returned only when the run's PID namespace and cgroup are empty (held open meanwhile, so that their identity
cannot pass to another run).

The isolation layers (``probe.py``, ``driver.py``, ``cgroups.py``), each of which holds without the others:
namespaces (mount, PID, network, IPC, UTS) under ``setpriv --pdeathsig KILL unshare``; a new read-only root holding
only the interpreter and its standard library, with private size-capped ``/work`` and ``/tmp``; a uid of its own per
run, no capabilities, ``no_new_privs``; a seccomp allow-list (the system calls a Python program needs, some with
checked arguments; no new process, exec, mount, namespace, ptrace, SysV IPC, memfd, record locks, ``flock``, sockets
but AF_UNIX, AIO, page-cache probes); rlimits; a cgroup per run (memory, pids, CPU) where the machine
has one; the audit hook (a convenience). Programs of different problems run in parallel (:func:`run_programs`).
"""
from __future__ import annotations

import itertools
import os
import random
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from snapeval.errors import check_choice
from snapeval.sandbox.cgroups import RunCgroup
from snapeval.sandbox.probe import (connect_fifos, image_mount, keep_resident, kill_process_group, require_isolation,
                                    run_uid_spec, spawn_driver)
from snapeval.sandbox.limits import RESULT_LIMITS, SandboxLimits
from snapeval.sandbox.protocol import (FrameReader, OutputTooLarge, ProtocolError, check_utf8, decode_value,
                                       input_frame)

MODES = ("stdin", "functional")
STATUSES = ("passed", "wrong_answer", "runtime_error", "time_limit", "output_limit", "sandbox_error")
STARTUP_S = 10.0  # the driver's trusted set-up, before the ready byte
_TICK_S = 0.05  # how often the harness reads the run's CPU time while a test runs
_REAP_S = 2.0

#: ``judge(test index, output) -> passed``: output is the captured standard output (``bytes``, checked to be UTF-8,
#: stdin mode) or the returned value (functional mode). An exception is that test's runtime error (the output could
#: not be compared).
Judge = Callable[[int, Any], bool]


@dataclass
class TestOutcome:
    __test__ = False  # not a pytest class

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
    """One program and its tests' inputs (``mode``: how each test calls it); ``judge`` grades each output. Jobs of
    the same ``group`` (the samples of one problem) never run at the same time (:func:`run_programs`)."""

    code: str
    inputs: Sequence[str]
    mode: str
    judge: Judge
    func_name: str | None = None
    group: Hashable | None = None


# ------------------------------------------------------------------------------------------- one run's process

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(proc_fd: int | None) -> float:
    """CPU time of the process whose ``/proc/<pid>`` directory ``proc_fd`` holds, its threads and its reaped
    children (utime + stime + cutime + cstime); 0.0 once the process is gone."""
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


def _child_pid(proc: subprocess.Popen) -> int | None:
    """The run's PID 1 (``unshare --fork``'s child), from the host's view."""
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        return int(children[0]) if children else None
    except (OSError, ValueError):
        return None


def _death_status(returncode: int | None) -> tuple[str, str]:
    sig = -returncode if returncode is not None and returncode < 0 else (
        returncode - 128 if returncode is not None and returncode > 128 else None)
    if sig == signal.SIGXCPU:
        return "time_limit", "CPU time limit"
    if sig == signal.SIGXFSZ:
        return "output_limit", "file size limit"
    return "runtime_error", f"the program ended the sandbox (exit status {returncode})"


class _Run:
    """One program's sandboxed process. Its PID 1 is pinned by an open ``/proc/<pid>`` directory and its PID
    namespace by an open ``ns/pid``: once the process is gone, reads through them fail instead of reaching a process
    that reused the PID (another run's, say)."""

    def __init__(self, proc: subprocess.Popen, ready: int, inputs: int, results: int, cgroup: RunCgroup | None,
                 one_process: bool):
        self.proc, self.ready, self.inputs, self.results, self.cgroup = proc, ready, inputs, results, cgroup
        self.one_process = one_process  # the seccomp filter refuses new processes: all CPU is PID 1's
        self.pid: int | None = None
        self.proc_fd: int | None = None
        self.ns_fd: int | None = None
        self.namespace: tuple[int, int] | None = None

    def attach(self) -> None:
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
            self._close_pins()

    def cpu(self) -> float:
        """The run's CPU time so far: the cgroup's (every thread and process it ever had), else PID 1's (threads
        and reaped children included) plus, without the seccomp filter, every other live process of the run's PID
        namespace."""
        if self.cgroup is not None:
            seconds = self.cgroup.cpu_seconds()
            if seconds is not None:
                return seconds
        total = _cpu_seconds(self.proc_fd)
        if not self.one_process and self.namespace is not None:
            total += sum(_cpu_of_pid(p) for p in _namespace_members(self.namespace) if p != self.pid)
        return total

    def death(self) -> tuple[str, str]:
        """Why the run ended on its own (its pipes closed)."""
        try:
            self.proc.wait(timeout=_REAP_S)
        except subprocess.TimeoutExpired:
            pass
        if self.cgroup is not None and self.cgroup.oom_kills():
            return "runtime_error", "memory limit (the kernel killed the run)"
        return _death_status(self.proc.returncode)

    def end(self) -> int:
        """Kill everything of the run and wait until nothing of it is left; returns how many processes had to be
        killed after the grace period (0 after every run so far: the check is the point)."""
        os.close(self.inputs)  # an idle driver reads the end of its input and exits
        self.inputs = -1
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)  # PID 1: the kernel kills the rest of its namespace
            except OSError:
                pass
        if self.cgroup is not None:
            self.cgroup.kill()
        try:  # unshare reaps its child and exits on its own: the namespace is then gone at once
            self.proc.wait(timeout=_REAP_S)
        except subprocess.TimeoutExpired:
            pass
        kill_process_group(self.proc)
        deadline = time.monotonic() + _REAP_S
        while True:  # one scan of /proc a check (about 1.6 ms with 100 processes), its members kept for the kill
            left = set(_namespace_members(self.namespace)) if self.namespace is not None else set()
            if not left and (self.cgroup is None or self.cgroup.empty()):
                break
            if time.monotonic() >= deadline:
                if self.cgroup is not None:
                    left |= self.cgroup.members()
                break
            time.sleep(0.005)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self._close_pins()
        if self.cgroup is not None:
            deadline = time.monotonic() + _REAP_S
            while not self.cgroup.remove() and time.monotonic() < deadline:
                time.sleep(0.01)
        for fd in (self.ready, self.results):
            os.close(fd)
        return len(left)

    def _close_pins(self) -> None:
        for name in ("proc_fd", "ns_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)


# ------------------------------------------------------------------------------------------------ supervision

def _wait_ready(run: _Run, deadline: float) -> bytes:
    """The driver's first word: ``R`` (ready), ``E <error>`` (its set-up failed), ``b""`` (it died)."""
    poller = select.poll()
    poller.register(run.ready, select.POLLIN)
    while (remaining := deadline - time.monotonic()) > 0:
        if poller.poll(max(1, int(remaining * 1000))):
            try:
                return os.read(run.ready, 512)
            except BlockingIOError:
                continue
    return b"?"


def _unsolicited(run: _Run) -> bool:
    """Whether anything arrived on the result pipe while no test was running."""
    try:
        return bool(os.read(run.results, 1))
    except BlockingIOError:
        return False


def _one_test(run: _Run, index: int, text: str, limits: SandboxLimits, cap: int, deadline: float,
              cpu_mark: float) -> tuple[TestOutcome | None, FrameReader]:
    """Give test ``index`` its input and read its result frame; an outcome when the test already failed."""
    started = time.monotonic()
    deadline = min(deadline, started + limits.timeout_s)
    pending = memoryview(input_frame(text))
    reader = FrameReader(cap)
    poller = select.poll()  # poll, not select: fd numbers may exceed 1023
    poller.register(run.results, select.POLLIN)
    poller.register(run.inputs, select.POLLOUT)
    check_cpu_at = started
    closed = False  # the program closed its result channel: it is graded when it dies, or at its limit
    while True:
        now = time.monotonic()
        if closed and run.proc.poll() is not None:
            status, detail = run.death()
            return TestOutcome(index, status, detail, now - started, run.cpu() - cpu_mark), reader
        if now >= check_cpu_at:
            cpu = run.cpu() - cpu_mark
            if cpu > limits.timeout_s:
                return TestOutcome(index, "time_limit", f"CPU limit {limits.timeout_s} s", now - started, cpu), reader
            check_cpu_at = now + _TICK_S
        if now >= deadline:
            detail = f"wall-clock limit {limits.timeout_s} s" if deadline == started + limits.timeout_s \
                else "the program's total time limit"
            return TestOutcome(index, "time_limit", detail, now - started, run.cpu() - cpu_mark), reader
        for fd, event in poller.poll(max(1, int((min(deadline, check_cpu_at) - now) * 1000) + 1)):
            if fd == run.inputs:
                try:
                    pending = pending[os.write(run.inputs, pending[:1 << 16]):]
                except BlockingIOError:
                    continue
                except OSError:  # the program closed its end: whatever it answers is still graded
                    pending = pending[:0]
                if not pending:
                    poller.unregister(run.inputs)
                continue
            try:
                chunk = os.read(run.results, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:  # the result channel's end: the run died, or the program closed it and lives on (the
                closed = True  # official runner waits for such a program until its time limit)
                poller.unregister(run.results)
                continue
            try:
                complete = reader.feed(chunk)
            except OutputTooLarge as exc:
                return TestOutcome(index, "output_limit", str(exc), time.monotonic() - started), reader
            except ProtocolError as exc:
                return TestOutcome(index, "runtime_error", str(exc), time.monotonic() - started), reader
            except MemoryError:  # the harness's own memory is limited and the output does not fit in it
                return TestOutcome(index, "output_limit", _NO_MEMORY, time.monotonic() - started), reader
            if complete:
                return None, reader


_NO_MEMORY = "the output does not fit in the harness's memory"


def _grade(reader: FrameReader, index: int, mode: str, judge: Judge, deadline: float) -> tuple[str, str] | None:
    """Decode a test's output and grade it: ``None`` when it passed, else ``(status, detail)``. Whatever fails here
    is the verdict of this test (the output's), never an exception: a malformed or oversized output, the judge
    raising, the harness running out of memory, grading that ends past the program's deadline."""
    try:
        payload = reader.take_payload()  # no copy: the output is held once while it is checked
        if mode == "stdin":
            check_utf8(payload)
            output = bytes(payload)  # graded as UTF-8 bytes: never widened to a str of up to 4 bytes a character
        else:
            output = decode_value(payload)  # decoded from the reader's own buffer
        del payload
    except OutputTooLarge as exc:
        return "output_limit", str(exc)
    except (UnicodeDecodeError, ProtocolError) as exc:
        return "runtime_error", f"malformed result ({exc})"
    except MemoryError:
        return "output_limit", _NO_MEMORY
    try:
        passed = bool(judge(index, output))
    except MemoryError:
        return "output_limit", _NO_MEMORY
    except Exception as exc:  # noqa: BLE001 - output the judge cannot compare is this program's failure
        return "runtime_error", f"the output cannot be compared ({type(exc).__name__})"
    finally:
        del output
    if time.monotonic() > deadline:
        return "time_limit", "the program's total time limit (reached while its output was graded)"
    return None if passed else ("wrong_answer", "")


def _supervise(run: _Run, inputs: Sequence[str], mode: str, judge: Judge, limits: SandboxLimits) -> ProgramResult:
    outcomes: list[TestOutcome] = []

    def fail(outcome: TestOutcome) -> ProgramResult:
        outcomes.append(outcome)
        return ProgramResult(outcome.status, outcomes, f"test {outcome.index}: {outcome.detail}".rstrip(": "))

    ready = _wait_ready(run, time.monotonic() + STARTUP_S)
    if ready != b"R":  # no program code has run yet: the machine's failure, not the program's
        detail = (ready[2:].decode("utf-8", "replace") if ready.startswith(b"E ") else run.death()[1] if not ready
                  else f"no ready signal within {STARTUP_S:.0f} s")
        return ProgramResult("sandbox_error", detail=f"the sandbox did not start ({detail})")
    run.attach()
    if run.cgroup is not None and (run.pid is None or not run.cgroup.contains(run.pid)):
        return ProgramResult("sandbox_error", detail="the run is not in its cgroup")
    deadline = time.monotonic() + len(inputs) * (limits.timeout_s + 1) + 5
    cpu_mark = run.cpu()
    budget = int(limits.program_output_bytes)
    for index, text in enumerate(inputs):
        if index and _unsolicited(run):
            return fail(TestOutcome(index, "runtime_error", "output before the test's input"))
        started = time.monotonic()
        outcome, reader = _one_test(run, index, text, limits, min(int(limits.output_bytes), budget), deadline,
                                    cpu_mark)
        if outcome is not None:
            return fail(outcome)
        wall, cpu = time.monotonic() - started, run.cpu() - cpu_mark
        cpu_mark += cpu
        if cpu > limits.timeout_s:
            return fail(TestOutcome(index, "time_limit", f"CPU limit {limits.timeout_s} s", wall, cpu))
        if reader.extra:
            return fail(TestOutcome(index, "runtime_error", "more than one result for one test", wall, cpu))
        if reader.header["status"] == "error":
            error = reader.header["error"]
            status = "output_limit" if error.endswith("(file size limit)") else "runtime_error"
            return fail(TestOutcome(index, status, error, wall, cpu))
        graded = _grade(reader, index, mode, judge, deadline)
        budget -= reader.end - reader.body_at
        if graded is not None:
            status, detail = graded
            return fail(TestOutcome(index, status, detail, wall, cpu))
        outcomes.append(TestOutcome(index, "passed", "", wall, cpu))
    return ProgramResult("passed", outcomes)


def run_program(code: str, inputs: Sequence[str], *, mode: str, judge: Judge, func_name: str | None = None,
                limits: SandboxLimits | None = None) -> ProgramResult:
    """Run ``code`` on ``inputs`` in a fresh sandbox, test after test, until ``judge`` rejects an output. Without
    inputs the program is only loaded (its one "test", under the same limits): ``passed`` with no outcomes when it
    loads, else the failure at test 0. Never raises for anything the program does (a machine that cannot contain it
    raises :class:`SnapevalError` before anything runs, see :func:`require_isolation`)."""
    check_choice("mode", mode, MODES)
    limits = limits or SandboxLimits()
    load_only = not inputs  # no tests: the program is only loaded, as the official runner compiles it first
    if load_only:
        inputs, judge = [""], (lambda index, output: True)
    if mode == "functional" and not func_name:
        return ProgramResult("sandbox_error", detail="functional tests need func_name")
    iso = require_isolation()
    keep_resident(iso.mapped)  # what the host evicted of the files a run maps, read again (probe.py)
    start = time.perf_counter()
    run_dir = tempfile.mkdtemp(prefix="snapeval-sandbox-")  # 0700, the harness's: the program never sees it
    work_dir = str(Path(run_dir, "work"))  # the working directory without a new root (weaker isolation only)
    run = cgroup = None
    result = ProgramResult("sandbox_error", detail="the sandbox did not start")
    held = ExitStack()  # the run's uid, reserved until the run is gone (probe.run_uid_spec)
    try:
        uid = held.enter_context(run_uid_spec(iso.drop_uid, iso.isolate_fs))
        cgroup = iso.cgroups.new_run(int(limits.memory_mb) << 20, int(limits.max_processes)) if iso.cgroups else None
        image = held.enter_context(image_mount(iso.image, iso.image_folders, run_dir)) if iso.image else None
        spec = {
            "mode": mode, "func_name": func_name, "isolate_fs": iso.isolate_fs,
            "root_dir": str(Path(run_dir, "root")), "expose": list(iso.expose), "hide": list(iso.hide),
            "packages": [list(p) for p in iso.packages] if iso.isolate_fs else [],
            "seccomp": iso.seccomp, "disk_bytes": int(limits.disk_mb) << 20,
            "memory_bytes": int(limits.memory_mb) << 20,
            "cpu_total_s": int(len(inputs) * limits.timeout_s + STARTUP_S) + 1,
            "max_file_bytes": int(limits.output_bytes), "max_open_files": int(limits.max_open_files),
            "max_processes": int(limits.max_processes), **uid,
            "cgroup_procs": cgroup.procs_files if cgroup else [], "load_only": load_only,
            "result_limits": RESULT_LIMITS, "code": code, "io": "fifo" if iso.fifo_io else "pipes", "image": image,
        }
        os.mkdir(Path(run_dir, "root"))
        if not iso.isolate_fs:  # weaker isolation, accepted by the user: an empty directory of the program's own
            os.mkdir(work_dir, 0o700)  # inside the root-only run directory, so it cannot be moved or replaced
            if iso.drop_uid is not None:
                os.chown(work_dir, iso.drop_uid, iso.drop_uid, follow_symlinks=False)  # just made, still empty
        proc, ready, inputs_fd, results = spawn_driver(iso.prefix, iso.python, run_dir, spec)
        if iso.fifo_io:
            try:
                inputs_fd, results = connect_fifos(proc, ready, run_dir, time.monotonic() + STARTUP_S)
            except OSError as exc:
                os.close(ready)
                kill_process_group(proc)
                raise OSError(f"the run's FIFOs: {exc}") from None
        run = _Run(proc, ready, inputs_fd, results, cgroup, iso.seccomp)
        result = _supervise(run, inputs, mode, judge, limits)
    except OSError as exc:
        result = ProgramResult("sandbox_error", detail=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - never raised for a program (a MemoryError of the harness included)
        result = ProgramResult("sandbox_error", detail=f"the harness failed ({type(exc).__name__}: {exc})"[:500])
    finally:
        if run is not None:
            left = run.end()
            if left:
                result.detail = (result.detail + f"; {left} leftover process(es) killed").lstrip("; ")
        elif cgroup is not None:
            cgroup.remove()
        shutil.rmtree(run_dir, ignore_errors=True)
        held.close()
    if load_only and result.passed:  # it loaded: no test ran
        result.outcomes = []
    result.wall_s = time.perf_counter() - start
    return result


#: Before a run of a group that has already run in this call, the harness waits a random time below this (uniform,
#: drawn from the system's random source): the next sample of a problem does not start a fixed gap after the
#: previous one ended, so the wall-clock phase at which that one ended tells it less (docs/sandbox.md, issue #60).
START_JITTER_S = 0.25
_RANDOM = random.SystemRandom()


def run_programs(jobs: Sequence[ProgramJob], *, limits: SandboxLimits | None = None,
                 workers: int | None = None) -> list[ProgramResult]:
    """Run many programs in parallel (``workers`` defaults to the usable cores); results in ``jobs`` order.

    Jobs of one ``group`` run one after the other, never side by side: what the kernel counts for every process at
    once and cannot hide from a run (the inode numbers of new pipes and sockets) then cannot carry one sample's
    answer to another sample of the same problem while both run (docs/sandbox.md). The order is random: the jobs of
    all groups shuffled; of the jobs whose group is not running a worker takes the first of the group whose last run
    ended longest ago (a group that has not run yet before any other), so the samples of all problems take turns: as
    long as other problems have samples left, the run before a sample on the machine is another problem's and the
    samples of one problem are apart by the runs of the others; a job whose group has run before in this call starts
    after a random wait below :data:`START_JITTER_S` (issue #60: a sample that ended at a chosen clock phase told the
    next sample of its problem its answers)."""
    if not jobs:
        return []
    workers = workers or len(os.sched_getaffinity(0))
    groups = [("group", job.group) if job.group is not None else ("job", index) for index, job in enumerate(jobs)]
    order = list(range(len(jobs)))
    _RANDOM.shuffle(order)
    results: list[ProgramResult | None] = [None] * len(jobs)
    running: set = set()
    started: set = set()
    ended: dict = {}  # group -> the place of its last run's end in the order of ends
    ends = itertools.count()
    ready = threading.Condition()

    def take() -> int | None:
        with ready:
            while order:
                free = [at for at, index in enumerate(order) if groups[index] not in running]
                if free:  # min keeps the shuffled order among equals
                    index = order.pop(min(free, key=lambda at: ended.get(groups[order[at]], -1)))
                    running.add(groups[index])
                    return index
                ready.wait()
            return None

    def worker() -> None:
        while (index := take()) is not None:
            job = jobs[index]
            try:
                if groups[index] in started:
                    time.sleep(_RANDOM.uniform(0.0, START_JITTER_S))
                started.add(groups[index])
                results[index] = run_program(job.code, job.inputs, mode=job.mode, judge=job.judge,
                                             func_name=job.func_name, limits=limits)
            finally:
                with ready:
                    running.discard(groups[index])
                    ended[groups[index]] = next(ends)
                    ready.notify_all()

    parallel = max(1, min(workers, len(set(groups))))
    tree = require_isolation().cgroups
    if tree is not None:
        tree.weigh(parallel)  # all parallel runs together weigh as that many host processes (cgroups.py)
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(worker) for _ in range(parallel)]:
            future.result()
    return results  # type: ignore[return-value]
