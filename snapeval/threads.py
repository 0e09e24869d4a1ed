"""How many CPU threads a run's torch ops use: the cores this process may run on, less those other processes would
take from it now, so that a busy neighbour costs about what one thread would, not the oversubscription of two threads
fighting over one core (issue #62, 2 cores, passkey 8 items x 16 configurations: 71.8 s idle with two threads; 160.9
s with two beside a busy core, 113.6 s with one). A neighbour counts by its priority (:func:`core_share`): a loop
niced to 19 takes next to nothing from a run at nice 0, and beside it every core's thread is kept
(``results/bench/cpu_threads.json``, passkey 4 items x 16 configurations, medians of two rounds: idle 113-128 s;
beside a loop at the same priority 327.6 s with two threads, 131.7 s with the one chosen).

``SNAPEVAL_THREADS=N`` chooses ``N`` (``all``: every core this process may use), and an ``OMP_NUM_THREADS`` set by
the user is kept. Nothing here imports torch: :func:`apply` sets ``OMP_NUM_THREADS`` before torch is imported (and
``torch.set_num_threads`` where it already is). It imports nothing of snapeval but :mod:`snapeval.errors`.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ENV = "SNAPEVAL_THREADS"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; a container's cpuset included)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def core_share(nice: int, own_nice: int = 0) -> float:
    """The share of a core a runnable thread of niceness ``nice`` takes from one of ours (niceness ``own_nice``)
    when they meet on a core: the kernel's fair scheduler splits a core by weight (1024 at nice 0, 1.25x less a
    step), so two equals halve it, which for a thread of a parallel region that waits for its slowest is as bad as
    losing the core: ``2 w / (w + w_own)``, at most 1. A loop at nice 19 takes 0.03 of a core from a nice-0 run;
    one at nice 0, a whole core."""
    weight, own = 1.25 ** -nice, 1.25 ** -own_nice
    return min(1.0, 2 * weight / (weight + own))


def runnable_nices(proc: Path = Path("/proc"), skip_pid: int | None = None) -> list[int] | None:
    """The niceness of every runnable thread (state ``R``) of the other processes ``proc`` shows; None where no
    process's threads can be read (a ``/proc`` mounted with ``hidepid``, or none)."""
    skip = os.getpid() if skip_pid is None else skip_pid
    nices, read_any = [], False
    try:
        pids = [entry.name for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        if int(pid) == skip:
            continue
        try:
            tids = [entry.name for entry in os.scandir(proc / pid / "task")]
        except OSError:
            continue
        for tid in tids:
            try:
                with open(proc / pid / "task" / tid / "stat", encoding="ascii", errors="replace") as f:
                    line = f.read()
            except OSError:
                continue
            fields = line[line.rfind(")") + 2:].split()  # after "pid (comm) ": state is field 3, nice field 19
            if len(fields) < 17:
                continue
            read_any = True
            if fields[0] == "R":
                try:
                    nices.append(int(fields[16]))
                except ValueError:
                    continue
    return nices if read_any else None


def _procs_running() -> int | None:
    """Runnable tasks the kernel counts (``procs_running`` of ``/proc/stat``) less this process's reading one."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith("procs_running "):
                    return max(0, int(line.split()[1]) - 1)
    except (OSError, ValueError):
        return None
    return None


def busy_elsewhere(samples: int = 5, interval_s: float = 0.02, proc: Path = Path("/proc")) -> float:
    """Cores other processes take from this one now: each runnable thread of another process counts for the share
    of a core it would take from ours (:func:`core_share`, by the two nicenesses: a busy loop at our priority is a
    core, one at nice 19 next to nothing), summed and averaged over ``samples`` reads ``interval_s`` apart (one read
    is a moment; a loop that runs all the time is in nearly every one). Where ``proc`` shows no other process's
    threads, the kernel's count of runnable tasks, each a core; 0 where neither can be read."""
    own_nice = os.getpriority(os.PRIO_PROCESS, 0)
    totals = []
    for index in range(samples):
        nices = runnable_nices(proc)
        if nices is not None:
            totals.append(sum(core_share(nice, own_nice) for nice in nices))
        else:
            running = _procs_running()
            if running is None:
                return 0.0
            totals.append(float(running))
        if index + 1 < samples:
            time.sleep(interval_s)
    return sum(totals) / len(totals) if totals else 0.0


def choose(cores: int | None = None, busy: float | None = None) -> tuple[int, str]:
    """``(threads, why)``: :data:`ENV` when set, else the usable cores less the busy ones (rounded down to the
    nearest whole core kept busy: ``busy`` 0.6 of 2 cores leaves 1), at least one."""
    cores = usable_cores() if cores is None else cores
    given = os.environ.get(ENV, "").strip().lower()
    if given == "all":
        return cores, f"{ENV}=all"
    if given:
        if not given.isdigit() or int(given) < 1:
            from snapeval.errors import SnapevalError

            raise SnapevalError(f"{ENV}={given!r} is invalid; allowed: an integer >= 1, or all")
        return int(given), f"{ENV}={given}"
    busy = busy_elsewhere() if busy is None else busy
    taken = int(busy + 0.5)  # a core counts as taken when something runs on it more often than not
    threads = max(1, cores - taken)
    return threads, f"{cores} core(s), {busy:.1f} busy with other processes"


def apply(stream=None) -> int | None:
    """Set the intra-op threads of this process's torch from :func:`choose`, before a model runs on the CPU; an
    ``OMP_NUM_THREADS`` the user set is kept (None returned). One line on ``stream`` (stderr) when fewer threads than
    cores are chosen."""
    if "OMP_NUM_THREADS" in os.environ and ENV not in os.environ:
        return None
    threads, why = choose()
    os.environ["OMP_NUM_THREADS"] = str(threads)  # torch reads it when first imported
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    cores = usable_cores()
    if threads < cores and ENV not in os.environ:
        print(f"snapeval: {threads} CPU thread(s) of {cores} ({why}; {ENV}=N or all chooses)",
              file=stream or sys.stderr)
    return threads
