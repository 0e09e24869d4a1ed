"""The LiveCodeBench sandbox: real problems pass/fail correctly, hostile programs are contained."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from snapeval.errors import SnapevalError
from snapeval.sandbox import ProgramJob, SandboxLimits, isolation, run_program, run_programs
from snapeval.tasks import livecodebench
from snapeval.tasks.livecodebench import TestCase, stdout_matches

pytestmark = pytest.mark.runs_programs  # beside the red-team checks of leftovers, never during them (conftest.py)

from tests.conftest import DATA_DIR as DATA  # noqa: E402  (the shared data folder, as conftest finds it)
FAST = SandboxLimits(timeout_s=2.0, memory_mb=512, output_bytes=1 << 20)
#: The same memory limit with time to reach it on a loaded machine (a growing bomb takes 0.3 s of CPU alone, and
#: about 2 s beside the rest of the suite): the memory limit, not the clock, must be what stops it.
ROOMY = SandboxLimits(timeout_s=20.0, memory_mb=512, output_bytes=1 << 20)

# Correct solutions, written for these real problems.
SOLUTIONS = {
    "1873_A": "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n"
              "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) <= 2 else 'NO')\n",
    "abc365_b": "n = int(input())\na = list(map(int, input().split()))\n"
                "print(sorted(range(n), key=lambda i: a[i])[-2] + 1)\n",
    "2727": "class Solution:\n    def countSeniors(self, details: List[str]) -> int:\n"
            "        return sum(int(d[11:13]) > 60 for d in details)\n",
    "2844": "class Solution:\n    def sumOfSquares(self, nums: List[int]) -> int:\n        n = len(nums)\n"
            "        return sum(x * x for i, x in enumerate(nums, 1) if n % i == 0)\n",
}
WRONG = {
    "1873_A": "t = int(input())\nfor _ in range(t):\n    input()\n    print('YES')\n",
    "abc365_b": "n = int(input())\na = list(map(int, input().split()))\nprint(a.index(max(a)) + 1)\n",
    "2727": "class Solution:\n    def countSeniors(self, details):\n        return len(details)\n",
    "2844": "class Solution:\n    def sumOfSquares(self, nums):\n        return sum(x * x for x in nums)\n",
}


@pytest.fixture(scope="module")
def problems():
    if not (DATA / "livecodebench" / "code_generation_lite.jsonl").is_file():
        pytest.skip(f"real data not available under {DATA} (set SNAPEVAL_DATA_DIR)")
    rows = {r["question_id"]: r for r in livecodebench.load(DATA).rows}
    return {qid: rows[qid] for qid in SOLUTIONS}


def _job(doc, code):
    tests = livecodebench.tests_of(doc)
    return ProgramJob(code, [c.input for c in tests.cases], tests.mode, livecodebench.judge(tests), tests.func_name)


def test_real_problems_correct_pass_wrong_fail(problems):
    assert {livecodebench.tests_of(d).cases[0].testtype for d in problems.values()} == {"stdin", "functional"}
    jobs = [_job(problems[q], SOLUTIONS[q]) for q in SOLUTIONS] + [_job(problems[q], WRONG[q]) for q in WRONG]
    results = run_programs(jobs, limits=FAST)
    n = len(SOLUTIONS)
    assert [r.status for r in results[:n]] == ["passed"] * n, [r.detail for r in results[:n]]
    assert [r.status for r in results[n:]] == ["wrong_answer"] * n


def test_evaluate_extracts_code_from_responses(problems):
    doc = problems["2844"]
    good = f"<think>try x*x for all?</think>Here:\n```python\n{SOLUTIONS['2844']}```"
    bad = f"```python\n{SOLUTIONS['2844']}```\nActually:\n```python\n{WRONG['2844']}```"
    results = livecodebench.evaluate([doc], [[good, bad, "no code at all"]], limits=FAST)[0]
    assert results[0].passed and results[1].status == "wrong_answer" and results[2] is None
    metrics = livecodebench.score(doc, results, k=2)
    assert metrics == {"pass@1": pytest.approx(1 / 3), "no_code": pytest.approx(1 / 3), "private_tests_used": 0.0,
                       "pass@2": pytest.approx(2 / 3)}


STDIN = ["2 3\n"]
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"


def wants(*outputs):
    """A judge expecting these standard outputs (the official line rules)."""
    return lambda index, output: stdout_matches(output, outputs[index])


def run_stdin(code, inputs=STDIN, outputs=("5\n",), **kw):
    return run_program(code, inputs, mode="stdin", judge=wants(*outputs), limits=kw.pop("limits", FAST), **kw)


@pytest.mark.parametrize("name, code, statuses", [
    ("infinite loop", "while True:\n    pass\n", {"time_limit"}),
    ("sleep past the wall clock", "import time\ntime.sleep(60)\n", {"time_limit"}),
    ("fork bomb", "import os\nwhile True:\n    os.fork()\n", {"runtime_error"}),
    ("subprocess", "import subprocess\nsubprocess.run(['sh', '-c', 'echo 5'])\n", {"runtime_error"}),
    ("memory bomb", "x = bytearray(8 << 30)\nprint(5)\n", {"runtime_error"}),
    ("memory bomb, growing", "x = []\nwhile True:\n    x.append(' ' * (1 << 20))\n", {"runtime_error"}),
    ("socket", "import socket\ns = socket.create_connection(('1.1.1.1', 53), timeout=1)\nprint(5)\n",
     {"runtime_error"}),
    ("kill the parent", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(5)\n", {"runtime_error"}),
    ("kill everything", "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint(5)\n", {"runtime_error"}),
    ("print gigabytes", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", {"output_limit"}),
    ("print gigabytes, swallowing the error",
     "while True:\n    try:\n        print('x' * 65536)\n    except BaseException:\n        break\nprint(5)\n",
     {"output_limit"}),
    ("exit early", "import sys\nsys.exit(0)\nprint(5)\n", {"wrong_answer"}),
    ("os._exit early", "import os\nos._exit(0)\n", {"runtime_error"}),
    ("read the environment", "import os\nprint(dict(os.environ))\n", {"wrong_answer"}),
    ("chdir out and write", "import os\nos.chdir('/tmp')\nopen('escape', 'w').write('x')\nprint(5)\n",
     {"runtime_error"}),
    ("ctypes", "import ctypes\nctypes.CDLL(None).fork()\nprint(5)\n", {"runtime_error"}),
    ("syntax error", "def f(:\n", {"runtime_error"}),
])
def test_hostile_programs_fail_the_problem_only(name, code, statuses, tmp_path, monkeypatch):
    monkeypatch.setenv("SNAPEVAL_TEST_SECRET", "hunter2-secret")
    result = run_stdin(code, limits=ROOMY if name.startswith("memory bomb") else FAST)
    assert result.status in statuses, (name, result)
    assert run_stdin(ADD).passed  # the harness carries on


def test_writes_outside_the_working_dir_change_nothing(tmp_path):
    target = tmp_path / "outside.txt"
    os.chmod(tmp_path, 0o777)
    for code in (f"open({str(target)!r}, 'w').write('x')\nprint(5)\n",
                 f"import os\nos.remove({str(Path(__file__).resolve())!r})\nprint(5)\n",
                 f"import shutil\nshutil.rmtree({str(tmp_path)!r})\nprint(5)\n"):
        assert run_stdin(code).status == "runtime_error"
    assert not target.exists() and tmp_path.is_dir() and Path(__file__).is_file()


def test_environment_secrets_do_not_reach_the_program(monkeypatch):
    monkeypatch.setenv("SNAPEVAL_TEST_SECRET", "hunter2-secret")
    probe = "import os\nprint('hunter2-secret' in str(dict(os.environ)) and 5 or 6)\n"
    assert run_stdin(probe).status == "wrong_answer"  # printed 6: no secret seen
    proc = "import os\nprint(5 if not any('hunter2' in open(f'/proc/{p}/environ').read() for p in os.listdir('/proc') if p.isdigit()) else 6)\n"
    assert run_stdin(proc).status in ("passed", "runtime_error")


def test_hostile_and_good_programs_in_parallel():
    jobs = [ProgramJob(code, STDIN, "stdin", wants("5\n"))
            for code in ("while True: pass\n", ADD, "import os\nos.kill(-1, 9)\n", ADD)]
    statuses = [r.status for r in run_programs(jobs, limits=SandboxLimits(timeout_s=1.0), workers=2)]
    assert statuses == ["time_limit", "passed", "runtime_error", "passed"]


def test_functional_mode_and_grading():
    tests = livecodebench.Tests((TestCase("[1, 2]\n3", "[4, 5]", "functional"),), "f", False)
    ok = "class Solution:\n    def f(self, a, k):\n        return tuple(x + k for x in a)\n"
    judge = livecodebench.judge(tests)
    assert run_program(ok, ["[1, 2]\n3"], mode="functional", judge=judge, func_name="f", limits=FAST).passed
    assert run_program(ok, ["[1, 2]\n3"], mode="functional", judge=judge, limits=FAST).status == "sandbox_error"
    assert stdout_matches("1.50 2\n\n", "1.5 2") and not stdout_matches("1 2", "1 2\n3")
    with pytest.raises(SnapevalError, match="testtype='file'"):
        TestCase("", "", "file")
    with pytest.raises(SnapevalError, match="mode='file' is not allowed; choose one of: stdin, functional"):
        run_program(ok, ["1"], mode="file", judge=judge)
    for field, value in (("timeout_s", 0), ("memory_mb", -1), ("output_bytes", 1.5), ("program_output_bytes", True)):
        with pytest.raises(SnapevalError, match=f"{field}={value!r} is not allowed") as err:
            SandboxLimits(**{field: value})
        assert "\n" not in str(err.value)


def test_isolation_report_is_honest():
    report = isolation().describe()
    assert report["audit_hook"] is True
    if os.geteuid() == 0 and report["namespaces"] != "none" and not report["user_namespace"]:
        assert report["runs_as"] == ("a uid of its own per run" if report["new_root"] else "nobody")


def test_malformed_test_cases_fail_when_the_data_loads(tmp_path):
    """A broken test case is a one-line error naming file:line (blank lines counted) and the field, raised by
    ``load`` before any generation, not at grading; non-UTF-8 bytes name their line too."""
    if not (DATA / "livecodebench" / "code_generation_lite.jsonl").is_file():
        pytest.skip(f"real data not available under {DATA}")
    import json

    first = (DATA / "livecodebench" / "code_generation_lite.jsonl").read_text(encoding="utf-8").splitlines()[0]
    good = json.loads(first)
    functional = {**good, "public_test_cases": json.dumps([{"input": "[1, 2\n3", "output": "3", "testtype": "functional"}]),
                  "metadata": json.dumps({"func_name": "f"})}
    folder = tmp_path / "livecodebench"
    folder.mkdir()
    path = folder / "code_generation_lite.jsonl"
    path.write_text(first + "\n\n\n" + json.dumps(functional) + "\n", encoding="utf-8")
    with pytest.raises(SnapevalError, match=r"code_generation_lite.jsonl:4: public_test_cases\[0\].input must be JSON "
                                            r"for a functional test") as err:
        livecodebench.load(tmp_path)
    assert "\n" not in str(err.value)
    path.write_bytes(first.encode() + b"\n\n" + first.encode()[:40] + b"\xc3\x28" + first.encode()[40:] + b"\n")
    with pytest.raises(SnapevalError, match=r"code_generation_lite.jsonl:3: not UTF-8 text"):
        livecodebench.load(tmp_path)


# ---------------------------------------------------------------------------------------- kernel accounting
V2_HOST = """\
24 1 0:21 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
"""
HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_cgroup_candidates_from_mountinfo():
    """Where run cgroups go: below this process's own cgroup first, then the v2 root; v1 needs memory and pids."""
    from snapeval.sandbox.cgroups import candidate_parents, parse_mountinfo, parse_proc_cgroup

    own = parse_proc_cgroup("0::/user.slice/session-3.scope\n")
    assert candidate_parents(parse_mountinfo(V2_HOST), own) == [
        (2, {"unified": "/sys/fs/cgroup/user.slice/session-3.scope"}), (2, {"unified": "/sys/fs/cgroup"})]
    own = parse_proc_cgroup("4:memory:/jobs/a\n2:cpu,cpuacct:/\n8:pids:/\n9:name=systemd:/\n0::/\n")
    assert candidate_parents(parse_mountinfo(HYBRID), own) == [
        (2, {"unified": "/sys/fs/cgroup/unified"}),
        (1, {"memory": "/sys/fs/cgroup/memory/jobs/a", "pids": "/sys/fs/cgroup/pids",
             "cpuacct": "/sys/fs/cgroup/cpu,cpuacct", "cpu": "/sys/fs/cgroup/cpu,cpuacct"})]
    assert candidate_parents(parse_mountinfo(HYBRID.replace("rw,pids", "rw,freezer")), own)[1:] == []


def test_cgroup_v2_run_writes_its_limits_and_reads_the_kernel(tmp_path, monkeypatch):
    """A v2 run on a stand-in file tree: the base enables memory and pids for its children, the run gets memory.max,
    pids.max (and swap 0 / OOM as a group where the kernel has them), and CPU, OOM kills and emptiness are read
    from cpu.stat, memory.events and cgroup.events."""
    from snapeval.sandbox import cgroups
    from snapeval.sandbox.cgroups import make_tree

    monkeypatch.setattr(cgroups, "_write", lambda path, value: Path(path).write_text(value))  # the kernel's files

    parent = tmp_path / "cg"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("cpu io memory pids\n")
    (parent / "cgroup.subtree_control").write_text("")
    tree = make_tree(2, {"unified": str(parent)}, 4242)
    base = parent / "snapeval-sandbox-4242"
    assert (parent / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"  # cpu: a share per run
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    run = tree.new_run(256 << 20, 16)
    d = base / "run-0"
    assert (d / "memory.max").read_text() == str(256 << 20) and (d / "pids.max").read_text() == "16"
    assert run.procs_files == [str(d / "cgroup.procs")]
    (d / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    (d / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    (d / "cgroup.procs").write_text("")
    assert (run.cpu_seconds(), run.oom_kills(), run.empty(), run.members()) == (1.5, 1, True, set())
    for name in ("cpu.stat", "memory.events", "cgroup.events", "cgroup.procs", "memory.max", "pids.max"):
        (d / name).unlink()
    assert run.remove() and not d.exists()
    (base / "cgroup.subtree_control").unlink()  # a real cgroup's files go with its directory
    tree.cleanup()
    assert not base.exists()
    (parent / "cgroup.controllers").write_text("cpu io\n")
    with pytest.raises(OSError, match="no memory and pids controllers"):
        make_tree(2, {"unified": str(parent)}, 4243)


def test_this_machine_accounts_runs_in_a_cgroup_when_it_can():
    """As root on a machine with a cgroup file system (this one, CI), runs are accounted in a cgroup; the mode is
    reported either way."""
    report = isolation().describe()
    assert report["accounting"].startswith(("cgroup v2", "cgroup v1", "rlimits"))
    if os.geteuid() == 0 and report["new_root"] and Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists():
        assert report["accounting"].startswith("cgroup")


def test_output_up_to_the_cap_passes_and_one_byte_more_is_an_output_limit():
    limits = SandboxLimits(timeout_s=2.0, memory_mb=512, output_bytes=4096)
    exact = "import sys\nsys.stdout.write('x' * 4094 + '\\n')\nprint(5)\n"  # 4095 + 2 = 4097 characters
    assert run_stdin(exact, outputs=("x" * 4094 + "\n5\n",), limits=limits).status == "output_limit"
    under = "import sys\nsys.stdout.write('x' * 4093 + '\\n')\nprint(5)\n"  # 4094 + 2 = 4096 characters
    assert run_stdin(under, outputs=("x" * 4093 + "\n5\n",), limits=limits).passed


def _seccomp_verdict(program, arch, nr, args=(0,) * 6):
    """Run the filter (``driver.seccomp_program``) on one system call: a small interpreter of the classic BPF
    instructions it uses (load word of seccomp_data, jeq / jge / jset / ja, ret)."""
    import struct

    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x06:
            return k
        elif code == 0x05:
            pc += k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        pc += 1


def test_the_seccomp_allow_list_as_the_kernel_runs_it():
    """The filter, run instruction by instruction for both architectures: the allowed calls pass, everything else is
    EPERM (record locks, shared futexes, new pipes and sockets, AIO, io_uring, the page-cache probes, flock, new
    processes, listmount, statmount, file handles), clone3 and statx (mount ids, issue #60)
    ENOSYS, threads only through clone, x32 and a foreign architecture kill the process; every jump is short."""
    from snapeval.sandbox import driver

    allow, eperm, enosys, kill = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000
    for machine, column in (("x86_64", 0), ("aarch64", 1)):
        program = driver.seccomp_program(machine)
        arch = driver._AUDIT_ARCH[machine]
        assert all(0 <= jt <= 255 and 0 <= jf <= 255 for _, jt, jf, _ in program)
        for name, numbers in driver.ALLOWED_SYSCALLS.items():
            assert _seccomp_verdict(program, arch, numbers[column]) == allow, (machine, name)
        ruled = {name: (x86, arm)[column] for name, (x86, arm, _, _) in driver.ARGUMENT_RULES.items()}
        for name, nr, args, verdict in [
            ("fcntl F_GETFL", ruled["fcntl"], (3, 3), allow), ("fcntl F_SETLK", ruled["fcntl"], (3, 6), eperm),
            ("fcntl F_OFD_SETLK", ruled["fcntl"], (3, 37), eperm), ("fcntl F_GETLK", ruled["fcntl"], (3, 5), eperm),
            ("fcntl F_SETLEASE", ruled["fcntl"], (3, 1024), eperm),
            ("socket AF_UNIX", (41, 198)[column], (1, 1), eperm),
            ("socket AF_VSOCK", (41, 198)[column], (40, 1), eperm),
            ("socketpair AF_UNIX", (53, 199)[column], (1,), eperm), ("pipe2", (293, 59)[column], (), eperm),
            ("madvise DONTNEED", ruled["madvise"], (0, 0, 4), allow),
            ("madvise PAGEOUT", ruled["madvise"], (0, 0, 21), eperm),
            ("madvise WILLNEED", ruled["madvise"], (0, 0, 3), eperm),
            ("preadv2 no flags", ruled["preadv2"], (3, 0, 1, 0, 0, 0), allow),
            ("preadv2 RWF_NOWAIT", ruled["preadv2"], (3, 0, 1, 0, 0, 8), eperm),
            ("pwritev2 RWF_APPEND", ruled["pwritev2"], (3, 0, 1, 0, 0, 16), eperm),
            ("ioctl TCGETS", ruled["ioctl"], (0, 0x5401), allow), ("ioctl TIOCSTI", ruled["ioctl"], (0, 0x5412), eperm),
            ("prctl PR_SET_NAME", ruled["prctl"], (15,), allow), ("prctl PR_SET_MM", ruled["prctl"], (35,), eperm),
            ("clone thread", driver.CLONE[column], (0x3D0F00,), allow),
            ("clone process", driver.CLONE[column], (17,), eperm),
            ("clone thread+newuser", driver.CLONE[column], (0x3D0F00 | 0x10000000,), eperm),
            ("clone3", driver.CLONE3[column], (), enosys),
            ("statx STATX_BASIC_STATS", driver.STATX[column], (0xFFFFFF9C, 0, 0, 0x7FF), enosys),
            ("statx STATX_MNT_ID_UNIQUE", driver.STATX[column], (0xFFFFFF9C, 0, 0, 0x4000), enosys),
            ("listmount", (458, 458)[column], (), eperm), ("statmount", (457, 457)[column], (), eperm),
            ("name_to_handle_at", (303, 264)[column], (), eperm),
            ("futex WAKE_PRIVATE", ruled["futex"], (0, 129), allow), ("futex WAKE", ruled["futex"], (0, 1), eperm),
            ("futex WAIT_BITSET_PRIVATE|CLOCK_REALTIME", ruled["futex"], (0, 9 | 128 | 256), allow),
            ("futex WAIT", ruled["futex"], (0, 0), eperm),
            ("io_setup", (206, 0)[column], (), eperm), ("io_submit", (209, 2)[column], (), eperm),
            ("io_uring_setup", 425, (), eperm), ("fadvise64", (221, 223)[column], (), eperm),
            ("readahead", (187, 213)[column], (), eperm), ("mincore", (27, 232)[column], (), eperm),
            ("cachestat", 451, (), eperm), ("flock", (73, 32)[column], (), eperm),
            ("execve", (59, 221)[column], (), eperm), ("unshare", (272, 97)[column], (), eperm),
            ("shmget", (29, 194)[column], (), eperm), ("memfd_create", (319, 279)[column], (), eperm),
        ]:
            assert _seccomp_verdict(program, arch, nr, tuple(args) + (0,) * (6 - len(args))) == verdict, \
                (machine, name)
        assert _seccomp_verdict(program, 0x40000003, 0) == kill  # i386 (int 0x80)
    x86 = driver.seccomp_program("x86_64")
    assert _seccomp_verdict(x86, driver._AUDIT_ARCH["x86_64"], 0x40000000 + 1) == kill  # x32
    assert _seccomp_verdict(x86, driver._AUDIT_ARCH["x86_64"], driver.X86_LEGACY_SYSCALLS["open"]) == allow


def test_old_sandbox_images_are_pruned_when_another_is_built(tmp_path, monkeypatch):
    """Each checkout's packages make an image of their own: one not rebuilt for IMAGE_MAX_AGE_S goes when another is
    built (what keeps CI's fresh clones from filling the disk); the one kept and recent ones stay."""
    import time

    from snapeval.sandbox import probe

    monkeypatch.setattr(probe, "IMAGE_DIR", str(tmp_path))
    old, recent, kept, other = (tmp_path / n for n in ("old.ext4", "recent.ext4", "kept.ext4", "notes.txt"))
    for path in (old, recent, kept, other):
        path.write_bytes(b"x")
    stale = time.time() - probe.IMAGE_MAX_AGE_S - 60
    for path in (old, kept, other):
        os.utime(path, (stale, stale))
    assert probe.prune_images(keep=str(kept)) == [str(old)]
    assert not old.exists() and recent.exists() and kept.exists() and other.exists()
