"""The ``snapeval`` command line.

Each sub-command lives next to the code it drives and exposes ``register(subparsers)``, which adds its parser and
sets ``func`` (called with the parsed namespace, returning an exit code). Registration must stay cheap: heavy
imports (torch, lm-eval) belong inside the command functions so that ``snapeval --help`` is instant.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from snapeval.errors import SnapevalError

# Order is the order shown by ``snapeval --help``.
COMMAND_MODULES = [
    "snapeval.sweep.cli",         # sweep: a grid of lm-eval runs over budgets (the main job)
    "snapeval.harness.cli",       # run: one lm-eval run through the snapstream model
    "snapeval.report.cli",        # report: tables and plots from a results directory
    "snapeval.stats.regress",     # regress: accuracy regression check against a baseline
    "snapeval.simulator.cli",     # simulate: SN40L memory and throughput
    "snapeval.models.cli",        # models: list the presets
    "snapeval.catalog",           # methods, tasks, hardware: what is installed (with plugins' entry points)
    "snapeval.demo",              # demo: long-document QA, full cache vs SnapStream
]


def build_parser() -> argparse.ArgumentParser:
    from snapeval import __version__

    parser = argparse.ArgumentParser(
        prog="snapeval",
        description="Measure what SnapStream KV-cache compression does to LLM accuracy, and what it buys on SN40L.",
    )
    parser.add_argument("--version", action="version", version=f"snapeval {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a command whose module is not written yet
            if not (exc.name and name.startswith(exc.name)):
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SnapevalError as exc:
        print(f"snapeval: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a read-only or full disk, a missing directory: every finished result is already on disk
        where = f" {exc.filename}" if exc.filename else ""
        print(f"snapeval: error: cannot read or write{where}: {exc.strerror or exc} (finished results are kept; "
              "fix the disk and re-run the same command to resume)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("snapeval: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
