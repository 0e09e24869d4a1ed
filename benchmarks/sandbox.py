"""Per-program start-up and per-test overhead of the LiveCodeBench sandbox -> results/bench/sandbox.json.

Every program gets its own mount, PID, network, IPC and UTS namespaces, a new root, a uid of its own and a seccomp
filter (``snapeval.tasks.sandbox``); the start-up is what a program with one trivial test costs end to end (target:
under 100 ms on an idle machine), beside a bare ``python -I -S -c pass`` of the same interpreter for scale.
Runs trivial programs (so that the time measured is the sandbox's, not the program's) with 1 and with N tests per
program, for stdin and functional problems, and reports the median wall time per program and the marginal cost of
one more test (the slope between the two). Usage: ``PYTHONPATH=. python benchmarks/sandbox.py [--repeats 30]``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

from snapeval.tasks.sandbox import SandboxLimits, TestCase, isolation, run_program, run_programs, ProgramJob

STDIN = ("a, b = map(int, input().split())\nprint(a + b)\n", "2 3\n", "5\n", None)
FUNCTIONAL = ("class Solution:\n    def add(self, a, b):\n        return a + b\n", "2\n3", "5", "add")


def _time_pair(code, small, large, func, repeats):
    """Median wall time of programs with ``small`` and ``large`` test lists, measured interleaved (the machine is
    shared, so drift hits both alike)."""
    walls = {id(small): [], id(large): []}
    for _ in range(repeats):
        for tests in (small, large):
            start = time.perf_counter()
            result = run_program(code, tests, func_name=func, limits=SandboxLimits())
            walls[id(tests)].append(time.perf_counter() - start)
            assert result.passed, result
    return statistics.median(walls[id(small)]), statistics.median(walls[id(large)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--tests", type=int, default=20, help="tests per program for the marginal cost")
    parser.add_argument("--out", default="results/bench/sandbox.json")
    args = parser.parse_args()
    load = [round(x, 2) for x in os.getloadavg()]
    run_program(*STDIN[:1], [TestCase(STDIN[1], STDIN[2], "stdin")])  # warm the isolation probe
    rows = {}
    for name, (code, inp, out, func) in {"stdin": STDIN, "functional": FUNCTIONAL}.items():
        kind = "stdin" if func is None else "functional"
        one, many = _time_pair(code, [TestCase(inp, out, kind)], [TestCase(inp, out, kind)] * args.tests, func,
                               args.repeats)
        rows[name] = {
            "program_with_1_test_ms": round(one * 1e3, 2),
            f"program_with_{args.tests}_tests_ms": round(many * 1e3, 2),
            "marginal_ms_per_test": round((many - one) / (args.tests - 1) * 1e3, 3),
            "amortized_ms_per_test": round(many / args.tests * 1e3, 3),
        }
    bare = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        subprocess.run([isolation().python, "-I", "-S", "-c", "pass"], check=True)
        bare.append(time.perf_counter() - start)
    jobs = [ProgramJob(STDIN[0], [TestCase(STDIN[1], STDIN[2], "stdin")])] * 40
    start = time.perf_counter()
    assert all(r.passed for r in run_programs(jobs))
    parallel = time.perf_counter() - start
    report = {
        "benchmark": "sandbox per-test overhead",
        "repeats": args.repeats,
        "results": rows,
        "bare_interpreter_start_ms": round(statistics.median(bare) * 1e3, 2),
        "parallel_40_programs_s": round(parallel, 3),
        "workers": len(os.sched_getaffinity(0)),
        "isolation": isolation().describe(),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_before": load, "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "target": "per-program start-up (a program with 1 test) < 100 ms on an idle machine",
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
