"""CPU threads beside a busy neighbour (issue #62): the passkey slice of the quickstart (SmolLM2-135M, ``--items`` items
x 16 configurations: full, and snapstream, streamingllm, snapkv at 64..1024 tokens), idle, beside a busy loop at the
run's own priority (``busy``) and beside one niced to 19 (``niced``), with every core's thread
(``SNAPEVAL_THREADS=all``, torch's default) and with the threads snapeval chooses (:mod:`snapeval.threads`, the
default). ``--repeats`` rounds, the six runs of a round one after another, so that a drift of the machine shows in
every configuration alike; the figures are medians over rounds, the slowdowns ratios to the idle run with every core.

    .venv/bin/python -m benchmarks.cpu_threads [--items 4] [--repeats 2] [--out results/bench/cpu_threads.json]

About half a minute a run at 4 items on 2 cores. It measures the machine it runs on, so run it where nothing else
runs (it refuses to start above a 1-minute load average of ``--max-load``, 0.5 by default): each figure is the wall
time of one ``snapeval sweep ... --no-report`` process into a fresh folder.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BUSY = "while True: pass"


def passkey_config(items: int) -> dict:
    """The quickstart's passkey task, its model, methods and budgets, ``items`` items."""
    quickstart = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())
    task = next(t for t in quickstart["tasks"] if t["name"] == "snapeval_passkey")
    return {"name": "cpu_threads", "models": quickstart["models"], "tasks": [{**task, "limit": items}],
            "budgets": quickstart["budgets"], "methods": quickstart["methods"], "simulate": {"enabled": False}}


def one_sweep(config: Path, out: Path, threads: str | None) -> dict:
    """Wall seconds of one sweep process; ``threads``: SNAPEVAL_THREADS (None: snapeval's choice)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "SNAPEVAL_THREADS")}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"})
    if threads is not None:
        env["SNAPEVAL_THREADS"] = threads
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "snapeval", "sweep", str(config), "--out", str(out), "--no-report"],
                          capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}): {done.stderr[-2000:]}")
    chosen = re.search(r"snapeval: (\d+) CPU thread", done.stderr)
    return {"seconds": round(seconds, 1), "threads": int(chosen.group(1)) if chosen else (threads or "all cores"),
            "load_1min_before": load}


NEIGHBOURS = {"idle": None, "busy": 0, "niced": 19}  # the busy loop's niceness


def run(items: int, repeats: int, out: Path) -> dict:
    results = {"items": items, "configurations": 16, "cores": len(os.sched_getaffinity(0)), "repeats": repeats,
               "load_1min_at_start": os.getloadavg()[0], "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "passkey.yaml"
        config.write_text(yaml.safe_dump(passkey_config(items)))
        for round_ in range(repeats):
            for neighbour, nice in NEIGHBOURS.items():
                busy = None
                if nice is not None:
                    busy = subprocess.Popen(["nice", "-n", str(nice), sys.executable, "-c", BUSY])
                    time.sleep(2)
                try:
                    for label, threads in (("all_threads", "all"), ("chosen", None)):
                        key = f"{neighbour}_{label}"
                        run_ = one_sweep(config, Path(tmp) / f"{key}_{round_}", threads)
                        results["runs"].setdefault(key, []).append(run_)
                        print(key, run_, flush=True)
                finally:
                    if busy is not None:
                        busy.kill()
                        busy.wait()
    runs = results["runs"]
    median = {key: statistics.median(r["seconds"] for r in values) for key, values in runs.items()}
    results["median_seconds"] = median
    results["slowdown_vs_idle_all_threads"] = {key: round(value / median["idle_all_threads"], 2)
                                                for key, value in median.items()}
    results["load_1min_at_end"] = os.getloadavg()[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=4, help="passkey items (default 4)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the six runs (default 2)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "cpu_threads.json")
    parser.add_argument("--max-load", type=float, default=0.5,
                        help="refuse to start above this 1-minute load average (default 0.5: an idle machine)")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    if load > args.max_load:
        print(f"load average {load:.2f} > --max-load {args.max_load}: the idle figures would not be idle; run it on "
              "an idle machine (or raise --max-load and say so)", file=sys.stderr)
        return 2
    run(args.items, args.repeats, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
