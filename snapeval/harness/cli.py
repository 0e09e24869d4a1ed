"""``snapeval run``: one lm-eval run of one model, task and cache method; results written as JSON."""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

from snapeval.errors import SnapevalError
from snapeval.models.presets import DEFAULT_MODEL


def register(subparsers) -> None:
    from snapeval.cache import METHOD_TABLE
    from snapeval.run_args import add_run_flags

    p = subparsers.add_parser(
        "run",
        help="evaluate one model on lm-eval tasks under one KV-cache method and budget",
        description="One lm-eval run through the `snapeval` model (tasks from tasks/, or $SNAPEVAL_TASKS_DIR). "
        "Prints the metrics with the measured KV-cache bytes and tokens/s, and writes the full results JSON.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="preset name (snapeval models), local dir, .gguf or hub id")
    p.add_argument("--tasks", "--task", dest="tasks", required=True, metavar="TASKS",
                   help="lm-eval task name(s), comma-separated (e.g. snapeval_passkey); --task is the same flag")
    p.add_argument("--method", default="snapstream",
                   help=f"{' | '.join(METHOD_TABLE.allowed().split(', '))} (e.g. kvpress:TOVAPress)")
    p.add_argument("--budget", type=int, default=None, help="total KV budget in tokens (not for full)")
    add_method_arg_flags(p)
    add_run_flags(p, defaults={"max_gen_toks": 256})  # --dtype, --device, ..., --decode-kernel, --capture
    p.add_argument("--limit", type=float, default=None,
                   help="documents per task (an int, or a fraction < 1; default: every document)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of lm-eval, sampling and the synthetic tasks; an integer in 0..4294967295 (default: 0)")
    p.add_argument("--metadata", default=None, help="JSON passed to the tasks (e.g. '{\"max_seq_lengths\": [1024]}')")
    p.add_argument("--data-dir", default=None, help="local data in the hub schema (default: $SNAPEVAL_DATA_DIR)")
    p.add_argument("--output", type=Path, default=None,
                   help="results JSON path (default: results/runs/<tasks>-<model>-<method>-<budget>[-<settings>]-"
                        "<hash of every setting>.json, so runs that differ in any setting never overwrite each other)")
    p.set_defaults(func=run)


#: The largest seed: lm-eval seeds numpy with it, which takes 32 bits (a sweep's ``seeds`` are checked the same).
MAX_SEED = 2**32 - 1

#: The flags of snapeval's own methods' settings before ``--method-arg`` (deprecated aliases: ``--sink 4`` is
#: ``--method-arg sink=4``, ``--kernel 7`` is ``--method-arg pool_kernel=7``), flag -> setting; a method added
#: since has only ``--method-arg``.
DEPRECATED_SETTING_FLAGS = {"sink": "sink", "recent": "recent", "topk": "topk", "observation": "observation",
                            "kernel": "pool_kernel", "pooling": "pooling"}


def add_method_arg_flags(p) -> None:
    """``--method-arg NAME=VALUE`` (a setting of the chosen method, in its own namespace: ``snapeval methods`` lists
    them), its deprecated spellings (``--press-arg``, ``--sink`` and the other flags of the shipped methods'
    settings, hidden from ``--help``). Reads no method: building the parser loads nothing."""
    import argparse

    p.add_argument("--method-arg", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting of --method, repeatable (e.g. --method-arg recent=0.5, --method-arg "
                        "pool_kernel=7; a kvpress press's own arguments too); `snapeval methods` lists each "
                        "method's settings and defaults")
    p.add_argument("--press-arg", action="append", default=[], metavar="NAME=VALUE", help=argparse.SUPPRESS)
    for name in DEPRECATED_SETTING_FLAGS:
        p.add_argument(f"--{name}", default=None, help=argparse.SUPPRESS)


def method_args(args) -> tuple[dict, dict]:
    """``(settings, press)`` from ``--method-arg`` (and its deprecated spellings, with a ``DeprecationWarning``): a
    registered method's settings parsed as declared, a family's (kvpress) arguments as the text given, which its
    configuration checks and converts against the press's own fields (:mod:`snapeval.cache.press_spec`); one-line :class:`SnapevalError` for a malformed ``NAME=VALUE``, a name given twice or a bad value."""
    from snapeval.cache.methods import settings_from_text

    given: dict[str, str] = {}
    items = [("--method-arg", item) for item in args.method_arg] + [("--press-arg", item) for item in args.press_arg]
    items += [(f"--{flag}", f"{name}={getattr(args, flag)}") for flag, name in DEPRECATED_SETTING_FLAGS.items()
              if getattr(args, flag, None) is not None]
    for flag, item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SnapevalError(f"{flag}={item!r} is invalid; allowed: NAME=VALUE")
        own = {"budget": "--budget", "method": "--method", "seed": "--seed", "pretrained": "--model",
               **{n: "--" + n.replace("_", "-") for n in _run_arg_names()}}
        if name in own and ":" not in args.method:  # not a setting: its own flag (resolve_method would get it twice)
            from snapeval.cache import METHOD_TABLE

            declared = ", ".join(s.name for s in METHOD_TABLE.get(args.method).settings()) or "none"
            raise SnapevalError(f"{flag}={item!r} is invalid: {name!r} is not a setting of method {args.method!r} "
                                f"but its own flag ({own[name]} {value or 'VALUE'}); allowed settings: {declared}")
        if name in given:
            raise SnapevalError(f"{flag} {name} is given twice ({name}={given[name]!r} and {name}={value!r}); "
                                "allowed: each setting once")
        if flag != "--method-arg":
            warnings.warn(f"{flag} is deprecated; use --method-arg {name}={value}", DeprecationWarning, 2)
        given[name] = value
    if ":" in args.method:  # a family's method (kvpress:<Press>): the press's own arguments, as text its
        return {}, given  # configuration checks and converts against the press's fields
    return settings_from_text(args.method, given), {}


def _run_arg_names() -> tuple[str, ...]:
    from snapeval.run_args import RunArgs

    return RunArgs.names("run")


def run(args) -> int:
    """Every argument is checked before lm-eval, torch or the model are imported (one-line errors, in a second)."""
    from snapeval.cache import resolve_method
    from snapeval.models.loading import check_model_reference
    from snapeval.run_args import RunArgs

    run_args = RunArgs.from_flags(args)  # every run argument, as declared (snapeval.run_args)
    context = check_model_reference(args.model)
    settings, press = method_args(args)
    config = resolve_method(args.method, args.budget, **settings, **press)  # every method, budget and setting error
    if context is not None and hasattr(config, "check_context"):
        config.check_context(context)
    press = dict(getattr(config, "press_args", ()))  # the press's arguments as its fields' types
    if args.seed is None or not 0 <= args.seed <= MAX_SEED:
        raise SnapevalError(f"--seed={args.seed} is invalid; allowed: an integer in 0..{MAX_SEED} (numpy's seeds)")
    if args.limit is not None and not (args.limit > 0 and (args.limit < 1 or float(args.limit).is_integer())):
        raise SnapevalError(f"--limit={args.limit} is invalid; allowed: a positive integer, or a fraction in (0, 1)")
    try:
        metadata = json.loads(args.metadata) if args.metadata else {}
    except json.JSONDecodeError as exc:
        raise SnapevalError(f"metadata is not valid JSON ({exc.msg}); allowed: a JSON object") from None
    if not isinstance(metadata, dict):
        raise SnapevalError(f"--metadata={args.metadata!r} is invalid; allowed: a JSON object such as "
                            "'{\"max_seq_lengths\": [1024]}'")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise SnapevalError(f"--tasks={args.tasks!r} is invalid; allowed: lm-eval task names, comma-separated")
    check_run_inputs(tasks, args.data_dir)
    if args.data_dir:
        metadata["data_dir"] = args.data_dir
        os.environ["SNAPEVAL_DATA_DIR"] = args.data_dir
    limit = args.limit
    if limit is not None and limit >= 1:
        limit = int(limit)
    named = {"pretrained": args.model, "method": args.method, "budget": args.budget, "run_args": run_args,
             **{f"press_{k}": v for k, v in press.items()},
             **config.stored_keys(settings)}  # what the output file is named by (a setting by its stored key)
    out = args.output or default_output(tasks, named, limit=limit, seed=args.seed, metadata=metadata)
    from snapeval.preflight import check_output_file

    check_output_file(out, "--output")
    from snapeval import threads

    threads.apply()  # the cores free now, before torch is imported (a busy neighbour costs one thread, not two)
    from snapeval.harness.evaluate import evaluate

    # the method configuration and the run arguments, each resolved once above, handed on unchanged (as a sweep
    # cell hands on its own: snapeval.sweep.grid.Cell.evaluate_kwargs); the lm-eval model resolves neither again
    model_args = {"pretrained": args.model, "config": config, "run_args": run_args}
    results = evaluate(model_args, tasks, limit=limit, seed=args.seed, metadata=metadata,
                       max_gen_toks_cap=run_args.max_gen_toks or 256)  # parsed, not the flag's text
    write_results(out, results)
    info = results["snapeval"]
    print(f"model={args.model} method={args.method} budget={args.budget or '-'} "
          f"KV bytes/seq={info['kv_cache_bytes']:,} decode tok/s={_fmt(info['decode_tokens_per_s'])} "
          f"prefill tok/s={_fmt(info['prefill_tokens_per_s'])}")
    for task, metrics in results["results"].items():
        shown = {k.split(",")[0]: v for k, v in metrics.items() if isinstance(v, (int, float)) and "stderr" not in k
                 and v == v}
        print(f"{task}: " + ", ".join(f"{k}={v:.4g}" for k, v in shown.items()))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def check_run_inputs(tasks: list[str], data_dir: str | None) -> None:
    """What ``run`` reads, before lm-eval or the model loads (:mod:`snapeval.preflight`): the task folder
    variables, the task names (with suggestions) and the tasks' data files."""
    from snapeval import preflight

    preflight.check_task_folder_env()
    preflight.check_task_names(tasks)
    preflight.check_task_data(tasks, data_dir)


def write_results(out: Path, results: dict) -> None:
    """Write the results JSON at once (a temporary file renamed over ``out``); a disk that refuses is one line (a run
    keeps nothing else: nothing to resume)."""
    from snapeval.results.store import atomic_write_text  # fsynced, then renamed over ``out``

    try:
        atomic_write_text(out, json.dumps(results, indent=1, default=str))
    except OSError as exc:
        raise SnapevalError(f"--output={str(out)!r} could not be written ({exc.strerror or exc}); the run's results "
                            "are lost: fix the folder or choose another --output and run again") from None


def default_output(tasks: list[str], model_args: dict, **run) -> Path:
    """``results/runs/<tasks>-<model>-<method>-<budget>[-<settings>]-<hash>.json``: readable names for the main
    choices and a hash of every argument of the run (model_args, limit, seed, metadata), so that two runs that differ
    in any setting never write the same file."""
    import hashlib
    import re

    settings = {k: v for k, v in model_args.items() if v is not None and k not in
                ("pretrained", "method", "budget", "run_args")}
    label = "-".join([
        "+".join(tasks), Path(str(model_args["pretrained"])).name, str(model_args["method"]).replace(":", "_"),
        str(model_args["budget"] or "full"), *(f"{k}={v}" for k, v in sorted(settings.items()))])
    label = re.sub(r"[^A-Za-z0-9_.=+-]", "_", label)[:150]
    flat = {k: v for k, v in model_args.items() if k != "run_args"}
    if model_args.get("run_args") is not None:  # the run arguments by name, as given (defaults left out)
        flat.update(model_args["run_args"].changed())
    digest = hashlib.sha256(json.dumps({"model_args": flat, **run}, sort_keys=True, default=str).encode())
    return Path("results") / "runs" / f"{label}-{digest.hexdigest()[:8]}.json"


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"
