"""Per-program start-up and per-test cost of the code sandbox -> results/bench/sandbox.json.

Every program gets its own mount, PID, network, IPC and UTS namespaces, a new root, a uid of its own, a seccomp
filter and (where the machine has one) a cgroup (``snapeval.sandbox``); the harness then hands it its tests one at a
time. The start-up is what a program with one trivial test costs end to end (target: under 100 ms on an idle
machine), beside a bare ``python -I -S -c pass`` of the same interpreter for scale; the marginal cost of one more
test is the slope between programs with 1 and with N tests. A sandbox started afresh for every test (the other way
to keep the program from steering its tests) would cost one start-up per test instead.
Runs trivial programs (so that the time measured is the sandbox's, not the program's), stdin and functional, and
reports medians. Usage: ``python -m benchmarks.sandbox [--repeats 30] [--tests 20]``; ``--smoke`` for a seconds-long
check that writes nowhere unless ``--out`` is given.
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

from snapeval.sandbox import ProgramJob, SandboxLimits, isolation, run_program, run_programs

STDIN = ("a, b = map(int, input().split())\nprint(a + b)\n", "2 3\n", "5", None, "stdin")
FUNCTIONAL = ("class Solution:\n    def add(self, a, b):\n        return a + b\n", "2\n3", 5, "add", "functional")


def _judge(expected):
    return lambda index, output: (output.strip() if isinstance(output, str) else output) == expected


def _time_pair(code, small, large, func, mode, expected, repeats):
    """Median wall time of programs with ``small`` and ``large`` input lists, measured interleaved (drift hits both
    alike)."""
    walls = {len(small): [], len(large): []}
    for _ in range(repeats):
        for inputs in (small, large):
            start = time.perf_counter()
            result = run_program(code, inputs, mode=mode, judge=_judge(expected), func_name=func,
                                 limits=SandboxLimits())
            walls[len(inputs)].append(time.perf_counter() - start)
            assert result.passed, result
    return statistics.median(walls[len(small)]), statistics.median(walls[len(large)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--tests", type=int, default=20, help="tests per program for the marginal cost")
    parser.add_argument("--out", default=None, help="default: results/bench/sandbox.json (none with --smoke)")
    parser.add_argument("--smoke", action="store_true", help="2 repeats, 3 tests, 4 parallel programs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats, args.tests = 2, 3
    out = args.out or (None if args.smoke else "results/bench/sandbox.json")
    load = [round(x, 2) for x in os.getloadavg()]
    run_program(STDIN[0], [STDIN[1]], mode="stdin", judge=_judge(STDIN[2]))  # warm the isolation probe
    rows = {}
    for name, (code, inp, expected, func, mode) in {"stdin": STDIN, "functional": FUNCTIONAL}.items():
        one, many = _time_pair(code, [inp], [inp] * args.tests, func, mode, expected, args.repeats)
        rows[name] = {
            "program_with_1_test_ms": round(one * 1e3, 2),
            f"program_with_{args.tests}_tests_ms": round(many * 1e3, 2),
            "marginal_ms_per_test": round((many - one) / (args.tests - 1) * 1e3, 3),
            "amortized_ms_per_test": round(many / args.tests * 1e3, 3),
            "fresh_sandbox_per_test_ms": round(one * 1e3, 2),  # the alternative: one start-up per test
        }
    bare = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        subprocess.run([isolation().python, "-I", "-S", "-c", "pass"], check=True)
        bare.append(time.perf_counter() - start)
    n_parallel = 4 if args.smoke else 40
    jobs = [ProgramJob(STDIN[0], [STDIN[1]], "stdin", _judge(STDIN[2]))] * n_parallel
    start = time.perf_counter()
    assert all(r.passed for r in run_programs(jobs))
    parallel = time.perf_counter() - start
    report = {
        "benchmark": "sandbox start-up and per-test cost",
        "smoke": args.smoke,
        "repeats": args.repeats,
        "results": rows,
        "bare_interpreter_start_ms": round(statistics.median(bare) * 1e3, 2),
        f"parallel_{n_parallel}_programs_s": round(parallel, 3),
        "workers": len(os.sched_getaffinity(0)),
        "isolation": isolation().describe(),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_before": load, "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "target": "per-program start-up (a program with 1 test) < 100 ms on an idle machine",
    }
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
