"""The real benchmarks by task-name prefix, the data files each reads and their typical lengths (no torch, no
lm-eval)."""
from __future__ import annotations


#: The real benchmarks, by the task-name prefix of their lm-eval tasks (``longbench_v2_cot`` -> ``longbench_v2``).
BENCHMARK_FAMILIES = ("longbench_v2", "aime24", "livecodebench")

#: Typical mean (prompt, generated) tokens per sample of each benchmark: what the SN40L pricing of a results row
#: uses for its deployment (:mod:`snapeval.simulator.pricing`). DeepSeek-R1-0528 with SnapStream (arXiv 2511.03092,
#: Table 3; restated in shared/reference/benchmarks.md).
TYPICAL_LENGTHS: dict[str, tuple[int, int]] = {
    "longbench_v2": (84_762, 1_296),
    "aime24": (140, 15_424),
    "livecodebench": (476, 10_634),
}


def task_family(name: str) -> str | None:
    """The benchmark a task name belongs to, or None (a synthetic task, which reads no data file)."""
    for family in BENCHMARK_FAMILIES:
        if name == family or name.startswith(family + "_"):
            return family
    return None


def typical_lengths(name: str) -> tuple[int, int] | None:
    """(prompt, generated) tokens typical of the benchmark a task name belongs to; None for a synthetic task (its
    lengths are set by its configuration)."""
    return TYPICAL_LENGTHS.get(task_family(name) or "")


def family_data_files(family: str) -> tuple[str, ...]:
    """The local files (relative to the data directory) a benchmark reads, from :mod:`snapeval.tasks`."""
    from snapeval.tasks import aime, livecodebench, longbench

    specs = {"longbench_v2": longbench.SPEC, "aime24": aime.SPEC, "livecodebench": livecodebench.SPEC}
    return tuple(specs[family].local_files)
