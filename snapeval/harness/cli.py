"""``snapeval run``: one lm-eval run of one model, task and cache method; results written as JSON."""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

from snapeval.errors import SnapevalError


def register(subparsers) -> None:
    from snapeval.cache import METHOD_TABLE

    p = subparsers.add_parser(
        "run",
        help="evaluate one model on lm-eval tasks under one KV-cache method and budget",
        description="One lm-eval run through the `snapeval` model (tasks from snapeval/tasks, or $SNAPEVAL_TASKS_DIR). "
        "Prints the metrics with the measured KV-cache bytes and tokens/s, and writes the full results JSON.",
    )
    p.add_argument("--model", default="smollm2-135m-instruct", help="preset name (snapeval models), local dir, .gguf or hub id")
    p.add_argument("--task", required=True, help="lm-eval task name(s), comma-separated (e.g. snapeval_passkey)")
    p.add_argument("--method", default="snapstream",
                   help=f"{' | '.join(METHOD_TABLE.allowed().split(', '))} (e.g. kvpress:TOVAPress)")
    p.add_argument("--budget", type=int, default=None, help="total KV budget in tokens (not for full)")
    add_method_arg_flags(p)
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 | float64 (default: the preset's)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda or cuda:1 (default cpu)")
    p.add_argument("--device-map", default=None,
                   help="spread the layers over devices: auto | balanced | balanced_low_0 | sequential | a JSON "
                        "{module: device} object (overrides --device)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--max-gen-toks", type=int, default=256)
    p.add_argument("--engine", default="auto", help="auto | true | false: generate with the continuous-batching "
                   "engine (auto: for snapstream and streamingllm)")
    p.add_argument("--engine-slots", type=int, default=None, help="engine decode slots (default max(batch size, 8))")
    p.add_argument("--limit", type=float, default=None, help="documents per task (an int, or a fraction < 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--metadata", default=None, help="JSON passed to the tasks (e.g. '{\"max_seq_lengths\": [1024]}')")
    p.add_argument("--data-dir", default=None, help="local data in the hub schema (default: $SNAPEVAL_DATA_DIR)")
    p.add_argument("--output", type=Path, default=None, help="results JSON path (default: results/runs/<task>-<method>.json)")
    p.set_defaults(func=run)


#: The flags of snapeval's own methods' settings before ``--method-arg`` (deprecated aliases: ``--sink 4`` is
#: ``--method-arg sink=4``); a method added since has only ``--method-arg``.
DEPRECATED_SETTING_FLAGS = ("sink", "recent", "topk", "observation", "kernel", "pooling")


def add_method_arg_flags(p) -> None:
    """``--method-arg NAME=VALUE`` (a setting of the chosen method, in its own namespace: ``snapeval methods`` lists
    them), its deprecated spellings (``--press-arg``, ``--sink`` and the other flags of the shipped methods'
    settings, hidden from ``--help``). Reads no method: building the parser loads nothing."""
    import argparse

    p.add_argument("--method-arg", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting of --method, repeatable (e.g. --method-arg recent=0.5; a kvpress press's own "
                        "arguments too); `snapeval methods` lists each method's settings and defaults")
    p.add_argument("--press-arg", action="append", default=[], metavar="NAME=VALUE", help=argparse.SUPPRESS)
    for name in DEPRECATED_SETTING_FLAGS:
        p.add_argument(f"--{name}", default=None, help=argparse.SUPPRESS)


def method_args(args) -> tuple[dict, dict]:
    """``(settings, press)`` from ``--method-arg`` (and its deprecated spellings, with a ``DeprecationWarning``): a
    registered method's settings parsed as declared, a family's (kvpress) arguments read as numbers, booleans or
    text; one-line :class:`SnapevalError` for a malformed ``NAME=VALUE``, a name given twice or a bad value."""
    from snapeval.cache.methods import settings_from_text
    from snapeval.harness.lm_eval_model import press_value

    given: dict[str, str] = {}
    items = [("--method-arg", item) for item in args.method_arg] + [("--press-arg", item) for item in args.press_arg]
    items += [(f"--{name}", f"{name}={getattr(args, name)}") for name in DEPRECATED_SETTING_FLAGS
              if getattr(args, name, None) is not None]
    for flag, item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SnapevalError(f"{flag}={item!r} is invalid; allowed: NAME=VALUE")
        if name in given:
            raise SnapevalError(f"{flag}: {name!r} is given twice; allowed: each setting once")
        if flag != "--method-arg":
            warnings.warn(f"{flag} is deprecated; use --method-arg {name}={value}", DeprecationWarning, 2)
        given[name] = value
    if ":" in args.method:  # a family's method (kvpress:<Press>): the press's own arguments
        return {}, {name: press_value(value) for name, value in given.items()}
    return settings_from_text(args.method, given), {}


def _positive(name: str, value, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if value is None or value < 1:
        raise SnapevalError(f"--{name}={value} is invalid; allowed: an integer >= 1")


def run(args) -> int:
    from snapeval.cache import resolve_method
    from snapeval.errors import check_choice

    check_choice("engine", args.engine, ("auto", "true", "false"))
    settings, press = method_args(args)
    resolve_method(args.method, args.budget, **settings, **press)  # every method, budget and setting error, before loading
    _positive("batch-size", args.batch_size)
    _positive("max-gen-toks", args.max_gen_toks)
    _positive("engine-slots", args.engine_slots, optional=True)
    if args.limit is not None and not (args.limit > 0 and (args.limit < 1 or float(args.limit).is_integer())):
        raise SnapevalError(f"--limit={args.limit} is invalid; allowed: a positive integer, or a fraction in (0, 1)")
    try:
        metadata = json.loads(args.metadata) if args.metadata else {}
    except json.JSONDecodeError as exc:
        raise SnapevalError(f"metadata is not valid JSON ({exc.msg}); allowed: a JSON object") from None
    if not isinstance(metadata, dict):
        raise SnapevalError(f"--metadata={args.metadata!r} is invalid; allowed: a JSON object such as "
                            "'{\"max_seq_lengths\": [1024]}'")
    if args.data_dir:
        metadata["data_dir"] = args.data_dir
        os.environ["SNAPEVAL_DATA_DIR"] = args.data_dir
    limit = args.limit
    if limit is not None and limit >= 1:
        limit = int(limit)
    model_args = {
        "pretrained": args.model, "method": args.method, "budget": args.budget, "dtype": args.dtype,
        "batch_size": args.batch_size, "max_gen_toks": args.max_gen_toks, "engine": args.engine,
        "engine_slots": args.engine_slots, "device": args.device, "device_map": args.device_map,
        **{f"press_{k}": v for k, v in press.items()},
        **settings,
    }
    from snapeval.harness.evaluate import evaluate

    tasks = [t for t in args.task.split(",") if t]
    results = evaluate(model_args, tasks, limit=limit, seed=args.seed, metadata=metadata)
    out = args.output or Path("results") / "runs" / f"{'+'.join(tasks)}-{args.method}-{args.budget or 'full'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    os.replace(tmp, out)
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


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"
