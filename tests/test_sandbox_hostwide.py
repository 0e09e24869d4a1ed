"""Nothing a run can read changes with another run (sandbox issue #47, item 1): host-wide figures under /proc are
fixed per-run views, the samples of one problem never run side by side, and the files a run maps are resident
before any run starts."""
from __future__ import annotations

import ctypes
import os
import threading
import time
from pathlib import Path

import pytest

from snapeval.sandbox import ProgramJob, SandboxLimits, harness, isolation, probe, run_program, run_programs
from snapeval.tasks.livecodebench import stdout_matches

FAST = SandboxLimits(timeout_s=3.0, memory_mb=512, output_bytes=1 << 20, disk_mb=8)
sandboxed = pytest.mark.skipif(not isolation().isolate_fs, reason="no mount namespace here: execution is refused")

READ_HOST = """
import os
def first(path, key):
    try:
        for line in open(path):
            if line.startswith(key):
                return line.split()[1]
    except OSError:
        return 'unreadable'
    return 'absent'
print(first('/proc/stat', 'processes'), first('/proc/meminfo', 'Shmem:'), open('/proc/loadavg').read().split()[3],
      sorted(os.listdir('/proc/sys')), len(open('/proc/vmstat').read()),
      sorted(os.listdir('/proc/pressure')) if os.path.isdir('/proc/pressure') else [])
"""


@sandboxed
@pytest.mark.runs_programs
def test_host_wide_proc_figures_are_fixed_views():
    """Old code: the host's fork count, shared memory, running threads, vm counters and /proc/sys (all moved by
    another run: enough to carry an answer between two samples)."""
    seen = []
    for _ in range(2):
        result = run_program(READ_HOST, ["x\n"], mode="stdin", judge=lambda i, out: seen.append(out) or True,
                             limits=FAST)
        assert result.passed, result
    assert seen[0] == seen[1] == b"0 0 1/1 [] 0 []\n", seen


@sandboxed
@pytest.mark.runs_programs
def test_cooperating_samples_cannot_meet_through_the_fork_count():
    """The copier of issue #47: it passes only if the fork count it sees moved by what the solver did beside it."""
    solver = "import os\na, b = map(int, input().split())\nprint(a + b)\n"
    copier = ("import os, time\nfirst = open('/proc/stat').read()\ntime.sleep(0.5)\n"
              "print(5 if open('/proc/stat').read() != first else 0)\n")
    judge = lambda index, out: stdout_matches(out, "5\n")  # noqa: E731
    results = run_programs([ProgramJob(copier, ["2 3\n"], "stdin", judge, group="p"),
                            ProgramJob(solver, ["2 3\n"], "stdin", judge, group="p")], limits=FAST, workers=2)
    assert [r.status for r in results] == ["wrong_answer", "passed"], results


# How a run reads the kernel-wide counter that numbers the inodes of new pipes, sockets and /proc entries: one
# counter per CPU, moved in batches of 1,024 from a shared one, so its low ten bits on one CPU count every such
# inode made there.
PIPE_INODE = """
import os
def inode():
    reading, writing = os.pipe()
    number = os.fstat(reading).st_ino
    os.close(reading)
    os.close(writing)
    return number
"""
PROC_INODE = """
import os, threading
def inode():
    seen = []
    def look():
        seen.append(os.stat(f'/proc/self/task/{threading.get_native_id()}').st_ino)
    thread = threading.Thread(target=look)
    thread.start()
    thread.join()
    return seen[0]
"""
# the solver leaves the counter of CPU 0 at its answer x 64 (at most 1,024 inodes); the copier, run next on CPU 0,
# reads it, rounding off what was made there in between (the harness's pipes, another run's start: fewer than 64)
INODE_SOLVER = """
a, b = map(int, input().split())
try:
    os.sched_setaffinity(0, {0})
    while inode() % 1024 != (a + b) * 64:
        pass
except Exception:
    pass
print(a + b)
"""
INODE_COPIER = """
try:
    os.sched_setaffinity(0, {0})
    print((inode() - 1) % 1024 // 64)
except Exception:
    print(-1)
"""


@sandboxed
@pytest.mark.runs_programs
@pytest.mark.parametrize("channel", ["pipes", "proc"])
def test_cooperating_samples_in_sequence_cannot_meet_through_the_inode_counter(channel):
    """Issue #47: the samples of one problem run one after the other, and the copier, run right after the solver,
    read its answer (11) off the counter of new inodes (old code: both passed, through pipes and through the /proc
    entries of new threads). A run can make neither now (pipe/socket creation is refused, /proc is a fixed tmpfs)."""
    reader = PIPE_INODE if channel == "pipes" else PROC_INODE
    judge = lambda index, out: stdout_matches(out, "11\n")  # noqa: E731
    results = run_programs([ProgramJob(reader + INODE_SOLVER, ["4 7\n"], "stdin", judge, group="p"),
                            ProgramJob(reader + INODE_COPIER, ["4 7\n"], "stdin", judge, group="p")], limits=FAST)
    assert [r.status for r in results] == ["passed", "wrong_answer"], results


# The host's PID counter, read through the run's uid (old code: SANDBOX_UID_BASE + the driver's host PID; two per
# run in between, setpriv/unshare and the driver): the solver makes as many threads (each a host PID) as put the next
# run's uid at its answer x 64.
UID_SOLVER = f"""
import os, threading
a, b = map(int, input().split())
driver = os.getuid() - {probe.SANDBOX_UID_BASE}
for _ in range(((a + b) * 64 - driver - 2) % 1024):
    thread = threading.Thread(target=int)
    thread.start()
    thread.join()
print(a + b)
"""
UID_COPIER = f"import os\nprint((os.getuid() - {probe.SANDBOX_UID_BASE}) % 1024 // 64)\n"


@sandboxed
@pytest.mark.runs_programs
def test_cooperating_samples_in_sequence_cannot_meet_through_the_run_uid():
    """Issue #47: a run's uid was SANDBOX_UID_BASE plus its driver's host PID, and a run moves the host's PID counter
    with every thread it makes: the copier read the solver's answer in its own uid (old code: both passed). The uid
    is drawn at random now (probe.run_uid_spec)."""
    if isolation().drop_uid is None:
        pytest.skip("not root: runs share the harness's uid")
    # A random uid still gives the copier a 1-in-16 guess in one round: four rounds with four answers, and the copier
    # must miss at least one (all four by chance: 16^-4; the old code's copier hit every one).
    copied = []
    for a, b in ((4, 7), (1, 2), (5, 9), (3, 3)):
        judge = lambda index, out, answer=a + b: stdout_matches(out, f"{answer}\n")  # noqa: E731
        results = run_programs([ProgramJob(UID_SOLVER, [f"{a} {b}\n"], "stdin", judge, group="p"),
                                ProgramJob(UID_COPIER, [f"{a} {b}\n"], "stdin", judge, group="p")], limits=FAST)
        assert results[0].status == "passed", results
        copied.append(results[1].status == "passed")
    assert not all(copied), copied


def test_samples_of_one_problem_never_run_side_by_side(monkeypatch):
    """Old code: ProgramJob had no group, and every job ran as soon as a worker was free."""
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    lock = threading.Lock()

    def fake_run(code, inputs, *, mode, judge, func_name=None, limits=None):
        with lock:
            running[code] = running.get(code, 0) + 1
            most[code] = max(most.get(code, 0), running[code])
        time.sleep(0.02)
        with lock:
            running[code] -= 1
        return harness.ProgramResult("passed")

    monkeypatch.setattr(harness, "run_program", fake_run)
    jobs = [ProgramJob(problem, [], "stdin", lambda i, o: True, group=problem) for problem in "aabbbc" * 3]
    results = run_programs(jobs, workers=4)
    assert len(results) == len(jobs) and all(r.passed for r in results)
    assert most == {"a": 1, "b": 1, "c": 1}, most


def test_the_files_a_run_maps_are_read_before_any_run():
    iso = isolation()
    if not iso.isolate_fs:
        pytest.skip("no new root here: a run maps the host's files")
    stdlib_file = os.path.join(os.path.dirname(os.__file__), "os.py")
    assert any(stdlib_file.startswith(path) for path in iso.expose)
    assert probe.make_resident([stdlib_file]) == os.path.getsize(stdlib_file)
    assert probe.make_resident([os.path.dirname(stdlib_file)], hidden=iso.hide) > 0


def test_evicted_pages_of_the_mapped_files_are_read_again_before_a_run(tmp_path):
    """Issue #47: the files a run maps were read once per process; pages the host evicted afterwards stayed out, and a
    run touching some of them showed the next run which (its major faults). Before every run, each file the page
    cache no longer holds whole is read again (cachestat)."""
    library = tmp_path / "libanswer.so"
    library.write_bytes(os.urandom(1 << 20))
    with open(library, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # what the host's reclaim does to a clean file
    first = probe.keep_resident([str(library)])
    if first == 0 and probe.keep_resident([str(library)]) == 0:
        with open(library, "rb") as f:
            whole, seen = probe._CachestatRange(0, 0), probe._Cachestat()
            if probe._libc.syscall(probe._SYS_CACHESTAT, f.fileno(), ctypes.byref(whole), ctypes.byref(seen), 0):
                pytest.skip("no cachestat(2) here (Linux 6.5)")
    assert first == 1 << 20
    assert probe.keep_resident([str(library)]) == 0  # whole in the page cache now: nothing read
    mapped = isolation().mapped
    if isolation().isolate_fs:
        assert os.path.realpath(isolation().python) in mapped and any(".so" in path for path in mapped)


def test_the_runs_parent_group_weighs_as_its_parallel_runs(tmp_path):
    """Old code: the parent of every run's cgroup kept the default weight (all parallel runs = one host process)."""
    from snapeval.sandbox.cgroups import CPU_WEIGHT, MAX_WEIGHT, CgroupTree

    (tmp_path / "cpu.weight").write_text("100\n")
    tree = CgroupTree(2, {"unified": str(tmp_path)})
    tree.weigh(8)
    assert (tmp_path / "cpu.weight").read_text().strip() == str(8 * CPU_WEIGHT)
    tree.weigh(1000)
    assert (tmp_path / "cpu.weight").read_text().strip() == str(MAX_WEIGHT)
    tree = isolation().cgroups
    if tree is None or tree.version != 2 or not os.path.exists(os.path.join(tree.bases["unified"], "cpu.weight")):
        pytest.skip("no cgroup v2 cpu controller here")
    run_programs([ProgramJob("print(1)", [], "stdin", lambda i, o: True, group=g) for g in "ab"], limits=FAST,
                 workers=2)
    with open(os.path.join(tree.bases["unified"], "cpu.weight")) as f:
        assert f.read().strip() == str(2 * CPU_WEIGHT)


# ------------------------------------------------------------------------------ what a run leaves (issue #60)
def _readings(code: str) -> list:
    box = []
    result = run_program(code, ["\n"], mode="stdin", judge=lambda i, o: box.append(o.decode()) or True, limits=FAST)
    assert result.passed, result
    return eval(box[0])  # noqa: S307 - the test's own program printed a repr of numbers


OWN_NUMBERS = """
import os, time
fds = []
for fd in range(3, 12):
    try:
        st = os.fstat(fd)
        fds.append((fd, st.st_ino, oct(st.st_mode)))
    except OSError:
        pass
load = os.getloadavg() if os.getloadavg() == __import__('posix').getloadavg() else None
print(repr((fds, os.stat('/work').st_ino, os.stat(os.path.dirname(os.__file__)).st_dev, time.monotonic(),
            time.clock_gettime(time.CLOCK_BOOTTIME), load)))
"""
BUSY = """
import os, mmap, threading
for i in range(300):
    open(f'/work/f{i}', 'w').close()
for i in range(20):
    os.mkfifo(f'/tmp/p{i}')
maps = [mmap.mmap(-1, 4096) for _ in range(100)]
for _ in range(100):
    t = threading.Thread(target=int)
    t.start()
    t.join()
print(1)
"""


@sandboxed
@pytest.mark.runs_programs
def test_a_run_reads_numbers_of_its_own_not_the_hosts():
    """Issue #60: the input and result were pipes the harness made, numbered by the host-wide inode counter that an
    earlier run moved (211 after a busy run against 129 after an idle one); they are FIFOs of the run's own tmpfs now,
    numbered alike in every run. The shared folders are a file system of the run's own (not the host's, whose
    dentry cache kept the names a run looked up), its monotonic and boot-time clocks sit at a random offset, and
    ``os.getloadavg()`` answers from the run's /proc (it raised: sysinfo is refused)."""
    iso = isolation()
    seen = []
    for solver in ("print(1)\n", BUSY):
        run_program(solver, ["\n"], mode="stdin", judge=lambda i, o: True, limits=FAST)
        seen.append(_readings(OWN_NUMBERS))
    (fds_a, work_a, dev_a, mono_a, boot_a, load_a), (fds_b, work_b, dev_b, mono_b, boot_b, load_b) = seen
    if iso.fifo_io:
        fifos = [(fd, inode) for fd, inode, mode in fds_a if mode.startswith("0o10")]  # S_IFIFO
        assert fds_a == fds_b and len(fifos) == 2, seen  # the input and the result, numbered alike in every run
    assert work_a == work_b == 1 and load_a == load_b == (0.0, 0.0, 0.0)
    if iso.image:
        assert dev_a != os.stat(os.path.dirname(os.__file__)).st_dev  # not the host's file system
    if iso.own_clocks:  # offsets drawn below 2^30 s: two within 1,000 s of each other once in a million pairs
        assert abs(mono_b - mono_a) > 1000 and abs(boot_b - boot_a) > 1000, seen


SPEC_SEARCH = """
import gc, sys
found = []
for obj in gc.get_objects():
    if isinstance(obj, dict) and 'mode' in obj and 'code' in obj:
        found.append(sorted(obj))
frames, frame = [], sys._getframe()
while frame:
    frames.append(frame.f_code.co_filename)
    frame = frame.f_back
print(repr((found, sys.argv, sys.orig_argv[1:5], frames)))
"""


@sandboxed
@pytest.mark.runs_programs
def test_the_spec_a_program_sees_names_nothing_of_the_host():
    """Issue #60: the driver's spec in the program's memory held the checkout's path, the harness's run directory,
    its PID and its run counter (the cgroup's path), and its file name was the checkout's path."""
    found, argv, orig, frames = _readings(SPEC_SEARCH)
    assert found == [["code", "func_name", "load_only", "max_file_bytes", "mode", "result_limits"]], found
    text = repr((found, argv, orig, frames))
    repo = str(Path(__file__).resolve().parents[1])
    assert repo not in text and "snapeval-sandbox" not in text and str(os.getpid()) not in text, text
    assert all(not name.startswith("/") or name.startswith("/sandbox/") for name in frames), frames


def test_runs_are_shuffled_and_a_groups_next_run_waits(monkeypatch):
    """Issue #60: the samples of one problem ran back to back in job order, and the next one started a fixed gap
    after the previous ended (the copier read the phase of the wall clock the solver ended at). The order is
    random now, and a group's later run starts after a random delay."""
    order, delays = [], []
    monkeypatch.setattr(harness, "run_program", lambda code, *a, **k: order.append(code) or harness.ProgramResult(
        "passed"))
    monkeypatch.setattr(harness.time, "sleep", delays.append)
    jobs = [ProgramJob(f"{problem}{n}", [], "stdin", lambda i, o: True, group=problem)
            for problem in "abcdefgh" for n in range(3)]
    assert all(r.passed for r in run_programs(jobs, workers=2))
    assert sorted(order) == sorted(job.code for job in jobs) and order != [job.code for job in jobs]
    assert len(delays) == 16 and all(0 <= d < harness.START_JITTER_S for d in delays) and len(set(delays)) > 1


WALL_CLOCK = """
import datetime, os, time, uuid
open('/work/f', 'w').write('1')
readings = {'time': time.time(), 'time_ns': time.time_ns() / 1e9, 'realtime': time.clock_gettime(time.CLOCK_REALTIME),
            'tai': time.clock_gettime(time.CLOCK_TAI), 'datetime': datetime.datetime.now().timestamp(),
            'utcnow': datetime.datetime.utcnow().replace(tzinfo=datetime.timezone.utc).timestamp(),
            'today': time.time() if datetime.date.today() == datetime.date.fromtimestamp(time.time()) else 0,
            'localtime': time.mktime(time.localtime()),
            'file': os.stat('/work/f').st_mtime, 'work': os.stat('/work').st_mtime, 'fifo': os.fstat(4).st_mtime,
            'scandir': [e.stat().st_mtime for e in os.scandir('/work')][0],
            'uuid1': (uuid.uuid1().time - 0x01b21dd213814000) / 1e7}
print(repr((readings, os.times().elapsed - time.monotonic())))
"""


@sandboxed
@pytest.mark.runs_programs
def test_a_run_reads_a_wall_clock_of_its_own():
    """Issue #60's clock channel: a correct sample ended each test at a wall-clock phase encoding its answers and the
    next sample read the phase as it started (about a bit a pair through the shuffled order). Every way the
    interpreter gives a program to read the wall clock (``time``, ``datetime``, ``uuid1``, the times of its files and
    FIFOs) now reads the host's clock plus an offset drawn for the run: a random instant of 2000-2034, unrelated to
    the host's time and to the previous run's. ``os.times().elapsed`` counted from the host's boot; it is the run's
    monotonic clock now."""
    runs = []
    for _ in range(2):
        host = time.time()
        readings, elapsed_gap = _readings(WALL_CLOCK)
        values = list(readings.values())
        assert max(values) - min(values) < 60, readings  # one clock (file times of the run's seconds, TAI's 37 s)
        assert abs(readings["time"] - host) > 1000, readings  # 1,000 s of 2^30: once in a million runs
        assert abs(elapsed_gap) < 0.05, elapsed_gap
        runs.append(readings["time"] - host)
    assert abs(runs[0] - runs[1]) > 1000, runs


INNOCENT_CLOCKS = """
import datetime, os, pickle, time
from datetime import datetime as dt, timedelta
start, start_dt = time.time(), dt.now()
d = datetime.date(2024, 2, 28) + timedelta(days=2)
checks = [d.isoformat() == '2024-03-01', (datetime.date(2024, 3, 1) - datetime.date(2023, 3, 1)).days == 366,
          repr(dt(2020, 1, 2, 3, 4)) == 'datetime.datetime(2020, 1, 2, 3, 4)', dt.max.year == 9999,
          isinstance(dt.now(), datetime.date), type(dt.now() + timedelta(1)) is dt,
          pickle.loads(pickle.dumps(start_dt)) == start_dt, dt.strptime('2021-05-06', '%Y-%m-%d').weekday() == 3,
          time.strftime('%Y', time.gmtime(0)) == '1970', len(time.ctime()) == 24]
time.sleep(0.05)
checks.append(0.04 < time.time() - start < 2 and timedelta(0) < dt.now() - start_dt < timedelta(seconds=2))
open('/work/g', 'w').close()
os.utime('/work/g', (1000000000.5, 1500000000.25))
checks.append((os.stat('/work/g').st_atime, os.path.getmtime('/work/g')) == (1000000000.5, 1500000000.25))
checks.append(os.stat('/work/g').st_mtime_ns == 1500000000250000000 and os.stat('/work/g')[8] == 1500000000)
print(checks.index(False) if False in checks else 'ok')
"""


@sandboxed
@pytest.mark.runs_programs
def test_innocent_uses_of_the_clock_still_work():
    """What legitimate solutions do with ``time`` and ``datetime`` (elapsed times, date arithmetic, ``repr``,
    ``strftime``, ``strptime``, pickling) and with file times (``os.utime``, then ``stat``) is unchanged by the
    run's own wall clock."""
    box = []
    result = run_program(INNOCENT_CLOCKS, ["\n"], mode="stdin", judge=lambda i, o: box.append(o.decode()) or True,
                         limits=FAST)
    assert result.passed and box == ["ok\n"], (result, box)


WALL_CLOCK_IN_PROCESS = """
import datetime, os, pickle, sys, time
sys.path.insert(0, sys.argv[1])
import wallclock
open('f', 'w').close()
fd = os.open('f', os.O_RDONLY)
[e.stat() for e in os.scandir('.')]  # the folder's access time set by its first read (relatime), not by the test's
before = [os.stat('.'), os.fstat(fd), [e.stat() for e in os.scandir('.')]]
assert wallclock.own_wall_clock(0) == 0
assert before == [os.stat('.'), os.fstat(fd), [e.stat() for e in os.scandir('.')]]  # offset 0: the same results
host = time.time()
shift = wallclock.own_wall_clock(10**18)  # the run's clock 10^9 s ahead
assert abs(time.time() - host - 1e9) < 5 and abs(datetime.datetime.now().timestamp() - host - 1e9) < 5
assert abs(os.stat('.').st_mtime - before[0].st_mtime - 1e9) < 1e-3, os.stat('.')
assert os.stat('.').st_mtime_ns - before[0].st_mtime_ns == 10**18 and os.stat('.')[8] == before[0][8] + 10**9
os.utime('.', ns=(before[0].st_atime_ns + 10**18, before[0].st_mtime_ns + 10**18))  # back where it was
assert os.lstat('.').st_mtime_ns == before[0].st_mtime_ns + 10**18
print('ok')
"""


def test_the_run_clock_is_the_hosts_plus_one_offset(tmp_path):
    """``wallclock.own_wall_clock`` in a process of its own (no sandbox needed): with offset 0 every reading is the
    host's exactly, stat results included; with an offset every clock and file time moves by it, and times given to
    ``os.utime`` come back as given."""
    import subprocess
    import sys

    folder = Path(__file__).resolve().parents[1] / "snapeval" / "sandbox"
    out = subprocess.run([sys.executable, "-I", "-c", WALL_CLOCK_IN_PROCESS, str(folder)], cwd=tmp_path,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert out.stdout == "ok\n", out.stderr


def test_the_samples_of_all_problems_take_turns(monkeypatch):
    """A worker takes a job of the group whose last run ended longest ago: the samples of all problems take turns,
    so a sample never follows one of its own problem while other problems have samples left (it did when the
    shuffled order put two side by side: the copier that reads the clock past the run's own view then ran right
    after the solver)."""
    order = []
    monkeypatch.setattr(harness, "run_program", lambda code, *a, **k: order.append(code) or harness.ProgramResult(
        "passed"))
    monkeypatch.setattr(harness.time, "sleep", lambda s: None)
    jobs = [ProgramJob(f"{problem}{n}", [], "stdin", lambda i, o: True, group=problem)
            for problem in "abcdefgh" for n in range(3)] + [ProgramJob("z", [], "stdin", lambda i, o: True)]
    assert all(r.passed for r in run_programs(jobs, workers=1))
    groups = [code[0] for code in order]
    assert all(a != b for a, b in zip(groups, groups[1:])), groups
    assert sorted(groups[:9]) == sorted("abcdefghz")  # every problem's first sample first
    assert all(sorted(groups[i:i + 8]) == sorted("abcdefgh") for i in (9, 17)), groups
