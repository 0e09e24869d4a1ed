"""Speculative prefill where it pays: a small draft reads the prompt for a target 4-8x its size.

The target is a random-weight model with the architecture of Llama-3.2-1B (16 layers, hidden 2048, 32 query and 8
KV heads, FFN 8192; 1.07B parameters) and SmolLM2's 49,152-token vocabulary, so it shares SmolLM2's tokenizer:
SmolLM2-135M-Instruct drafts for it as the same family (kept ids keep their original positions) and Gemma-3-270M
drafts for it across families (kept text re-tokenized by the target). Random weights make its answers meaningless,
so this measures time to first token (TTFT) and the kept fraction only; accuracy comes from specprefill.py.

Prompts: LongBench-v2 items ('short' subset, file order), the official zero-shot prompt middle-truncated to each of
``--lengths`` target tokens, instruction and question protected. TTFT full = the target's prefill of the whole
prompt; TTFT specprefill = the draft's tokenization, prefill, look-ahead and scoring, the selection, and the
target's prefill of the kept prompt. Conditions are interleaved per prompt in one process; compare ratios.

    python -m benchmarks.specprefill_target [--lengths 4096 4096 8192] [--keeps 0.1 0.3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from benchmarks.common import machine, write_json
from benchmarks.engine import random_llama_1b
from benchmarks.specprefill import MODELS, longbench_prompts

SHAPE_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "head_dim", "tie_word_embeddings")


def target_shape(config) -> dict:
    """The architecture fields of the target recorded in the JSON."""
    return {**{k: getattr(config, k) for k in SHAPE_FIELDS}, "rope_theta": config.rope_parameters["rope_theta"]}

def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 4096, 8192],
                        help="one prompt per entry, truncated to this many target tokens")
    parser.add_argument("--keeps", type=float, nargs="+", default=[0.1, 0.3])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from snapeval.models.loading import load_model
    from snapeval.specprefill import SpecPrefillConfig, compress_prompt, score_prompt
    from snapeval.specprefill.method import run_target

    started, load_start = time.perf_counter(), os.getloadavg()
    drafts = {name: load_model(MODELS[name]) for name in MODELS}
    tokenizer = drafts["smollm2"][1]
    target = random_llama_1b(tokenizer, "float32", "cpu")
    params = sum(p.numel() for p in target.parameters())
    items = []
    for n, length in enumerate(args.lengths):
        item = longbench_prompts(tokenizer, n + 1, length)[n]  # item n of the subset, at this length
        items.append({**item, "length": length})
    warm = tokenizer(items[0]["text"]).input_ids[:256]  # first calls pay one-time costs: pay them before timing
    run_target(target, tokenizer, warm, None, 1, "full", None)
    for draft in MODELS:
        score_prompt(tokenizer.decode(warm), SpecPrefillConfig(draft=MODELS[draft], keep=0.5), draft=drafts[draft])
    rows = []
    for item in items:
        run = run_target(target, tokenizer, tokenizer(item["text"]).input_ids, None, 1, "full", None)
        full_ttft = run.prefill_seconds
        rows.append(dict(id=item["id"], length=item["length"], draft=None, keep=1.0, prompt_tokens=run.prompt_tokens,
                         kept_fraction=1.0, ttft_s=full_ttft, full_ttft_s=full_ttft, draft_s=0.0,
                         target_prefill_s=full_ttft))
        for draft in MODELS:
            scores = score_prompt(item["text"], SpecPrefillConfig(draft=MODELS[draft], keep=min(args.keeps)),
                                  draft=drafts[draft])
            for keep in args.keeps:
                config = SpecPrefillConfig(draft=MODELS[draft], keep=keep)
                compressed = compress_prompt(item["text"], tokenizer, config, item["protect"], draft=drafts[draft],
                                             scores=scores)
                kept = run_target(target, tokenizer, compressed.target_ids, compressed.position_ids, 1, "full", None)
                ttft = compressed.draft_seconds + kept.prefill_seconds
                rows.append(dict(id=item["id"], length=item["length"], draft=draft, keep=keep,
                                 prompt_tokens=compressed.full_target_tokens,
                                 kept_target_tokens=len(compressed.target_ids), kept_fraction=compressed.kept_fraction,
                                 same_tokenizer=compressed.same_tokenizer, ttft_s=ttft, full_ttft_s=full_ttft,
                                 draft_s=compressed.draft_seconds, target_prefill_s=kept.prefill_seconds,
                                 speedup=full_ttft / ttft))
        print(f"[{time.perf_counter() - started:6.0f}s] {item['id']} ({item['length']} tokens): full {full_ttft:.1f} s; "
              + ", ".join(f"{r['draft']}@{r['keep']} {r['ttft_s']:.1f} s ({r['speedup']:.2f}x)"
                          for r in rows if r["id"] == item["id"] and r["draft"]), flush=True)
    summary = []
    for draft in MODELS:
        for keep in args.keeps:
            for length in sorted(set(args.lengths)):
                sel = [r for r in rows if r["draft"] == draft and r["keep"] == keep and r["length"] == length]
                summary.append(dict(
                    draft=MODELS[draft], keep=keep, length=length, prompts=len(sel),
                    kept_fraction=statistics.mean(r["kept_fraction"] for r in sel),
                    ttft_s=statistics.mean(r["ttft_s"] for r in sel),
                    full_ttft_s=statistics.mean(r["full_ttft_s"] for r in sel),
                    draft_s=statistics.mean(r["draft_s"] for r in sel),
                    ttft_speedup=statistics.mean(r["full_ttft_s"] for r in sel) / statistics.mean(r["ttft_s"] for r in sel),
                ))
    payload = dict(
        benchmark="specprefill_target", machine=machine(), load_average_start=load_start,
        load_average_end=os.getloadavg(), wall_seconds=time.perf_counter() - started,
        settings=dict(vars(args), drafts=MODELS, target=dict(
            shape=target_shape(target.config), vocab_size=len(tokenizer),
                      parameters=params, weights="random", dtype="float32"), chunk=32, lookahead=8, pool_kernel=13),
        summary=summary, rows=rows,
    )
    out = write_json("specprefill_target.json", payload)
    print("| draft | keep | prompt tokens | kept | TTFT full (s) | TTFT specprefill (s) | speedup |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for s in summary:
        print(f"| {s['draft']} | {s['keep']} | {s['length']} | {s['kept_fraction']:.2f} | {s['full_ttft_s']:.1f} | "
              f"{s['ttft_s']:.1f} | {s['ttft_speedup']:.2f}x |")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
