"""The lm-eval hooks of the LongBench-v2 tasks (``longbench_v2.yaml``, ``longbench_v2_cot.yaml`` beside this file)."""
from __future__ import annotations

import logging
from typing import Any

from snapeval.errors import SnapevalError
from snapeval.tasks import longbench
from snapeval.tasks.followup import read_two_pass
from snapeval.tasks.hooks import (NO_LIMIT, as_dataset, cluster_of, flag, get_tokenizer, int_value, provenance,
                                  reasoning, tokenizer_name)

log = logging.getLogger(__name__)


def hub_id_of(name: str) -> str:
    """The hub id of a snapeval preset (``llama-3.1-8b-instruct`` -> ``meta-llama/Llama-3.1-8B-Instruct``); any other
    name or path as given."""
    from snapeval.models.presets import get_preset

    try:
        return get_preset(name).hub_id
    except SnapevalError:
        return name


def template_tokens(tokenizer) -> int:
    """Tokens the tokenizer's chat template adds around one user message (with the generation prompt); 0 without a
    chat template."""
    if not getattr(tokenizer, "chat_template", None):
        return 0
    text = tokenizer.apply_chat_template([{"role": "user", "content": ""}], tokenize=False, add_generation_prompt=True)
    return len(tokenizer.encode(text, add_special_tokens=False))


def prompt_limit(md: dict, max_new_tokens: int) -> int | None:
    """The prompt limit of a run (docs/tasks.md), with why: :func:`limit_and_reason`'s limit."""
    return limit_and_reason(md, max_new_tokens)[0]


def limit_and_reason(md: dict, max_new_tokens: int) -> tuple[int | None, str]:
    """The prompt limit of a run and why it applies (the run's log says it): ``max_input_tokens`` when given; else
    pred.py's own limit (:func:`longbench.official_limit`: 120,000) for a model it lists, named by hub id or preset,
    by the ``official_model`` metadata key (a local checkout of a listed model), or recognised from a local
    checkout's ``config.json`` (:func:`longbench.listed_model_of_checkout`); else the model's context (``max_length``,
    else the tokenizer's ``model_max_length``) less the generation budget, the chat template's tokens and a
    re-encoding margin (:func:`longbench.fallback_limit`). None without a tokenizer (prompts are then not cut)."""
    limit = int_value(md, "max_input_tokens", None)
    if limit is not None:
        if limit < 1:
            raise SnapevalError(f"metadata max_input_tokens={limit} is invalid; allowed: an integer >= 1")
        return limit, "max_input_tokens given"
    named = md.get("official_model")
    if named:
        official = longbench.official_limit(str(named))
        if official is None:
            raise SnapevalError(f"metadata official_model={named!r} is not a model pred.py lists; allowed: "
                                f"{', '.join(longbench.OFFICIAL_MAX_INPUT_TOKENS)}")
        return official, f"pred.py's limit for {named} (official_model given)"
    name = tokenizer_name(md)
    if not name:
        return None, "no tokenizer in the metadata"
    official = longbench.official_limit(hub_id_of(name))
    if official is not None:
        return official, f"pred.py's limit for {hub_id_of(name)}"
    recognised = longbench.listed_model_of_checkout(name)
    if recognised is not None:
        return (longbench.official_limit(recognised),
                f"pred.py's limit for {recognised}: the local checkout {name}'s config.json declares its architecture")
    tokenizer = get_tokenizer(name)
    context = int_value(md, "max_length", None)
    if context is None:
        model_max = getattr(tokenizer, "model_max_length", None)
        context = int(model_max) if isinstance(model_max, (int, float)) and model_max < NO_LIMIT else None
    if context is None:
        return None, f"{name}: no context length known"
    return (longbench.fallback_limit(context, max_new_tokens, template_tokens(tokenizer)),
            f"{name} is not a model pred.py lists: its context {context} less the generation budget, the chat "
            "template and a margin")


def _longbench(md: dict, cot: bool) -> dict[str, Any]:
    data = longbench.load(md.get("data_dir"))
    # the limit leaves room for the longest pass: the chain of thought's first (1,024 tokens)
    gen = int_value(md, "max_gen_toks", longbench.MAX_NEW_TOKENS_COT if cot else longbench.MAX_NEW_TOKENS)
    limit, reason = limit_and_reason(md, gen)
    name = tokenizer_name(md)
    log.info("longbench_v2: prompts cut at %s tokens (%s)", limit, reason)
    if limit is None:
        log.warning("longbench_v2: no tokenizer or context length in metadata; prompts are not truncated")
    extra = {"cot": cot, "max_input_tokens": limit or 0, "tokenizer_name": name or "",
             "reasoning": reasoning(md), "strip_thinking": flag(md, "strip_thinking"), **provenance(data)}
    # questions on one document are one cluster (38 of the 395 local questions share 10 documents)
    return as_dataset([{**row, **extra, "cluster": cluster_of("longbench_v2", longbench.FAMILY.cluster(row))} for row in data.rows])


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
    """Scores the answer: the reply itself, or, for the two-pass chain of thought, the second pass's reply (an empty
    first pass ends the item as pred.py ends it: an empty reply, whatever the second pass said)."""
    empty = None
    if doc["cot"]:
        passes = read_two_pass(results[0])
        response = passes["second_pass"]
        empty = passes["first_pass"] == "" or response == ""
    else:
        response = results[0]
    return longbench.score(doc, response, assume_thinking=doc["reasoning"],
                           strip_thinking=doc.get("strip_thinking", False), empty=empty)
