"""How many CPU threads a run's torch ops use: the cores this process may run on, less those other processes keep
busy now, so that a busy neighbour costs about what one thread would, not the oversubscription of two threads
fighting over one core (measured on 2 cores, passkey 8 items x 16 configurations, issue #62: 71.8 s idle with two
threads; 160.9 s with two beside a busy core, 113.6 s with one).

``SNAPEVAL_THREADS=N`` chooses ``N`` (``all``: every core this process may use), and an ``OMP_NUM_THREADS`` set by
the user is kept. Nothing here imports torch: :func:`apply` sets ``OMP_NUM_THREADS`` before torch is imported (and
``torch.set_num_threads`` where it already is). It imports nothing of snapeval but :mod:`snapeval.errors`.
"""
from __future__ import annotations

import os
import sys
import time

ENV = "SNAPEVAL_THREADS"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; a container's cpuset included)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_elsewhere(samples: int = 5, interval_s: float = 0.02) -> float:
    """Cores other processes keep busy now: the runnable tasks the kernel counts (``procs_running`` of
    ``/proc/stat``) less this process's own, averaged over ``samples`` reads ``interval_s`` apart (one read is a
    moment; a loop that runs all the time is in nearly every one). 0 where ``/proc/stat`` cannot be read."""
    counts = []
    for index in range(samples):
        try:
            with open("/proc/stat", encoding="ascii") as f:
                for line in f:
                    if line.startswith("procs_running "):
                        counts.append(max(0, int(line.split()[1]) - 1))  # less the reader (this process)
                        break
        except (OSError, ValueError):
            return 0.0
        if index + 1 < samples:
            time.sleep(interval_s)
    return sum(counts) / len(counts) if counts else 0.0


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
