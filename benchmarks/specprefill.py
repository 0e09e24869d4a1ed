"""Speculative prefill: time to first token and accuracy, full prompt vs keep fractions, same- and cross-family.

Targets and drafts: SmolLM2-135M-Instruct (Llama family, byte-level BPE) and Gemma-3-270M (base model, SentencePiece,
262k vocabulary), both float32, as plain completion models (no chat template; SmolLM2 fails the passkey task in chat
format at 1k tokens, it passes it as a completion). Pairs (draft -> target): SmolLM2 -> SmolLM2 (same family, kept
ids with original positions), Gemma -> SmolLM2 and SmolLM2 -> Gemma (cross-family, kept text spans re-tokenized).

Prompts: synthetic passkey and kv-needle samples of ``--length`` SmolLM2 tokens, and LongBench-v2 items (official
zero-shot prompt, middle-truncated to ``--lb-length`` SmolLM2 tokens, completed after "The correct answer is (").
Protected spans: the task instruction (first line / text header) and the question (everything after the document).

Time to first token (TTFT): full = the target's prefill of the whole prompt; specprefill = the draft's
tokenization, prefill, look-ahead decoding and scoring + selection + the target's prefill of the kept prompt. The
draft scores do not depend on the keep fraction, so each prompt is scored once per draft and that time is added to
every keep fraction's TTFT. Conditions are interleaved per prompt, in one process; the machine is shared (its load
average is recorded), so compare ratios, not absolute seconds.

    python benchmarks/specprefill.py [--length 2048] [--synthetic 6] [--longbench 3] [--budget-minutes 14]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from benchmarks.common import data_dir, machine, write_json

PAIRS = (("smollm2", "smollm2"), ("gemma", "smollm2"), ("smollm2", "gemma"))
MODELS = {"smollm2": "smollm2-135m-instruct", "gemma": "gemma-3-270m"}
LB_CUE = "\n\nThe correct answer is ("


def synthetic_prompts(tokenizer, n: int, length: int) -> list[dict]:
    from snapeval.tasks import synthetic
    from snapeval.specprefill.selection import default_protected_spans

    out = []
    for i in range(n):
        make = synthetic.passkey if i % 2 == 0 else synthetic.kv_needle
        sample = make(tokenizer, length, seed=0, index=i // 2)
        text = sample.prompt
        protect = [(0, text.index("\n")), *default_protected_spans(text)]
        out.append(dict(task=sample.task, id=f"{sample.task}-{i // 2}", text=text, protect=protect,
                        answers=sample.answers, max_new_tokens=12))
    return out


def longbench_prompts(tokenizer, n: int, length: int) -> list[dict]:
    from snapeval.tasks import longbench

    rows = [r for r in longbench.load(data_dir()).rows if r["length"] == "short"][:n]
    out = []
    for doc in rows:
        prompt, _, _ = longbench.truncate_middle(longbench.build_prompt(doc), tokenizer, length - 8)
        text = prompt + LB_CUE
        header, footer = text.find("<text>\n"), text.rfind("</text>")
        protect = [(0, header + len("<text>\n") if header >= 0 else 0), (footer if footer >= 0 else len(prompt), len(text))]
        out.append(dict(task="longbench_v2", id=doc["_id"], text=text, protect=protect, doc=doc, max_new_tokens=3))
    return out


def correct(item: dict, response: str) -> float:
    if item["task"] == "longbench_v2":
        from snapeval.tasks import longbench

        return float(longbench.score(item["doc"], "The correct answer is (" + response)["acc"])
    return float(all(a in response for a in item["answers"]))


def interleave(*lists):
    out = []
    for i in range(max(map(len, lists), default=0)):
        out.extend(lst[i] for lst in lists if i < len(lst))
    return out


def summarise(rows: list[dict], keeps: list[float]) -> list[dict]:
    table = []
    for target in ("smollm2", "gemma"):
        full = [r for r in rows if r["target"] == target and r["draft"] is None]
        if full:
            table.append(dict(draft="-", target=target, keep=1.0, n=len(full),
                              accuracy=statistics.mean(r["correct"] for r in full), kept_fraction=1.0,
                              ttft_s=statistics.mean(r["ttft_s"] for r in full), ttft_ratio=1.0, draft_s=0.0))
    for draft, target in PAIRS:
        for keep in keeps:
            sel = [r for r in rows if (r["draft"], r["target"], r["keep"]) == (draft, target, keep)]
            if not sel:
                continue
            table.append(dict(
                draft=draft, target=target, keep=keep, n=len(sel),
                accuracy=statistics.mean(r["correct"] for r in sel),
                kept_fraction=statistics.mean(r["kept_fraction"] for r in sel),
                ttft_s=statistics.mean(r["ttft_s"] for r in sel),
                ttft_ratio=statistics.median(r["ttft_s"] / r["full_ttft_s"] for r in sel),
                draft_s=statistics.mean(r["draft_s"] for r in sel),
            ))
    return table


def markdown(table: list[dict]) -> str:
    lines = ["| draft -> target | keep | n | accuracy | kept (target tokens) | TTFT s | TTFT / full (median) | draft s |",
             "|---|---|---|---|---|---|---|---|"]
    for t in table:
        pair = f"full prompt -> {t['target']}" if t["draft"] == "-" else f"{t['draft']} -> {t['target']}"
        lines.append(f"| {pair} | {t['keep']:.1f} | {t['n']} | {t['accuracy']:.2f} | {t['kept_fraction']:.3f} | "
                     f"{t['ttft_s']:.2f} | {t['ttft_ratio']:.2f} | {t['draft_s']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--length", type=int, default=2048, help="synthetic prompt length in SmolLM2 tokens")
    parser.add_argument("--lb-length", type=int, default=2048, help="LongBench-v2 truncation in SmolLM2 tokens")
    parser.add_argument("--synthetic", type=int, default=6, help="synthetic samples (alternating passkey, kv-needle)")
    parser.add_argument("--longbench", type=int, default=3, help="LongBench-v2 items ('short' subset, file order)")
    parser.add_argument("--keeps", type=float, nargs="+", default=[0.1, 0.3, 0.5])
    parser.add_argument("--budget-minutes", type=float, default=14.0, help="start no new prompt after this")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from snapeval.models.loading import load_model
    from snapeval.specprefill import SpecPrefillConfig, compress_prompt, generate_full, score_prompt
    from snapeval.specprefill.method import run_target

    started = time.perf_counter()
    load_start = os.getloadavg()
    models = {name: load_model(MODELS[name]) for name in MODELS}
    tok = models["smollm2"][1]
    items = interleave(synthetic_prompts(tok, args.synthetic, args.length),
                       longbench_prompts(tok, args.longbench, args.lb_length))
    rows, done = [], 0
    for item in items:
        if time.perf_counter() - started > args.budget_minutes * 60:
            print(f"time budget reached after {done} of {len(items)} prompts")
            break
        full = {}
        for target in ("smollm2", "gemma"):
            model, tokenizer = models[target]
            run = generate_full(model, tokenizer, item["text"], max_new_tokens=item["max_new_tokens"])
            full[target] = run.ttft_seconds
            rows.append(dict(id=item["id"], task=item["task"], draft=None, target=target, keep=1.0,
                             prompt_tokens=run.prompt_tokens, kept_fraction=1.0, ttft_s=run.ttft_seconds,
                             full_ttft_s=run.ttft_seconds, draft_s=0.0, response=run.text,
                             correct=correct(item, run.text)))
        scores = {}
        for draft in ("smollm2", "gemma"):
            config = SpecPrefillConfig(draft=MODELS[draft], keep=min(args.keeps))
            scores[draft] = score_prompt(item["text"], config, draft=models[draft])
        for draft, target in PAIRS:
            model, tokenizer = models[target]
            for keep in args.keeps:
                config = SpecPrefillConfig(draft=MODELS[draft], keep=keep)
                compressed = compress_prompt(item["text"], tokenizer, config, item["protect"], draft=models[draft],
                                             scores=scores[draft])
                run = run_target(model, tokenizer, compressed.target_ids, compressed.position_ids,
                                  item["max_new_tokens"], "full", None)
                ttft = compressed.draft_seconds + run.prefill_seconds
                rows.append(dict(
                    id=item["id"], task=item["task"], draft=draft, target=target, keep=keep,
                    prompt_tokens=compressed.full_target_tokens, kept_target_tokens=len(compressed.target_ids),
                    kept_fraction=compressed.kept_fraction, draft_tokens=compressed.draft_tokens,
                    kept_draft_tokens=compressed.kept_draft_tokens, ttft_s=ttft, full_ttft_s=full[target],
                    draft_s=compressed.draft_seconds, target_prefill_s=run.prefill_seconds, response=run.text,
                    correct=correct(item, run.text),
                ))
        done += 1
        print(f"[{time.perf_counter() - started:6.0f}s] {item['id']}: " + ", ".join(
            f"{r['draft'] or 'full'}->{r['target']}@{r['keep']}={r['correct']:.0f}" for r in rows if r["id"] == item["id"]
        ), flush=True)
    table = summarise(rows, args.keeps)
    payload = dict(
        benchmark="specprefill", machine=machine(), load_average_start=load_start, load_average_end=os.getloadavg(),
        wall_seconds=time.perf_counter() - started, prompts_done=done, prompts_planned=len(items),
        settings=dict(vars(args), models=MODELS, pairs=PAIRS, chunk=32, lookahead=8, pool_kernel=13, dtype="float32"),
        summary=table, rows=rows,
    )
    out = write_json("specprefill.json", payload)
    print(markdown(table))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
