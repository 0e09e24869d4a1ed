"""Hostile programs by class. Every attack runs with the Python-level layers switched off first (the audit hook, and
the official runner's guard that sets ``os.fork`` and friends to ``None``): the kernel layers (namespaces, the new
root, the privilege drop, seccomp, rlimits, the cgroup) and the harness's own protocol must hold without them.

Issue #25's classes (the harness drives the tests, not the program) come first. Each is written as a program that
passed, or hung the harness, on the sandbox before it (where the test says so); ``docs/sandbox.md`` lists them.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import pickle
import shutil
import socket
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from snapeval.errors import SnapevalError
from snapeval.sandbox import ProgramJob, SandboxLimits, isolation, probe, run_program, run_programs
from snapeval.tasks import livecodebench
from snapeval.tasks.livecodebench import functional_matches, load_json, stdout_matches

FAST = SandboxLimits(timeout_s=2.0, memory_mb=512, output_bytes=1 << 20, disk_mb=8)
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
MUL = "a, b = map(int, input().split())\nprint(a * b)\n"  # right only when a * b == a + b
REPO = Path(__file__).resolve().parents[1]
from tests.conftest import DATA_DIR as DATA  # noqa: E402  (the shared data folder, as conftest finds it)

# Switch the Python-level layers off first, as a red-team program did: rebind the audit hook's closure cells (its
# path checks) to functions that allow everything, empty the driver's block lists, and undo the official runner's
# guard (os functions back from posix, hidden modules back, shutil reloaded). What is tested after this is the kernel
# and the harness.
NO_HOOK = """
import sys
if not getattr(sys, '_python_layers_off', False):
    sys._python_layers_off = True
    import gc, os, posix
    for _f in gc.get_objects():
        if type(_f).__name__ == 'function' and _f.__code__.co_name == 'hook' and _f.__closure__:
            for _cell in _f.__closure__:
                if callable(_cell.cell_contents):
                    _cell.cell_contents = lambda *a, **k: True
    for _mod in list(sys.modules.values()):
        for _attr in ('BLOCKED_EVENTS', 'BLOCKED_IMPORTS', 'PATH_EVENTS'):
            if isinstance(getattr(_mod, _attr, None), frozenset):
                setattr(_mod, _attr, frozenset())
    for _name in dir(posix):
        if getattr(os, _name, 0) is None:
            setattr(os, _name, getattr(posix, _name))
    for _name in [_n for _n, _m in sys.modules.items() if _m is None]:
        del sys.modules[_name]
    try:
        import importlib, shutil
        importlib.reload(shutil)
    except ImportError:  # weaker isolation, as nobody: the interpreter's files may be unreadable
        pass
"""


def hostile(code: str) -> str:
    """``code`` run after the Python-level layers are off (a stdin program's top-level imports run before its body,
    as the official runner hoists them: the attack is executed as a whole once :data:`NO_HOOK` has run)."""
    return NO_HOOK + f"exec(compile({code!r}, '<attack>', 'exec'), globals())\n"


# The driver's pipes, found as a program finds them: every descriptor it holds that is a pipe.
PIPES = """
import os, stat
def _pipes():
    out = []
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                out.append(fd)
        except OSError:
            pass
    return out
"""

pytestmark = [pytest.mark.skipif(not isolation().isolate_fs, reason="no mount namespace here: execution is refused"),
              pytest.mark.runs_programs]  # the checks of leftovers (sandbox_alone) see the whole machine


def judge_stdout(*outputs):
    return lambda index, output: stdout_matches(output, outputs[index])


def run(code: str, inputs=("2 3\n",), outputs=("5\n",), *, mode="stdin", func_name=None, limits=FAST):
    judge = judge_stdout(*outputs) if mode == "stdin" else \
        (lambda index, value: functional_matches(value, load_json(outputs[index])))
    return run_program(hostile(code), list(inputs), mode=mode, judge=judge, func_name=func_name, limits=limits)


def _sandbox_processes() -> list[int]:
    """Host PIDs of processes running under a sandbox uid (every run has its own, from SANDBOX_UID_BASE up)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid >= probe.SANDBOX_UID_BASE:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether host process ``pid`` is a descendant of ``ancestor`` (its chain of parents, read from /proc)."""
    while pid > 1:
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        if pid == ancestor:
            return True
    return False


def _run_cgroups() -> list[str]:
    """The run cgroups that exist now (each run makes one and removes it before returning)."""
    tree = isolation().cgroups
    if tree is None:
        return []
    return [os.path.join(base, entry) for base in set(tree.bases.values()) for entry in os.listdir(base)
            if entry.startswith("run-")]


def test_the_python_layers_really_are_off():
    code = "import socket, subprocess, os\nopen('/tmp/x', 'w').write('x')\nos.getcwd()\nprint(5)\n"
    assert run(code).passed


# ------------------------------------------------------------------ issue #25: the harness drives the tests
THREE = (["2 3\n", "1 4\n", "2 2\n"], ["5\n", "5\n", "4\n"])  # a * b is right on the last test only

FORGE = PIPES + """
import json
# the old protocol: announce the later tests early and report only the last one, whose answer is computable here
for fd in _pipes():
    try:
        a, b = map(int, open('/work/in_2').read().split())
        open('/work/out_2', 'w').write(str(a * b) + '\\n')
    except OSError:
        pass
    for forged in (b'S 1\\nS 2\\nD 2 {"status": "ok"}\\n',
                   # the new one: a frame for this test, then frames for tests that have not started
                   b'{"status": "ok", "bytes": 2}\\n4\\n' * 3):
        try:
            os.write(fd, forged)
        except OSError:
            pass
import time
time.sleep(3)
"""


def test_forged_control_lines_never_grade_a_test():
    """Forged and reordered control lines on every pipe the program holds (on the old harness: only test 2 graded,
    pass@1 = 1.0 for a wrong program). Now the first frame is test 0's output, and the extra ones are a runtime
    error; a well-formed forged frame is just this test's output."""
    result = run(FORGE, *THREE)
    assert result.status == "runtime_error" and [o.index for o in result.outcomes] == [0], result


def test_functional_forgery_never_grades_a_test():
    forge = PIPES + """
import json
class Solution:
    def f(self, a, b):
        for fd in _pipes():
            try:
                os.write(fd, ('S 1\\nS 2\\nD 2 ' + json.dumps({"status": "ok", "result": "4"}) + '\\n').encode())
                os.write(fd, b'{"status": "ok", "bytes": 1}\\n4')
            except OSError:
                pass
        return a * b
"""
    result = run(forge, ["2\n3", "1\n4", "2\n2"], ["5", "5", "4"], mode="functional", func_name="f")
    assert not result.passed and result.outcomes[0].index == 0, result


def test_rewritten_reports_never_skip_a_test():
    """The program rewrites what the driver writes (on the old harness: test 0's report became the start of test 1,
    so test 0 was never graded and a program wrong on it passed). Now every frame it can write is the output of the
    test in progress; a frame withheld leaves the test without an answer until its deadline."""
    rewrite = """
import os, sys
if not hasattr(sys, '_patched'):
    sys._patched = True
    _w, _r = os.write, os.read
    state = {'fake_ack': False, 'frames': 0}
    def w(fd, data):
        data = bytes(data)
        if data.startswith(b'D 0 '):  # the old protocol: test 0's report becomes the start of test 1
            state['fake_ack'] = True
            return _w(fd, b'S 1\\n')
        if data == b'S 1\\n':
            return len(data)
        if data.startswith(b'{"status"'):  # the new one: withhold test 0's (wrong) result
            state['frames'] += 1
            if state['frames'] == 1:
                return len(data)
        return _w(fd, data)
    def r(fd, n):
        if state['fake_ack']:
            state['fake_ack'] = False
            return b'\\n'
        return _r(fd, n)
    os.write, os.read = w, r
a, b = map(int, input().split())
print(a * b)
"""
    start = time.perf_counter()
    result = run(rewrite, ["2 3\n", "2 2\n", "0 0\n"], ["5\n", "4\n", "0\n"])
    assert result.status == "time_limit" and [o.index for o in result.outcomes] == [0], result
    assert time.perf_counter() - start < FAST.timeout_s + 5


def test_time_shifting_is_impossible():
    """Work for a later test before its clock starts (on the old harness: 1.5 s of CPU per test against a 1 s
    limit, passed, by computing while the driver was about to announce the test). Now a test's input exists only
    once its clock runs."""
    shift = """
import os, sys, time
def work(a, b):
    end = time.process_time() + 1.5
    while time.process_time() < end:
        pass
    return a + b
if not hasattr(sys, '_shift'):
    sys._shift = {}
    _w = os.write
    def w(fd, data):
        data = bytes(data)
        if data.startswith(b'S '):  # the old driver announces a test: do its work first, off the clock
            try:
                a, b = map(int, open('/work/in_%d' % int(data.split()[1])).read().split())
                sys._shift[(a, b)] = work(a, b)
            except OSError:
                pass
        return _w(fd, data)
    os.write = w
a, b = map(int, input().split())
print(5 if (a, b) == (2, 3) else sys._shift[(a, b)] if (a, b) in sys._shift else work(a, b))
"""
    result = run(shift, ["2 3\n", "1 4\n", "2 6\n"], ["5\n", "5\n", "8\n"],
                 limits=SandboxLimits(timeout_s=1.0, memory_mb=512))
    assert result.status == "time_limit" and [o.status for o in result.outcomes] == ["passed", "time_limit"], result


def test_cpu_of_every_thread_between_and_during_tests_is_counted():
    """GIL-free threads started in test 0 keep burning while later tests run and between them; the kernel counts
    their CPU for the run, and the harness charges everything from the ready byte to the last result to the tests:
    the per-test CPU adds up to at least what the process itself used."""
    burn = """
import hashlib, os, sys, threading
if not hasattr(sys, '_burners'):
    sys._start = os.times()
    block = b'x' * (1 << 20)
    def spin():
        for _ in range(500):
            hashlib.sha256(block).digest()
    sys._burners = [threading.Thread(target=spin) for _ in range(2)]
    [t.start() for t in sys._burners]
a, b = map(int, input().split())
if a == 0:
    [t.join() for t in sys._burners]
    now = os.times()
    print(now.user + now.system - sys._start.user - sys._start.system)
else:
    print(a + b)
"""
    seen = {}

    def judge(index, output):
        seen[index] = output
        return True

    result = run_program(hostile(burn), ["2 3\n", "1 1\n", "0 0\n"], mode="stdin", judge=judge,
                         limits=SandboxLimits(timeout_s=5.0, memory_mb=512))
    assert result.passed, result
    own = float(seen[2])
    assert own > 0.2 and sum(o.cpu_s for o in result.outcomes) >= own - 0.05, (own, result.outcomes)


def test_gil_free_cpu_burn_is_a_time_limit():
    """Threads that release the GIL burn CPU faster than the wall clock runs; the program fakes its own
    accounting. The limit is on the kernel's count of the run's CPU time, checked while the test runs."""
    burner = ("import hashlib, resource, threading, time\n"
              "resource.getrusage = lambda who: type('R', (), {'ru_utime': 0.0, 'ru_stime': 0.0})()\n"
              "time.process_time = lambda: 0.0\nblock = b'x' * (4 << 20)\n"
              "def burn():\n    end = time.perf_counter() + 1.3\n    while time.perf_counter() < end:\n"
              "        hashlib.sha256(block).digest()\n"
              "ts = [threading.Thread(target=burn) for _ in range(2)]\n[t.start() for t in ts]\n"
              "[t.join() for t in ts]\nprint(5)\n")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores to burn CPU faster than the wall clock")
    limits = SandboxLimits(timeout_s=1.5, memory_mb=1024, output_bytes=1 << 20)
    result = run(burner, limits=limits)
    last = result.outcomes[-1] if result.outcomes else None
    if "CPU limit" not in result.detail and last is not None and last.cpu_s < limits.timeout_s:
        # decided by what the run got, not by the load average before it (which lags, and under xdist always shows
        # the other worker): with no second core free its threads cannot burn the limit's CPU within the wall
        # clock, so there is nothing to judge; a run that burned past the limit and was not stopped fails below
        pytest.skip(f"the run got {last.cpu_s:.2f} s of CPU in {last.wall_s:.2f} s: no second core free to burn "
                    f"past the {limits.timeout_s} s limit")
    assert result.status == "time_limit" and "CPU limit" in result.detail, result
    assert result.outcomes[-1].cpu_s > 1.5 > result.outcomes[-1].wall_s


def rereport(output: str, pause: float) -> str:
    """A program that prints ``output`` for test 0 and then, from a thread, re-sends the old protocol's report of
    test 0 on every pipe every ``pause`` seconds while its main thread never returns."""
    return PIPES + f"""
import sys, threading, time
a, b = map(int, input().split())
print({output})
sys.stdout.flush()
def again():
    while True:
        for fd in _pipes():
            try:
                os.write(fd, b'D 0 {{"status": "ok"}}\\n')
            except OSError:
                pass
        time.sleep({pause})
threading.Thread(target=again, daemon=True).start()
time.sleep(60)
"""


REPEAT = rereport("a + b", 0.3)


def test_repeated_reports_never_extend_the_run():
    """Re-sending a report every 0.3 s (on the old harness: test 0 re-graded forever, the deadline pushed each time,
    the harness hung at ~0 CPU). Now one frame per test, one deadline per test and per program."""
    start = time.perf_counter()
    result = run(REPEAT, ["2 3\n", "1 4\n"], ["5\n", "5\n"])
    assert result.status == "runtime_error", result  # a second frame, bytes before an input, or a malformed one
    assert time.perf_counter() - start < FAST.timeout_s + 5


def test_pipe_size_tricks_never_block_the_harness():
    """Shrink every pipe to one page and flood reports (on the old harness: a blocking write of an acknowledgement
    deadlocked the harness); and shrink them and leave a 1 MiB input unread. Every write of the harness is
    non-blocking, every wait bounded: garbage is a runtime error at once, an unread input a time limit."""
    flood = PIPES + """
import fcntl, sys, time
a, b = map(int, input().split())
print(a + b)
sys.stdout.flush()
for fd in _pipes():
    try:
        fcntl.fcntl(fd, 1031, 4096)  # F_SETPIPE_SZ: one page
    except OSError:
        pass
for _ in range(100000):
    for fd in _pipes():
        try:
            os.write(fd, b'D 0 {"status": "ok"}\\n')
        except OSError:
            pass
time.sleep(60)
"""
    start = time.perf_counter()
    result = run(flood, ["2 3\n", "1 4\n"], ["5\n", "5\n"])
    assert result.status == "runtime_error", result
    assert time.perf_counter() - start < FAST.timeout_s + 5
    quiet = PIPES + "import fcntl, time\nfor fd in _pipes():\n    fcntl.fcntl(fd, 1031, 4096)\ntime.sleep(60)\n"
    start = time.perf_counter()
    result = run(quiet, ["1 " * (1 << 19) + "\n"], ["5\n"])
    assert result.status == "time_limit", result
    assert time.perf_counter() - start < FAST.timeout_s + 5


AMPLIFY = """
a, b = map(int, input().split())
print('0' * ((30 << 20) - 8) + str(a + b))
"""
RESEND = rereport("'0' * ((30 << 20) - 8) + str(a + b)", 0)


def test_the_harness_spends_a_bounded_share_of_cpu_per_program():
    """32 MiB of zero-padded correct output per test, and the same re-sent in a loop (on the old harness: 20 s of
    the harness's own CPU on one program, re-grading each copy). Each output is read once, capped and compared in
    linear time; a copy beyond the first is a runtime error."""
    limits = SandboxLimits(timeout_s=5.0, memory_mb=1024)
    for code, inputs, passes in ((AMPLIFY, ["2 3\n", "1 4\n", "2 2\n"], True), (RESEND, ["2 3\n", "1 4\n"], False)):
        start = time.thread_time()  # run_program works in this thread
        result = run_program(hostile(code), inputs, mode="stdin", judge=judge_stdout("5\n", "5\n", "4\n"),
                             limits=limits)
        spent = time.thread_time() - start
        assert result.passed == passes, result  # Decimal('000...05') == 5: the official compares so too
        assert spent < 4.0, spent


# memory the rlimits do not count: SysV shared memory, memfd files, SysV message queues (each over 256 MiB)
SHM = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
held = 0
for _ in range(12):
    sid = libc.shmget(0, 64 << 20, 0o1600)
    if sid < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    addr = libc.shmat(sid, None, 0)
    ctypes.memset(addr, 1, 64 << 20)
    libc.shmdt(ctypes.c_void_p(addr))
    held += 64
print(5 if held >= 640 else held)
"""
MEMFD = """
import mmap, os
fds = []
for _ in range(24):
    fd = os.memfd_create('x')
    os.ftruncate(fd, (32 << 20) - 1)
    m = mmap.mmap(fd, (32 << 20) - 1)
    m.write(b'x' * ((32 << 20) - 1))
    m.close()
    fds.append(fd)
print(5)
"""
MSGQ = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class Msg(ctypes.Structure):
    _fields_ = [('mtype', ctypes.c_long), ('mtext', ctypes.c_char * 8192)]
m = Msg(1, b'x' * 8192)
held = 0
while held < (400 << 20):
    qid = libc.msgget(0, 0o1600)
    if qid < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    for _ in range(2):
        if libc.msgsnd(qid, ctypes.byref(m), 8192, 0o4000) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        held += 8192
print(5)
"""
MEMORY_ATTACKS = [("SysV shared memory", SHM), ("memfd", MEMFD), ("SysV message queues", MSGQ)]
LOW_MEMORY = SandboxLimits(timeout_s=10.0, memory_mb=256, disk_mb=8)


@pytest.mark.parametrize("name, code", MEMORY_ATTACKS)
def test_memory_outside_the_rlimits_is_refused(name, code):
    """640-768 MiB held under a 256 MiB limit on the old sandbox. The seccomp filter refuses SysV IPC, memfd and
    POSIX message queues (no program needs them), in every mode."""
    if not isolation().seccomp:
        pytest.skip("no seccomp filter here (the cgroup counts them instead: see the next test)")
    result = run(code, limits=LOW_MEMORY)
    assert result.status == "runtime_error" and "Operation not permitted" in result.detail + str(
        [o.detail for o in result.outcomes]), result


@pytest.mark.parametrize("name, code", MEMORY_ATTACKS)
def test_memory_outside_the_rlimits_is_counted_by_the_cgroup(name, code, monkeypatch):
    """With the seccomp filter off, the run's cgroup counts the same memory: the kernel stops the run at its
    limit (memory.max / memory.limit_in_bytes count shared memory, memfd pages and kernel memory)."""
    if isolation().cgroups is None:
        pytest.skip("no usable cgroup here (the seccomp filter refuses these instead)")
    monkeypatch.setattr(probe, "isolation", lambda: dataclasses.replace(isolation(), seccomp=False))
    result = run(code, limits=LOW_MEMORY)
    assert result.status == "runtime_error" and not result.passed, result
    assert "memory limit" in result.detail or "Cannot allocate" in result.detail or "No space" in result.detail, result


def test_fd_exhaustion_never_changes_a_verdict():
    """A program that exhausts its file descriptors after the first test: later tests are still given their input
    and graded on their own output (the harness needs no new descriptor in the sandbox, the driver none either)."""
    exhaust = """
import os
a, b = map(int, input().split())
print(a * b if (a, b) != (2, 3) else 5)
try:
    while True:
        os.open('/dev/null', os.O_RDONLY)
except OSError:
    pass
"""
    result = run(exhaust, *THREE)
    assert result.status == "wrong_answer" and [o.status for o in result.outcomes] == ["passed", "wrong_answer"]
    result = run(exhaust.replace("a * b if", "a + b if"), ["2 3\n", "1 4\n"], ["5\n", "5\n"])
    assert result.passed, result


@pytest.mark.sandbox_alone  # no other test's runs on the machine while it looks for leftovers
def test_no_thread_outlives_the_reported_run():
    """A thread that keeps running (and writing) after the last test: the result comes back only once every thread
    and process of the run is gone and its cgroup removed."""
    late = PIPES + """
import threading, time
def tail():
    time.sleep(0.2)
    while True:
        open('/work/late', 'a').write('x')
        for fd in _pipes():
            try:
                os.write(fd, b'late')
            except OSError:
                pass
threading.Thread(target=tail).start()
print(5)
"""
    for _ in range(3):
        result = run(late)
        assert result.passed, result
        assert _sandbox_processes() == [] and _run_cgroups() == []


def test_parallel_runs_cannot_signal_each_other_through_locks():
    """A lock on a file every run sees read-only (the interpreter, /dev/null): on the old sandbox one run's flock
    was visible to a parallel run. flock and inotify are refused."""
    holder = ("import fcntl, os, time\nfor path in (os.__file__, '/dev/null'):\n    fd = os.open(path, os.O_RDONLY)\n"
              "    try:\n        fcntl.flock(fd, fcntl.LOCK_EX)\n    except OSError:\n        pass\ntime.sleep(1.5)\n"
              "print(5)\n")
    prober = ("import fcntl, os, time\ntime.sleep(0.5)\nseen = []\nfor path in (os.__file__, '/dev/null'):\n"
              "    fd = os.open(path, os.O_RDONLY)\n    try:\n        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
              "    except BlockingIOError:\n        seen.append(path)\n    except OSError:\n        pass\n"
              "print(5 if seen else 6)\n")
    judge = judge_stdout("5\n")
    limits = SandboxLimits(timeout_s=5.0, memory_mb=512)
    results = run_programs([ProgramJob(hostile(holder), ["x\n"], "stdin", judge),
                            ProgramJob(hostile(prober), ["x\n"], "stdin", judge)], limits=limits, workers=2)
    assert [r.status for r in results] == ["passed", "wrong_answer"], results
    refused = ("import ctypes, fcntl, os\nlibc = ctypes.CDLL(None, use_errno=True)\nworked = []\n"
               "try:\n    fcntl.flock(os.open('/dev/null', os.O_RDONLY), fcntl.LOCK_SH)\n    worked.append('flock')\n"
               "except OSError:\n    pass\n"
               "if libc.inotify_init1(0) >= 0:\n    worked.append('inotify')\n"
               "print(5 if not worked else worked)\n")
    if isolation().seccomp:
        assert run(refused).passed


# ------------------------------------------------------------------------------- the earlier red team, still held
def test_the_file_system_holds_only_the_interpreter(tmp_path):
    iso = isolation()
    for path in iso.expose:  # nothing of the checkout, the data, the virtual environment or the home directory
        assert not any(path.startswith(p) for p in (str(REPO), str(DATA.resolve()), sys.prefix, "/home", "/tmp")), path
    host_tmp = Path("/tmp", f"snapeval-host-secret-{os.getpid()}")
    host_tmp.write_text("secret")
    hidden = [str(DATA / "livecodebench"), str(DATA), str(REPO / "README.md"), str(REPO), sys.prefix,
              str(Path(sys.prefix, "lib")), str(host_tmp), "/etc/passwd", "/etc/shadow", "/home", "/var", "/run",
              "/root/.bashrc", "/root/.cache", "/usr/bin", "/bin/sh", "/usr/share", "/usr/local", "/sys", "/mnt"]
    probe_code = (f"import os, sys\nseen = [p for p in {hidden!r} if os.path.lexists(p)]\n"
                  f"seen += [(p, os.listdir(p)) for p in {list(iso.hide)!r} if os.listdir(p)]\n"
                  "import decimal, fractions, hashlib, zlib, bz2, lzma, sqlite3, ctypes, json, heapq\n"  # stdlib works
                  "for name in ('yaml', 'snapeval', 'torch', 'pytest', 'scipy'):\n"  # numpy only: see below
                  "    try:\n        __import__(name)\n        seen.append(name)\n    except ImportError:\n        pass\n"
                  "seen += [p for p in os.listdir('/proc') if p.isdigit() and p != '1']\n"  # only the run's process
                  "seen += os.listdir('/tmp') + os.listdir('/work')\n"  # no input of any test, no other run's file
                  "print(5 if not seen else seen)\n")
    try:
        result = run(probe_code)
    finally:
        host_tmp.unlink()
    assert result.passed, result


@pytest.mark.skipif(not (DATA / "livecodebench" / "code_generation_lite.jsonl").is_file(), reason="no data")
def test_looking_up_the_expected_output_in_the_data_fails():
    cheat = ("import glob, json, sys\ndata = sys.stdin.read()\n"
             f"for path in glob.glob({str(DATA)!r} + '/**/*.jsonl', recursive=True):\n"
             "    for line in open(path):\n"
             "        row = json.loads(line)\n"
             "        for t in json.loads(row.get('public_test_cases') or '[]'):\n"
             "            if t['input'] == data:\n"
             "                print(t['output']); sys.exit(0)\n"
             "print('not found')\n")
    rows = {r["question_id"]: r for r in livecodebench.load(DATA).rows}
    tests = livecodebench.tests_of(rows["1873_A"])
    result = run_program(hostile(cheat), [c.input for c in tests.cases], mode="stdin", judge=livecodebench.judge(tests),
                         limits=FAST)
    assert result.status == "wrong_answer", result


def test_the_kernel_refuses_what_a_program_never_needs():
    """With the hook off: no new process, no exec, no namespace, no mount, no chroot, no ptrace, no uid change, no
    device node, no escape through a directory fd or /proc/1/root (its own root)."""
    attempts = r"""
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
worked = []
def attempt(name, fn):
    try:
        if fn() not in (-1, None, False):
            worked.append(name)
    except (OSError, ValueError):
        pass
attempt('fork', lambda: os.fork() == 0 and os._exit(0) or True)
attempt('subprocess', lambda: subprocess.run(['/bin/true']) and True)
attempt('posix_spawn', lambda: os.posix_spawn('/proc/self/exe', ['x', '-c', '1'], {}) and True)
attempt('execv', lambda: os.execv('/proc/self/exe', ['x', '-c', 'print(5)']))
attempt('unshare user+mount', lambda: libc.unshare(0x10000000 | 0x00020000))
attempt('unshare mount', lambda: libc.unshare(0x00020000))
attempt('mount tmpfs', lambda: libc.mount(b'none', b'/work', b'tmpfs', 0, None))
attempt('chroot', lambda: os.chroot('/tmp') or True)
attempt('ptrace', lambda: libc.ptrace(16, 1, 0, 0))
attempt('setuid 0', lambda: os.setuid(0) or True)
attempt('mknod', lambda: os.mknod('/tmp/sda', 0o600 | 0o060000, os.makedev(8, 0)) or True)
attempt('dir_fd escape', lambda: os.open('etc/passwd', os.O_RDONLY, dir_fd=os.open('/', os.O_RDONLY)) and True)
attempt('proc root escape', lambda: os.path.exists('/proc/1/root/etc/passwd') or None)
attempt('clone into a new user namespace', lambda: os.uname().machine == 'x86_64' and libc.syscall(56, 0x10000017, 0, 0, 0, 0) != -1)
attempt('kernel log', lambda: libc.klogctl(3, ctypes.create_string_buffer(4096), 4096))
attempt('raise rlimit', lambda: __import__('resource').setrlimit(__import__('resource').RLIMIT_NPROC, (10**6, 10**6)) or True)
print(5 if not worked else worked)
"""
    result = run(attempts)
    assert result.passed, result


def test_host_unix_sockets_and_the_network_are_unreachable(tmp_path):
    path = tmp_path / "host.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chmod(tmp_path, 0o777)
    os.chmod(path, 0o777)
    server.listen(1)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(f"\0snapeval-test-{os.getpid()}")
    abstract.listen(1)
    try:
        code = ("import _socket\nreached = []\n"
                f"for family, address in [(_socket.AF_UNIX, {str(path)!r}), "
                f"(_socket.AF_UNIX, '\\0snapeval-test-{os.getpid()}'), (_socket.AF_INET, ('127.0.0.1', 22)), "
                "(_socket.AF_INET, ('1.1.1.1', 53)), (_socket.AF_INET6, ('::1', 22))]:\n"
                "    try:\n        s = _socket.socket(family, _socket.SOCK_STREAM)\n        s.settimeout(1)\n"
                "        s.connect(address)\n        reached.append(address)\n    except OSError:\n        pass\n"
                "print(5 if not reached else reached)\n")
        result = run(code)
        assert result.passed, result
    finally:
        server.close()
        abstract.close()


@pytest.mark.sandbox_alone  # no other test's runs on the machine while it looks for leftovers
def test_no_process_outlives_its_run():
    """A new session and a double fork: the seccomp filter refuses the fork itself, and nothing of the run is left."""
    survivor = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\nprint(5)\n")
    result = run(survivor)
    assert result.status == "runtime_error" and "not permitted" in result.detail, result
    assert _sandbox_processes() == [] and _run_cgroups() == []


@pytest.mark.sandbox_alone  # no other test's runs on the machine while it looks for leftovers
def test_no_process_outlives_its_run_without_seccomp(monkeypatch, tmp_path):
    """The PID namespace (and the cgroup) alone: when the run's PID 1 ends, the kernel kills the setsid +
    double-forked survivor before it can touch anything, and the harness finds nothing of the run left."""
    monkeypatch.setattr(probe, "isolation", lambda: dataclasses.replace(isolation(), seccomp=False))
    survivor = ("import os, time\n"
                "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                "        time.sleep(1.5)\n        open('/work/late', 'w').write('alive')\n"
                "    os._exit(0)\n"
                "print(5)\n")
    result = run(survivor)
    assert result.status == "passed" and "leftover" not in result.detail, result
    assert _sandbox_processes() == [] and _run_cgroups() == []
    assert run(ADD, ["2 3\n", "1 1\n"], ["5\n", "2\n"]).passed


def test_samples_cannot_read_each_other_or_starve_each_other():
    """Private /tmp and /work per run; a uid (and a cgroup) per run, so one run's threads do not count against
    another's limits (a thread bomb in one sample leaves a parallel sample's threads alone)."""
    writer = "import time\nopen('/tmp/answer', 'w').write('5')\nopen('/work/answer', 'w').write('5')\ntime.sleep(1)\nprint(5)\n"
    reader = ("import os, time\ntime.sleep(0.5)\n"
              "print(open('/tmp/answer').read() if os.path.exists('/tmp/answer') else 6)\n")
    hog = ("import threading, time\nstop = threading.Event()\nn = 0\ntry:\n    while True:\n"
           "        threading.Thread(target=stop.wait).start(); n += 1\nexcept RuntimeError:\n    pass\n"
           "time.sleep(1.2)\nstop.set()\nprint(5 if n < 16 else 6)\n")
    worker = ("import threading, time\ntime.sleep(0.4)\nr = []\n"
              "ts = [threading.Thread(target=r.append, args=(1,)) for _ in range(8)]\n"
              "[t.start() for t in ts]\n[t.join() for t in ts]\nprint(len(r) - 3)\n")
    judge = judge_stdout("5\n")
    jobs = [ProgramJob(hostile(code), ["x\n"], "stdin", judge) for code in (writer, reader)]
    assert [r.status for r in run_programs(jobs, limits=FAST, workers=2)] == ["passed", "wrong_answer"]
    limits = SandboxLimits(timeout_s=3.0, memory_mb=1024, output_bytes=1 << 20, disk_mb=8, max_processes=16)
    jobs = [ProgramJob(hostile(code), ["x\n"], "stdin", judge) for code in (hog, worker)]
    results = run_programs(jobs, limits=limits, workers=2)
    assert [r.status for r in results] == ["passed", "passed"], results


@pytest.mark.parametrize("attack", [
    "os.symlink('/etc/shadow', '/work/out_0')",  # where the old harness read outputs: a link,
    "os.mkfifo('/work/out_0')",  # a FIFO (a blocking open would hang a grader that read files),
    "os.symlink('/dev/zero', '/work/out_0')",  # an endless read,
    "os.mkdir('/work/out_0')",  # a directory
])
def test_planted_files_are_never_read(attack):
    """Outputs travel on a pipe: whatever the program plants in its working directory, only what it prints counts."""
    start = time.perf_counter()
    result = run(f"import os\n{attack}\nprint(5)\n")
    assert result.passed, (attack, result)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("name, code, mode, statuses", [
    ("nested functional result", "class Solution:\n    def f(self, x):\n        v = []\n        for _ in range(200000):\n"
     "            v = [v]\n        return v\n", "functional", {"runtime_error"}),
    ("nested stdout", "print('[' * 100000 + ']' * 100000)\n", "stdin", {"wrong_answer"}),
    ("signaling NaN", "print('sNaN')\n", "stdin", {"runtime_error"}),  # the official comparison raises too
    ("huge exponent", "print('1e999999999999999999')\n", "stdin", {"wrong_answer"}),
    ("garbage on every pipe", PIPES + "for fd in _pipes():\n    try:\n        os.write(fd, b'X 0\\n')\n"
     "    except OSError:\n        pass\nimport time\ntime.sleep(0.5)\nprint(5)\n", "stdin", {"runtime_error"}),
    ("a flood on every pipe", PIPES + "for fd in _pipes():\n    try:\n"
     "        os.write(fd, b'D 0 ' + b'x' * (3 << 20))\n    except OSError:\n        pass\nprint(5)\n", "stdin",
     {"runtime_error"}),
    ("a frame larger than the cap", PIPES + "for fd in _pipes():\n    try:\n"
     "        os.write(fd, b'{\"status\": \"ok\", \"bytes\": 99999999999}\\n')\n    except OSError:\n        pass\n"
     "import time\ntime.sleep(1)\n", "stdin", {"output_limit"}),
    ("pipes closed, then sleep", "import os, time\nos.closerange(3, 4096)\ntime.sleep(30)\n", "stdin", {"time_limit"}),
    ("output past the cap", "import sys\nsys.stdout.write('5' * (2 << 20))\n", "stdin", {"output_limit"}),
])
def test_the_grader_cannot_be_crashed_or_hung(name, code, mode, statuses):
    start = time.perf_counter()
    result = run(code, ["0"] if mode == "functional" else ["2 3\n"], ["[]"] if mode == "functional" else ["5\n"],
                 mode=mode, func_name="f" if mode == "functional" else None)
    assert result.status in statuses, (name, result)
    assert time.perf_counter() - start < FAST.timeout_s + 3, name


def test_disk_writes_are_capped():
    filler = ("n = 0\ntry:\n    while True:\n        open(f'/tmp/f{n}', 'wb').write(b'x' * (1 << 20)); n += 1\n"
              "except OSError:\n    pass\nprint(5 if n < 9 else 6)\n")
    assert run(filler).passed  # the 8 MiB tmpfs filled up; no host disk was touched
    inodes = ("n = 0\ntry:\n    while True:\n        open(f'/work/f{n}', 'w').close(); n += 1\n"
              "except OSError:\n    pass\nprint(5 if n < 4096 else 6)\n")
    assert run(inodes).passed
    one_file = "import os\nos.pwrite(os.open('/work/big', os.O_WRONLY | os.O_CREAT), b'x', 10 << 30)\nprint(5)\n"
    assert run(one_file).status == "output_limit"  # RLIMIT_FSIZE


def test_root_never_follows_a_planted_link(tmp_path):
    secret = tmp_path / "root_only"
    secret.write_text("secret")
    os.chmod(secret, 0o600)
    plant = f"import os\nos.symlink({str(secret)!r}, '/work/link')\nos.symlink({str(secret)!r}, '/tmp/link')\nprint(5)\n"
    assert run(plant).passed
    st = secret.stat()
    assert (st.st_uid, st.st_mode & 0o777, secret.read_text()) == (os.getuid(), 0o600, "secret")


def test_weaker_isolation_only_when_accepted(monkeypatch, tmp_path):
    """Without a mount namespace, execution is refused unless SNAPEVAL_ALLOW_UNSAFE_CODE=1; accepted, programs run
    in a directory of their own inside a root-only one, and root still never follows what they plant."""
    unshare = shutil.which("unshare")
    prefix = (unshare, "--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc")
    drop = probe.NOBODY_UID if os.geteuid() == 0 else None
    weak = probe.Isolation(prefix, False, drop, isolation().python, "a private mount namespace (test)",
                           seccomp=isolation().seccomp)
    monkeypatch.setattr(probe, "isolation", lambda: weak)
    monkeypatch.delenv(probe.UNSAFE_ENV, raising=False)
    with pytest.raises(SnapevalError, match="refusing to execute generated code: this machine lacks a private mount"):
        run(ADD)
    monkeypatch.setenv(probe.UNSAFE_ENV, "1")
    assert run(ADD).passed
    if drop is not None:  # as root: the program runs as nobody, never as root
        assert run(f"import os\nprint(5 if os.getuid() == {drop} else os.getuid())\n").passed
    secret = tmp_path / "root_only"
    secret.write_text("secret")
    os.chmod(secret, 0o600)
    plant = f"import os\nos.symlink({str(secret)!r}, 'out_1')\nos.symlink({str(secret)!r}, 'link')\nprint(5)\n"
    assert run(plant).passed
    assert (secret.stat().st_uid, secret.stat().st_mode & 0o777) == (os.getuid(), 0o600)


@pytest.mark.skipif(not (DATA / "livecodebench" / "code_generation_lite.jsonl").is_file(), reason="no data")
def test_hostile_responses_through_the_real_lm_eval_path():
    """``livecodebench_execute`` (the lm-eval filter) on real problems: hostile samples fail themselves only."""
    from snapeval.tasks.livecodebench import hooks

    rows = {r["question_id"]: r for r in livecodebench.load(DATA).rows}
    extra = {"sandbox_timeout_s": 2.0, "sandbox_memory_mb": 512}
    docs = [{**rows["1873_A"], **extra}, {**rows["2727"], **extra}]
    fence = "```python\n{}```".format
    stdin_ok = ("t = int(input())\nfor _ in range(t):\n    s = input().strip()\n"
                "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) <= 2 else 'NO')\n")
    func_ok = ("class Solution:\n    def countSeniors(self, details: List[str]) -> int:\n"
               "        return sum(int(d[11:13]) > 60 for d in details)\n")
    snoop = hostile(f"import os\nprint(os.listdir({str(DATA)!r}))\n")
    nested = hostile("class Solution:\n    def countSeniors(self, details):\n        v = []\n"
                     "        for _ in range(100000):\n            v = [v]\n        return v\n")
    verdicts = hooks.livecodebench_execute(
        [[fence(stdin_ok), fence(snoop), fence(hostile("import os\nos.fork()\n"))],
         [fence(func_ok), fence(nested), "no code"]], docs)
    statuses = [[json.loads(v)["status"] for v in per_doc] for per_doc in verdicts]
    assert statuses == [["passed", "runtime_error", "runtime_error"], ["passed", "runtime_error", "no_code"]], verdicts


def test_malicious_private_tests_never_run_code_in_the_harness(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    blob = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(SnapevalError, match="private_test_cases.*refused to load") as err:
        livecodebench.decode_private(blob, "row 7")
    assert "\n" not in str(err.value) and not marker.exists()
    good = base64.b64encode(zlib.compress(pickle.dumps('[{"input": "1", "output": "2", "testtype": "stdin"}]'))).decode()
    assert livecodebench.decode_private(good) == [{"input": "1", "output": "2", "testtype": "stdin"}]


def test_unsafe_execution_is_refused_without_isolation(monkeypatch):
    for weak, lacks in [(probe.Isolation((), False, None, "/usr/bin/python3", "the unshare command (util-linux)"),
                         "the unshare command"),
                        (probe.Isolation(("unshare",), True, None, "/usr/bin/python3", seccomp=False),
                         "a cgroup or a seccomp filter")]:
        monkeypatch.setattr(probe, "isolation", lambda: weak)
        monkeypatch.delenv(probe.UNSAFE_ENV, raising=False)
        with pytest.raises(SnapevalError, match=f"refusing to execute generated code: this machine lacks {lacks}"
                                                ".*SNAPEVAL_ALLOW_UNSAFE_CODE=1") as err:
            run_program(ADD, ["2 3\n"], mode="stdin", judge=judge_stdout("5\n"), limits=FAST)
        assert "\n" not in str(err.value)


# ------------------------------------------------------------- issue #37: no channel between runs, a bounded harness
def _cooperate(publisher: str, cheater: str, limits: SandboxLimits | None = None) -> list:
    """Two samples of one problem in parallel: a correct one that publishes its answer (``a + b``) through a channel
    between runs while it holds the answer for 2 s, and one with no algorithm that sleeps 0.6 s and prints what it
    reads from that channel (nothing, when the channel is closed). Returns their results."""
    judge = judge_stdout("5\n")
    jobs = [ProgramJob(hostile(publisher), ["2 3\n"], "stdin", judge),
            ProgramJob(hostile(cheater), ["2 3\n"], "stdin", judge)]
    return run_programs(jobs, limits=limits or SandboxLimits(timeout_s=6.0, memory_mb=512), workers=2)


LOCK_PUBLISHER = """
import fcntl, os, struct, time
a, b = map(int, input().split())
held = os.open(os.__file__, os.O_RDONLY)  # a file every run sees read-only
try:  # a read lock on byte a + b: struct flock: type, whence, start, len, pid
    fcntl.fcntl(held, {set_cmd}, struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, a + b, 1, 0))
except OSError:
    pass
time.sleep(2)
print(a + b)
"""
LOCK_CHEATER = """
import fcntl, os, struct, time
time.sleep(0.6)
fd = os.open(os.__file__, os.O_RDONLY)
for offset in range(64):
    try:
        got = fcntl.fcntl(fd, {get_cmd}, struct.pack('hhqqi4x', fcntl.F_WRLCK, 0, offset, 1, 0))
    except OSError:
        break
    if struct.unpack('hhqqi4x', got)[0] != fcntl.F_UNLCK:
        print(offset)
        break
"""


@pytest.mark.parametrize("set_cmd, get_cmd", [(6, 5), (37, 36)], ids=["F_SETLK", "F_OFD_SETLK"])
def test_cooperating_samples_cannot_pass_answers_through_record_locks(set_cmd, get_cmd):
    """Issue #37: the correct sample publishes its answer as a POSIX (or open-file-description) record lock on a
    shared read-only file, the other reads it with F_GETLK: on the old filter the second passed with no algorithm.
    Every record-lock command of fcntl is refused now (only ``flock`` was)."""
    results = _cooperate(LOCK_PUBLISHER.format(set_cmd=set_cmd), LOCK_CHEATER.format(get_cmd=get_cmd))
    assert [r.status for r in results] == ["passed", "wrong_answer"], results


PAGE_CACHE = """
import os
pages = os.path.join(os.path.dirname(os.__file__), 'pydoc_data', 'topics.py')  # read-only, shared, mapped by nobody
fd = os.open(pages, os.O_RDONLY)
"""
CACHE_PUBLISHER = PAGE_CACHE + """
import time
a, b = map(int, input().split())
try:  # evict the whole file, then bring back page a + b only (no readahead)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    os.pread(fd, 1, (a + b) * 4096)
except OSError:
    pass
time.sleep(2)
print(a + b)
"""
CACHE_CHEATER = PAGE_CACHE + """
import time
time.sleep(0.6)
for page in range(64):  # the first page in the page cache: RWF_NOWAIT reads only what is cached
    try:
        os.preadv(fd, [bytearray(1)], page * 4096, os.RWF_NOWAIT)
    except BlockingIOError:
        continue
    except OSError:
        break
    print(page)
    break
"""


def test_cooperating_samples_cannot_pass_answers_through_the_page_cache():
    """Issue #37: eviction (``posix_fadvise`` DONTNEED) and a read of one page publish a number in the page cache of
    a shared library file; ``preadv2(RWF_NOWAIT)`` reads it back in another run. Both are refused now."""
    results = _cooperate(CACHE_PUBLISHER, CACHE_CHEATER)
    assert [r.status for r in results] == ["passed", "wrong_answer"], results


VSOCK_PUBLISHER = """
import socket, time
a, b = map(int, input().split())
try:
    held = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    held.bind((socket.VMADDR_CID_ANY, 47000 + a + b))
except OSError:
    pass
time.sleep(2)
print(a + b)
"""
VSOCK_CHEATER = """
import socket, time
time.sleep(0.6)
for port in range(47000, 47064):
    try:
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    except OSError:
        break
    try:
        s.bind((socket.VMADDR_CID_ANY, port))
    except OSError:
        print(port - 47000)
        break
    finally:
        s.close()
"""


def test_cooperating_samples_cannot_pass_answers_through_vsock():
    """Issue #37: vsock ports are not confined by the network namespace (one run's bound port is busy in another;
    on a virtual machine vsock reaches the host). ``socket()`` takes AF_UNIX only now."""
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    except (OSError, AttributeError):
        pytest.skip("no vsock on this machine: the channel cannot be shown here (the refusal is tested below)")
    results = _cooperate(VSOCK_PUBLISHER, VSOCK_CHEATER)
    assert [r.status for r in results] == ["passed", "wrong_answer"], results


def test_the_kernel_refuses_every_channel_between_runs_and_host_wide_resources():
    """Issue #37, one run: record locks, leases and directory notification through ``fcntl``; sockets of any family
    (vsock, IP, netlink, packet; AF_UNIX too since issue #47: a new pipe or socket takes its inode number from a
    kernel-wide counter); new pipes; the page-cache primitives (``posix_fadvise``, ``readahead``, ``mincore``,
    ``cachestat``, ``preadv2``/``pwritev2`` flags); legacy AIO (``io_setup`` takes events from a host-wide limit) and
    ``io_uring``. What a program does need still works: ``fcntl`` on its own descriptors, ``preadv`` without flags,
    ``madvise`` to free memory."""
    if not isolation().seccomp:
        pytest.skip("no seccomp filter here")
    attempts = r"""
import ctypes, fcntl, mmap, os, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
worked, failed = [], []
def attempt(name, fn):
    try:
        if fn() not in (-1, None, False):
            worked.append(name)
    except OSError:
        pass
def need(name, fn):
    try:
        fn()
    except OSError as exc:
        failed.append((name, str(exc)))
lib = os.open(os.__file__, os.O_RDONLY)
lock = struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, 0, 1, 0)
for cmd in (5, 6, 7, 36, 37, 38):  # F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW
    attempt(f'fcntl {cmd}', lambda: fcntl.fcntl(lib, cmd, lock) and True)
attempt('lockf', lambda: fcntl.lockf(lib, fcntl.LOCK_SH | fcntl.LOCK_NB) or True)
attempt('flock', lambda: fcntl.flock(lib, fcntl.LOCK_SH) or True)
attempt('F_SETLEASE', lambda: fcntl.fcntl(lib, 1024, fcntl.F_RDLCK) == 0)
attempt('F_NOTIFY', lambda: fcntl.fcntl(os.open('/', os.O_RDONLY), 1026, 1) == 0)
for family, kind in ((socket.AF_VSOCK, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM),
                     (socket.AF_INET6, socket.SOCK_DGRAM), (socket.AF_NETLINK, socket.SOCK_DGRAM),
                     (socket.AF_PACKET, socket.SOCK_DGRAM), (socket.AF_UNIX, socket.SOCK_STREAM)):
    attempt(f'socket {family}', lambda: socket.socket(family, kind) and True)
attempt('AF_UNIX pair', lambda: socket.socketpair() and True)
attempt('pipe', lambda: os.pipe() and True)
attempt('pipe2', lambda: os.pipe2(os.O_CLOEXEC) and True)
attempt('fadvise', lambda: os.posix_fadvise(lib, 0, 0, os.POSIX_FADV_DONTNEED) or True)
attempt('readahead', lambda: libc.readahead(lib, ctypes.c_long(0), ctypes.c_size_t(4096)) == 0)
anon = mmap.mmap(-1, 4096)
vec = ctypes.create_string_buffer(1)
address = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(anon)))
attempt('mincore', lambda: libc.mincore(address, ctypes.c_size_t(4096), vec) == 0)
attempt('cachestat', lambda: libc.syscall(451, lib, ctypes.byref((ctypes.c_uint64 * 2)(0, 4096)),
                                          ctypes.byref((ctypes.c_uint64 * 8)()), 0) == 0)
attempt('preadv2 RWF_NOWAIT', lambda: os.preadv(lib, [bytearray(1)], 0, os.RWF_NOWAIT) and True)
attempt('preadv2 RWF_HIPRI', lambda: os.preadv(lib, [bytearray(1)], 0, os.RWF_HIPRI) and True)
mine = os.open('/work/x', os.O_RDWR | os.O_CREAT)
attempt('pwritev2 RWF_APPEND', lambda: os.pwritev(mine, [b'x'], 0, os.RWF_APPEND) and True)
ctx = ctypes.c_ulong(0)
attempt('io_setup', lambda: libc.syscall(206, 4096, ctypes.byref(ctx)) == 0)
attempt('io_submit', lambda: libc.syscall(209, ctx, 0, None) == 0)
attempt('io_getevents', lambda: libc.syscall(208, ctx, 0, 0, None, None) == 0)
attempt('io_uring_setup', lambda: libc.syscall(425, 8, ctypes.byref((ctypes.c_uint32 * 30)())) >= 0)
need('fcntl F_GETFL', lambda: fcntl.fcntl(lib, fcntl.F_GETFL))
need('fcntl F_SETFD', lambda: fcntl.fcntl(lib, fcntl.F_SETFD, fcntl.FD_CLOEXEC))
need('os.set_blocking', lambda: os.set_blocking(mine, False))
need('preadv without flags', lambda: os.preadv(lib, [bytearray(1)], 0))
need('os.pread', lambda: os.pread(lib, 1, 0))
need('madvise', lambda: mmap.mmap(-1, 1 << 20).madvise(mmap.MADV_DONTNEED))
print(5 if not worked and not failed else (worked, failed))
"""
    result = run(attempts)
    assert result.passed, result


def test_only_the_library_files_the_interpreter_loads_are_visible():
    """Issue #37: the whole of the host's library folders was visible (a 110 MB libLLVM among them). Now each shared
    library file the interpreter, its extension modules and the packages load is shown, and nothing else of those
    folders."""
    iso = isolation()
    shown = {p for e in iso.expose for p in (e, os.path.realpath(e))}
    walk = ("import os\nfound = []\nfor top in ('/lib', '/lib64', '/usr/lib', '/usr/lib64', '/usr/local/lib'):\n"
            "    for d, _, files in os.walk(top):\n        found += [os.path.join(d, f) for f in files]\n"
            "print(sorted(found))\n")
    seen = []
    result = run_program(hostile(walk), ["x\n"], mode="stdin", judge=lambda i, out: seen.append(out) or True,
                         limits=FAST)
    assert result.passed, result
    found = eval(seen[0])  # noqa: S307 - a list of strings printed by the test's own program
    assert found and all(os.path.realpath(f) in shown or f in shown for f in found), sorted(set(found) - shown)[:5]
    assert not any("LLVM" in f for f in found)


def test_device_nodes_are_the_runs_own_and_read_only():
    """Issue #37: read-only binds of the host's /dev/zero and /dev/urandom could still be written (a bind's read-only
    flag does not cover the device). Each run has its own nodes now: zero, urandom and random not writable, null
    writable, none of them the host's inode (a lock or a watch on them reaches no other run)."""
    if os.geteuid() != 0:
        pytest.skip("private device nodes need root (a user namespace binds the host's /dev/null only)")
    host = {name: tuple(os.stat(f"/dev/{name}")[1:3]) for name in ("null", "zero", "urandom")}
    code = (f"import os\nhost = {host!r}\nwritten, shared = [], []\n"
            "for name in ('zero', 'urandom', 'random'):\n    try:\n"
            "        os.write(os.open('/dev/' + name, os.O_WRONLY), b'x')\n        written.append(name)\n"
            "    except OSError:\n        pass\n"
            "for name, ids in host.items():\n    if tuple(os.stat('/dev/' + name)[1:3]) == ids:\n"
            "        shared.append(name)\n"
            "os.write(os.open('/dev/null', os.O_WRONLY), b'x')\n"
            "assert len(os.read(os.open('/dev/urandom', os.O_RDONLY), 8)) == 8\n"
            "print(5 if not written and not shared else (written, shared))\n")
    assert run(code).passed


def test_numpy_is_importable_and_read_only():
    """Issue #35/#37: the official LiveCodeBench environment has numpy; a run imports it (from the harness's own
    environment, shown read-only under /packages, nothing else of that environment) and cannot change it."""
    if not isolation().packages:
        pytest.skip("numpy is not installed beside the harness (pip install numpy), so runs have none")
    code = ("import numpy as np, os\na, b = map(int, input().split())\nprint(int(np.array([a, b]).sum()))\n"
            "for path in (os.path.join(os.path.dirname(np.__file__), 'x.py'), np.__file__):\n    try:\n"
            "        open(path, 'a').write('x')\n        print('written', path)\n    except OSError:\n        pass\n")
    assert run(code, limits=SandboxLimits(timeout_s=10.0, memory_mb=1024)).passed
    functional = ("import numpy as np\nclass Solution:\n    def f(self, nums):\n"
                  "        return int(np.sort(np.array(nums))[-1])\n")
    result = run(functional, ["[3, 9, 4]"], ["9"], mode="functional", func_name="f",
                 limits=SandboxLimits(timeout_s=10.0, memory_mb=1024))
    assert result.passed, result


def test_each_run_has_a_cpu_share_of_its_own():
    """Issue #37: only ``cpuacct`` was set per run, so a run with many threads took a neighbour's CPU time (the
    scheduler divided the CPU between threads). Each run is in a ``cpu`` cgroup of its own now (v1 ``cpu.shares``,
    v2 ``cpu.weight``): the CPU is divided between runs."""
    from snapeval.sandbox.cgroups import parse_mountinfo

    tree = isolation().cgroups
    mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    if tree is None or not any(
            "cpu" in m.super_options if m.fstype == "cgroup" else
            "cpu" in Path(m.point, "cgroup.controllers").read_text().split() for m in mounts):
        pytest.skip("no cgroup with the cpu controller on this machine")
    # the run has no /proc of its own to read (issue #47): its cgroups are read on the host while it sleeps
    seen: list[str] = []
    thread = threading.Thread(target=lambda: seen.append(run("import time\ntime.sleep(1.5)\nprint(5)\n").status))
    thread.start()
    lines: list[str] = []
    while thread.is_alive() and not lines:
        # this test's run only: another worker's runs (a probe's, without cgroups) are on the machine too
        for pid in (p for p in _sandbox_processes() if _descends_from(p, os.getpid())):
            try:
                lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
            except OSError:
                continue
        time.sleep(0.05)
    thread.join()
    wanted = (lambda l: l.startswith("0::")) if tree.version == 2 else (lambda l: "cpu" in l.split(":")[1].split(","))
    cpu = [line.split(":", 2)[2] for line in lines if wanted(line)]
    assert seen == ["passed"] and cpu and all("/run-" in path for path in cpu), (seen, lines)


def _bomb(name: str, harness_memory_mb: int = 0) -> dict:
    """What one of the benchmark's bombs costs the harness, measured as the benchmark's docs run it, in a fresh
    interpreter (``python -m benchmarks.sandbox --bomb NAME``: its peak RSS is the harness's alone, the run is
    another process); the last line it prints is the cost as JSON."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "benchmarks.sandbox", "--bomb", name, "--harness-memory-mb",
                          str(harness_memory_mb)], capture_output=True, text=True, timeout=600, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["16M_tokens_one_line", "4M_empty_lists"])
def test_the_harness_cost_of_an_output_is_bounded_by_the_limits(name):
    """Issue #37: 16M one-character tokens on one line cost the old harness 3-9 s of CPU and 2.1 GiB, 4M empty lists
    as a functional answer 2 s and 0.6 GiB (11M: 20 s, 1.6 GiB), per program and so per parallel worker. Now the
    tokens are counted before anything is converted and a result's values before it is decoded: well under a second
    and 200 MiB (6x the 32 MiB output cap: the payload, its text and one translated copy)."""
    cost = _bomb(name)
    assert cost["status"] in ("wrong_answer", "output_limit"), cost
    assert cost["harness_cpu_s"] < 1.0 and cost["harness_peak_rss_growth_mib"] < 200, cost


def test_memory_error_while_grading_is_a_verdict():
    """Issue #37: under an address-space limit, decoding a large answer raised MemoryError out of run_program (1M
    empty lists, 60 MiB of room). Any failure while grading is now that test's verdict."""
    cost = _bomb("1M_empty_lists", harness_memory_mb=60)
    assert cost["status"] in ("output_limit", "wrong_answer"), cost


def test_grading_ends_inside_the_programs_deadline():
    """A test graded after the program's deadline (``(timeout_s + 1) x tests + 5`` s) is a time limit, however long the
    grading took (the old harness passed it)."""
    result = run_program(ADD, ["2 3\n"], mode="stdin", limits=SandboxLimits(timeout_s=0.5, memory_mb=512),
                         judge=lambda index, out: time.sleep(7) or True)
    assert result.status == "time_limit" and "graded" in result.detail, result


def test_the_comparison_of_outputs_keeps_the_official_verdicts():
    """stdout_matches counts lines and tokens before it converts anything; the verdicts are those of the official
    comparison (``grade_stdio``: stripped lines, text or exact decimals), checked here against its direct form on
    lines built to hit every branch (counts that differ, tokens that do not convert, signaling NaNs)."""
    from decimal import Decimal, InvalidOperation
    import random

    from snapeval.tasks.livecodebench import token_count

    def official(got, expected):
        a = [line.strip() for line in got.strip().split("\n")]
        b = [line.strip() for line in expected.strip().split("\n")]
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if x == y:
                continue
            try:
                dx = [Decimal(t) for t in x.split()]
            except Exception:  # noqa: BLE001
                dx = None
            try:
                dy = [Decimal(t) for t in y.split()]
            except Exception:  # noqa: BLE001
                dy = None
            if dx is None or dy is None or dx != dy:
                return False
        return True

    rng = random.Random(7)
    tokens = ["1", "1.0", "01", "-0", "0", "2", "1e3", "1000", "x", "sNaN", "NaN", "inf", "é", "5"]
    spaces = [" ", "  ", "\t", "\u00a0", "\u2003", "\x1c", "\r"]
    for _ in range(3000):
        def text():
            lines = [rng.choice(spaces).join(rng.choice(tokens) for _ in range(rng.randint(0, 3)))
                     for _ in range(rng.randint(1, 3))]
            return "\n".join(lines) + rng.choice(["", "\n", " \n"])
        got, expected = text(), text()
        try:
            want = official(got, expected)
        except InvalidOperation:
            with pytest.raises(InvalidOperation):
                stdout_matches(got, expected)
            continue
        assert stdout_matches(got, expected) == want, (got, expected)
        line = rng.choice(spaces).join(rng.choice(tokens + spaces) for _ in range(rng.randint(0, 6)))
        assert token_count(line) == len(line.split()), line


def test_a_results_shape_is_checked_before_it_is_decoded():
    """check_shape refuses, in C-speed passes over the bytes, a result with more than MAX_VALUES values or nested
    too deep for the parser; commas and brackets inside strings are not structure."""
    from snapeval.sandbox import protocol

    start = time.process_time()
    with pytest.raises(protocol.OutputTooLarge):
        protocol.decode_value(b"[" + b"[], " * (4 << 20) + b"[]]")
    with pytest.raises(protocol.ProtocolError, match="nested deeper"):
        protocol.decode_value(b"[" * (1 << 18) + b"]" * (1 << 18))
    assert time.process_time() - start < 1.0
    assert protocol.decode_value(b'["' + b",[" * (3 << 20) + b'"]') == [",[" * (3 << 20)]
    deep = b"[" * protocol.MAX_DEPTH + b"[1]" + b"]" * protocol.MAX_DEPTH
    with pytest.raises(protocol.ProtocolError, match="nested deeper"):
        protocol.decode_value(deep)
    assert protocol.decode_value(deep[1:-1]) is not None


FUTEX = """
import ctypes, mmap, os, struct, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
fd = os.open(os.__file__, os.O_RDONLY)  # a file every run sees read-only: the same page for every run
base = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
def word(slot):
    return struct.unpack_from('i', os.pread(fd, 4 * 16, 0), 4 * slot)[0]
"""
FUTEX_PUBLISHER = FUTEX + """
a, b = map(int, input().split())
end = time.time() + 2
while time.time() < end:  # wake whoever waits on slot a + b (a shared futex: keyed by the file's page)
    libc.syscall(202, ctypes.c_void_p(base + 4 * (a + b)), 1, 1 << 30, None, None, 0)
print(a + b)
"""
FUTEX_CHEATER = FUTEX + """
class Timespec(ctypes.Structure):
    _fields_ = [('sec', ctypes.c_long), ('nsec', ctypes.c_long)]
time.sleep(0.4)
for slot in range(16):
    if libc.syscall(202, ctypes.c_void_p(base + 4 * slot), 0, word(slot), ctypes.byref(Timespec(0, 100000000)),
                    None, 0) == 0:
        print(slot)
        break
"""


def test_cooperating_samples_cannot_pass_answers_through_shared_futexes():
    """Two runs that map the same read-only file share its futex keys (a shared futex is keyed by the page, not the
    process): one wakes the slot of its answer, the other waits on each slot in turn. Only process-private futex
    operations (what threads use) are allowed."""
    results = _cooperate(FUTEX_PUBLISHER, FUTEX_CHEATER)
    assert [r.status for r in results] == ["passed", "wrong_answer"], results


def test_sysinfo_host_wide_figures_are_refused():
    """sysinfo(2) returns the host's process count, load and shared memory (what /proc/stat, /proc/loadavg and
    /proc/meminfo show, now fixed views: issue #47); old code allowed it."""
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = ctypes.create_string_buffer(128)\n"
            "print(libc.syscall(99, buf), ctypes.get_errno())\n")
    seen = []
    result = run_program(hostile(code), ["x\n"], mode="stdin", judge=lambda i, out: seen.append(out) or True,
                         limits=FAST)
    assert result.passed and seen == [b"-1 1\n"], (result, seen)
