"""``snapeval report RESULTS_DIR [--out DIR]``: comparison tables (markdown, CSV) and PNG plots."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="tables and plots from a results directory",
        description="Write report.md, comparison.csv, accuracy_vs_budget.csv and PNG plots (accuracy vs budget, "
                    "accuracy vs simulated KV memory, accuracy/simulated-throughput Pareto front).")
    p.add_argument("results_dir", help="a directory written by `snapeval sweep`")
    p.add_argument("--out", help="where to write the report (default: RESULTS_DIR/report)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from snapeval.report import build_report

    import sys

    paths = build_report(args.results_dir, args.out)
    if paths.foreign_cells:
        print(f"snapeval report: {len(paths.foreign_cells)} cell file(s) in {args.results_dir} belong to another "
              "configuration and are not in this report (listed in the report)", file=sys.stderr)
    print(f"report: {paths.markdown}")
    for path in paths.csvs + paths.plots:
        print(f"  {path}")
    return 0
