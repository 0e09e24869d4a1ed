"""The lm-eval hooks of the LongBench-v2 tasks (``longbench_v2.yaml``, ``longbench_v2_cot.yaml`` beside this file)."""
from __future__ import annotations

import logging
from typing import Any

from snapeval.tasks import longbench
from snapeval.tasks.followup import read_two_pass
from snapeval.tasks.hooks import (NO_LIMIT, as_dataset, cluster_of, flag, get_tokenizer, int_value, provenance,
                                  tokenizer_name)

log = logging.getLogger(__name__)


def _longbench(md: dict, cot: bool) -> dict[str, Any]:
    data = longbench.load(md.get("data_dir"))
    gen = int_value(md, "max_gen_toks", longbench.MAX_NEW_TOKENS_COT if cot else longbench.MAX_NEW_TOKENS)
    name = tokenizer_name(md)
    limit = int_value(md, "max_input_tokens", None)
    if limit is None and name:
        context = int_value(md, "max_length", None)
        if context is None:
            model_max = getattr(get_tokenizer(name), "model_max_length", None)
            context = int(model_max) if isinstance(model_max, (int, float)) and model_max < NO_LIMIT else None
        limit = context - gen if context else None
    if limit is None:
        log.warning("longbench_v2: no tokenizer or context length in metadata; prompts are not truncated")
    extra = {"cot": cot, "max_input_tokens": limit or 0, "tokenizer_name": name or "",
             "reasoning": flag(md, "reasoning"), **provenance(data)}
    # questions on one document are one cluster (38 of the 395 local questions share 10 documents)
    return as_dataset([{**row, **extra, "cluster": cluster_of("longbench_v2", row["context"])} for row in data.rows])


def longbench_v2_dataset(**md: Any) -> dict[str, Any]:
    return _longbench(md, cot=False)


def longbench_v2_cot_dataset(**md: Any) -> dict[str, Any]:
    return _longbench(md, cot=True)


def _fit(prompt: str, doc: dict) -> str:
    """``prompt`` cut in the middle to ``max_input_tokens``, as pred.py's ``query_llm`` cuts every prompt it sends."""
    if doc["max_input_tokens"] and doc["tokenizer_name"]:
        prompt, _, _ = longbench.truncate_middle(prompt, get_tokenizer(doc["tokenizer_name"]), doc["max_input_tokens"])
    return prompt


def longbench_v2_doc_to_text(doc: dict) -> str:
    """The official prompt (``0shot.txt``, or ``0shot_cot.txt``: the first of the two chain-of-thought passes), cut in
    the middle to ``max_input_tokens`` (done lazily: only for the docs used)."""
    return _fit(longbench.build_prompt(doc, cot=doc["cot"]), doc)


def longbench_v2_cot_answer_prompt(doc: dict, first_output: str) -> str:
    """The official second pass (``0shot_cot_ans.txt``: the question, the choices and the first pass's stripped
    reasoning; the document omitted), cut like every prompt pred.py sends."""
    return _fit(longbench.build_cot_answer_prompt(doc, first_output), doc)


def longbench_v2_process_results(doc: dict, results: list[str]) -> dict[str, float | None]:
    """Scores the answer: the reply itself, or, for the two-pass chain of thought, the second pass's reply."""
    response = read_two_pass(results[0])["second_pass"] if doc["cot"] else results[0]
    return longbench.score(doc, response, assume_thinking=doc["reasoning"])
