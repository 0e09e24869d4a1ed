"""SN40L simulator: memory and throughput of every (model, context, budget, batch, sockets) point.

``simulate(hardware, model, deployment, policy) -> SimResult`` and ``simulate_point(model, hardware, ...)``.
"""
from __future__ import annotations

from snapeval.simulator.core import (
    DTYPE_BYTES, Deployment, KernelTime, KVPolicy, SimResult, TierUsage, simulate, simulate_point,
)
from snapeval.simulator.hardware import (
    Assumptions, HardwareSpec, SocketSpec, get_hardware, list_hardware, load_hardware_file,
)

__all__ = [
    "Assumptions", "DTYPE_BYTES", "Deployment", "HardwareSpec", "KVPolicy", "KernelTime", "SimResult",
    "SocketSpec", "TierUsage", "get_hardware", "list_hardware", "load_hardware_file", "simulate",
    "simulate_point",
]
