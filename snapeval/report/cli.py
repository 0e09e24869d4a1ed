"""``snapeval report RESULTS_DIR [--out DIR]``: comparison tables (markdown, CSV) and PNG plots."""
from __future__ import annotations

import argparse

from snapeval.stats.decision import DEFAULT_ALPHA, DEFAULT_MARGIN


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="tables and plots from a results directory",
        description="Write report.md (first, per method: non-inferior to the full cache at budget X, not "
                    "non-inferior, or inconclusive at this n with the n that would settle it), comparison.csv, accuracy_vs_budget.csv, paired.csv, decisions.csv and PNG plots "
                    "(accuracy vs budget, paired difference vs budget, accuracy vs simulated KV memory, "
                    "accuracy/simulated-throughput Pareto front). Rebuilds RESULTS_DIR/results.{parquet,csv} with the "
                    "sweep's own margin and alpha (--margin / --alpha change this report only).")
    p.add_argument("results_dir", help="a directory written by `snapeval sweep`")
    p.add_argument("--out", help="where to write the report (default: RESULTS_DIR/report)")
    p.add_argument("--margin", type=float, default=None,
                   help=f"non-inferiority margin in the headline metric's units (default: the sweep's "
                        f"decision.margin, else {DEFAULT_MARGIN})")
    p.add_argument("--alpha", type=float, default=None,
                   help=f"level of every test (default: the sweep's decision.alpha, else {DEFAULT_ALPHA})")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when the report leaves out cells of the sweep's grid (unfinished, or files of "
                        "another configuration); without it they are named on stderr and the report is written")
    p.add_argument("--search-replay", action="store_true",
                   help="also write search.md: what the sequential budget search (anytime-valid, budgets walked "
                        "from the largest down) decides on this sweep's own per-item results, the items each cell "
                        "used and the item-evaluations and time against the full grid (no model runs)")
    p.add_argument("--design", default="group-sequential", choices=("group-sequential", "e-process"),
                   help="--search-replay: planned looks with Lan-DeMets boundaries (default) or the anytime-valid "
                        "e-process looked at after every --batch")
    p.add_argument("--looks", type=int, default=None,
                   help="--search-replay, group-sequential: planned looks at equal shares of the items (default 5: "
                        "snapeval.stats.groupseq.LOOKS)")
    p.add_argument("--batch", type=int, default=8, help="--search-replay, e-process: items per batch (default 8)")
    p.add_argument("--seed", type=int, default=0, help="--search-replay: seed of the batches' random order (default 0)")
    p.add_argument("--monotone", action="store_true",
                   help="--search-replay: accept that accuracy does not fall as a budget grows (budgets below a "
                        "settled failure are run on the first look's items only, and labelled not non-inferior where "
                        "those agree; search.md warns where they do not)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import sys

    from snapeval.errors import SnapevalError
    from snapeval.report import build_report
    from snapeval.report.results_table import sweep_decision

    from snapeval import preflight

    preflight.check_results_to_read(args.results_dir, "RESULTS_DIR")
    preflight.check_output_folder(args.out or f"{args.results_dir}/report", "--out")
    decision = None
    if args.margin is not None or args.alpha is not None:
        try:
            decision = sweep_decision(args.results_dir).with_overrides(margin=args.margin, alpha=args.alpha)
        except SnapevalError as exc:
            raise SnapevalError(str(exc).replace("decision.", "--", 1)) from None
    settings = None
    if args.search_replay:
        from snapeval.report.search import SearchSettings

        try:
            settings = SearchSettings(batch=args.batch, seed=args.seed, monotone=args.monotone, design=args.design,
                                      **({} if args.looks is None else {"looks": args.looks}))
        except SnapevalError as exc:
            raise SnapevalError(str(exc).replace("search.", "--", 1)) from None
    from snapeval.results.store import ResultsStore

    store = ResultsStore(args.results_dir)
    unfinished = store.unfinished()
    check_scores(store)
    paths = build_report(args.results_dir, args.out, decision=decision)
    if paths.foreign_cells:
        print(f"snapeval report: {len(paths.foreign_cells)} cell file(s) in {args.results_dir} belong to another "
              "configuration and are not in this report (listed in the report)", file=sys.stderr)
    if unfinished:
        print(f"snapeval report: {len(unfinished)} cell(s) of the sweep's grid have no result in "
              f"{args.results_dir} and are not in this report ({', '.join(unfinished[:3])}"
              f"{', ...' if len(unfinished) > 3 else ''}; re-run the sweep to finish them)", file=sys.stderr)
    print(f"report: {paths.markdown}")
    for path in paths.csvs + paths.plots:
        print(f"  {path}")
    if settings is not None:
        from snapeval.results.store import atomic_write_text
        from snapeval.report.search import render, replay

        rule = decision if decision is not None else sweep_decision(args.results_dir)
        lines = ["# Sequential budget search, replayed on this sweep's items", ""]
        lines += render(replay(args.results_dir, rule=rule, settings=settings), rule, settings)
        path = paths.markdown.parent / "search.md"
        atomic_write_text(path, "\n".join(lines) + "\n")
        print(f"  {path}: {lines[-1].split(' (each item')[0]}")
    if args.strict and (unfinished or paths.foreign_cells):
        print("snapeval report: --strict: cells left out (above); exit 1", file=sys.stderr)
        return 1
    return 0


def check_scores(store) -> None:
    """Every finished cell's per-item scores within their metric's range (:func:`snapeval.stats.consistency.
    score_range`: shares in [0, 1]), or a one-line error naming the file: a damaged or hand-edited cell would
    otherwise move its aggregates and every comparison quietly."""
    from snapeval.errors import SnapevalError
    from snapeval.stats.consistency import score_range

    for result in store.finished():
        for sample in result.samples:
            for key, value in sample.scores.items():
                low, high = score_range(key)
                if isinstance(value, (int, float)) and not low <= float(value) <= high:
                    raise SnapevalError(f"{store.cell_path(result.cell_id)}: per-item score {key}={value!r} of "
                                        f"{sample.subtask} doc {sample.doc_id} is outside [{low:g}, {high:g}]; allowed: "
                                        "scores in the metric's range (a damaged or hand-edited cell file: re-run "
                                        "the sweep to recompute it)")
