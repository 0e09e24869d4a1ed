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
    "snapeval.projection.cli",    # project: the paper grids in GPU-hours from measured rates
    "snapeval.models.cli",        # models: list the presets
    "snapeval.catalog",           # methods, tasks, hardware: what is installed (with plugins' entry points)
    "snapeval.demo",              # demo: long-document QA, full cache vs SnapStream
]


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every command's ``--help``: each flag's default shown after its help (unless the help already says it, or
    there is none to show: a flag that is off, or a value left unset)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (action.option_strings and "%(default)" not in text and "default" not in text.lower()
                and default is not None and default is not False  # 0 is a default to show (--seed 0)
                and default not in (argparse.SUPPRESS, [], "")):
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    from snapeval import __version__

    parser = argparse.ArgumentParser(
        prog="snapeval",
        description="Measure what KV-cache compression (SnapStream and the baselines) does to LLM accuracy, and what "
                    "it buys in memory and throughput (SN40L and GPUs, simulated).",
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
    for command in sub.choices.values():  # one convention for every command's help
        command.formatter_class = DefaultsHelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # inside the try: a reader that went away is said here, not by Python at exit
        return code
    except SnapevalError as exc:
        print(f"snapeval: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # the reader went away (`snapeval sweep --dry-run | head`): not a disk error; the
        _quiet_stdout()  # status of a program its pipe's reader closed (128 + SIGPIPE), as `yes | head` gives
        return 141
    except OSError as exc:  # a read-only or full disk, a missing directory: every finished result is already on disk
        where = f" {exc.filename}" if exc.filename else ""
        print(f"snapeval: error: cannot read or write{where}: {exc.strerror or exc} (finished results are kept; "
              "fix the disk and re-run the same command to resume)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("snapeval: interrupted", file=sys.stderr)
        return 130


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit does not report the closed pipe again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor to redirect (a test's captured stdout)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
