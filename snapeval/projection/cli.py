"""``snapeval project``: the paper grids in GPU-hours, from rates measured on a GPU (no model, no device).

    snapeval project --rates-from results/bench/gpu.json --out /tmp/paper_projection.json

Its flags (:func:`add_projection_flags`) are those of ``python -m benchmarks.paper_projection``, which measures the
rates on a GPU first and then projects through the same code.
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path

from snapeval.errors import SnapevalError


def add_projection_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a projection (``snapeval project`` and ``benchmarks/paper_projection.py``): the prompt lengths,
    the chunk, the hardware projected for, host memory, mean new tokens and the shared step."""
    from snapeval.projection.grids import LENGTHS_FILE

    parser.add_argument("--lengths", type=Path, default=LENGTHS_FILE, help="benchmarks.paper_lengths' JSON")
    parser.add_argument("--chunk", type=int, default=None,
                        help="items in flight at most (default: the sweep's on CUDA, memory_plan.GPU_CHUNK)")
    parser.add_argument("--as-hardware", choices=("h100", "h200"), default="h100",
                        help="project the grids for this GPU (restated from the measured one by the sheets)")
    parser.add_argument("--host-gib", type=float, default=256.0,
                        help="host memory per GPU where held branches may wait (default 256: a DGX H100's 2 TiB over "
                             "its 8 GPUs; 0: they stay on the device)")
    parser.add_argument("--new-tokens", nargs="*", default=[], metavar="TASK=N",
                        help="mean new tokens of a task instead of its max_gen_toks (an upper bound)")
    parser.add_argument("--shared-step", choices=("auto", "false"), default="auto",
                        help="the sweep's run argument: auto (its configurations in rows may share one decode step "
                             "where the kernel allows, as the projection assumes of an H100 with triton) or false")


def check_projection_flags(parser: argparse.ArgumentParser, args) -> None:
    """One line (the parser's usage error) for a negative ``--host-gib`` or a malformed ``--new-tokens``."""
    if not args.host_gib >= 0:
        parser.error(f"--host-gib {args.host_gib:g} is invalid; allowed: GiB of host memory per GPU, 0 or more")
    for pair in args.new_tokens:
        if "=" not in pair or not pair.split("=", 1)[1].isdigit():
            parser.error(f"--new-tokens {pair!r} is invalid; allowed: TASK=N with N a whole number")


def project_from_rates(args, rates) -> dict:
    """The grids from rates measured elsewhere (``--rates-from``): no model, no device, no slice. ``args``: the
    parsed :func:`add_projection_flags` (and ``rates_from``)."""
    from snapeval.projection.grids import project_grids

    lengths = json.loads(Path(args.lengths).read_text())
    return {"benchmark": "paper_projection", "smoke": False, "rates_from": str(args.rates_from),
            "rates": asdict(rates), "slice": None, "load_average": os.getloadavg(),
            **project_grids(args, rates, lengths, 80e9)}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "project", help="the paper grids in GPU-hours, projected from rates measured on a GPU",
        description="Project every group of configs/paper_llama.yaml and configs/paper_r1_distill.yaml in GPU-hours: "
                    "a model of the sweep's shared group (the memory plan's routes, each step's bytes) at rates "
                    "fitted to a benchmarks.gpu run, over the tasks' real prompt lengths. No model, no device; "
                    "docs/engine.md says what it assumes.")
    p.add_argument("--rates-from", type=Path, required=True, metavar="GPU_JSON",
                   help="a benchmarks.gpu run whose figures the rates are fitted to (results/bench/gpu.json)")
    add_projection_flags(p)
    p.add_argument("--out", type=Path, default=None, help="write the projection here as JSON (default: print only)")
    p.set_defaults(func=project, parser=p)


def project(args) -> int:
    from snapeval.projection.rates import rates_from_gpu_json

    check_projection_flags(args.parser, args)
    if not args.rates_from.is_file():
        raise SnapevalError(f"--rates-from={str(args.rates_from)!r} is not a file; allowed: a benchmarks.gpu run's "
                            "JSON (results/bench/gpu.json)")
    payload = project_from_rates(args, rates_from_gpu_json(args.rates_from))
    if args.out is not None:
        from snapeval.results.store import atomic_write_text

        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, json.dumps(payload, indent=2) + "\n")  # as the benchmark writes it
        print(f"wrote {args.out}")
    return 0
