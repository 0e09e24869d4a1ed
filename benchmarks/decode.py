"""Decode speed and memory: full cache vs SnapStream budgets after a real 8,192-token prompt (issue: foundation).

SmolLM2-135M-Instruct, float32, 2 threads, 256 forced new tokens. All runs in one process, so ratios compare like
with like. Writes results/bench/decode.json and prints a table.

    python -m benchmarks.decode [--prompt-len 8192] [--new-tokens 256]
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from benchmarks.common import longbench_context, machine, middle_truncate, peak_rss_mib, reset_peak_rss, write_json


def real_prompt(tokenizer, length: int) -> list[int]:
    context = longbench_context()
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": f"Read the document and summarise its main points.\n\n{context}"}],
        add_generation_prompt=True,
        tokenize=True,
    )
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    if len(ids) < length:
        raise SystemExit(f"benchmark: context too short ({len(ids)} tokens) for a {length}-token prompt")
    return middle_truncate(list(ids), length)


def run_snapeval(model, tokenizer, prompt, method, budget, new_tokens):
    from snapeval import generate
    from snapeval.cache import resolve_method

    sizes = []
    reset_peak_rss()
    result = generate(
        model, tokenizer, [prompt], config=resolve_method(method, budget) if budget else None,
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, on_step=lambda cache: sizes.append(cache.kv_bytes()),
    )
    decode_sizes = sizes[1:]  # after each decode step
    return {
        "prefill_s": result.prefill_seconds,
        "compress_s": result.compress_seconds,
        "decode_tokens_per_s": result.decode_tokens_per_s,
        "generated_tokens": result.generated_tokens,
        "kv_bytes": result[0].kv_bytes,
        "kv_bytes_first_step": sizes[0],
        "kv_bytes_constant_in_decode": len(set(decode_sizes)) == 1,
        "peak_rss_mib": peak_rss_mib(),
    }


def run_kvpress(model, tokenizer, prompt, press_name, budget, new_tokens):
    """kvpress presses compress in prefill; its DynamicCache grows in decode. Same budget, same prompt."""
    from snapeval.cache import resolve_method

    name = {"snapkv": "kvpress:SnapKVPress", "streamingllm": "kvpress:StreamingLLMPress"}[press_name]
    press = resolve_method(name, budget).make_press(len(prompt))  # exactly `budget` tokens kept, as snapeval's methods
    ids = torch.tensor([prompt])
    times = []

    class Clock:
        def __call__(self, input_ids, scores):
            times.append(time.perf_counter())
            return scores

    model.set_attn_implementation("sdpa")
    reset_peak_rss()
    start = time.perf_counter()
    with press(model):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, logits_processor=[Clock()],
                             return_dict_in_generate=True)
    cache = out.past_key_values  # kvpress keeps a DynamicCache: the kept prompt, then every decoded token appended
    return {
        "prefill_s": times[0] - start,
        "decode_tokens_per_s": (len(times) - 1) / (times[-1] - times[0]),
        "generated_tokens": out.sequences.shape[1] - ids.shape[1],
        "kv_bytes": sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers),
        "kv_bytes_constant_in_decode": False,
        "peak_rss_mib": peak_rss_mib(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompt-len", type=int, default=8192)
    parser.add_argument("--short-prompt-len", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--budgets", default="512,1024,2048")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from snapeval import load_model

    started, load_start = time.perf_counter(), os.getloadavg()
    model, tokenizer = load_model("smollm2-135m-instruct", dtype="float32")
    long_prompt = real_prompt(tokenizer, args.prompt_len)
    short_prompt = real_prompt(tokenizer, args.short_prompt_len)
    budgets = [int(b) for b in args.budgets.split(",")]
    plan = [("full", None, "long")] + [("snapstream", b, "long") for b in budgets]
    plan += [("full", None, "short"), ("snapstream", 1024, "short")]
    runs = []
    for method, budget, which in plan:
        prompt = long_prompt if which == "long" else short_prompt
        row = {"method": method, "budget": budget, "prompt_tokens": len(prompt), "implementation": "snapeval"}
        row.update(run_snapeval(model, tokenizer, prompt, method, budget, args.new_tokens))
        runs.append(row)
        print(row, flush=True)
    try:
        import kvpress  # noqa: F401

        for press_name in ("snapkv", "streamingllm"):
            row = {"method": f"kvpress-{press_name}", "budget": 1024, "prompt_tokens": len(long_prompt),
                   "implementation": "kvpress"}
            row.update(run_kvpress(model, tokenizer, long_prompt, press_name, 1024, args.new_tokens))
            runs.append(row)
            print(row, flush=True)
        kvpress_note = "kvpress installed: presses run at budget 1024"
    except ImportError:
        kvpress_note = "kvpress not installed (pip install -e '.[kvpress]'): kvpress rows skipped"

    def find(method, budget, n):
        return next(r for r in runs if r["method"] == method and r["budget"] == budget and r["prompt_tokens"] == n)

    full_long = find("full", None, args.prompt_len)
    snap_long = find("snapstream", 1024, args.prompt_len)
    full_short = find("full", None, args.short_prompt_len)
    targets = {
        "snapstream1024_vs_full_after_long_prompt": snap_long["decode_tokens_per_s"] / full_long["decode_tokens_per_s"],
        "snapstream1024_after_long_vs_full_after_short_prompt":
            snap_long["decode_tokens_per_s"] / full_short["decode_tokens_per_s"],
        "compression_overhead_of_prefill": max(  # the target is about the long prompt
            r["compress_s"] / (r["prefill_s"] - r["compress_s"])
            for r in runs if r["method"] == "snapstream" and r["prompt_tokens"] == args.prompt_len
        ),
        "compression_overhead_of_prefill_short_prompt": max(
            r["compress_s"] / (r["prefill_s"] - r["compress_s"])
            for r in runs if r["method"] == "snapstream" and r["prompt_tokens"] == args.short_prompt_len
        ),
        "kv_bytes_constant_in_decode": all(r["kv_bytes_constant_in_decode"] for r in runs if r["method"] == "snapstream"),
    }
    goals = {
        "snapstream1024_vs_full_after_long_prompt": ">= 2.0",
        "snapstream1024_after_long_vs_full_after_short_prompt": ">= 0.85",
        "compression_overhead_of_prefill": "<= 0.05",
        "compression_overhead_of_prefill_short_prompt": "(reported, no target)",
        "kv_bytes_constant_in_decode": "true",
    }
    payload = {
        "benchmark": "decode",
        "model": "smollm2-135m-instruct",
        "dtype": "float32",
        "new_tokens": args.new_tokens,
        "machine": machine(),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "wall_seconds": time.perf_counter() - started,
        "note": kvpress_note,
        "runs": runs,
        "ratios": targets,
        "goals": goals,
    }
    out = write_json("decode.json", payload)
    print(f"\n{'method':<22}{'budget':>7}{'prompt':>7}{'prefill s':>10}{'compress s':>11}{'decode tok/s':>13}{'KV MiB':>9}{'peak RSS MiB':>13}")
    for r in runs:
        print(f"{r['method']:<22}{str(r['budget'] or '-'):>7}{r['prompt_tokens']:>7}{r['prefill_s']:>10.2f}"
              f"{r.get('compress_s', float('nan')):>11.3f}{r['decode_tokens_per_s']:>13.2f}"
              f"{r['kv_bytes'] / 2**20:>9.1f}{r['peak_rss_mib']:>13.0f}")
    for k, v in targets.items():
        print(f"{k}: {v:.3f} (goal {goals[k]})" if not isinstance(v, bool) else f"{k}: {v}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
