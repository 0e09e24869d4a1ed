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
    p.add_argument("--dtype", default=None,
                   help="float32 | bfloat16 | float16 | float64 (default: the preset's, else float32)")
    p.add_argument("--device", default="cpu",
                   help="cpu | cuda | cuda:N | mps (a bare cuda falls back to cpu on a machine without a GPU)")
    p.add_argument("--device-map", default=None,
                   help="spread the layers over devices: auto | balanced | balanced_low_0 | sequential | a JSON "
                        "{module: device} object (overrides --device; default: one device)")
    p.add_argument("--batch-size", type=int, default=1, help="requests per lm-eval batch")
    p.add_argument("--max-gen-toks", type=int, default=256, help="most tokens generated per request")
    p.add_argument("--engine", default="auto", help="auto | true | false: generate with the continuous-batching "
                   "engine (auto: for snapstream and streamingllm)")
    p.add_argument("--engine-slots", type=int, default=None, help="engine decode slots (default: max(batch size, 8))")
    p.add_argument("--limit", type=float, default=None,
                   help="documents per task (an int, or a fraction < 1; default: every document)")
    p.add_argument("--seed", type=int, default=0, help="seed of lm-eval, sampling and the synthetic tasks")
    p.add_argument("--metadata", default=None, help="JSON passed to the tasks (e.g. '{\"max_seq_lengths\": [1024]}')")
    p.add_argument("--data-dir", default=None, help="local data in the hub schema (default: $SNAPEVAL_DATA_DIR)")
    p.add_argument("--output", type=Path, default=None,
                   help="results JSON path (default: results/runs/<tasks>-<model>-<method>-<budget>[-<settings>]-"
                        "<hash of every setting>.json, so runs that differ in any setting never overwrite each other)")
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
    registered method's settings parsed as declared, a family's (kvpress) arguments as the text given, which its
    configuration checks and converts against the press's own fields (:mod:`snapeval.cache.press_spec`); one-line :class:`SnapevalError` for a malformed ``NAME=VALUE``, a name given twice or a bad value."""
    from snapeval.cache.methods import settings_from_text

    given: dict[str, str] = {}
    items = [("--method-arg", item) for item in args.method_arg] + [("--press-arg", item) for item in args.press_arg]
    items += [(f"--{name}", f"{name}={getattr(args, name)}") for name in DEPRECATED_SETTING_FLAGS
              if getattr(args, name, None) is not None]
    for flag, item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SnapevalError(f"{flag}={item!r} is invalid; allowed: NAME=VALUE")
        if name in given:
            raise SnapevalError(f"{flag} {name} is given twice ({name}={given[name]!r} and {name}={value!r}); "
                                "allowed: each setting once")
        if flag != "--method-arg":
            warnings.warn(f"{flag} is deprecated; use --method-arg {name}={value}", DeprecationWarning, 2)
        given[name] = value
    if ":" in args.method:  # a family's method (kvpress:<Press>): the press's own arguments, as text its
        return {}, given  # configuration checks and converts against the press's fields
    return settings_from_text(args.method, given), {}


def _positive(name: str, value, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if value is None or value < 1:
        raise SnapevalError(f"--{name}={value} is invalid; allowed: an integer >= 1")


def run(args) -> int:
    """Every argument is checked before lm-eval, torch or the model are imported (one-line errors, in a second)."""
    from snapeval.cache import resolve_method
    from snapeval.errors import check_choice
    from snapeval.models.devices import check_device, parse_device_map
    from snapeval.models.loading import check_model_reference

    check_choice("engine", args.engine, ("auto", "true", "false"))
    context = check_model_reference(args.model)
    check_device(args.device, "--device")
    parse_device_map(args.device_map)
    if args.dtype is not None and args.dtype != "auto":
        from snapeval.models.loading import DTYPES

        check_choice("dtype", args.dtype, DTYPES)
    settings, press = method_args(args)
    config = resolve_method(args.method, args.budget, **settings, **press)  # every method, budget and setting error
    if context is not None and hasattr(config, "check_context"):
        config.check_context(context)
    press = dict(getattr(config, "press_args", ()))  # the press's arguments as its fields' types
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
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise SnapevalError(f"--tasks={args.tasks!r} is invalid; allowed: lm-eval task names, comma-separated")
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
    out = args.output or default_output(tasks, model_args, limit=limit, seed=args.seed, metadata=metadata)
    from snapeval.harness.evaluate import evaluate

    results = evaluate(model_args, tasks, limit=limit, seed=args.seed, metadata=metadata)
    from snapeval.results.store import atomic_write_text

    atomic_write_text(out, json.dumps(results, indent=1, default=str))
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


def default_output(tasks: list[str], model_args: dict, **run) -> Path:
    """``results/runs/<tasks>-<model>-<method>-<budget>[-<settings>]-<hash>.json``: readable names for the main
    choices and a hash of every argument of the run (model_args, limit, seed, metadata), so that two runs that differ
    in any setting never write the same file."""
    import hashlib
    import re

    settings = {k: v for k, v in model_args.items() if v is not None and k not in
                ("pretrained", "method", "budget", "batch_size", "max_gen_toks", "engine", "engine_slots", "device",
                 "device_map", "dtype")}
    label = "-".join([
        "+".join(tasks), Path(str(model_args["pretrained"])).name, str(model_args["method"]).replace(":", "_"),
        str(model_args["budget"] or "full"), *(f"{k}={v}" for k, v in sorted(settings.items()))])
    label = re.sub(r"[^A-Za-z0-9_.=+-]", "_", label)[:150]
    digest = hashlib.sha256(json.dumps({"model_args": model_args, **run}, sort_keys=True, default=str).encode())
    return Path("results") / "runs" / f"{label}-{digest.hexdigest()[:8]}.json"


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"
