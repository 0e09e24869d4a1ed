"""SN40L simulator: memory and throughput of every (model, context, method, batch, sockets) point.

``simulate(hardware, model, deployment, method) -> SimResult`` (``method``: a resolved cache configuration from
:func:`snapeval.cache.resolve_method`) and ``simulate_point(model, hardware, ...)``; :mod:`snapeval.simulator.pricing`
prices a results-table row.
"""
from __future__ import annotations

from snapeval.simulator.core import (
    DTYPE_BYTES, Deployment, KernelTime, SimResult, TierUsage, at_batch, forward_flops_per_token, gain_vs_full, simulate,
    simulate_point,
)
from snapeval.simulator.hardware import (
    Assumptions, HardwareSpec, SocketSpec, get_hardware, list_hardware, load_hardware_file,
)

__all__ = [
    "Assumptions", "DTYPE_BYTES", "Deployment", "HardwareSpec", "KernelTime", "SimResult", "SocketSpec",
    "TierUsage", "at_batch", "forward_flops_per_token", "gain_vs_full", "get_hardware", "list_hardware", "load_hardware_file", "simulate",
    "simulate_point",
]
