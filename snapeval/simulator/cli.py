"""``snapeval simulate``: SN40L (and GPU) memory and throughput for one point or a sweep."""
from __future__ import annotations

import argparse
import json

from snapeval.models.presets import DEFAULT_MODEL


def _int(text: str) -> int:
    try:
        low = text.strip().lower()
        return int(low[:-1]) * 1024 if low.endswith("k") else int(low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (suffix k = x1024 allowed)") from None


def _window(text: str) -> int | float:
    """Tokens (suffix k allowed), or a fraction of the budget in (0, 1] when written with a decimal point."""
    if "." in text:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of tokens or a fraction of the budget in "
                                             "(0, 1]") from None
    return _int(text)


def register(subparsers) -> None:
    from snapeval.cache import METHOD_TABLE

    p = subparsers.add_parser(
        "simulate", help="memory and throughput of a (model, context, method, batch, sockets) point on SN40L or a GPU",
        description="Simulate memory per socket and tier, the largest batch that fits, decode throughput (the step's "
                    "kernels, call boundaries and fill/drain, which sum to the step) and prefill time, on an SN40L "
                    "or GPU target (`snapeval hardware` lists them). Assumptions and their sources: "
                    "docs/simulator.md.")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="preset name (snapeval models) or a config.json/dir, priced at its real size (as "
                        "in snapeval run)")
    hw = p.add_mutually_exclusive_group()
    hw.add_argument("--hardware", default="sn40l-16", help=hardware_help())
    hw.add_argument("--hardware-file", help="a hardware spec YAML/JSON (shape of snapeval/simulator/hardware/*.yaml)")
    p.add_argument("--prompt-len", type=_int, default=4096, help="prompt tokens per sequence (suffix k = x1024)")
    p.add_argument("--gen-len", type=_int, default=1024, help="generated tokens per sequence (suffix k = x1024)")
    p.add_argument("--method", default=None,
                   help=f"cache method: {METHOD_TABLE.allowed()} (default: snapstream with --budget, else full); "
                        "priced by what it holds and computes (docs/simulator.md)")
    p.add_argument("--budget", type=_int, default=None, help="cache budget in tokens per layer and KV head")
    p.add_argument("--method-arg", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting of --method (sink=4, recent=512, pool_kernel=7; a press's own argument such as "
                        "window_size=64), repeatable; `snapeval methods` lists them")
    p.add_argument("--split", action="append", default=[], metavar="NAME=VALUE", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=_int, default=1, help="sequences decoded together")
    p.add_argument("--sockets", type=_int, default=None, help="sockets (GPUs) used (default: the hardware's)")
    p.add_argument("--tp", type=_int, default=None, help="tensor-parallel degree of the GEMMs (default: every socket)")
    p.add_argument("--attention-parallel", default="auto", help="auto | dp | tp")
    p.add_argument("--weight-dtype", default="auto", help="auto | bfloat16 | float16 | float32 | fp8 | int8 | int4")
    p.add_argument("--kv-dtype", default="bfloat16", help="KV-cache element type")
    p.add_argument("--mtp-factor", type=float, default=None, help="default: 2.4 for DeepSeek-R1, else 1")
    loop = p.add_mutually_exclusive_group()
    loop.add_argument("--kernel-looping", dest="kernel_looping", action="store_true", default=None,
                      help="loop identical layer kernels in one call (default: the hardware's)")
    loop.add_argument("--no-kernel-looping", dest="kernel_looping", action="store_false",
                      help="one call per layer kernel")
    p.add_argument("--placement", default="hbm", help="hbm | hbm+ddr")
    p.add_argument("--batch-granularity", default="auto", help="auto (the hardware's: any on h100/h200, pow2 elsewhere) | pow2 | any")
    p.add_argument("--compiled-context", type=_int, default=None,
                   help="context the static graphs are compiled for (default: the hardware's; 0 = the prompt)")
    p.add_argument("--kv-slot", default="exact", help="exact | bucket")
    p.add_argument("--moe-parallel", default="auto", help="auto | ep | tp")
    p.add_argument("--attention-tiling", default="auto",
                   help="how decode attention is tiled over a socket's compute units: auto (the cheapest that fits "
                        "on-chip) | keys (split the key axis only) | rows (split the query rows only)")
    p.add_argument("--draft-tokens", type=_int, default=None,
                   help="drafts verified per step: MTP drafts, or the lookahead of --draft-model (default: the "
                        "fastest)")
    p.add_argument("--draft-model", default=None, help="speculative decoding with this draft model (a preset name)")
    p.add_argument("--draft-acceptance", type=float, default=0.8, help="probability a draft token is accepted")
    p.add_argument("--observation-length", type=_window, default=None, help=argparse.SUPPRESS)  # deprecated
    p.add_argument("--sweep", help="NAME=V1,V2,... with NAME in batch, prompt_len, gen_len, budget (full allowed), "
                                   "sockets, tp")
    p.add_argument("--plot", help="write a PNG of the sweep here")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def _model(spec: str):
    from pathlib import Path

    from snapeval.models.presets import get_preset, preset_from_config, preset_from_gguf

    path = Path(spec)
    if path.suffix == ".gguf" and path.is_file():
        return preset_from_gguf(path)
    if path.suffix == ".json" or path.is_dir():
        return preset_from_config(path, name=path.stem if path.suffix == ".json" else path.name)
    return get_preset(spec)


def hardware_help() -> str:
    """``--hardware``'s help: the installed targets (:func:`snapeval.simulator.hardware.list_hardware`)."""
    from snapeval.simulator.hardware import list_hardware

    return f"{', '.join(list_hardware())} (`snapeval hardware` describes them)"


def _method_args(args) -> dict:
    """``--method-arg`` as settings (and their deprecated spellings ``--split`` and ``--observation-length``, with a
    ``DeprecationWarning``)."""
    import warnings

    if args.split:
        warnings.warn("--split is deprecated; use --method-arg NAME=VALUE", DeprecationWarning, 2)
    if args.observation_length is not None:
        warnings.warn("--observation-length is deprecated; use --method-arg observation=N", DeprecationWarning, 2)
    return _split([*args.method_arg, *args.split], args.observation_length)


def _split(items: list[str], observation: int | float | None) -> dict:
    """``NAME=VALUE`` pairs (integers, floats, true/false, else strings) and ``--observation-length``."""
    from snapeval.errors import SnapevalError

    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise SnapevalError(f"--method-arg {item!r} must look like NAME=VALUE (e.g. sink=4)")
        value: object = raw.strip()
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                continue
        if raw.strip().lower() in ("true", "false"):
            value = raw.strip().lower() == "true"
        out[key.strip()] = value
    if observation is not None:
        out["observation"] = observation
    return out


def method_for(name: str | None, settings: dict):
    """The resolved method configuration of a budget (None: the full cache): ``name`` (default snapstream) with
    its ``settings``; one-line errors from :func:`snapeval.cache.resolve_method`."""
    from snapeval.cache import METHOD_TABLE, resolve_method

    # an old spelling: its name, warned once (not once per budget)
    settings = METHOD_TABLE.get(name or "snapstream").config_class().typed(settings, where="--method-arg ")

    def resolve(budget: int | None):
        if budget is None and (name is None or METHOD_TABLE.is_reference(name)):
            return resolve_method("full")
        return resolve_method(name or "snapstream", budget, **settings)

    return resolve


def check_within_context(model, prompt_len: int, gen_len: int, sweep: tuple[str, list] | None) -> None:
    """Prompt and generation (each value a sweep gives them) fit the model's context: one line otherwise (a
    deployment past the context the model was trained for is not one to price)."""
    from snapeval.errors import SnapevalError

    context = getattr(model, "max_context", None)
    if not context:
        return
    prompts, gens = [prompt_len], [gen_len]
    if sweep is not None and sweep[0] in ("prompt_len", "gen_len"):
        (prompts if sweep[0] == "prompt_len" else gens)[:] = [v for v in sweep[1] if v is not None]
    prompt, gen = max(prompts), max(gens)
    if prompt + gen > context:
        raise SnapevalError(f"--prompt-len={prompt} with --gen-len={gen} is {prompt + gen:,} tokens, past "
                            f"{model.name}'s {context:,}-token context; allowed: prompt + generation <= {context:,}")


def run(args) -> int:
    from snapeval.errors import SnapevalError
    from snapeval.simulator.core import Deployment, gain_vs_full, simulate
    from snapeval.simulator.hardware import get_hardware, load_hardware_file
    from snapeval.simulator.sweep import parse_sweep, plot_sweep, row, run_sweep

    if args.plot and not args.sweep:
        raise SnapevalError("--plot needs --sweep NAME=V1,V2,...")
    hardware = load_hardware_file(args.hardware_file) if args.hardware_file else get_hardware(args.hardware)
    model = _model(args.model)
    dep = Deployment(batch=args.batch, prompt_len=args.prompt_len, gen_len=args.gen_len, sockets=args.sockets,
                     tp=args.tp, attention_parallel=args.attention_parallel, weight_dtype=args.weight_dtype,
                     kv_dtype=args.kv_dtype, mtp_factor=args.mtp_factor, kernel_looping=args.kernel_looping,
                     placement=args.placement, batch_granularity=args.batch_granularity,
                     compiled_context=args.compiled_context, kv_slot=args.kv_slot, moe_parallel=args.moe_parallel,
                     attention_tiling=args.attention_tiling,
                     draft_tokens=args.draft_tokens, draft_model=args.draft_model,
                     draft_acceptance=args.draft_acceptance)
    resolve = method_for(args.method, _method_args(args))
    sweep = parse_sweep(args.sweep) if args.sweep else None
    check_within_context(model, args.prompt_len, args.gen_len, sweep)
    method = None if sweep and sweep[0] == "budget" else resolve(args.budget)  # a budget sweep sets its own

    if sweep:
        name, values = sweep
        results = run_sweep(hardware, model, dep, method, name, values, method_for_budget=resolve)
        rows = [{name: ("full" if v is None else v), **row(r), "reason": r.reason} for v, r in zip(values, results)]
        if args.plot:
            plot_sweep(results, name, values, args.plot)
        if args.json:
            print(json.dumps({"sweep": name, "points": [r.to_dict() for r in results], "table": rows}, indent=2))
        else:
            print(_sweep_table(name, rows))
            if args.plot:
                print(f"plot: {args.plot}")
        return 0

    result = simulate(hardware, model, dep, method)
    if args.json:
        out = result.to_dict()
        out["gain_vs_full"] = gain_vs_full(result) if result.budget is not None else None
        print(json.dumps(out, indent=2))
    else:
        print(_point_table(result))
    return 0


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _sweep_table(name: str, rows: list[dict]) -> str:
    from snapeval.simulator.sweep import COLUMNS

    headers = [name, *COLUMNS]
    cells = [[_fmt(r[h]) for h in headers] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(cell, widths)) for cell in cells]
    notes = [f"{r[name]}: {r['reason']}" for r in rows if r["reason"]]
    return "\n".join(lines + ([""] + notes if notes else []))


def _point_table(r) -> str:
    from snapeval.simulator.core import gain_vs_full

    gb = 1e9
    method = "full cache" if r.budget is None else f"method {r.method}"
    lines = [
        f"{r.model} on {r.hardware}: {r.sockets} socket(s), TP{r.tp} GEMMs, {r.attention_parallel.upper()} attention, "
        f"weights {r.weight_dtype}, KV {r.kv_dtype}, kernel looping {'on' if r.kernel_looping else 'off'}",
        f"point: batch {r.batch}, prompt {r.prompt_len}, gen {r.gen_len}, {method}",
        f"fits: {'yes' if r.fits else 'NO - ' + r.reason}",
        "",
        "memory per socket (GB)      HBM        DDR",
        f"  weights              {r.hbm.weights / gb:9.2f}  {r.ddr.weights / gb:9.2f}",
        f"  KV cache             {r.hbm.kv_cache / gb:9.2f}  {r.ddr.kv_cache / gb:9.2f}",
        f"  activations/buffers  {r.hbm.activations / gb:9.2f}  {r.ddr.activations / gb:9.2f}",
        f"  total / capacity     {r.hbm.total / gb:9.2f} / {r.hbm_capacity / gb:.0f}"
        + (f"   {r.ddr.total / gb:.2f} / {r.ddr_capacity / gb:.0f}" if r.ddr_capacity else "   (DDR not used)"),
        f"KV cache: {r.kv_bytes_per_token:,.0f} bytes/token, {r.kv_bytes_per_seq / gb:.2f} GB/sequence slot, "
        f"{r.kv_bytes_total / gb:.1f} GB in total; {r.kept_tokens:,.0f} tokens kept on average over the decode",
        f"largest batch that fits: {r.max_batch} (exact limit {r.max_batch_exact})",
    ]
    if r.fits:
        mtp = f" (x{r.mtp_factor:g} multi-token prediction included)" if r.includes_mtp else ""
        lines += [
            "",
            f"decode step: {r.decode_step_seconds * 1e3:.2f} ms; {r.decode_tokens_per_s:,.1f} tokens/s for the batch, "
            f"{r.decode_tokens_per_s_per_seq:,.2f} per sequence{mtp}",
            f"  raw (no MTP): {r.decode_tokens_per_s_raw:,.1f} tokens/s; achieved bandwidth "
            f"{r.achieved_bandwidth_fraction * 100:.1f}% of peak",
        ]
        if r.draft_model:
            lines.append(f"  speculative decoding: draft {r.draft_model}, lookahead {r.draft_tokens}, "
                         f"{r.tokens_per_step:.2f} tokens per step expected, drafting "
                         f"{(r.draft_seconds_per_step or 0) * 1e3:.2f} ms per step")
        for k in r.decode_kernels:
            lines.append(f"  {k.name:<28} {k.seconds * 1e3:8.3f} ms  ({k.bound}-bound)")
        for name, seconds in r.decode_overheads:  # the step's time besides its kernels: the lines sum to the step
            lines.append(f"  {name:<28} {seconds * 1e3:8.3f} ms")
        if r.draft_seconds_per_step:
            lines.append(f"  {'drafting':<28} {r.draft_seconds_per_step * 1e3:8.3f} ms")
        if r.attention_units > 1:
            lines.append(f"  (each KV stream's attention tiled over {r.attention_units} compute units)")
        lines.append(f"prefill (one prompt): {r.prefill_seconds:.3f} s"
                     + (f", of which the method's compression {r.prefill_compression_seconds * 1e3:.1f} ms "
                        f"({r.prefill_overhead_fraction * 100:.2f}%)" if r.prefill_compression_seconds else ""))
        if r.budget is not None:
            g = gain_vs_full(r)
            lines.append("gain vs full cache: KV memory x{0}, batch x{1} ({2} vs {3}), throughput at max batch x{4}"
                         .format(_fmt(g["kv_memory_reduction"], 3), _fmt(g["batch_gain"], 3), g["max_batch"],
                                 g["full_max_batch"], _fmt(g["throughput_gain_max_batch"], 3)))
    return "\n".join(lines)
