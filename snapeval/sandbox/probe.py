"""Which isolation layers this machine gives (probed once per process) and how a run's driver is started.

The probe starts the driver once with ``--probe``: it joins a test cgroup, builds a run's new root, drops its
privileges and installs the seccomp filter, and says which of these worked. Where the mount namespace cannot be built,
executing generated code is refused with one line naming what is missing, unless the user accepts weaker isolation
(``SNAPEVAL_ALLOW_UNSAFE_CODE=1``, lm-eval's ``--confirm_run_unsafe_code`` convention: that flag itself never
reaches a task's code); so it is where memory outside the rlimits can be neither counted (no usable cgroup) nor
refused (no seccomp filter).
"""
from __future__ import annotations

import ctypes
import errno
import importlib.util
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Sequence

from snapeval.errors import SnapevalError
from snapeval.sandbox.cgroups import CgroupTree, kernel_accounting

DRIVER = Path(__file__).with_name("driver.py")
NOBODY_UID = 65534
SANDBOX_UID_BASE = 0x58000000  # + the driver's host PID: a uid of its own for every live run (no account uses it)
UNSAFE_ENV = "SNAPEVAL_ALLOW_UNSAFE_CODE"
RLIMITS = ("AS", "CPU", "FSIZE", "NOFILE", "NPROC", "CORE", "MSGQUEUE")


@dataclass(frozen=True)
class Isolation:
    """What this machine gives: the command prefix (``setpriv`` + ``unshare``), whether the child builds its own root
    (and from which paths), whether it drops privileges (to a uid of its own per run), whether the seccomp filter is
    in place, the interpreter, what is missing (when the new root cannot be built), the cgroup tree runs are
    accounted in (``None``: rlimits and the seccomp filter only), and the third-party packages a run can import
    (``(host directory, directory in the run's root)``, read-only under :data:`PACKAGES_DIR`); ``mapped``: the files
    among them a run can map (:func:`keep_resident` before each run)."""

    prefix: tuple[str, ...]
    isolate_fs: bool
    drop_uid: int | None
    python: str
    missing: str = ""
    expose: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    seccomp: bool = False
    cgroups: CgroupTree | None = None
    packages: tuple[tuple[str, str], ...] = ()
    mapped: tuple[str, ...] = ()  # the files a run can map (shared libraries, the interpreter): kept resident
    own_clocks: bool = False  # a time namespace per run: its monotonic and boot-time clocks at a random offset

    @property
    def memory_bounded(self) -> bool:
        """Whether memory that rlimits do not count (SysV shared memory and message queues, memfd, POSIX message
        queues) is counted (a cgroup) or refused (the seccomp filter)."""
        return self.cgroups is not None or self.seccomp

    def describe(self) -> dict[str, Any]:
        return {
            "namespaces": "mount+pid+net+ipc+uts" if self.isolate_fs else ("net+pid" if self.prefix else "none"),
            "new_root": self.isolate_fs,
            "visible_read_only": list(self.expose) if self.isolate_fs else "the whole file system",
            "hidden_inside_them": list(self.hide),
            "packages": {inside: host for host, inside in self.packages} if self.isolate_fs else {},
            "user_namespace": "--map-root-user" in self.prefix,
            "runs_as": ("a uid of its own per run" if self.drop_uid is not None and self.isolate_fs
                        else "nobody" if self.drop_uid is not None else "the harness user"),
            "seccomp": self.seccomp,
            "own_clocks": self.own_clocks,
            "accounting": self.cgroups.describe() if self.cgroups else "rlimits (no usable cgroup)",
            "python": self.python,
            "audit_hook": True,
            "rlimits": list(RLIMITS),
            "missing": self.missing,
        }


def spawn_driver(prefix: Sequence[str], python: str, run_dir: str, spec: dict, *, extra: Sequence[str] = ()):
    """Write the spec and start the driver; returns ``(process, ready read end, input write end, result read end)``,
    the harness's ends non-blocking. The driver writes one ready byte when its trusted set-up is done, then reads
    test inputs and writes results (``driver.py``)."""
    ready_r, ready_w = os.pipe()
    input_r, input_w = os.pipe()
    result_r, result_w = os.pipe()
    for fd in (ready_r, input_w, result_r):
        os.set_blocking(fd, False)
    spec = {**spec, "ready_fd": ready_w, "input_fd": input_r, "result_fd": result_w}
    Path(run_dir, "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    work = "/work" if spec["isolate_fs"] else str(Path(run_dir, "work"))
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": work,
           "TMPDIR": "/tmp" if spec["isolate_fs"] else work}
    cwd = "/" if spec["isolate_fs"] else work
    cmd = [*prefix, python, "-I", "-S", "-B", str(DRIVER), str(Path(run_dir, "spec.json")), *extra]
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=(ready_w, input_r, result_w),
                                start_new_session=True, close_fds=True)
    except BaseException:
        for fd in (ready_r, input_w, result_r):
            os.close(fd)
        raise
    finally:
        for fd in (ready_w, input_r, result_w):
            os.close(fd)
    return proc, ready_r, input_w, result_r


def kill_process_group(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """Kill ``setpriv``/``unshare`` and the driver (a process group of their own) unless ``unshare`` has already
    been reaped (its PID, and so the group's, could belong to another process by then), and wait, boundedly."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass


_UID_SLOTS = 1 << 24  # the uids a run can get: SANDBOX_UID_BASE and the 2^24 - 1 above it


@contextmanager
def run_uid_spec(drop_uid: int | None, isolate_fs: bool) -> Iterator[dict[str, Any]]:
    """How the child picks its uid, reserved for as long as the ``with`` block (the run's life): per run (new root,
    as root) a uid of its own drawn at random from 2^24 above :data:`SANDBOX_UID_BASE`, kept by no other live run of
    any harness in this network namespace (the host's, as a rule): an abstract AF_UNIX socket named after it stays
    bound meanwhile (the kernel frees the name when the socket closes, the harness's death included). Not the
    driver's host PID, as it was: a run that makes threads moves the host's PID counter, and the next run of the same
    problem read how far in its own uid (``os.getuid()``; issue #47). Weaker isolation: the fixed ``drop_uid``."""
    if drop_uid is None or not isolate_fs:
        yield {"uid": None, "fallback_uid": drop_uid}
        return
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        while True:
            slot = secrets.randbelow(_UID_SLOTS)
            try:
                holder.bind(f"\0snapeval-sandbox-uid-{slot}")
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
        yield {"uid": SANDBOX_UID_BASE + slot, "fallback_uid": drop_uid}
    finally:
        holder.close()


_TREE_SCRIPT = """
import json, os, sys, sysconfig
paths = sysconfig.get_paths()
print(json.dumps({"executable": os.path.realpath(sys.executable), "stdlib": paths["stdlib"],
                  "platstdlib": paths["platstdlib"], "purelib": paths["purelib"], "platlib": paths["platlib"],
                  "dynload": [p for p in sys.path if p.endswith("lib-dynload")]}))
"""
_FALLBACK_LIB_DIRS = ("/lib", "/lib64", "/lib32", "/usr/lib64", "/usr/lib32", "/usr/lib/x86_64-linux-gnu",
                      "/usr/lib/aarch64-linux-gnu", "/usr/lib/arm-linux-gnueabihf")
#: Third-party packages a run can import, as in the official LiveCodeBench environment (numpy), when the harness's
#: own environment has them: each is shown read-only under PACKAGES_DIR (with its wheel's bundled libraries,
#: ``<name>.libs``), never the rest of that environment.
SANDBOX_PACKAGES = ("numpy",)
#: Extension modules whose libraries are not shown: tkinter (the official runner hides it; its Tcl/Tk and X11
#: libraries are a fifth of the files otherwise), so importing ``_tkinter`` fails in a run.
SKIPPED_MODULES = ("_tkinter",)
PACKAGES_DIR = "/packages"


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


def _packages() -> list[tuple[str, str]]:
    """``(host directory, directory in the run's root)`` of each of :data:`SANDBOX_PACKAGES` that this process can
    import (the harness runs the same interpreter as its runs: same version, same ABI), and of its bundled
    libraries."""
    found = []
    for name in SANDBOX_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if not locations:
            continue
        package = os.path.realpath(locations[0])
        found.append((package, f"{PACKAGES_DIR}/{name}"))
        bundled = os.path.join(os.path.dirname(package), f"{name}.libs")
        if os.path.isdir(bundled):
            found.append((os.path.realpath(bundled), f"{PACKAGES_DIR}/{name}.libs"))
    return found


def _interpreter_tree(python: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...]]:
    """``(expose, hide, packages)``: what a run's new root shows of the host, read-only (the interpreter binary, its
    standard library and extension modules, each shared library file that they and the packages' extension modules
    load (not the folders they are in), the loader's cache), the directories inside those that it hides
    (``site-packages``: third-party code of the base interpreter), and the packages (:func:`_packages`)."""
    try:
        info = json.loads(subprocess.run([python, "-I", "-S", "-c", _TREE_SCRIPT], stdin=subprocess.DEVNULL,
                                         capture_output=True, text=True, timeout=60, check=True).stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise OSError(f"cannot ask {python} where its standard library is ({exc})") from None
    dynload = [d for d in info["dynload"] if os.path.isdir(d)]
    modules = [str(p) for d in dynload for p in sorted(Path(d).glob("*.so"))
               if not p.name.startswith(SKIPPED_MODULES)]
    packages = _packages()
    package_modules = [str(p) for host, _ in packages for p in sorted(Path(host).rglob("*.so*")) if p.is_file()]
    libs = _shared_libraries([info["executable"], *modules, *package_modules])
    inside_packages = (lambda p: any(p == h or p.startswith(h + "/") for h, _ in packages))
    lib_files = ({p for lib in libs for p in (lib, os.path.realpath(lib)) if not inside_packages(os.path.realpath(lib))}
                 if libs is not None else set(_FALLBACK_LIB_DIRS))
    expose = {info["executable"], info["stdlib"], info["platstdlib"], *dynload, *lib_files, "/etc/ld.so.cache"}
    expose = sorted((p for p in expose if os.path.lexists(p)), key=lambda p: (p.count("/"), p))
    real_exposed = [os.path.realpath(p) for p in expose]
    hide = set()
    for candidate in (info["purelib"], info["platlib"], *(os.path.join(info[k], n) for k in ("stdlib", "platstdlib")
                                                           for n in ("site-packages", "dist-packages"))):
        real = os.path.realpath(candidate)
        if os.path.isdir(real) and any(real == e or real.startswith(e + "/") for e in real_exposed):
            hide.add(real)
    return tuple(expose), tuple(sorted(hide)), tuple(packages)


@dataclass(frozen=True)
class _ProbeAnswer:
    worked: bool
    seccomp: bool = False
    cgroup: bool = False
    packages: bool = False
    clocks: bool = False


def _probe_driver(prefix: tuple[str, ...], python: str, drop_uid: int | None, isolate_fs: bool,
                  expose: Sequence[str], hide: Sequence[str], tree: CgroupTree | None,
                  packages: Sequence[tuple[str, str]] = ()) -> _ProbeAnswer:
    """Run the driver's set-up once with ``--probe`` and read which layers it got."""
    run_dir = tempfile.mkdtemp(prefix="snapeval-sandbox-probe-")
    run_cgroup = None
    try:
        os.mkdir(Path(run_dir, "root"))
        if not isolate_fs:
            os.mkdir(Path(run_dir, "work"), 0o700)
            if drop_uid is not None:
                os.chown(Path(run_dir, "work"), drop_uid, drop_uid, follow_symlinks=False)
        Path(run_dir, "solution.py").write_text("", encoding="utf-8")
        try:
            run_cgroup = tree.new_run(1 << 30, 64) if tree else None
        except OSError:
            run_cgroup = None
        with run_uid_spec(drop_uid, isolate_fs) as uid:
            spec = {"mode": "stdin", "isolate_fs": isolate_fs, "root_dir": str(Path(run_dir, "root")),
                    "expose": list(expose), "hide": list(hide), "packages": [list(p) for p in packages],
                    "disk_bytes": 1 << 20, "seccomp": True,
                    **uid, "memory_bytes": 1 << 30, "cpu_total_s": 10,
                    "max_file_bytes": 1 << 20, "max_open_files": 64, "max_processes": 64,
                    "cgroup_procs": run_cgroup.procs_files if run_cgroup else []}
            proc, ready, inputs, results = spawn_driver(prefix, python, run_dir, spec, extra=("--probe",))
            try:
                proc.wait(timeout=20)
                poller = select.poll()
                poller.register(ready, select.POLLIN)
                answer = os.read(ready, 64) if poller.poll(0) else b""
            except subprocess.TimeoutExpired:
                answer = b""
            finally:
                for fd in (ready, inputs, results):
                    os.close(fd)
                kill_process_group(proc)
        words = answer.split()
        return _ProbeAnswer(answer.startswith(b"P ok"), b"seccomp" in words, b"cgroup" in words,
                            b"packages" in words, b"clocks" in words)
    except (OSError, subprocess.SubprocessError):
        return _ProbeAnswer(False)
    finally:
        if run_cgroup is not None:
            run_cgroup.kill()
            run_cgroup.remove()
        shutil.rmtree(run_dir, ignore_errors=True)


_PROBED = threading.Lock()


def make_resident(paths: Sequence[str], hidden: Sequence[str] = (), mapped: list[str] | None = None) -> int:
    """Read every file a run can map (the interpreter, its libraries, its standard library, the exposed packages)
    once, before any run starts, so that their pages are in the page cache, charged to the harness's cgroup (a run's
    memory limit does not reclaim them): a run's page faults on them are then minor whatever another run touched, so
    its fault counts tell nothing about which pages another run used. ``hidden``: folders a run does not see
    (skipped); ``mapped``: a list that gets the files a run can map (:func:`can_be_mapped`). Returns the bytes read."""
    buffer, total = bytearray(1 << 20), 0
    for top in paths:
        walk = [(top, [], [""])] if os.path.isfile(top) else os.walk(top)
        for folder, subfolders, files in walk:
            subfolders[:] = [s for s in subfolders if os.path.join(folder, s) not in hidden]
            for name in files:
                path = os.path.join(folder, name) if name else folder
                try:
                    with open(path, "rb", buffering=0) as f:
                        while (n := f.readinto(buffer)):
                            total += n
                except OSError:
                    continue
                if mapped is not None and can_be_mapped(path):
                    mapped.append(path)
    return total


def can_be_mapped(path: str) -> bool:
    """Whether a run maps ``path`` when it loads it (a shared library, or the loader's cache, by its name): with the
    interpreter, the files whose page faults a run counts (``getrusage``); the rest (sources, bytecode, data) it
    reads with ``read``."""
    name = os.path.basename(path)
    return name.endswith(".so") or ".so." in name


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]


_SYS_CACHESTAT = 451  # cachestat(2), Linux 6.5: the same number on x86-64 and arm64
_libc = ctypes.CDLL(None, use_errno=True)


def keep_resident(paths: Sequence[str]) -> int:
    """Read again each file of ``paths`` that the page cache no longer holds whole (the host evicts pages under
    memory pressure), so that before every run every page a run can map is resident, as :func:`make_resident` left
    it: otherwise a run that touches chosen pages of an evicted library makes them resident, and the next run of the
    same problem reads which through its own major-fault count. One ``cachestat(2)`` per file (about 2 ms for the
    230 files of this machine); a file read again costs its size. Returns the bytes read; 0 on a kernel without
    ``cachestat`` (before 6.5), where nothing is checked."""
    whole, seen, again, buffer = _CachestatRange(0, 0), _Cachestat(), 0, None
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if _libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(whole), ctypes.byref(seen), 0) != 0:
                if ctypes.get_errno() == errno.ENOSYS:
                    return again
                continue
            if seen.cache * _PAGE < os.fstat(fd).st_size:
                buffer = buffer or bytearray(1 << 20)
                while (n := os.readv(fd, [buffer])):
                    again += n
        finally:
            os.close(fd)
    return again


_PAGE = os.sysconf("SC_PAGE_SIZE")


def isolation() -> Isolation:
    """Probe once per process which layers work here (no root assumed; CI is root). Parallel first calls (the
    workers of :func:`~snapeval.sandbox.run_programs`) wait for one probe."""
    with _PROBED:
        return _probe_layers()


@lru_cache(maxsize=1)
def _probe_layers() -> Isolation:
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
    tree = kernel_accounting()
    missing = "a private mount namespace with a new root (mount, pivot_root)"
    try:
        expose, hide, packages = _interpreter_tree(python)
        answer = _probe_driver(prefix, python, drop_uid, True, expose, hide, tree, packages)
    except OSError as exc:
        expose, hide, packages, answer, missing = (), (), (), _ProbeAnswer(False), f"{missing[:-1]}; {exc})"
    if answer.worked:
        mapped = [python]
        make_resident([*expose, *(host for host, _ in packages)], hidden=hide, mapped=mapped)
        return Isolation(prefix, True, drop_uid, python, expose=expose, hide=hide, seccomp=answer.seccomp,
                         cgroups=tree if answer.cgroup else None,
                         packages=packages if answer.packages else (), mapped=tuple(mapped),
                         own_clocks=answer.clocks)
    weak = (unshare, "--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc")
    weak = guard + (weak if root else weak[:1] + ("--map-root-user",) + weak[1:])
    if not _probe(weak + ("true",)):
        weak = ()
    weak_drop = drop_uid if root else None
    answer = _probe_driver(weak, python, weak_drop, False, (), (), tree)
    return Isolation(weak, False, weak_drop, python, missing, seccomp=answer.seccomp,
                     cgroups=tree if answer.cgroup else None)


def require_isolation(allow_unsafe: bool | None = None) -> Isolation:
    """The isolation of this machine, or a one-line :class:`SnapevalError` when generated code cannot be contained
    and the user has not accepted weaker isolation (``SNAPEVAL_ALLOW_UNSAFE_CODE=1`` or ``allow_unsafe``)."""
    iso = isolation()
    if iso.isolate_fs and iso.memory_bounded:
        return iso
    if allow_unsafe is None:
        allow_unsafe = os.environ.get(UNSAFE_ENV, "") in ("1", "true", "yes")
    if not allow_unsafe:
        lacks = [iso.missing] if not iso.isolate_fs else []
        if not iso.memory_bounded:
            lacks.append("a cgroup or a seccomp filter (memory outside the rlimits could be neither counted nor "
                         "refused)")
        raise SnapevalError(
            f"refusing to execute generated code: this machine lacks {' and '.join(lacks)}; run as root or where "
            f"user namespaces are allowed, or accept weaker isolation with {UNSAFE_ENV}=1 "
            "(lm-eval: --confirm_run_unsafe_code)")
    return iso


def _probe(cmd: Sequence[str], **kw: Any) -> bool:
    try:
        return subprocess.run(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=20, **kw).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
