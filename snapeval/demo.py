"""``snapeval demo``: one long real document, one question, the full cache vs SnapStream at two budgets, every method
branched from one prefill of the document (:class:`snapeval.branching.BranchSet`, as a sweep runs its grid)."""
from __future__ import annotations

import sysconfig
from pathlib import Path

from snapeval.errors import SnapevalError
from snapeval.models.presets import DEFAULT_MODEL

DEFAULT_QUESTION = "According to the document, who created Python, at which institute, and in which country?"


def default_document() -> Path:
    """Python's own LICENSE.txt (history of the software + licences, about 3,300 SmolLM2 tokens): always installed."""
    return Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="answer a question about a long document with the full cache and SnapStream budgets",
        description="Prefill a long real document once, branch the full cache and each SnapStream budget from that "
        "prefill (as a sweep does), and answer a question about the document with each; prints the answers, each "
        "method's KV-cache bytes and decode speed, and the shared prefill's time.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="preset name, local dir, .gguf or hub id")
    p.add_argument("--document", type=Path, default=None, help="a text file (default: Python's LICENSE.txt)")
    p.add_argument("--question", default=DEFAULT_QUESTION, help="the question asked about the document")
    p.add_argument("--budgets", default="256,1024", help="comma-separated SnapStream budgets (default: 256,1024)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="most tokens of each answer")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.set_defaults(func=run_demo)


def run_demo(args) -> int:
    from snapeval.cache.config import MIN_BUDGET

    try:
        budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError:
        raise SnapevalError(f"budgets={args.budgets!r} is invalid; allowed: comma-separated integers >= {MIN_BUDGET}") from None
    document = args.document or default_document()
    if not document.is_file():
        raise SnapevalError(f"document={str(document)!r}: no such file")
    from snapeval.cache import FullConfig, resolve_method

    # every configuration resolved (a bad budget: one line) before anything heavy is loaded
    configs = [FullConfig()] + [resolve_method("snapstream", budget=b) for b in budgets]
    import torch

    from snapeval import load_model
    from snapeval.branching import BranchSet
    from snapeval.decoding import SamplingParams
    from snapeval.generation import encode_prompts

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    text = document.read_text(errors="replace")
    prompt = f"Read the document and answer the question.\n\nDocument:\n{text}\n\nQuestion: {args.question}"
    ids = encode_prompts(tokenizer, [prompt], chat=True)[0][0].tolist()
    print(f"model: {args.model}   document: {document} ")
    print(f"question: {args.question}\n")
    branches = BranchSet(model, tokenizer, configs, batch=1)
    completions = branches.generate([ids], [SamplingParams(max_new_tokens=args.max_new_tokens)])
    stats = branches.stats
    rows = []
    for config, (out,) in zip(configs, completions):
        budget = "-" if config.method == "full" else str(config.budget)
        decode = stats.decode.get(config.label) or stats.decode_alone.get(config.label) or {}
        # one row: its decode steps (the tokens after the one chosen from the prefill's logits) over their seconds
        speed = f"{decode['steps'] / decode['seconds']:.1f}" if decode.get("seconds") else "-"
        rows.append(f"{config.method:<12} {budget:>7} {out.kv_bytes:>12,} {out.generated_tokens:>10} {speed:>12}")
        print(f"[{config.method} {budget}] {out.text.strip()}\n")
    print(f"one prefill of {len(ids)} prompt tokens, {stats.prefill_seconds:.2f} s, shared by every method\n")
    print(f"{'method':<12} {'budget':>7} {'KV bytes':>12} {'new tokens':>10} {'decode tok/s':>12}")
    print("\n".join(rows))
    return 0
