"""``snapeval demo``: one long real document, one question, the full cache vs SnapStream at two budgets."""
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
        description="Prefill a long real document once per method, then answer a question about it; prints the "
        "answers, the KV-cache bytes and prefill/decode speed for the full cache and SnapStream budgets.",
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
    import torch

    from snapeval import SnapStreamConfig, generate, load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    text = document.read_text(errors="replace")
    prompt = f"Read the document and answer the question.\n\nDocument:\n{text}\n\nQuestion: {args.question}"
    runs = [("full", None)] + [("snapstream", SnapStreamConfig.from_budget(b)) for b in budgets]
    print(f"model: {args.model}   document: {document} ")
    print(f"question: {args.question}\n")
    header = f"{'method':<12} {'budget':>7} {'prompt tok':>10} {'KV bytes':>12} {'prefill s':>9} {'compress s':>10} {'decode tok/s':>12}"
    rows = []
    for method, config in runs:
        result = generate(model, tokenizer, [prompt], config=config, method=method, chat=True,
                          max_new_tokens=args.max_new_tokens)
        out = result[0]
        budget = str(config.budget) if config else "-"
        rows.append(f"{method:<12} {budget:>7} {out.prompt_tokens:>10} {out.kv_bytes:>12,} "
                    f"{result.prefill_seconds:>9.2f} {result.compress_seconds:>10.3f} {result.decode_tokens_per_s:>12.1f}")
        print(f"[{method} {budget}] {out.text.strip()}\n")
    print(header)
    print("\n".join(rows))
    return 0
