"""The limits of one program run (what the harness enforces and what it asks the kernel to enforce)."""
from __future__ import annotations

from dataclasses import dataclass

from snapeval.errors import SnapevalError


#: How deep a functional result may nest (the driver refuses a deeper one, the program's runtime error; the harness
#: refuses deeper bytes before parsing them). lcb_runner compares in the program's process, where only Python's
#: recursion limit (50,000 under its import header) and the C stack bound it: a listed departure (docs/sandbox.md).
MAX_DEPTH = 500
#: Integers wider than this are sent in hexadecimal (linear to write and to read; a decimal literal costs quadratic
#: time to convert), so no integer literal of a result is longer than :data:`MAX_INT_LITERAL` characters.
DECIMAL_INT_BITS = 64
MAX_INT_LITERAL = len(str(-(1 << DECIMAL_INT_BITS)))
#: The most JSON values (scalars, containers, object keys) a functional result may hold: 5x the largest
#: LeetCode-style output (10^5 values), and at most about 55 MiB of Python objects (105 bytes a value measured for
#: the worst, a list of one-character strings outside the BMP).
MAX_VALUES = 1 << 19
#: What the driver needs of these (it imports nothing of snapeval: they travel in its spec).
RESULT_LIMITS = {"max_depth": MAX_DEPTH, "decimal_int_bits": DECIMAL_INT_BITS}


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
