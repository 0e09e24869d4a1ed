"""The limits of one program run (what the harness enforces and what it asks the kernel to enforce)."""
from __future__ import annotations

from dataclasses import dataclass

from snapeval.errors import SnapevalError


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one program run.

    ``timeout_s`` is each test's limit, both wall-clock and CPU (all threads, measured by the kernel); test 0's
    clock includes loading the program. ``memory_mb`` caps the run's memory: the address space (``RLIMIT_AS``)
    and, where a cgroup is available, everything the kernel charges to the run (heap, stacks, tmpfs files, page
    tables, pipe and socket buffers). ``output_bytes`` caps one test's output (and the size of any file the program
    writes), ``program_output_bytes`` all tests' outputs of one program together: it bounds what the harness reads
    and compares per program. ``disk_mb`` sizes each of the run's private ``/work`` and ``/tmp`` (RAM-backed).
    """

    timeout_s: float = 6.0
    memory_mb: int = 2048
    output_bytes: int = 32 << 20
    program_output_bytes: int = 128 << 20
    max_open_files: int = 64
    max_processes: int = 64
    disk_mb: int = 64

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "output_bytes", "program_output_bytes", "max_open_files",
                     "max_processes", "disk_mb"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise SnapevalError(f"{name}={value!r} is not allowed; it must be a positive number")
            if name != "timeout_s" and value != int(value):
                raise SnapevalError(f"{name}={value!r} is not allowed; it must be a positive integer")
