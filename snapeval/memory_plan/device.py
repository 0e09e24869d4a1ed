"""The device's budget and the measured peak: what is in use, what a group may use, :class:`PeakMeter`."""
from __future__ import annotations

from snapeval.memory_plan.units import MARGIN_BYTES, MARGIN_FRACTION, gib


def _status_bytes(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise OSError(f"no {key} in /proc/self/status")


def _meminfo_bytes(key: str) -> int:
    for line in open("/proc/meminfo"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise OSError(f"no {key} in /proc/meminfo")


def bytes_in_use(device) -> int:
    """What the process holds on ``device`` now: CUDA: bytes allocated by torch; CPU: resident memory."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return _status_bytes("VmRSS")


def device_budget(device, max_memory: int | None = None) -> int:
    """The bytes a group may use on ``device``, weights included: ``max_memory`` when given, else what is in use
    plus what is free (CUDA: free device memory and torch's unused reserve; CPU: the kernel's available memory),
    less a margin (the larger of 1 GiB and 8% of the device)."""
    import torch

    if max_memory is not None:
        return int(max_memory)
    device = torch.device(device)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        usable = free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    else:
        total, usable = _meminfo_bytes("MemTotal"), _meminfo_bytes("MemAvailable")
    margin = max(MARGIN_BYTES, int(MARGIN_FRACTION * total))
    return max(0, bytes_in_use(device) + usable - margin)


class PeakMeter:
    """The measured peak of a stretch of work on ``device``: CUDA: torch's peak allocated bytes; CPU: the process's
    resident high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs``). ``growth_bytes`` is the peak
    above what was in use at the start (what a :class:`GroupPlan`'s ``peak_bytes`` predicts)."""

    def __init__(self, device):
        import torch

        self.device = torch.device(device)
        self.source = "cuda_max_memory_allocated" if self.device.type == "cuda" else "cpu_vmhwm"
        self.start_bytes = 0
        self.peak = 0

    def __enter__(self) -> "PeakMeter":
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            try:
                with open("/proc/self/clear_refs", "w") as fh:
                    fh.write("5")  # resets VmHWM to the current RSS
            except OSError:
                self.source = "cpu_vmhwm_not_reset"
        self.start_bytes = bytes_in_use(self.device)
        return self

    def __exit__(self, *exc) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = int(torch.cuda.max_memory_allocated(self.device))
        else:
            self.peak = _status_bytes("VmHWM")

    @property
    def growth_bytes(self) -> int:
        return max(0, self.peak - self.start_bytes)

    def to_dict(self) -> dict:
        return {"source": self.source, "start_bytes": self.start_bytes, "peak_bytes": self.peak,
                "growth_bytes": self.growth_bytes, "growth_gib": gib(self.growth_bytes)}


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure (CUDA's ``OutOfMemoryError``, or the CPU allocator's)."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and ("out of memory" in text or "can't allocate memory" in text
                                                             or isinstance(exc, MemoryError))
