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

The harness's own cost per program under hostile output (``harness_cost``): each bomb of :data:`BOMBS` run by a
fresh interpreter (``--bomb NAME``, which prints one JSON line), so that its CPU time and peak RSS
(``getrusage(RUSAGE_SELF)``) are the harness's alone (the run is another process), beside the program's own limits;
``--bomb-repeats`` rounds of all of them (medians, and each round's ratio to the same round's reference bomb), or
only them with ``--bombs-only``. ``--startup-only N`` times N programs with one test each: run it alternately in two
checkouts to compare their start-up in one window. Every report records the load average before and after.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from snapeval.sandbox import ProgramJob, SandboxLimits, isolation, run_program, run_programs

STDIN = ("a, b = map(int, input().split())\nprint(a + b)\n", "2 3\n", "5", None, "stdin")
FUNCTIONAL = ("class Solution:\n    def add(self, a, b):\n        return a + b\n", "2\n3", 5, "add", "functional")


#: name -> (program, mode, test input, expected output): outputs that cost the harness more than they cost the program.
BOMBS = {
    "16M_tokens_one_line": ("import sys\nsys.stdout.write('0 ' * (16 * 10**6 - 1) + '0\\n')\n", "stdin", "2 3\n",
                            "5\n"),
    "4M_empty_lists": ("class Solution:\n    def f(self, x):\n        return [[] for _ in range(4 * 10**6)]\n",
                       "functional", "0", "[]"),
    "1M_empty_lists": ("class Solution:\n    def f(self, x):\n        return [[] for _ in range(10**6)]\n",
                       "functional", "0", "[]"),
    # the classes of sandbox issue #47 (each about 28-32 MB, under the 32 MiB cap)
    "8M_astral_chars_one_line": ("import sys\nsys.stdout.write('\\U0001F600' * (8 * 10**6 - 1))\n", "stdin",
                                 "2 3\n", "5\n"),
    "ascii_line_then_one_astral": ("import sys\nsys.stdout.write('a' * (32 * 10**6) + '\\U0001F600')\n", "stdin",
                                   "2 3\n", "5\n"),
    "4M_astral_tokens_ideographic_spaces": ("import sys\nsys.stdout.write('\\U0001F600\\u3000' * (4 * 10**6))\n",
                                            "stdin", "2 3\n", "5\n"),
    "7000_integers_of_3900_digits": ("class Solution:\n    def f(self, x):\n"
                                     "        return [10**3900 + i for i in range(7000)]\n", "functional", "0", "[]"),
    "1.77M_astral_strings": ("class Solution:\n    def f(self, x):\n        return ['\\U0001F600'] * 1770000\n",
                             "functional", "0", "[]"),
    # over 2x the reference's CPU before the whitespace look-up and the result skeleton (about 32 MB each): the 19
    # multi-byte whitespace characters packed on one line, and one-digit tokens between them
    "wide_spaces_one_line": ("import sys\nsys.stdout.write(''.join(c for c in map(chr, range(128, 0x3001))"
                             " if c.isspace()) * (32 * 10**6 // 55))\n", "stdin", "2 3\n", "5\n"),
    "tokens_between_wide_spaces": ("import sys\nsys.stdout.write(''.join('7' + c for c in map(chr, range(128, 0x3001))"
                                   " if c.isspace()) * (32 * 10**6 // 74))\n", "stdin", "2 3\n", "5\n"),
    # issue #60: correct answers of long number tokens (32 MB), and a Fraction of 2 MiB parts (16 Mbit), unreduced
    "16M_arabic_indic_zeros_then_the_answer": ("import sys\nsys.stdout.write('\\u0660' * (16 * 10**6) + '5\\n')\n",
                                               "stdin", "2 3\n", "5\n"),
    "3.000...0_of_32MB": ("import sys\nsys.stdout.write('5.' + '0' * (32 * 10**6 - 2) + '\\n')\n", "stdin", "2 3\n",
                          "5\n"),
    # zeros of several scripts in a random order (no repeated unit to skip by): three scripts of one and two bytes,
    # then ASCII and astral (four-byte) zeros, about 32 MB each
    "random_zeros_of_three_scripts_then_the_answer": (
        "import os, sys\nletters = os.urandom(19_000_000).translate(bytes(b'abc'[i % 3] for i in range(256)))\n"
        "sys.stdout.write(letters.decode().replace('a', '0').replace('b', '\\u0660').replace('c', '\\u06f0') + '5\\n')\n",
        "stdin", "2 3\n", "5\n"),
    "random_ascii_and_astral_zeros_then_the_answer": (
        "import os, sys\nletters = os.urandom(12_800_000).translate(bytes(b'ab'[i % 2] for i in range(256)))\n"
        "sys.stdout.write(letters.decode().replace('a', '0').replace('b', '\\U0001FBF0') + '5\\n')\n",
        "stdin", "2 3\n", "5\n"),
    "fraction_of_2MiB_parts": ("from fractions import Fraction\nclass Solution:\n    def f(self, x):\n"
                               "        return Fraction((1 << 16_777_216) + 3, (1 << 16_777_216) + 1, _normalize=False)\n",
                               "functional", "0", "3"),
}
#: The bomb every other is compared with (the documented reference: 16 million one-character tokens).
REFERENCE_BOMB = "16M_tokens_one_line"
BOMB_LIMITS = SandboxLimits(timeout_s=30.0, memory_mb=2048)


def _loadavg() -> list[float]:
    """The three load averages (``/proc/loadavg``): the machine is shared, so every figure is recorded beside them."""
    return [round(x, 2) for x in os.getloadavg()]


def _without_checkout_path(description: dict) -> dict:
    """``description`` with this checkout's absolute path written ``<repo>`` (numpy's folder is bound from the
    checkout's environment): the committed figures name no path of the machine that measured them."""
    from snapeval.paths import repo_root

    return json.loads(json.dumps(description).replace(str(repo_root()), "<repo>"))


def bomb(name: str, harness_memory_mb: int = 0) -> dict:
    """Run one of :data:`BOMBS` here and return its verdict and what it cost this process: CPU seconds and the growth
    of its peak RSS. ``harness_memory_mb`` > 0 puts this process under an address-space limit of that much beyond
    what it maps now (the run raises its own limit to the program's)."""
    from snapeval.tasks.livecodebench import functional_matches, grading, load_json, stdout_matches

    code, mode, test_input, expected = BOMBS[name]
    judge = ((lambda index, out: stdout_matches(out, expected)) if mode == "stdin"
             else (lambda index, value: functional_matches(value, load_json(expected))))
    isolation()  # probed once per process (and the files a run maps read): not this bomb's cost
    # nor what grading builds once per process: the table of non-ASCII digits, the whitespace and zero look-ups (numpy)
    assert stdout_matches("\u2003\u3000\u0663".encode(), "3")
    grading._zero_tables()
    if harness_memory_mb:
        with open("/proc/self/status", encoding="ascii") as f:
            mapped = int(next(line for line in f if line.startswith("VmSize")).split()[1]) << 10
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (harness_memory_mb << 20), resource.RLIM_INFINITY))
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    try:
        status = run_program(code, [test_input], mode=mode, judge=judge, func_name="f" if mode != "stdin" else None,
                             limits=BOMB_LIMITS).status
    except BaseException as exc:  # noqa: BLE001 - what the old harness did (MemoryError), reported as such
        status = f"raised {type(exc).__name__}"
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"status": status, "harness_cpu_s": round(cpu, 3),
            "harness_peak_rss_growth_mib": round((after.ru_maxrss - before.ru_maxrss) / 1024, 1),
            "wall_s": round(time.perf_counter() - start, 2)}


def bomb_in_fresh_process(name: str, harness_memory_mb: int = 0) -> dict:
    """:func:`bomb` in a new interpreter (``--bomb``), so that the peak RSS measured is this bomb's."""
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "benchmarks.sandbox", "--bomb", name, "--harness-memory-mb",
                          str(harness_memory_mb)], capture_output=True, text=True, timeout=600, check=True, cwd=repo,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def harness_costs(repeats: int) -> dict:
    """Every bomb of :data:`BOMBS`, each in a fresh interpreter, ``repeats`` rounds of all of them (so that a change
    of load hits every bomb alike): per bomb the median CPU and peak RSS growth of its rounds, and their ratios to the
    output cap and to the reference bomb's median CPU (the targets of issue #47: at most 2x each)."""
    names = [name for name in BOMBS if name != "1M_empty_lists"]
    rounds: dict[str, list[dict]] = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            rounds[name].append(bomb_in_fresh_process(name))
    harness_cost = {}
    for name, runs in rounds.items():
        harness_cost[name] = {
            "status": runs[0]["status"] if len({r["status"] for r in runs}) == 1 else [r["status"] for r in runs],
            "harness_cpu_s": round(statistics.median(r["harness_cpu_s"] for r in runs), 3),
            "harness_cpu_s_rounds": [r["harness_cpu_s"] for r in runs],
            "harness_peak_rss_growth_mib": round(statistics.median(r["harness_peak_rss_growth_mib"] for r in runs), 1),
            "wall_s": round(statistics.median(r["wall_s"] for r in runs), 2)}
    harness_cost["1M_empty_lists_harness_under_60_MiB_of_address_space"] = bomb_in_fresh_process("1M_empty_lists", 60)
    cap_mib, reference_cpu = BOMB_LIMITS.output_bytes / (1 << 20), harness_cost[REFERENCE_BOMB]["harness_cpu_s"]
    for cost in harness_cost.values():
        cost["peak_rss_growth_per_output_cap"] = round(cost["harness_peak_rss_growth_mib"] / cap_mib, 2)
        cost["cpu_per_reference_bomb"] = round(cost["harness_cpu_s"] / max(reference_cpu, 1e-3), 2)
    for name, runs in rounds.items():  # each round's bomb against the same round's reference (the load of its minute)
        harness_cost[name]["cpu_per_reference_bomb_rounds"] = [
            round(run["harness_cpu_s"] / max(reference["harness_cpu_s"], 1e-3), 2)
            for run, reference in zip(runs, rounds[REFERENCE_BOMB])]
    return harness_cost


# ------------------------------------------------------------------------------------ what a run leaves (issue #60)
#: The solver of the dentry channel: it looks up 20,000 names that do not exist in the standard library's folder,
#: from the set its input bit names; the copier times first lookups of names of both sets, interleaved, and says
#: which set is the faster (a cached negative dentry: about 1.1 us, a fresh lookup 3 us, issue #60).
DENTRY_SOLVER = ("import os\nbit, tag = input().split()\nfolder = os.path.dirname(os.__file__)\n"
                 "for i in range(20000):\n    os.path.exists(f'{folder}/nx{tag}_{bit}_{i}')\nprint(bit)\n")
DENTRY_COPIER = ("import os, time\ntag = input().strip()\nfolder = os.path.dirname(os.__file__)\n"
                 "times = [[], []]\n"
                 "for i in range(3000):\n    for bit in (0, 1):\n        name = f'{folder}/nx{tag}_{bit}_{i}'\n"
                 "        start = time.perf_counter_ns()\n        os.path.exists(name)\n"
                 "        times[bit].append(time.perf_counter_ns() - start)\n"
                 "median = [sorted(t)[len(t) // 2] for t in times]\nprint(0 if median[0] < median[1] else 1)\n")
#: What a run can read of its own descriptors, its folders and its clocks: the copier of the counters' channels.
READINGS = ("import os, time\nout = []\nfor fd in range(3, 12):\n    try:\n        st = os.fstat(fd)\n"
            "        out.append((fd, st.st_ino, st.st_dev))\n    except OSError:\n        pass\n"
            "for path in ('/work', '/tmp', os.path.dirname(os.__file__)):\n    st = os.stat(path)\n"
            "    out.append((path[:5], st.st_ino, st.st_dev))\n"
            "print(repr((out, time.time(), time.monotonic(), time.clock_gettime(time.CLOCK_BOOTTIME))))\n")
#: A run that moves what host-wide counters it can: files, FIFOs, threads, shared mappings.
BUSY = ("import os, mmap, threading\nfor i in range(1000):\n    open(f'/work/f{i}', 'w').close()\n"
        "for i in range(50):\n    os.mkfifo(f'/tmp/p{i}')\n"
        "maps = [mmap.mmap(-1, 4096) for _ in range(200)]\n"
        "for _ in range(200):\n    t = threading.Thread(target=int)\n    t.start()\n    t.join()\nprint(1)\n")
#: The host's wall clock as a program that gets past the run's own (``sandbox/wallclock.py``) reads it: the
#: original ``time.time_ns`` its replacement keeps (where there is none, the code before: ``time.time_ns``).
HOST_CLOCK = ("import time\ndef host_time():\n    for cell in getattr(time.time_ns, '__closure__', None) or ():\n"
              "        f = cell.cell_contents\n"
              "        if type(f).__name__ == 'builtin_function_or_method' and f.__name__ == 'time_ns':\n"
              "            return f() / 1e9\n    return time.time_ns() / 1e9\n")
#: The solver of the clock channel: it ends when the host's wall clock's phase (in a second) is its value's quarter
#: (the worst case: a solver that gets past the run's own clock).
CLOCK_SOLVER = HOST_CLOCK + ("value = int(input())\nwhile abs((host_time() % 1.0) - (value + 0.5) / 4) > 0.01:\n"
                             "    time.sleep(0.002)\nprint(repr(host_time()))\n")
#: The copier reads the clock as it starts: as a program reads it (``time.time()``) and past the run's own clock.
CLOCK_COPIER = HOST_CLOCK + "print(repr((time.time(), host_time())))\n"


def _bits_of_binary_guess(right: int, rounds: int) -> float:
    """What a guess that is right ``right`` times in ``rounds`` of a fair coin tells, in bits (1 - H(error))."""
    import math

    p = min(max(right / rounds, 1e-9), 1 - 1e-9)
    return round(max(0.0, 1 + p * math.log2(p) + (1 - p) * math.log2(1 - p)), 3)


def _output(box):
    return lambda index, out: box.append(out.decode().strip()) or True


def channels(rounds: int, clock_only: bool = False) -> dict:
    """Issue #60's channels, measured as the red team measured them: a solver, then a copier of the same problem
    right after it (``run_program`` back to back: no shuffle, no start delay, the worst order), ``rounds`` times.
    ``dentry``: how often the copier names the solver's random bit, with the shared folders as the run's own image
    and, as the control, as bind mounts of the host's folders (the code before issue #60). ``counters``: whether
    anything the copier reads of its descriptors' and folders' numbers differs after an idle and a busy solver.
    ``clock``: the monotonic and boot-time clocks' difference between two runs (random offsets), and for the wall
    clock the solver's value (0-3, the quarter of the second it ended in) against the copier's best guess, back to
    back and through ``run_programs`` (shuffled, with the start delay), for a copier that reads ``time.time()`` and
    one that gets past the run's own clock (``clock_only``: the wall clock only)."""
    import dataclasses
    import random

    from snapeval.sandbox import harness

    iso = isolation()
    fast = SandboxLimits(timeout_s=5.0, memory_mb=512, output_bytes=1 << 20, disk_mb=16)
    out: dict = {"rounds": rounds}
    if clock_only:
        _clock_channel(out, rounds, fast)
        return out
    variants = {"image": iso, "bind_mounts_control": dataclasses.replace(iso, image=None)} if iso.image \
        else {"bind_mounts": iso}
    original = harness.require_isolation
    try:
        for name, variant in variants.items():
            harness.require_isolation = lambda variant=variant: variant
            right = 0
            for _ in range(rounds):
                bit, tag, box = random.randrange(2), random.randrange(1 << 40), []  # fresh names every round
                run_program(DENTRY_SOLVER, [f"{bit} {tag}\n"], mode="stdin", judge=lambda i, o: True, limits=fast)
                run_program(DENTRY_COPIER, [f"{tag}\n"], mode="stdin", judge=_output(box), limits=fast)
                right += box == [str(bit)]
            out[f"dentry_{name}"] = {"right": right, "rounds": rounds,
                                     "bits_per_pair_for_one_bit": _bits_of_binary_guess(right, rounds)}
    finally:
        harness.require_isolation = original
    readings: dict[str, list] = {"idle": [], "busy": []}
    for _ in range(max(2, rounds // 2)):
        for kind, solver in (("idle", "print(1)\n"), ("busy", BUSY)):
            box = []
            run_program(solver, ["\n"], mode="stdin", judge=lambda i, o: True, limits=fast)
            run_program(READINGS, ["\n"], mode="stdin", judge=_output(box), limits=fast)
            readings[kind].append(box[0])
    import ast as _ast

    parsed = {kind: [_ast.literal_eval(r) for r in rs] for kind, rs in readings.items()}
    numbers = {kind: {repr(p[0]) for p in ps} for kind, ps in parsed.items()}
    out["counters"] = {"distinct_readings_after_idle": len(numbers["idle"]),
                       "distinct_readings_after_busy": len(numbers["busy"]),
                       "same_after_idle_and_busy": numbers["idle"] == numbers["busy"],
                       "example": sorted(numbers["idle"])[0]}
    stamps = [p[1:] for ps in parsed.values() for p in ps]
    monotonic_gaps = [abs(b[1] - a[1]) for a, b in zip(stamps, stamps[1:])]
    out["monotonic_difference_between_runs_s"] = {"min": round(min(monotonic_gaps)), "max": round(max(monotonic_gaps))}
    _clock_channel(out, rounds, fast)
    return out


def _decoded(pairs: list, gaps: list) -> int:
    """How many of ``pairs`` (the solver's value, the copier's reading) the copier's best decoder gets right: its
    reading less the median gap between the solver's end and it, read as the quarter of the second."""
    positive = [g for g in gaps if g > 0]
    gap = statistics.median(positive) if positive else 0.0
    return sum(int(((reading - gap) % 1.0) * 4) == value for value, reading in pairs)


def _clock_channel(out: dict, rounds: int, fast: SandboxLimits) -> None:
    import random

    for mode in ("back_to_back", "run_programs", "run_programs_beside_8_other_problems"):
        pairs: dict[str, list] = {"time_time": [], "past_the_run_clock": []}
        gaps: dict[str, list] = {"time_time": [], "past_the_run_clock": []}
        for _ in range(rounds):
            value, box = random.randrange(4), []
            if mode == "back_to_back":
                run_program(CLOCK_SOLVER, [f"{value}\n"], mode="stdin", judge=_output(box), limits=fast)
                run_program(CLOCK_COPIER, ["\n"], mode="stdin", judge=_output(box), limits=fast)
                ended, (plain, host) = float(box[0]), ast.literal_eval(box[1])
            else:
                results = {}
                jobs = [ProgramJob(CLOCK_SOLVER, [f"{value}\n"], "stdin",
                                   lambda i, o: results.setdefault("solver", float(o)) or True, group="p"),
                        ProgramJob(CLOCK_COPIER, ["\n"], "stdin",
                                   lambda i, o: results.setdefault("copier", ast.literal_eval(o.decode())) or True,
                                   group="p")]
                if mode != "run_programs":  # other problems' samples, shuffled in with them
                    jobs += [ProgramJob("import time\ntime.sleep(0.1)\nprint(1)\n", ["\n"], "stdin", lambda i, o: True,
                                        group=other) for other in range(8)]
                run_programs(jobs, limits=fast)
                ended, (plain, host) = results["solver"], results["copier"]
            for name, reading in (("time_time", plain), ("past_the_run_clock", host)):
                gaps[name].append(reading - ended)
                pairs[name].append([value, reading])
        out[f"clock_{mode}"] = {
            name: {"right": _decoded(pairs[name], gaps[name]), "rounds": rounds, "chance": 0.25,
                   "bits_per_pair": _bits_of_quarter_guess(_decoded(pairs[name], gaps[name]), rounds),
                   "gap_s": [round(min(gaps[name]), 3), round(max(gaps[name]), 3)],
                   "copier_first": sum(g < 0 for g in gaps["past_the_run_clock"])}
            for name in pairs}


def _bits_of_quarter_guess(right: int, rounds: int) -> float:
    """What a guess of one of 4 equally likely values, right ``right`` times in ``rounds``, tells in bits (Fano's
    equality for a symmetric channel: 2 - H(p) - (1 - p) log2 3)."""
    import math

    p = min(max(right / rounds, 1e-9), 1 - 1e-9)
    bits = 2 + p * math.log2(p) + (1 - p) * math.log2((1 - p) / 3)
    return round(max(0.0, bits), 3)


def startup(programs: int) -> dict:
    """The start-up per program: the median wall time and the mean CPU (this process and its children together) of
    ``programs`` stdin and functional programs with one trivial test, with the load before and after: run it
    alternately against two checkouts to compare them in one window."""
    load = _loadavg()
    run_program(STDIN[0], [STDIN[1]], mode="stdin", judge=_judge(STDIN[2]))  # warm the isolation probe
    out = {}
    for name, (code, inp, expected, func, mode) in {"stdin": STDIN, "functional": FUNCTIONAL}.items():
        walls, before = [], _cpu_with_children()
        for _ in range(programs):
            start = time.perf_counter()
            assert run_program(code, [inp], mode=mode, judge=_judge(expected), func_name=func).passed
            walls.append(time.perf_counter() - start)
        out[f"{name}_program_with_1_test_ms"] = round(statistics.median(walls) * 1e3, 2)
        out[f"{name}_cpu_ms_per_program"] = round((_cpu_with_children() - before) / programs * 1e3, 2)
    return {**out, "load_average_before": load, "load_average_after": _loadavg()}


def _cpu_with_children() -> float:
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def _judge(expected):
    def judge(index, output):
        output = output.decode() if isinstance(output, bytes) else output  # a standard output arrives as bytes
        return (output.strip() if isinstance(output, str) else output) == expected
    return judge


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
    parser.add_argument("--bomb", choices=sorted(BOMBS), help="run one bomb here and print its cost (JSON)")
    parser.add_argument("--harness-memory-mb", type=int, default=0, help="with --bomb: an address-space limit")
    parser.add_argument("--startup-only", type=int, default=0, metavar="N",
                        help="time N programs with one test each (stdin, functional) and print the medians (JSON)")
    parser.add_argument("--bomb-repeats", type=int, default=3, help="rounds of every bomb (medians are reported)")
    parser.add_argument("--channels", type=int, default=0, metavar="ROUNDS",
                        help="measure what a run reads of the previous one (issue #60) in ROUNDS pairs and print it")
    parser.add_argument("--clock-only", action="store_true", help="with --channels: the wall clock's channel only")
    parser.add_argument("--bombs-only", action="store_true",
                        help="measure the harness cost of every bomb only and print it (written only with --out)")
    args = parser.parse_args(argv)
    if args.bomb:
        print(json.dumps(bomb(args.bomb, args.harness_memory_mb)))
        return 0
    if args.startup_only:
        print(json.dumps(startup(args.startup_only)))
        return 0
    if args.channels:
        load = _loadavg()
        report = {"channels": channels(args.channels, args.clock_only), "load_average_before": load,
                  "load_average_after": _loadavg()}
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report, indent=2))
        return 0
    if args.bombs_only:
        load = _loadavg()
        costs = harness_costs(args.bomb_repeats)
        report = {"harness_cost": costs, "load_average_before": load, "load_average_after": _loadavg()}
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report, indent=2))
        return 0
    if args.smoke:
        args.repeats, args.tests, args.bomb_repeats = 2, 3, 1
    out = args.out or (None if args.smoke else "results/bench/sandbox.json")
    load = _loadavg()
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
    harness_cost = harness_costs(args.bomb_repeats)
    report = {
        "benchmark": "sandbox start-up and per-test cost",
        "smoke": args.smoke,
        "repeats": args.repeats,
        "results": rows,
        "bare_interpreter_start_ms": round(statistics.median(bare) * 1e3, 2),
        f"parallel_{n_parallel}_programs_s": round(parallel, 3),
        "workers": len(os.sched_getaffinity(0)),
        "harness_cost": harness_cost,
        "program_limits": {"memory_mb": BOMB_LIMITS.memory_mb, "output_bytes": BOMB_LIMITS.output_bytes,
                           "timeout_s": BOMB_LIMITS.timeout_s},
        "isolation": _without_checkout_path(isolation().describe()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_before": load, "load_average_after": _loadavg()},
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
