"""The real benchmarks by task-name prefix, and the data files each reads (no torch, no lm-eval)."""
from __future__ import annotations


#: The real benchmarks, by the task-name prefix of their lm-eval tasks (``longbench_v2_cot`` -> ``longbench_v2``).
BENCHMARK_FAMILIES = ("longbench_v2", "aime24", "livecodebench")


def task_family(name: str) -> str | None:
    """The benchmark a task name belongs to, or None (a synthetic task, which reads no data file)."""
    for family in BENCHMARK_FAMILIES:
        if name == family or name.startswith(family + "_"):
            return family
    return None


def family_data_files(family: str) -> tuple[str, ...]:
    """The local files (relative to the data directory) a benchmark reads, from :mod:`snapeval.tasks`."""
    from snapeval.tasks import aime, livecodebench, longbench

    specs = {"longbench_v2": longbench.SPEC, "aime24": aime.SPEC, "livecodebench": livecodebench.SPEC}
    return tuple(specs[family].local_files)
