"""Helpers shared by the benchmarks: machine description, real prompts, peak-RSS accounting, JSON output."""
from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "results" / "bench"


def data_dir() -> Path:
    path = Path(os.environ.get("SNAPEVAL_DATA_DIR", REPO.parent / "shared" / "data"))
    if not path.is_dir():
        sys.exit(f"benchmark: data folder {path} not found; set SNAPEVAL_DATA_DIR")
    return path


def machine() -> dict:
    import torch

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    mem = next((int(l.split()[1]) // 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal")), None)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_mib": mem,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }


def reset_peak_rss() -> None:
    """Reset the kernel's peak-RSS counter (VmHWM) of this process (Linux)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mib() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return float("nan")


def longbench_context(min_chars: int = 60_000) -> str:
    """The first LongBench-v2 context (hub-schema JSONL in the shared data) with at least ``min_chars``."""
    path = data_dir() / "longbench_v2" / "longbench_v2.jsonl"
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if len(row.get("context") or "") >= min_chars:
                return row["context"]
    sys.exit(f"benchmark: no context of {min_chars}+ characters in {path}")


def middle_truncate(ids: list[int], length: int) -> list[int]:
    """Keep the first and last halves of ``length`` tokens (LongBench's official truncation)."""
    if len(ids) <= length:
        return ids
    half = length // 2
    return ids[:half] + ids[len(ids) - (length - half):]


def fill_defaults(args, defaults: dict) -> None:
    """Set every argument of ``defaults`` the command line left at None (a benchmark's defaults differ between its
    ``--smoke`` run and the real one)."""
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)


def write_json(name: str, payload: dict) -> Path:
    return write_json_at(BENCH_DIR / name, payload)


def write_json_at(path: Path, payload: dict) -> Path:
    """Write ``payload`` to ``path`` at once (a temporary file renamed over it: a kill never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def full_snapstream_snapkv(budgets) -> list:
    """The shared-prefill benchmarks' grid: the full cache, then SnapStream and SnapKV at each of ``budgets``."""
    from snapeval.cache import resolve_method

    return [resolve_method("full")] + [resolve_method(m, b) for m in ("snapstream", "snapkv") for b in budgets]


def alone_token_ids(model, tokenizer, config, prompts, max_new: int, slots: int) -> list[list[int]]:
    """Greedy token ids of one configuration with its own prefill of every prompt, as ``snapeval sweep --per-cell``
    runs it: SnapStream on the continuous-batching engine (``slots`` slots), the others through
    ``snapeval.generate`` one prompt at a time (lm-eval's padded batches of ``batch_size: 1``)."""
    from snapeval.engine import Engine, SamplingParams
    from snapeval.generation import generate

    if config.method == "snapstream":
        done = Engine(model, tokenizer, config, num_slots=slots).generate(
            prompts, [SamplingParams(max_new_tokens=max_new)] * len(prompts))
        return [d.token_ids for d in done]
    return [generate(model, tokenizer, [p], config=config, max_new_tokens=max_new)[0].token_ids for p in prompts]
