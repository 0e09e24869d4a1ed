"""``snapeval sweep CONFIG [--out DIR] [--executor ray] [--limit N] [--dry-run]``: the main job."""
from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a grid of lm-eval runs over models, tasks, methods and budgets (resumable)",
        description="Run every cell of a sweep config (models x tasks x methods x budgets x seeds) through the "
                    "snapeval lm-eval model, as one paired experiment: each item is prefilled once and every method "
                    "and budget of its (model, task, seed) branches from that prefill, in chunks of items sized by a "
                    "memory plan (a model's max_memory). Finished cells (and item shards) are kept one file each and "
                    "skipped on re-runs; the tidy table (Parquet, CSV) with paired comparisons against the full "
                    "cache, and the report with plots, are written at the end.")
    p.add_argument("config", nargs="?", default="quickstart",
                   help="a sweep YAML, or the name of one in configs/ (default: quickstart)")
    p.add_argument("--out", help="results directory (default: the config's 'out', else results/<name>)")
    p.add_argument("--executor", default="inprocess", choices=("inprocess", "ray"),
                   help="run work units here one by one (default) or as Ray tasks with the model's resources (a unit is "
                        "a shared-prefill group of cells, or one cell, or one item shard of either: 'shards' or "
                        "'shard_size' in the config; on Ray the default is one shard per worker)")
    p.add_argument("--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray instance)")
    p.add_argument("--limit", type=int, help="samples per task for every task (changes the cells' identities)")
    p.add_argument("--dry-run", action="store_true", help="list the cells and which are already done; run nothing")
    p.add_argument("--per-cell", action="store_true",
                   help="run every cell as its own lm-eval run (the reference path) instead of one prefill per item "
                        "shared by every method and budget of a model and task")
    p.add_argument("--no-report", action="store_true", help="write the table but not the report and plots")
    p.add_argument("--rerun-stale", action="store_true",
                   help="redo finished cells whose task files (the YAML, templates and hooks in the task's folder, "
                        "and the base configs it includes) changed since they ran; without it such a sweep stops "
                        "with the count")
    p.add_argument("--until-decided", action="store_true",
                   help="sequential budget search: items in batches in a fixed random order, each method's budgets "
                        "walked from the largest down, a cell stopped as soon as the design's paired test settles it "
                        "(non-inferior or not at the sweep's decision margin; --design) or it is out of reach; writes "
                        "search.md")
    p.add_argument("--design", default=None, choices=("group-sequential", "e-process"),
                   help="--until-decided: planned looks with Lan-DeMets alpha spending (default; snapeval.stats."
                        "groupseq's DESIGN_SPENDING and OTHER_SPENDING), or the anytime-valid e-process looked at after "
                        "every --batch")
    p.add_argument("--looks", type=int, default=None,
                   help="--until-decided, group-sequential: planned looks at equal shares of the items (default 5: "
                        "snapeval.stats.groupseq.LOOKS)")
    p.add_argument("--batch", type=int, default=None, help="--until-decided, e-process: items per batch (default 8)")
    p.add_argument("--search-seed", type=int, default=None,
                   help="--until-decided: seed of the batches' random order (default 0)")
    p.add_argument("--monotone", action="store_true",
                   help="--until-decided: accept that accuracy does not fall as a budget grows (budgets below a "
                        "settled failure are run on the first look's items only, and labelled not non-inferior where "
                        "those agree; search.md warns where they do not)")
    p.add_argument("--no-run-ahead", action="store_true",
                   help="--until-decided: run at each look only the budgets the walk tests (default: also every "
                        "budget below each open method's current one, from the same prefill per item, so a budget "
                        "opened later reads its earlier looks instead of prefilling their items again; the decisions "
                        "are the same). For tasks whose items cost mostly decoding")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from snapeval.sweep.config import load_config
    from snapeval.sweep.executors import make_executor
    from snapeval.sweep.runner import plan, resolve_out, run_sweep

    from snapeval.errors import SnapevalError

    search = None
    given = [flag for flag, value in (("--batch", args.batch), ("--search-seed", args.search_seed),
                                      ("--design", args.design), ("--looks", args.looks),
                                      ("--monotone", args.monotone or None),
                                      ("--no-run-ahead", args.no_run_ahead or None)) if value is not None]
    if given and not args.until_decided:  # an option of the search alone: never silently ignored
        raise SnapevalError(f"{given[0]} is an option of --until-decided; allowed: with --until-decided, or left out")
    if args.until_decided:
        from snapeval.report.search import SearchSettings

        try:
            search = SearchSettings(batch=8 if args.batch is None else args.batch,
                                    seed=0 if args.search_seed is None else args.search_seed, monotone=args.monotone,
                                    run_ahead=not args.no_run_ahead,
                                    design=args.design or "group-sequential",
                                    **({} if args.looks is None else {"looks": args.looks}))
        except SnapevalError as exc:
            raise SnapevalError(str(exc).replace("search.seed", "--search-seed").replace("search.", "--", 1)) from None
    config = load_config(args.config).with_limit(args.limit)
    if search is not None:
        check_until_decided(config)
    if args.per_cell:
        config = config.per_cell()
    check_sweep_inputs(config, args)
    if args.dry_run:
        cells = plan(config, args.out)
        done = sum(state == "done" for _, state in cells)
        stale = sum(state == "stale" for _, state in cells)
        print(f"sweep {config.name!r} -> {resolve_out(config, args.out)}: {len(cells)} cells, {done} done, "
              f"{len(cells) - done} to run" + (f" ({stale} stale: --rerun-stale)" if stale else ""))
        for (cell, state), label in zip(cells, distinct_labels([cell for cell, _ in cells])):
            print(f"  {state:5}  {cell.cell_id}  {label}")
        from snapeval.sweep.search import plan_lines

        for line in plan_lines([cell for cell, _ in cells], config.decision, search):
            print(line)
        return 0
    if args.executor == "inprocess":
        from snapeval import threads

        threads.apply()  # the cores free now (a Ray worker takes its cell's num_cpus instead)
    executor = make_executor(args.executor, ray_address=args.ray_address)
    summary = run_sweep(config, args.out, executor=executor, report=not args.no_report, rerun_stale=args.rerun_stale,
                        search=search)
    print(summary.render())
    return 0 if summary.ok else 1


def check_until_decided(config) -> None:
    """``--until-decided`` compares each budget with the full cache, at the sweep's margin: a grid without the
    reference method, or with nothing but it, or a margin of 0 (nothing is non-inferior at 0) is one line before
    anything runs."""
    from snapeval.cache import METHOD_TABLE
    from snapeval.errors import SnapevalError

    names = [spec.method for spec in config.methods]
    reference = [n for n in names if METHOD_TABLE.is_reference(n)]
    if not reference:
        raise SnapevalError(f"--until-decided needs the full cache among the methods (each budget is compared with "
                            f"it); the config has {', '.join(names)}; allowed: add method 'full', or run without "
                            "--until-decided")
    if len(reference) == len(names):
        raise SnapevalError("--until-decided needs a method with budgets beside the full cache (nothing to decide); "
                            "allowed: add a compressed method, or run without --until-decided")
    if not 0 < config.decision.margin < 1:
        raise SnapevalError(f"decision.margin={config.decision.margin!r} is invalid with --until-decided (no budget is "
                            "non-inferior within a margin of 0); allowed: a number in (0, 1), e.g. 0.02")


def check_sweep_inputs(config, args) -> None:
    """What a sweep reads and writes, before any cell (:mod:`snapeval.preflight`; also for ``--dry-run``): the task
    folder variables, the task names, each model reference, the results folder and the Ray address."""
    from snapeval import preflight
    from snapeval.models.loading import check_model_reference
    from snapeval.sweep.runner import resolve_out

    preflight.check_task_folder_env()
    preflight.check_task_names(sorted({task.name for task in config.tasks}), config.include_dir, field="tasks")
    for index, model in enumerate(config.models):
        check_model_reference(model.pretrained)
        if args.executor == "inprocess" and model.run_args.device_map is not None:  # placed here, on this machine
            from snapeval.run_args import RunArgs

            label = f"{Path(config.source).name}: models[{index}].device_map: device_map"
            RunArgs.declarations()[RunArgs.names().index("device_map")].check_map_on_this_machine(
                model.run_args.device_map, label)
    preflight.check_results_folder(resolve_out(config, args.out), config.name)
    if args.executor == "ray" and not args.dry_run:
        preflight.check_ray_address(args.ray_address)


def _flat(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def distinct_labels(cells) -> list[str]:
    """Each cell's label, followed, where several cells share it, by what tells them apart: the fields of their
    identities whose values differ (``snapstream@64 | seed 0 (sink=4)`` vs ``(sink=8)``)."""
    labels = [cell.label for cell in cells]
    groups: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        groups.setdefault(label, []).append(index)
    for indices in groups.values():
        if len(indices) < 2:
            continue
        flats = [_flat(cells[i].identity()) for i in indices]
        keys = sorted({k for flat in flats for k in flat})
        differ = [k for k in keys if len({repr(flat.get(k)) for flat in flats}) > 1]
        for i, flat in zip(indices, flats):
            shown = ", ".join(f"{k.split('.')[-1] if k.startswith('policy.') else k}={flat.get(k)!r}" for k in differ)
            labels[i] = f"{labels[i]} ({shown})"
    return labels
