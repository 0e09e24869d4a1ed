"""LongBench-v2 (THUDM/LongBench-v2): generative four-choice QA over long documents, official protocol.

Prompts are the official ``prompts/0shot*.txt`` templates of THUDM/LongBench (pred.py at c5ea10b); an over-long
prompt is cut in the middle at the token level exactly as pred.py's ``query_llm`` cuts it (:func:`truncate_middle`:
counted with special tokens, ``ids[:L//2] + ids[-L//2:]``, decoded with special tokens skipped), with pred.py's limit
(:func:`official_limit`: 120,000 tokens for the open models ``config/model2maxlen.json`` lists); answers are extracted
from the raw reply with pred.py's regular expressions (first match, a thinking section included). Accuracy is
reported overall and by difficulty, length and domain; an unparsable answer counts as wrong and is counted
separately; an empty reply, which pred.py drops, is wrong here and counted (``empty_reply``), and ``acc_answered`` is
pred.py's reading (the accuracy over the items it keeps). See docs/tasks.md for every rule's source line.
"""
from __future__ import annotations

import os
import re
from snapeval.errors import SnapevalError, check_int
from snapeval.tasks.data import DatasetSpec, LoadedData, Schema, load_dataset_rows
from snapeval.tasks.families import TaskFamily
from snapeval.tasks.metrics import breakdown
from snapeval.tasks.reasoning import split_thinking
from snapeval.tasks.tokens import Tokenizer, decode, token_ids_with_specials

SCHEMA = Schema({
    "_id": (str,), "domain": (str,), "sub_domain": (str,), "difficulty": (str,), "length": (str,),
    "question": (str,), "choice_A": (str,), "choice_B": (str,), "choice_C": (str,), "choice_D": (str,),
    "answer": (str,), "context": (str,),
})
SPEC = DatasetSpec("longbench_v2", "THUDM/LongBench-v2", "train", ("longbench_v2/longbench_v2.jsonl",), SCHEMA)
#: The task family this folder is (snapeval.tasks.families): its tasks' prefix, its data and the mean (prompt,
#: generated) tokens per sample of DeepSeek-R1-0528 with SnapStream (arXiv 2511.03092, Table 3; restated in
#: shared/reference/benchmarks.md), which the SN40L pricing of a results row deploys.
FAMILY = TaskFamily("longbench_v2", data=SPEC, typical_lengths=(84_762, 1_296),
                    hooks="snapeval.tasks.longbench.hooks",
                    reference_reply=lambda doc: f"The correct answer is ({doc['answer']})",
                    cluster=lambda row: row["context"])  # questions on one document are one cluster

DIFFICULTIES = ("easy", "hard")
LENGTHS = ("short", "medium", "long")
DOMAINS = (
    "Single-Document QA", "Multi-Document QA", "Long In-context Learning",
    "Long-dialogue History Understanding", "Code Repository Understanding", "Long Structured Data Understanding",
)
CHOICES = ("A", "B", "C", "D")

# THUDM/LongBench prompts/0shot.txt, 0shot_cot.txt and 0shot_cot_ans.txt (note the typographic apostrophe).
TEMPLATE_0SHOT = (
    "Please read the following text and answer the question below.\n\n<text>\n$DOC$\n</text>\n\n"
    "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
    'Format your response as follows: "The correct answer is (insert answer here)".'
)
TEMPLATE_0SHOT_COT = (
    "Please read the following text and answer the questions below.\n\n<text>\n$DOC$\n</text>\n\n"
    "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
    "Let\u2019s think step by step:"
)
TEMPLATE_0SHOT_COT_ANS = (
    "Please read the following text and answer the questions below.\n\nThe text is too long and omitted here.\n\n"
    "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
    "Let\u2019s think step by step: $COT$\n\n"
    "Based on the above, what is the single, most likely answer choice? "
    'Format your response as follows: "The correct answer is (insert answer here)".'
)
#: Generation budgets of pred.py: 128 new tokens for the answer, 1024 for the chain of thought.
MAX_NEW_TOKENS = 128
MAX_NEW_TOKENS_COT = 1024

#: pred.py's prompt limit (``config/model2maxlen.json``) for the open models it serves (``config/model2path.json``,
#: by hub id): 120,000 tokens for every one of them, whatever the generation budget.
OFFICIAL_MAX_INPUT_TOKENS = {hub_id: 120_000 for hub_id in (
    "THUDM/glm-4-9b-chat", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct", "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF", "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct", "mistralai/Mistral-Large-Instruct-2407", "mistralai/Mistral-Large-Instruct-2411",
    "CohereForAI/c4ai-command-r-plus-08-2024")}
#: The architecture (``config.json`` fields) of each listed model snapeval's caches run, to recognise a local
#: checkout of one of them: a folder is not a hub id, but pred.py would serve the same weights with the same limit.
#: Llama-3.3-70B and Nemotron-70B share Llama-3.1-70B's; Qwen2.5's ``max_position_embeddings`` is 32,768.
OFFICIAL_ARCHITECTURES = {
    "meta-llama/Llama-3.1-8B-Instruct": dict(model_type="llama", vocab_size=128_256, hidden_size=4096,
                                             num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                             max_position_embeddings=131_072, rope_type="llama3"),
    "meta-llama/Llama-3.1-70B-Instruct": dict(model_type="llama", vocab_size=128_256, hidden_size=8192,
                                              num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                                              max_position_embeddings=131_072, rope_type="llama3"),
    "Qwen/Qwen2.5-7B-Instruct": dict(model_type="qwen2", vocab_size=152_064, hidden_size=3584, num_hidden_layers=28,
                                     num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32_768),
    "Qwen/Qwen2.5-72B-Instruct": dict(model_type="qwen2", vocab_size=152_064, hidden_size=8192, num_hidden_layers=80,
                                      num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=32_768),
}
#: For a model pred.py does not list: the room the chat template's own tokens may grow by when the cut text is
#: re-encoded inside it (a merge across the cut or the template's edges), kept free under the model's context.
REENCODE_MARGIN = 16

_ANSWER_RES = (re.compile(r"The correct answer is \(([A-D])\)"), re.compile(r"The correct answer is ([A-D])"))


def load(data_dir: str | os.PathLike | None = None) -> LoadedData:
    """All validated rows (hub ``THUDM/LongBench-v2`` or ``<data_dir>/longbench_v2/longbench_v2.jsonl``)."""
    data = load_dataset_rows(SPEC, data_dir)
    for i, row in enumerate(data.rows, start=1):
        for fld, allowed in (("difficulty", DIFFICULTIES), ("length", LENGTHS), ("answer", CHOICES)):
            if row[fld] not in allowed:
                raise SnapevalError(f"{data.source}:{i}: field {fld!r}={row[fld]!r} is not one of {', '.join(allowed)}")
    return data


def fill(template: str, doc: dict, cot: str | None = None) -> str:
    """Fill an official template exactly as pred.py does (every field stripped)."""
    out = template.replace("$DOC$", doc["context"].strip()).replace("$Q$", doc["question"].strip())
    for c in CHOICES:
        out = out.replace(f"$C_{c}$", doc[f"choice_{c}"].strip())
    if cot is not None:
        out = out.replace("$COT$", cot)
    return out


def build_prompt(doc: dict, *, cot: bool = False) -> str:
    """The zero-shot prompt (``cot=False``) or the first pass of the chain of thought (``cot=True``)."""
    return fill(TEMPLATE_0SHOT_COT if cot else TEMPLATE_0SHOT, doc)


def build_cot_answer_prompt(doc: dict, cot: str) -> str:
    """The official second pass of the chain of thought: no document, the first pass's reasoning (stripped, as
    pred.py strips the reply before it fills ``$COT$``)."""
    return fill(TEMPLATE_0SHOT_COT_ANS, doc, cot=cot.strip())


def official_limit(hub_id: str | None) -> int | None:
    """pred.py's prompt limit for a model (``config/model2maxlen.json``), by hub id
    (``meta-llama/Llama-3.1-8B-Instruct``) or its last part (``Llama-3.1-8B-Instruct``, case folded); None for a model
    pred.py does not list."""
    if not hub_id:
        return None
    name = str(hub_id).rstrip("/").lower()
    for listed, limit in OFFICIAL_MAX_INPUT_TOKENS.items():
        if name in (listed.lower(), listed.split("/")[-1].lower()):
            return limit
    return None


def listed_model_of_checkout(path: str | os.PathLike) -> str | None:
    """The listed model (:data:`OFFICIAL_ARCHITECTURES`) whose architecture a local checkout's ``config.json``
    declares (model type, vocabulary, widths, depth, heads, maximum positions and RoPE scaling type), else None."""
    import json
    from pathlib import Path

    config_path = Path(path) / "config.json"
    if not config_path.is_file():
        return None
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError):
        return None
    rope = config.get("rope_scaling") or {}
    declared = {**config, "rope_type": rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None}
    for hub_id, architecture in OFFICIAL_ARCHITECTURES.items():
        expected = {"rope_type": None, **architecture}
        if all(declared.get(k) == v for k, v in expected.items()):
            return hub_id
    return None


def fallback_limit(context: int, max_new_tokens: int, template_tokens: int) -> int:
    """The prompt limit for a model pred.py does not list: its context, less the generation budget, the chat
    template's own tokens and :data:`REENCODE_MARGIN` (docs/tasks.md)."""
    limit = context - max_new_tokens - template_tokens - REENCODE_MARGIN
    if limit < 1:
        raise SnapevalError(f"max_length={context} leaves no room for a LongBench-v2 prompt after max_gen_toks="
                            f"{max_new_tokens} and {template_tokens} chat-template tokens; "
                            "allowed: a larger max_length")
    return limit


def truncate_middle(prompt: str, tokenizer: Tokenizer, max_tokens: int) -> tuple[str, int, bool]:
    """``prompt`` cut in the middle to ``max_tokens`` tokens exactly as pred.py's ``query_llm`` cuts it.

    Counted with the tokenizer's special tokens (``tokenizer.encode(prompt)``: a BOS counts); a prompt of at most
    ``max_tokens`` tokens is returned unchanged (not re-decoded); a longer one keeps ``ids[:L//2] + ids[-L//2:]``
    (Python's floor division: an odd ``L`` keeps one more token at the tail, ``L`` tokens in all) and is decoded with
    special tokens skipped. Returns ``(prompt, original_token_count, truncated)``.
    """
    check_int("max_input_tokens", max_tokens, 1)
    ids = token_ids_with_specials(tokenizer, prompt)
    if len(ids) <= max_tokens:
        return prompt, len(ids), False
    kept = ids[:max_tokens // 2] + ids[-max_tokens // 2:]  # -L//2 is (-L)//2: the tail gets the odd token
    return decode(tokenizer, kept), len(ids), True


def extract_answer(response: str) -> str | None:
    """pred.py's extraction: drop ``*``, then ``The correct answer is (X)``, then ``The correct answer is X``."""
    response = response.replace("*", "")
    for pattern in _ANSWER_RES:
        match = pattern.search(response)
        if match:
            return match.group(1)
    return None


def score(doc: dict, response: str, *, assume_thinking: bool = False, strip_thinking: bool = False,
          empty: bool | None = None) -> dict[str, float | None]:
    """Per-doc metrics: ``acc``, ``unparsable``, ``empty_reply``, ``acc_answered``, ``truncated_in_thinking`` and the
    ``acc_<group>`` breakdown.

    As pred.py: the answer is extracted from the raw reply, stripped (a thinking section included: its first match
    counts). ``empty_reply``: the reply is the empty string (``empty`` overrides: the chain of thought's first pass
    was empty), which pred.py drops (``output == ''``) and snapeval scores as wrong; ``acc_answered`` is the item's
    correctness when pred.py keeps it, else None (its mean is pred.py's accuracy). ``strip_thinking`` (a named
    variant, not the default): extract only after the thinking section, a reply cut off inside it having no answer.
    """
    _, answer_text, cut = split_thinking(response, assume_thinking=assume_thinking)
    pred = extract_answer(answer_text if strip_thinking else response.strip())
    correct = float(pred is not None and pred == doc["answer"])
    dropped = response == "" if empty is None else bool(empty)
    if dropped:
        correct = 0.0
    out: dict[str, float | None] = {
        "acc": correct,
        "unparsable": float(pred is None),
        "empty_reply": float(dropped),
        "acc_answered": None if dropped else correct,
        "truncated_in_thinking": float(cut),
    }
    out.update(breakdown(correct, {"difficulty": doc["difficulty"], "length": doc["length"], "domain": doc["domain"]},
                         {"difficulty": DIFFICULTIES, "length": LENGTHS, "domain": DOMAINS}))
    return out
