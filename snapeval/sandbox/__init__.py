"""The code sandbox: runs untrusted programs test by test, contained by the kernel, and returns what each test
produced (captured standard output, or the returned value) as judged by the caller. What counts as a correct output
is the task's business (``snapeval.tasks.livecodebench``); this package runs programs.

Modules: :mod:`~snapeval.sandbox.harness` (runs and supervises programs), :mod:`~snapeval.sandbox.driver` (the
child side, run as a script inside the sandbox), :mod:`~snapeval.sandbox.protocol` (what crosses the pipes),
:mod:`~snapeval.sandbox.probe` (which isolation layers this machine gives, how a run is started),
:mod:`~snapeval.sandbox.cgroups` (kernel accounting per run), :mod:`~snapeval.sandbox.limits`. Details:
``docs/sandbox.md``.
"""
from __future__ import annotations

from snapeval.sandbox.harness import (
    MODES, STATUSES, Judge, ProgramJob, ProgramResult, TestOutcome, run_program, run_programs,
)
from snapeval.sandbox.probe import UNSAFE_ENV, Isolation, isolation, require_isolation
from snapeval.sandbox.limits import SandboxLimits

__all__ = ["MODES", "STATUSES", "UNSAFE_ENV", "Isolation", "Judge", "ProgramJob", "ProgramResult", "SandboxLimits",
           "TestOutcome", "isolation", "require_isolation", "run_program", "run_programs"]
