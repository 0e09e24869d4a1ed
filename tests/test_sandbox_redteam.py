"""Hostile programs by class (issue: a sandbox that holds against a red team). Every attack also runs with the
audit hook switched off first: the kernel layers (mount/PID/network namespaces, the new root, the privilege drop,
rlimits, the harness's own measurements) must hold without it."""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import pickle
import shutil
import socket
import sys
import time
import zlib
from pathlib import Path

import pytest

from snapeval.errors import SnapevalError
from snapeval.tasks import livecodebench, sandbox
from snapeval.tasks.sandbox import (
    ProgramJob, SandboxLimits, TestCase, isolation, read_capped, run_program, run_programs,
)

FAST = SandboxLimits(timeout_s=2.0, memory_mb=512, output_bytes=1 << 20, disk_mb=8)
STDIN = [TestCase("2 3\n", "5\n", "stdin")]
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SNAPEVAL_DATA_DIR") or REPO.parent / "shared" / "data")

# Switch the audit hook off first, as a red-team program did: rebind the hook's closure cells (its path checks) to
# functions that allow everything and empty the driver's block lists. What is tested after this is the kernel.
NO_HOOK = """
import gc, sys
for _f in gc.get_objects():
    if type(_f).__name__ == 'function' and _f.__code__.co_name == 'hook' and _f.__closure__:
        for _cell in _f.__closure__:
            if callable(_cell.cell_contents):
                _cell.cell_contents = lambda *a, **k: True
for _mod in list(sys.modules.values()):
    for _attr in ('BLOCKED_EVENTS', 'BLOCKED_IMPORTS', 'PATH_EVENTS'):
        if isinstance(getattr(_mod, _attr, None), frozenset):
            setattr(_mod, _attr, frozenset())
"""

pytestmark = pytest.mark.skipif(not isolation().isolate_fs, reason="no mount namespace here: execution is refused")


def run(code: str, tests=STDIN, **kw):
    return run_program(NO_HOOK + code, tests, limits=kw.pop("limits", FAST), **kw)


def test_the_hook_really_is_off():
    assert run("import socket, subprocess, os\nopen('/tmp/x', 'w').write('x')\nprint(5)\n").passed


def _sandbox_processes() -> list[int]:
    """Host PIDs of processes running under a sandbox uid (every run has its own, from SANDBOX_UID_BASE up)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid >= sandbox.SANDBOX_UID_BASE:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def test_the_file_system_holds_only_the_interpreter(tmp_path):
    iso = isolation()
    for path in iso.expose:  # nothing of the checkout, the data, the virtual environment or the home directory
        assert not any(path.startswith(p) for p in (str(REPO), str(DATA.resolve()), sys.prefix, "/home", "/tmp")), path
    host_tmp = Path("/tmp", f"snapeval-host-secret-{os.getpid()}")
    host_tmp.write_text("secret")
    hidden = [str(DATA / "livecodebench"), str(DATA), str(REPO / "README.md"), str(REPO), sys.prefix,
              str(Path(sys.prefix, "lib")), str(host_tmp), "/etc/passwd", "/etc/shadow", "/home", "/var", "/run",
              "/root/.bashrc", "/root/.cache", "/usr/bin", "/bin/sh", "/usr/share", "/usr/local", "/sys", "/mnt"]
    probe = (f"import os, sys\nseen = [p for p in {hidden!r} if os.path.lexists(p)]\n"
             f"seen += [(p, os.listdir(p)) for p in {list(iso.hide)!r} if os.listdir(p)]\n"
             "import decimal, fractions, hashlib, zlib, bz2, lzma, sqlite3, ctypes, json, heapq\n"  # stdlib works
             "for name in ('numpy', 'yaml', 'snapeval', 'torch', 'pytest'):\n"
             "    try:\n        __import__(name)\n        seen.append(name)\n    except ImportError:\n        pass\n"
             "seen += [p for p in os.listdir('/proc') if p.isdigit() and p != '1']\n"  # only the run's own process
             "seen += os.listdir('/tmp') + sorted(set(os.listdir('/work')) - {'in_0', 'out_0'})\n"
             "print(5 if not seen else seen)\n")
    try:
        result = run(probe)
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
    assert run_program(NO_HOOK + cheat, tests.cases, limits=FAST).status == "wrong_answer"


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


def test_no_process_outlives_its_run():
    """A new session and a double fork: the seccomp filter refuses the fork itself, and nothing of the run is left."""
    survivor = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\nprint(5)\n")
    result = run(survivor)
    assert result.status == "runtime_error" and "not permitted" in result.detail, result
    assert _sandbox_processes() == []


def test_no_process_outlives_its_run_without_seccomp(monkeypatch, tmp_path):
    """The PID namespace alone: when the run's PID 1 ends, the kernel kills the setsid + double-forked survivor
    before it can touch anything, and the harness finds no process of the run left."""
    monkeypatch.setattr(sandbox, "isolation", lambda: dataclasses.replace(isolation(), seccomp=False))
    marker = tmp_path / "survivor"
    os.chmod(tmp_path, 0o777)
    survivor = ("import os, time\n"
                "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                "        time.sleep(1.5)\n"
                f"        open({str(marker)!r}, 'w').write('alive')\n        open('/work/out_0', 'w').write('6')\n"
                "    os._exit(0)\n"
                "print(5)\n")
    result = run(survivor)
    assert result.status == "passed" and "leftover" not in result.detail, result
    assert _sandbox_processes() == []
    later = run(ADD, [TestCase("2 3\n", "5\n", "stdin"), TestCase("1 1\n", "2\n", "stdin")])
    time.sleep(1.6)
    assert later.passed and not marker.exists()


def test_samples_cannot_read_each_other_or_starve_each_other():
    """Private /tmp and /work per run; a uid per run, so one run's threads do not count against another's
    RLIMIT_NPROC (a thread bomb in one sample leaves a parallel sample's threads alone)."""
    writer = "import time\nopen('/tmp/answer', 'w').write('5')\nopen('/work/answer', 'w').write('5')\ntime.sleep(1)\nprint(5)\n"
    reader = ("import os, time\ntime.sleep(0.5)\n"
              "print(open('/tmp/answer').read() if os.path.exists('/tmp/answer') else 6)\n")
    hog = ("import threading, time\nstop = threading.Event()\nn = 0\ntry:\n    while True:\n"
           "        threading.Thread(target=stop.wait).start(); n += 1\nexcept RuntimeError:\n    pass\n"
           "time.sleep(1.2)\nstop.set()\nprint(5 if n < 16 else 6)\n")
    worker = ("import threading, time\ntime.sleep(0.4)\nr = []\n"
              "ts = [threading.Thread(target=r.append, args=(1,)) for _ in range(8)]\n"
              "[t.start() for t in ts]\n[t.join() for t in ts]\nprint(len(r) - 3)\n")
    limits = SandboxLimits(timeout_s=3.0, memory_mb=1024, output_bytes=1 << 20, disk_mb=8, max_processes=16)
    results = run_programs([ProgramJob(NO_HOOK + writer, STDIN), ProgramJob(NO_HOOK + reader, STDIN)], limits=FAST,
                           workers=2)
    assert [r.status for r in results] == ["passed", "wrong_answer"]
    results = run_programs([ProgramJob(NO_HOOK + hog, STDIN), ProgramJob(NO_HOOK + worker, STDIN)], limits=limits,
                           workers=2)
    assert [r.status for r in results] == ["passed", "passed"], results


@pytest.mark.parametrize("attack", [
    "os.symlink('/etc/shadow', '/work/out_0')",  # a link where the output should be
    "os.mkfifo('/work/out_0')",  # a FIFO: a blocking open would hang the grader
    "os.symlink('/dev/zero', '/work/out_0')",  # an endless read
    "os.mkdir('/work/out_0')",
    "os.link('/work/in_0', '/work/out_0')",  # a hard link is a regular file: graded as output (wrong)
])
def test_planted_files_never_hurt_the_grader(attack):
    start = time.perf_counter()
    result = run(f"import os\nos.close(1)\nos.remove('/work/out_0')\n{attack}\n")
    assert result.status in ("runtime_error", "wrong_answer"), (attack, result)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("name, code, tests, statuses", [
    ("nested functional result", "class Solution:\n    def f(self, x):\n        v = []\n        for _ in range(200000):\n"
     "            v = [v]\n        return v\n", [TestCase("0", "[]", "functional")], {"runtime_error", "wrong_answer"}),
    ("nested stdout", "print('[' * 100000 + ']' * 100000)\n", STDIN, {"wrong_answer"}),
    ("signaling NaN", "print('sNaN')\n", STDIN, {"wrong_answer"}),
    ("huge exponent", "print('1e999999999999999999')\n", STDIN, {"wrong_answer"}),
    ("forged control line", "import os\nfor fd in range(3, 4096):\n    try:\n        os.write(fd, b'X 0\\n')\n"
     "    except OSError:\n        pass\nimport time\ntime.sleep(0.5)\nprint(5)\n", STDIN, {"runtime_error"}),
    ("flooded control channel", "import os\nfor fd in range(3, 4096):\n    try:\n"
     "        os.write(fd, b'D 0 ' + b'x' * (3 << 20))\n    except OSError:\n        pass\nprint(5)\n", STDIN,
     {"output_limit", "runtime_error"}),
    ("closed control channel, then sleep", "import os, time\nos.closerange(3, 4096)\ntime.sleep(30)\n", STDIN,
     {"time_limit", "runtime_error"}),
    ("output past the cap", "import sys\nsys.stdout.write('5' * (2 << 20))\n", STDIN, {"output_limit"}),
])
def test_the_grader_cannot_be_crashed_or_hung(name, code, tests, statuses):
    start = time.perf_counter()
    result = run(code, tests, func_name="f" if tests[0].testtype == "functional" else None)
    assert result.status in statuses, (name, result)
    assert time.perf_counter() - start < FAST.timeout_s + 3, name


def test_cpu_time_is_measured_by_the_harness():
    """Two threads that release the GIL burn CPU faster than the wall clock runs; the program fakes its own
    accounting. The harness reads the run's CPU time from /proc itself: over the limit, whatever the program says."""
    burner = ("import hashlib, resource, threading, time\n"
              "resource.getrusage = lambda who: type('R', (), {'ru_utime': 0.0, 'ru_stime': 0.0})()\n"
              "time.process_time = lambda: 0.0\nblock = b'x' * (4 << 20)\n"
              "def burn():\n    end = time.perf_counter() + 1.3\n    while time.perf_counter() < end:\n"
              "        hashlib.sha256(block).digest()\n"
              "ts = [threading.Thread(target=burn) for _ in range(2)]\n[t.start() for t in ts]\n[t.join() for t in ts]\n"
              "print(5)\n")
    result = run(burner, limits=SandboxLimits(timeout_s=1.5, memory_mb=1024, output_bytes=1 << 20))
    if len(os.sched_getaffinity(0)) < 2 or os.getloadavg()[0] > 1.0:
        pytest.skip("needs two idle cores to burn CPU faster than the wall clock")
    assert result.status == "time_limit" and "CPU limit" in result.detail, result
    assert result.outcomes[-1].cpu_s > 1.5 > result.outcomes[-1].wall_s


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
    prefix = (unshare, "--net", "--pid", "--fork", "--kill-child", "--mount-proc")
    drop = sandbox.NOBODY_UID if os.geteuid() == 0 else None
    weak = sandbox.Isolation(prefix, False, drop, isolation().python, "a private mount namespace (test)",
                             seccomp=isolation().seccomp)
    monkeypatch.setattr(sandbox, "isolation", lambda: weak)
    monkeypatch.delenv(sandbox.UNSAFE_ENV, raising=False)
    with pytest.raises(SnapevalError, match="refusing to execute generated code: this machine lacks a private mount"):
        run(ADD)
    monkeypatch.setenv(sandbox.UNSAFE_ENV, "1")
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
    from snapeval.tasks import lm_eval_hooks

    rows = {r["question_id"]: r for r in livecodebench.load(DATA).rows}
    extra = {"sandbox_timeout_s": 2.0, "sandbox_memory_mb": 512, "reasoning": False}
    docs = [{**rows["1873_A"], **extra}, {**rows["2727"], **extra}]
    fence = "```python\n{}```".format
    stdin_ok = ("t = int(input())\nfor _ in range(t):\n    s = input().strip()\n"
                "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) <= 2 else 'NO')\n")
    func_ok = ("class Solution:\n    def countSeniors(self, details: List[str]) -> int:\n"
               "        return sum(int(d[11:13]) > 60 for d in details)\n")
    snoop = NO_HOOK + f"import os\nprint(os.listdir({str(DATA)!r}))\n"
    nested = NO_HOOK + "class Solution:\n    def countSeniors(self, details):\n        v = []\n" \
                       "        for _ in range(100000):\n            v = [v]\n        return v\n"
    verdicts = lm_eval_hooks.livecodebench_execute(
        [[fence(stdin_ok), fence(snoop), fence(NO_HOOK + "import os\nos.fork()\n")],
         [fence(func_ok), fence(nested), "no code"]], docs)
    statuses = [[json.loads(v)["status"] for v in per_doc] for per_doc in verdicts]
    assert statuses[0] == ["passed", "runtime_error", "runtime_error"], verdicts
    assert statuses[1][0] == "passed" and statuses[1][1] in ("runtime_error", "wrong_answer") and \
        statuses[1][2] == "no_code", verdicts


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


def test_read_capped_refuses_fifos_links_and_devices(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to("/dev/zero")
    for path in (fifo, link, Path("/dev/zero")):
        with pytest.raises(OSError):
            read_capped(str(path), 10)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100)
    assert len(read_capped(str(big), 10)) == 11


def test_unsafe_execution_is_refused_without_isolation(monkeypatch):
    from snapeval.tasks import sandbox

    weak = sandbox.Isolation((), False, None, "/usr/bin/python3", "the unshare command (util-linux)")
    monkeypatch.setattr(sandbox, "isolation", lambda: weak)
    monkeypatch.delenv(sandbox.UNSAFE_ENV, raising=False)
    with pytest.raises(SnapevalError, match="refusing to execute generated code: this machine lacks the unshare "
                                            "command.*SNAPEVAL_ALLOW_UNSAFE_CODE=1") as err:
        run_program(ADD, STDIN, limits=FAST)
    assert "\n" not in str(err.value)
