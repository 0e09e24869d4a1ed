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
import marshal
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
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Sequence

from snapeval.errors import SnapevalError
from snapeval.sandbox.cgroups import CgroupTree, kernel_accounting

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
    fifo_io: bool = False  # the run's input and result are FIFOs on a tmpfs of its own, not the harness's pipes
    image: str | None = None  # the shared folders as an ext4 image each run mounts from a loop device of its own
    image_folders: tuple[tuple[str, str], ...] = ()  # (host folder, folder in the run's root), image folder /<i>

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
            "input_and_result": "FIFOs on the run's own tmpfs" if self.fifo_io else "pipes",
            "shared_folders": ("a read-only image per run (its own loop device and file system)" if self.image
                               else "bind mounts of the host's folders"),
            "accounting": self.cgroups.describe() if self.cgroups else "rlimits (no usable cgroup)",
            "python": self.python,
            "audit_hook": True,
            "rlimits": list(RLIMITS),
            "missing": self.missing,
        }


#: The driver's parts (``driver.py`` loads the others from the bundle, see ``_load_part`` there).
DRIVER_PARTS = ("driver", "official", "seccomp", "wallclock")
FIFO_DIR = "io"  # in the run directory: the run's own tmpfs holding its input and result FIFOs (``driver.py``)


#: What the interpreter runs (``-c``): it reads the run's bundle (the spec, the program, the driver's sources) from its
#: standard input, a file of the harness's private run directory, and executes the driver compiled under a name of
#: the run's own. No path of the host (the checkout, the run directory) is in the command line or in a file name of
#: the driver's code (frames, tracebacks); the driver drops what of the spec names the host once its set-up is done.
BOOTSTRAP = ("import json, marshal, sys\n"
             "BUNDLE = json.load(sys.stdin)\n"
             "exec(marshal.loads(bytes.fromhex(BUNDLE['compiled']['driver'])) if 'compiled' in BUNDLE\n"
             "     else compile(BUNDLE['sources']['driver'], '/sandbox/driver.py', 'exec'))\n")  # as __main__


@lru_cache(maxsize=16)
def _compiled_part(name: str, source: str) -> str:
    """A driver part compiled as the run names it (``/sandbox/<name>.py``), marshalled, in hexadecimal: compiled
    once per process instead of once per run (the four parts took about 15 ms of each run's CPU, a fifth of its
    start-up beyond a bare interpreter, issue #60)."""
    return marshal.dumps(compile(source, f"/sandbox/{name}.py", "exec")).hex()


def _driver_bundle(python: str) -> dict[str, Any]:
    """The driver's parts for the bundle: compiled (:func:`_compiled_part`) where the run's interpreter is this
    process's own (the same binary reads the same bytecode: the harness always runs the driver on it), else their
    sources, which the driver compiles itself."""
    sources = {name: Path(__file__).with_name(f"{name}.py").read_text(encoding="utf-8") for name in DRIVER_PARTS}
    if python != os.path.realpath(sys.executable):
        return {"sources": sources}
    return {"compiled": {name: _compiled_part(name, source) for name, source in sources.items()}}


def spawn_driver(prefix: Sequence[str], python: str, run_dir: str, spec: dict, *, extra: Sequence[str] = ()):
    """Write the run's bundle (spec, program, the driver's sources) and start the driver; returns ``(process, ready
    read end, input write end, result read end)``, the harness's ends non-blocking. With ``spec["io"] == "fifo"``
    the input and result ends are ``None``: the driver makes its FIFOs on a tmpfs of its own, and
    :func:`connect_fifos` opens them. The driver writes one ready byte when its trusted set-up is done, then reads
    test inputs and writes results (``driver.py``)."""
    fifo = spec.get("io") == "fifo"
    ready_r, ready_w = os.pipe()
    ends = [] if fifo else [*os.pipe(), *os.pipe()]
    input_r, input_w, result_r, result_w = ends or (None,) * 4
    for fd in (ready_r, input_w, result_r):
        if fd is not None:
            os.set_blocking(fd, False)
    spec = {**spec, "ready_fd": ready_w, "input_fd": input_r, "result_fd": result_w}
    if fifo:
        os.mkdir(Path(run_dir, FIFO_DIR), 0o700)
        spec["io_dir"] = str(Path(run_dir, FIFO_DIR))
    bundle = Path(run_dir, "bundle.json")
    bundle.write_text(json.dumps({"spec": spec, **_driver_bundle(python)}), encoding="utf-8")
    work = "/work" if spec["isolate_fs"] else str(Path(run_dir, "work"))
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": work,
           "TMPDIR": "/tmp" if spec["isolate_fs"] else work}
    cwd = "/" if spec["isolate_fs"] else work
    cmd = [*prefix, python, "-I", "-S", "-B", "-c", BOOTSTRAP, *extra]
    passed = tuple(fd for fd in (ready_w, input_r, result_w) if fd is not None)
    try:
        with open(bundle, "rb") as stdin:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, pass_fds=passed, start_new_session=True,
                                    close_fds=True)
    except BaseException:
        for fd in (ready_r, input_w, result_r):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        for fd in passed:
            os.close(fd)
    return proc, ready_r, input_w, result_r


def connect_fifos(proc: subprocess.Popen, ready: int, run_dir: str, deadline: float) -> tuple[int, int]:
    """The harness's ends of a run's input and result FIFOs (``spec["io"] == "fifo"``), non-blocking: once the
    driver says ``F`` (its tmpfs is mounted, its FIFOs made, its input end open), they are opened through its root
    (``/proc/<pid>/root``: the tmpfs is in the run's mount namespace only) and ``G`` written on the input, after
    which the driver opens its result end and goes on. Raises ``OSError`` with the driver's error, or when it said
    nothing in time."""
    poller = select.poll()
    poller.register(ready, select.POLLIN)
    answer = b""
    while not answer and (remaining := deadline - time.monotonic()) > 0:
        if poller.poll(max(1, int(remaining * 1000))):
            try:
                answer = os.read(ready, 512) or b"?"
            except BlockingIOError:
                continue
    if answer != b"F":
        raise OSError(answer[2:].decode("utf-8", "replace") if answer.startswith(b"E ")
                      else "the driver did not make its FIFOs")
    try:
        pid = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        raise OSError("the driver's process is gone") from None
    folder = f"/proc/{pid}/root{run_dir}/{FIFO_DIR}"
    inputs = os.open(f"{folder}/in", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        results = os.open(f"{folder}/out", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.write(inputs, b"G")
    except BaseException:
        os.close(inputs)
        raise
    return inputs, results


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


def _shared_folders(expose: Sequence[str], packages: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The folders a run sees of the host (``(host folder, folder in the run's root)``): each exposed folder that no
    other holds (the standard library; ``lib-dynload`` is inside it), at its own place, and the packages."""
    folders = [path for path in expose if os.path.isdir(path) and not os.path.islink(path)]
    top = [f for f in folders if not any(f != g and f.startswith(g + "/") for g in folders)]
    return [(f, f) for f in top] + [(host, inside) for host, inside in packages]


@dataclass(frozen=True)
class _ProbeAnswer:
    worked: bool
    seccomp: bool = False
    cgroup: bool = False
    packages: bool = False
    clocks: bool = False


def _probe_driver(prefix: tuple[str, ...], python: str, drop_uid: int | None, isolate_fs: bool,
                  expose: Sequence[str], hide: Sequence[str], tree: CgroupTree | None,
                  packages: Sequence[tuple[str, str]] = (), fifo: bool = False, image: str | None = None,
                  image_folders: Sequence[tuple[str, str]] = ()) -> _ProbeAnswer:
    """Run the driver's set-up once with ``--probe`` and read which layers it got (``fifo``: with the run's input
    and result as FIFOs, :func:`connect_fifos`; ``image``: the shared folders from the image, :func:`shared_image`)."""
    run_dir = tempfile.mkdtemp(prefix="snapeval-sandbox-probe-")
    run_cgroup = None
    held = ExitStack()
    try:
        image_spec = held.enter_context(image_mount(image, image_folders, run_dir)) if image else None
        os.mkdir(Path(run_dir, "root"))
        if not isolate_fs:
            os.mkdir(Path(run_dir, "work"), 0o700)
            if drop_uid is not None:
                os.chown(Path(run_dir, "work"), drop_uid, drop_uid, follow_symlinks=False)
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
                    "cgroup_procs": run_cgroup.procs_files if run_cgroup else [], "code": "",
                    "io": "fifo" if fifo else "pipes", "image": image_spec}
            proc, ready, inputs, results = spawn_driver(prefix, python, run_dir, spec, extra=("--probe",))
            try:
                if fifo:
                    inputs, results = connect_fifos(proc, ready, run_dir, time.monotonic() + 20)
                proc.wait(timeout=20)
                poller = select.poll()
                poller.register(ready, select.POLLIN)
                answer = os.read(ready, 64) if poller.poll(0) else b""
            except subprocess.TimeoutExpired:
                answer = b""
            except OSError:
                answer = b""
            finally:
                for fd in (ready, inputs, results):
                    if fd is not None:
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
        held.close()
        shutil.rmtree(run_dir, ignore_errors=True)


@contextmanager
def image_mount(image: str, folders: Sequence[tuple[str, str]], run_dir: str) -> Iterator[dict[str, Any]]:
    """What the driver needs to mount the shared image (``spec["image"]``): a loop device of the run's own
    (:func:`attach_image`, held until the ``with`` block ends), a folder of the run directory to mount it on before
    its folders are bound in the new root, and which folder of the image goes where."""
    device_fd, device = attach_image(image)
    try:
        os.mkdir(Path(run_dir, "image"), 0o700)
        yield {"device": device, "mount_at": str(Path(run_dir, "image")),
               "folders": [[str(index), inside] for index, (_, inside) in enumerate(folders)]}
    finally:
        os.close(device_fd)


_PROBED = threading.Lock()

#: Where the read-only images of the shared folders are kept (root only), one per content (:func:`shared_image`).
IMAGE_DIR = "/var/tmp/snapeval-sandbox-images"
_LOOP_CTL_GET_FREE, _LOOP_CONFIGURE, _LOOP_CLR_FD = 0x4C82, 0x4C0A, 0x4C01
_LO_FLAGS_READ_ONLY, _LO_FLAGS_AUTOCLEAR = 1, 4


def shared_image(folders: Sequence[tuple[str, str]], hidden: Sequence[str] = ()) -> str | None:
    """An ext4 image holding each shared folder a run sees (``(host folder, folder in the run's root)``: the standard
    library with ``lib-dynload``, numpy and its libraries), folder ``i`` as ``/<i>``, ``hidden`` left out; built once
    per content (named by a hash of every file's path, size and time) with ``mke2fs -d`` (e2fsprogs, Essential) in
    :data:`IMAGE_DIR`. Every run mounts it read-only from a loop device of its own (:func:`attach_image`): a file
    system of its own whose dentries, negative ones included, die with the run, where a bind mount of the host's
    folder left in the host's dentry cache every name a run looked up (the next run of the problem timed lookups of
    chosen names: 16 bits a pair of runs, issue #60). ``None`` where it cannot be built (not root, no ``mke2fs``)."""
    import hashlib

    mke2fs = shutil.which("mke2fs") or (os.path.exists("/sbin/mke2fs") and "/sbin/mke2fs")
    if os.geteuid() != 0 or not mke2fs or not os.path.exists("/dev/loop-control"):
        return None
    digest, total, count = hashlib.sha256(), 0, 0
    for index, (host, inside) in enumerate(folders):
        digest.update(f"{index}\0{host}\0{inside}\0{sorted(hidden)}\n".encode())
        for folder, subfolders, files in os.walk(host):
            subfolders[:] = sorted(s for s in subfolders if os.path.join(folder, s) not in hidden)
            for name in sorted(files):
                st = os.lstat(os.path.join(folder, name))
                digest.update(f"{folder}/{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
                total, count = total + st.st_size, count + 1
    os.makedirs(IMAGE_DIR, mode=0o700, exist_ok=True)
    os.chmod(IMAGE_DIR, 0o700)
    image = os.path.join(IMAGE_DIR, digest.hexdigest()[:32] + ".ext4")
    if os.path.exists(image):
        return image
    staging = tempfile.mkdtemp(dir=IMAGE_DIR)
    try:
        for index, (host, _) in enumerate(folders):
            shutil.copytree(host, os.path.join(staging, "tree", str(index)), symlinks=True,
                            ignore=lambda folder, names: [n for n in names if os.path.join(folder, n) in hidden])
            for path in hidden:  # left empty, as the run's root shows them (an empty read-only tmpfs)
                if path.startswith(host + "/"):
                    os.makedirs(os.path.join(staging, "tree", str(index), path[len(host) + 1:]), mode=0o555,
                                exist_ok=True)
        size_kib = (total * 5 // 4 + count * 8192) // 1024 + 32768
        subprocess.run([mke2fs, "-q", "-F", "-t", "ext4", "-O", "^has_journal", "-b", "4096", "-N",
                        str(count * 2 + 4096), "-E", "root_owner=0:0", "-d", os.path.join(staging, "tree"),
                        os.path.join(staging, "image"), f"{size_kib}k"], check=True, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=300)
        os.rename(os.path.join(staging, "image"), image)
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    prune_images(keep=image)
    return image


#: An image not rebuilt for this long is removed when another is built (each checkout's own packages make one of
#: about 500 MB: without this, every fresh clone a CI run makes would leave one behind for good).
IMAGE_MAX_AGE_S = 6 * 3600


def prune_images(keep: str, max_age_s: float = IMAGE_MAX_AGE_S) -> list[str]:
    """Remove the images of :data:`IMAGE_DIR` built more than ``max_age_s`` ago, except ``keep``; a run still using
    one keeps its loop device's open file (an unlinked file lives until its last close). Returns what was removed."""
    import time

    removed = []
    now = time.time()
    for name in os.listdir(IMAGE_DIR):
        path = os.path.join(IMAGE_DIR, name)
        try:
            if (path != keep and name.endswith(".ext4") and os.path.isfile(path)
                    and now - os.stat(path).st_mtime > max_age_s):
                os.unlink(path)
                removed.append(path)
        except OSError:
            continue
    return removed


def attach_image(image: str) -> tuple[int, str]:
    """A loop device of the run's own for ``image``, read-only, cleared when its last user closes it: ``(the
    harness's descriptor of it, its path)``. The harness holds the descriptor until the run is gone; closing it then
    detaches the device and drops its block cache (the last close of a block device), so the next run's device,
    most likely the same number, starts with nothing cached."""
    import fcntl
    import struct

    control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    backing = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for _ in range(64):  # another thread may take the free device between the two calls
            number = fcntl.ioctl(control, _LOOP_CTL_GET_FREE)
            device = os.open(f"/dev/loop{number}", os.O_RDONLY | os.O_CLOEXEC)
            info = struct.pack("=QQQQQIIII64s64s32sQQ", 0, 0, 0, 0, 0, 0, 0, 0,
                               _LO_FLAGS_READ_ONLY | _LO_FLAGS_AUTOCLEAR, b"", b"", b"", 0, 0)
            config = struct.pack("=II", backing, 0) + info + bytes(64)
            try:
                fcntl.ioctl(device, _LOOP_CONFIGURE, config)
                return device, f"/dev/loop{number}"
            except OSError as exc:
                os.close(device)
                if exc.errno != errno.EBUSY:
                    raise
        raise OSError(errno.EBUSY, "no free loop device")
    finally:
        os.close(backing)
        os.close(control)


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
        fifo = root  # the FIFOs' tmpfs is mounted by the driver and opened through /proc/<pid>/root by the harness
        folders = _shared_folders(expose, packages)
        image = shared_image(folders, hidden=hide) if root else None
        answer = _probe_driver(prefix, python, drop_uid, True, expose, hide, tree, packages, fifo=fifo, image=image,
                               image_folders=folders)
        if (fifo or image) and not answer.worked:  # then the harness's pipes and bind mounts, as before issue #60
            fifo, image = False, None
            answer = _probe_driver(prefix, python, drop_uid, True, expose, hide, tree, packages)
    except OSError as exc:
        expose, hide, packages, answer, missing = (), (), (), _ProbeAnswer(False), f"{missing[:-1]}; {exc})"
    if answer.worked:
        mapped = [python]
        make_resident([*expose, *(host for host, _ in packages), *([image] if image else [])], hidden=hide,
                      mapped=mapped)
        return Isolation(prefix, True, drop_uid, python, expose=expose, hide=hide, seccomp=answer.seccomp,
                         cgroups=tree if answer.cgroup else None,
                         packages=packages if answer.packages else (), mapped=tuple(mapped + ([image] if image else [])),
                         own_clocks=answer.clocks, fifo_io=fifo, image=image,
                         image_folders=tuple(folders) if image else ())
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
