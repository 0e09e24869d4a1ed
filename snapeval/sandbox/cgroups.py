"""Kernel accounting of a run: one cgroup per run, made by the harness, joined by the driver before it does anything
else, removed once the run is over.

- **cgroup v2** (a ``cgroup2`` mount whose controllers include ``memory`` and ``pids``): ``memory.max`` (which
  counts anonymous memory, tmpfs and shared memory, memfd files, page tables, kernel stacks, pipe and socket
  buffers, SysV message queues), ``memory.swap.max = 0``, ``memory.oom.group``, ``pids.max``, ``cpu.weight``
  where the ``cpu`` controller is available (:data:`CPU_WEIGHT`); CPU time from
  ``cpu.stat``; ``cgroup.kill`` and ``cgroup.events`` to end the run and to know that nothing of it is left.
- **cgroup v1** (the ``memory`` and ``pids`` hierarchies, ``cpuacct`` and ``cpu`` when mounted):
  ``memory.limit_in_bytes`` (kernel memory is charged to it as well), ``memory.memsw.limit_in_bytes`` and
  ``memory.kmem.limit_in_bytes`` where the kernel still accepts them, ``pids.max``, ``cpu.shares``
  (:data:`CPU_SHARES`); CPU time from ``cpuacct.usage``.

The runs' cgroups sit under one directory of this process (``snapeval-sandbox-<pid>``) below its own cgroup of
each hierarchy, so that whatever limits this process is under still apply; where cgroup v2's rule that a cgroup
with processes has no controllers in its children forbids that, below the root of the hierarchy. Where neither
works (no cgroup file system, not root and nothing delegated), :func:`kernel_accounting` is ``None`` and the
harness falls back to rlimits plus a seccomp filter that refuses the memory rlimits do not count (see
``docs/sandbox.md``).
"""
from __future__ import annotations

import atexit
import itertools
import os
import signal
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Sequence

BASE_PREFIX = "snapeval-sandbox-"
V1_ROLES = ("memory", "pids", "cpuacct", "cpu")  # cpuacct and cpu are optional
#: Each run's CPU share among the runs (cgroup v1 ``cpu.shares``, v2 ``cpu.weight``: the kernel's defaults, set
#: explicitly): the scheduler divides the CPU between runs, not between their threads, so a run with many threads
#: cannot take a parallel run's CPU time.
CPU_SHARES, CPU_WEIGHT = 1024, 100
#: The kernel's largest weight and shares (cgroup v2 ``cpu.weight``, v1 ``cpu.shares``).
MAX_WEIGHT, MAX_SHARES = 10000, 262144


@dataclass(frozen=True)
class Mount:
    root: str  # the directory of the file system mounted (a cgroup namespace shows "/" for its own root)
    point: str
    fstype: str
    super_options: frozenset[str]


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup mounts of ``/proc/self/mountinfo``."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if len(fields) < sep + 4 or fields[sep + 1] not in ("cgroup", "cgroup2"):
            continue
        unescape = (lambda s: s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
                    .replace("\\134", "\\"))
        mounts.append(Mount(unescape(fields[3]), unescape(fields[4]), fields[sep + 1],
                            frozenset(fields[sep + 3].split(","))))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as ``{controller or "" (v2): path}``."""
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers = parts[1].split(",") if parts[1] else [""]
        for name in controllers:
            paths[name.removeprefix("name=")] = parts[2]
    return paths


def _below(mount: Mount, path: str) -> str | None:
    """Where ``path`` (a cgroup path as ``/proc/self/cgroup`` shows it) is on ``mount``, if it is visible there."""
    root = mount.root.rstrip("/")
    if root and not (path == root or path.startswith(root + "/")):
        return None
    return os.path.normpath(mount.point + "/" + path[len(root):].lstrip("/"))


def candidate_parents(mounts: Sequence[Mount], own: dict[str, str]) -> list[tuple[int, dict[str, str]]]:
    """Where run cgroups could go, best first: ``(2, {"unified": dir})`` for each usable cgroup2 parent (this
    process's own cgroup, then the hierarchy's root), then ``(1, {role: dir})`` with a directory per v1 controller."""
    out: list[tuple[int, dict[str, str]]] = []
    for m in mounts:
        if m.fstype != "cgroup2":
            continue
        mine = _below(m, own.get("", "/")) if "" in own else None
        for parent in dict.fromkeys(p for p in (mine, m.point) if p):
            out.append((2, {"unified": parent}))
    roles: dict[str, str] = {}
    for role in V1_ROLES:
        for m in mounts:
            if m.fstype == "cgroup" and role in m.super_options and role in own:
                parent = _below(m, own[role])
                if parent:
                    roles[role] = parent
                break
    if "memory" in roles and "pids" in roles:
        out.append((1, roles))
    return out


def _read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read()


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode("ascii"))
    finally:
        os.close(fd)


def _keyed(text: str, key: str) -> int | None:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return None


@dataclass
class RunCgroup:
    """One run's cgroup (v2: one directory; v1: one per hierarchy)."""

    version: int
    dirs: dict[str, str]  # role -> directory (v1 roles may share one directory)

    @property
    def procs_files(self) -> list[str]:
        """What the driver writes ``0`` to, to join."""
        return [os.path.join(d, "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]

    def members(self) -> set[int]:
        pids: set[int] = set()
        for d in dict.fromkeys(self.dirs.values()):
            try:
                pids.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split())
            except OSError:
                continue
        return pids

    def contains(self, pid: int) -> bool:
        """Whether ``pid`` is in every hierarchy of this run."""
        try:
            return all(pid in {int(p) for p in _read(os.path.join(d, "cgroup.procs")).split()}
                       for d in dict.fromkeys(self.dirs.values()))
        except OSError:
            return False

    def cpu_seconds(self) -> float | None:
        """CPU time of every thread the run ever had, from the kernel; None without a CPU controller (v1 without
        cpuacct)."""
        try:
            if self.version == 2:
                usec = _keyed(_read(os.path.join(self.dirs["unified"], "cpu.stat")), "usage_usec")
                return None if usec is None else usec / 1e6
            if "cpuacct" in self.dirs:
                return int(_read(os.path.join(self.dirs["cpuacct"], "cpuacct.usage"))) / 1e9
        except (OSError, ValueError):
            return None
        return None

    def oom_kills(self) -> int:
        """How many processes the kernel killed because the run reached its memory limit."""
        try:
            if self.version == 2:
                return _keyed(_read(os.path.join(self.dirs["unified"], "memory.events")), "oom_kill") or 0
            return _keyed(_read(os.path.join(self.dirs["memory"], "memory.oom_control")), "oom_kill") or 0
        except (OSError, ValueError):
            return 0

    def empty(self) -> bool:
        if self.version == 2:
            try:
                return _keyed(_read(os.path.join(self.dirs["unified"], "cgroup.events")), "populated") == 0
            except (OSError, ValueError):
                return not self.members()
        return not self.members()

    def kill(self) -> None:
        if self.version == 2 and os.path.exists(os.path.join(self.dirs["unified"], "cgroup.kill")):
            try:
                _write(os.path.join(self.dirs["unified"], "cgroup.kill"), "1")
                return
            except OSError:
                pass
        for pid in self.members():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def remove(self) -> bool:
        """Remove the run's directories; False while a process is still in one (the caller retries)."""
        done = True
        for d in dict.fromkeys(self.dirs.values()):
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


@dataclass
class CgroupTree:
    """The directory (per hierarchy) under which this process makes its runs' cgroups."""

    version: int
    bases: dict[str, str]
    _counter: Any = field(default_factory=itertools.count, repr=False)

    def new_run(self, memory_bytes: int, max_processes: int) -> RunCgroup:
        """A fresh cgroup with these limits (``OSError`` if the kernel refuses any of them)."""
        n = next(self._counter)
        dirs: dict[str, str] = {}
        made: dict[str, str] = {}
        try:
            for role, base in self.bases.items():
                if base not in made:
                    made[base] = os.path.join(base, f"run-{n}")
                    os.mkdir(made[base], 0o755)
                dirs[role] = made[base]
            run = RunCgroup(self.version, dirs)
            if self.version == 2:
                d = dirs["unified"]
                _write(os.path.join(d, "memory.max"), str(memory_bytes))
                _write(os.path.join(d, "pids.max"), str(max_processes))
                for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1"),
                                    ("cpu.weight", str(CPU_WEIGHT))):
                    if os.path.exists(os.path.join(d, name)):
                        _write(os.path.join(d, name), value)
            else:
                _write(os.path.join(dirs["memory"], "memory.limit_in_bytes"), str(memory_bytes))
                for name in ("memory.memsw.limit_in_bytes", "memory.kmem.limit_in_bytes"):
                    try:  # memsw exists only with swap accounting; kmem limits are gone from recent kernels
                        _write(os.path.join(dirs["memory"], name), str(memory_bytes))
                    except OSError:
                        pass
                _write(os.path.join(dirs["pids"], "pids.max"), str(max_processes))
                if "cpu" in dirs:
                    _write(os.path.join(dirs["cpu"], "cpu.shares"), str(CPU_SHARES))
        except OSError:
            for d in made.values():
                try:
                    os.rmdir(d)
                except OSError:
                    pass
            raise
        return run

    def weigh(self, parallel_runs: int) -> None:
        """Weight the runs' parent group as ``parallel_runs`` processes of the host (``parallel_runs x`` the default
        weight, at most the kernel's largest): the scheduler divides the CPU first between the parent's siblings, so
        at the default weight all parallel runs together would get the share of one host process (starved by a busy
        host), while a weight per run lets them neither starve the host nor be starved by it. Without a cpu
        controller (or permission) the weight stays as it is."""
        runs = max(1, int(parallel_runs))
        if self.version == 2:
            name, value = "cpu.weight", min(MAX_WEIGHT, CPU_WEIGHT * runs)
            base = self.bases.get("unified")
        else:
            name, value = "cpu.shares", min(MAX_SHARES, CPU_SHARES * runs)
            base = self.bases.get("cpu")
        if base and os.path.exists(os.path.join(base, name)):
            try:
                _write(os.path.join(base, name), str(value))
            except OSError:
                pass

    def describe(self) -> str:
        if self.version == 2:
            return f"cgroup v2 ({self.bases['unified']})"
        return f"cgroup v1 ({', '.join(sorted(self.bases))})"

    def cleanup(self) -> None:
        for base in dict.fromkeys(self.bases.values()):
            try:
                for entry in os.listdir(base):
                    if entry.startswith("run-"):
                        os.rmdir(os.path.join(base, entry))
                os.rmdir(base)
            except OSError:
                pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _remove_stale(parent: str) -> None:
    """Empty base directories of processes that died without cleaning up (``kill -9``)."""
    try:
        entries = os.listdir(parent)
    except OSError:
        return
    for entry in entries:
        if entry.startswith(BASE_PREFIX) and entry[len(BASE_PREFIX):].isdigit() \
                and not _pid_alive(int(entry[len(BASE_PREFIX):])):
            CgroupTree(0, {"stale": os.path.join(parent, entry)}).cleanup()


def make_tree(version: int, parents: dict[str, str], pid: int) -> CgroupTree:
    """Create this process's base directory under ``parents`` (``OSError`` when the kernel or permissions say no)."""
    name = f"{BASE_PREFIX}{pid}"
    bases: dict[str, str] = {}
    try:
        if version == 2:
            parent = parents["unified"]
            available = _read(os.path.join(parent, "cgroup.controllers")).split()
            if not {"memory", "pids"} <= set(available):
                raise OSError(f"{parent}: no memory and pids controllers")
            wanted = "+memory +pids" + (" +cpu" if "cpu" in available else "")  # cpu: a share per run
            enabled = _read(os.path.join(parent, "cgroup.subtree_control")).split()
            if not set(wanted.replace("+", "").split()) <= set(enabled):
                _write(os.path.join(parent, "cgroup.subtree_control"), wanted)
            _remove_stale(parent)
            bases["unified"] = os.path.join(parent, name)
            os.makedirs(bases["unified"], 0o755, exist_ok=True)
            _write(os.path.join(bases["unified"], "cgroup.subtree_control"), wanted)
        else:
            for role, parent in parents.items():
                _remove_stale(parent)
                bases[role] = os.path.join(parent, name)
                os.makedirs(bases[role], 0o755, exist_ok=True)
                needed = {"memory": "memory.limit_in_bytes", "pids": "pids.max", "cpuacct": "cpuacct.usage",
                          "cpu": "cpu.shares"}[role]
                if not os.path.exists(os.path.join(bases[role], needed)):
                    raise OSError(f"{bases[role]}: no {needed}")
    except OSError:
        CgroupTree(version, bases).cleanup()
        raise
    return CgroupTree(version, bases)


_PROBED = threading.Lock()


def kernel_accounting() -> CgroupTree | None:
    """The cgroup tree this process can make runs in (probed once per process, parallel first calls waiting for
    one probe; ``None`` when there is none). The driver still has to join a run's cgroup: the isolation probe checks
    that it can."""
    with _PROBED:
        return _find_tree()


@lru_cache(maxsize=1)
def _find_tree() -> CgroupTree | None:
    try:
        mounts = parse_mountinfo(_read("/proc/self/mountinfo"))
        own = parse_proc_cgroup(_read("/proc/self/cgroup"))
    except OSError:
        return None
    for version, parents in candidate_parents(mounts, own):
        try:
            tree = make_tree(version, parents, os.getpid())
            probe = tree.new_run(64 << 20, 8)
            probe.remove()
        except (OSError, ValueError):
            continue
        atexit.register(tree.cleanup)
        return tree
    return None
