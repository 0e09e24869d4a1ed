"""Hostile programs by class (issue: a sandbox that holds against a red team). Every attack also runs with the
audit hook switched off first: the kernel layers (mount/PID/network namespaces, the new root, the privilege drop,
rlimits, the harness's own measurements) must hold without it."""
from __future__ import annotations

import base64
import os
import pickle
import socket
import time
import zlib
from pathlib import Path

import pytest

from snapeval.errors import SnapevalError
from snapeval.tasks import livecodebench
from snapeval.tasks.sandbox import SandboxLimits, TestCase, isolation, read_capped, run_program, run_programs

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


def test_the_file_system_holds_only_the_interpreter():
    hidden = [str(DATA / "livecodebench"), str(REPO / "README.md"), str(REPO / ".venv"), "/etc/passwd", "/etc/shadow",
              "/home", "/var", "/run", "/root/.bashrc", "/root/.cache", "/usr/bin/sh", "/bin/sh"]
    probe = (f"import os\nseen = [p for p in {hidden!r} if os.path.lexists(p)]\n"
             "top = sorted(os.listdir('/'))\n"
             "print(5 if not seen and set(top) <= {'work', 'tmp', 'proc', 'dev', 'usr', 'lib', 'lib64', 'lib32', 'etc', "
             "'root', 'opt', 'home'} and sorted(os.listdir('/work')) == ['in_0', 'out_0'] else (seen, top))\n")
    result = run(probe)
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


def test_host_unix_sockets_are_unreachable(tmp_path):
    path = tmp_path / "host.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chmod(tmp_path, 0o777)
    os.chmod(path, 0o777)
    server.listen(1)
    try:
        code = (f"import _socket\ns = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)\ns.connect({str(path)!r})\n"
                "print(5)\n")
        assert run(code).status == "runtime_error"
        abstract = "import _socket\ns = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\ns.connect(('127.0.0.1', 22))\nprint(5)\n"
        assert run(abstract).status == "runtime_error"
    finally:
        server.close()


def test_no_process_outlives_its_run(tmp_path):
    marker = tmp_path / "survivor"
    os.chmod(tmp_path, 0o777)
    survivor = ("import os, time\n"
                "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                "        time.sleep(3)\n"
                f"        open({str(marker)!r}, 'w').write('alive')\n        open('/work/out_1', 'w').write('5')\n"
                "    os._exit(0)\n"
                "print(5)\n")
    result = run(survivor)
    assert result.status == "passed" and "leftover" not in result.detail
    time.sleep(3.5)
    assert not marker.exists()  # the file system it wanted is not there, and the process is gone anyway
    later = run(ADD, [TestCase("2 3\n", "5\n", "stdin"), TestCase("1 1\n", "2\n", "stdin")])
    assert later.passed


def test_samples_cannot_read_each_other():
    writer = "import time\nopen('/tmp/answer', 'w').write('5')\nopen('/work/answer', 'w').write('5')\ntime.sleep(1)\nprint(5)\n"
    reader = ("import os, time\ntime.sleep(0.5)\n"
              "print(open('/tmp/answer').read() if os.path.exists('/tmp/answer') else 6)\n")
    from snapeval.tasks.sandbox import ProgramJob

    results = run_programs([ProgramJob(NO_HOOK + writer, STDIN), ProgramJob(NO_HOOK + reader, STDIN)], limits=FAST,
                           workers=2)
    assert [r.status for r in results] == ["passed", "wrong_answer"]


def test_planted_links_and_special_files_never_hurt_the_grader():
    for code in (
        "import os\nos.symlink('/etc/shadow', '/work/out_0')\n",  # a link where the output should be
        "import os\nos.remove('/work/out_0') if os.path.exists('/work/out_0') else None\nos.mkfifo('/work/out_0')\n",
        "import os\nos.symlink('/dev/zero', '/work/out_0')\n",
        "import os\nos.mkdir('/work/out_0')\n",
    ):
        # the driver opened out_0 as stdout; replace the file under it, then let the test end
        start = time.perf_counter()
        result = run("import os\nos.close(1)\nos.remove('/work/out_0')\n" + code.replace(
            "os.remove('/work/out_0') if os.path.exists('/work/out_0') else None\n", ""))
        assert result.status == "runtime_error", (code, result)
        assert time.perf_counter() - start < 5
    assert run(ADD).passed


def test_deeply_nested_output_is_this_programs_failure():
    nested = "class Solution:\n    def f(self, x):\n        v = []\n        for _ in range(200000):\n            v = [v]\n        return v\n"
    result = run_program(nested, [TestCase("0", "[]", "functional")], func_name="f", limits=FAST)
    assert result.status in ("runtime_error", "wrong_answer")
    assert run(ADD).passed


def test_cpu_time_is_measured_by_the_harness():
    """The child cannot under-report: a forked helper burns CPU too, and the harness reads the run's PID 1 CPU time
    (its reaped children included) from /proc, whatever the program does to its own accounting."""
    faker = ("import os, time, resource\nresource.getrusage = lambda who: type('R', (), {'ru_utime': 0.0, 'ru_stime': 0.0})()\n"
             "pid = os.fork()\nt = time.process_time()\nwhile time.process_time() - t < 0.9:\n    pass\n"
             "if pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nprint(5)\n")
    result = run(faker, limits=SandboxLimits(timeout_s=1.2, memory_mb=512, output_bytes=1 << 20))
    assert result.status == "time_limit", result
    assert result.outcomes[-1].cpu_s > 1.2 or "wall-clock" in result.detail


def test_disk_writes_are_capped():
    filler = ("n = 0\ntry:\n    while True:\n        open(f'/tmp/f{n}', 'wb').write(b'x' * (1 << 20)); n += 1\n"
              "except OSError:\n    pass\nprint(5 if n < 64 else 6)\n")
    assert run(filler).passed  # the 8 MiB tmpfs filled up; no host disk was touched


def test_root_never_follows_a_planted_link(tmp_path):
    secret = tmp_path / "root_only"
    secret.write_text("secret")
    os.chmod(secret, 0o600)
    plant = f"import os\nos.symlink({str(secret)!r}, '/work/link')\nos.symlink({str(secret)!r}, '/tmp/link')\nprint(5)\n"
    assert run(plant).passed
    st = secret.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (os.getuid(), 0o600)


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
