"""Two-pass generation: a second request built from the first one's output, as LongBench-v2's official runner does.

THUDM/LongBench ``pred.py --cot`` asks for reasoning first (``prompts/0shot_cot.txt``, 1,024 tokens), then sends a
*new* request (``prompts/0shot_cot_ans.txt``: the question, the choices and that reasoning, the document omitted;
128 tokens) and extracts the answer from the second reply. lm-eval's ``generate_until`` makes one call per request,
so a task declares the second pass in its ``generation_kwargs``::

    followup:
      prompt: snapeval.tasks.longbench.hooks:longbench_v2_cot_answer_prompt   # (doc, first output) -> second prompt
      first_prompt: snapeval.tasks.longbench.hooks:longbench_v2_doc_to_text # doc -> the first prompt (doc_to_text)
      max_gen_toks: 128
      temperature: 0.1
      do_sample: true

and the ``snapeval`` model runs both passes (:class:`~snapeval.harness.lm_eval_model.SnapStreamLM`). The second
prompt is wrapped exactly as the first was: where the first context is the first prompt inside a chat template,
the second prompt takes its place in the same template. Under a cache budget the second pass is a request like any
other (prefilled, compressed, decoded). The request's answer is :func:`two_pass_response`: JSON with both passes'
texts and token counts, which the task's ``process_results`` reads with :func:`read_two_pass`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from snapeval.errors import SnapevalError, is_int

#: What a ``followup`` entry may hold besides its two prompt builders: the second pass's own generation settings.
GEN_KEYS = ("max_gen_toks", "temperature", "do_sample", "top_p", "top_k", "until")
KEYS = ("prompt", "first_prompt", *GEN_KEYS)
RESPONSE_FORMAT = "snapeval-two-pass/1"


def _load(path: str, what: str) -> Callable:
    from snapeval.cache.methods import load_object

    if not isinstance(path, str) or ":" not in path:
        raise SnapevalError(f"followup.{what}={path!r} is invalid; allowed: a 'module:function' path")
    try:
        return load_object(path)
    except (ImportError, AttributeError) as exc:
        raise SnapevalError(f"followup.{what}={path!r} cannot be imported: {exc}") from None


@dataclass(frozen=True)
class Followup:
    """A validated ``followup`` entry of a task's ``generation_kwargs`` (see the module docstring)."""

    prompt: str
    first_prompt: str
    gen_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: Any) -> "Followup":
        if isinstance(value, Followup):
            return value
        if not isinstance(value, dict):
            raise SnapevalError(f"generation_kwargs.followup={value!r} is invalid; allowed: a mapping with keys "
                                f"{', '.join(KEYS)}")
        unknown = sorted(set(value) - set(KEYS))
        if unknown:
            raise SnapevalError(f"generation_kwargs.followup: unknown key {unknown[0]!r}; allowed: {', '.join(KEYS)}")
        for key in ("prompt", "first_prompt"):
            if key not in value:
                raise SnapevalError(f"generation_kwargs.followup.{key} is missing; allowed: a 'module:function' path")
            _load(value[key], key)
        gen = {k: v for k, v in value.items() if k in GEN_KEYS}
        tokens = gen.get("max_gen_toks")
        if tokens is not None and (not is_int(tokens) or tokens < 1):
            raise SnapevalError(f"generation_kwargs.followup.max_gen_toks={tokens!r} is invalid; allowed: an integer >= 1")
        return cls(prompt=value["prompt"], first_prompt=value["first_prompt"], gen_kwargs=gen)

    def second_context(self, doc: dict, first_context: str, first_output: str) -> str:
        """The second request's context: the second prompt, wrapped as the first prompt was in ``first_context``
        (bare, or inside the chat template lm-eval applied)."""
        first = _load(self.first_prompt, "first_prompt")(doc)
        second = _load(self.prompt, "prompt")(doc, first_output)
        if first_context == first:
            return second
        if first_context.count(first) != 1:
            raise SnapevalError(
                f"followup: the first prompt ({self.first_prompt}) is not found exactly once in the request's context; "
                "the second prompt cannot be wrapped as the first was (a chat template that rewrites the prompt?)")
        return first_context.replace(first, second)

    def identity(self) -> str:
        return json.dumps({"prompt": self.prompt, "first_prompt": self.first_prompt, **self.gen_kwargs}, sort_keys=True)


def two_pass_response(first: str, second: str, first_tokens: int, second_tokens: int) -> str:
    """The answer of a two-pass request: both passes' texts and generated token counts, as one JSON string."""
    return json.dumps({"format": RESPONSE_FORMAT, "first_pass": first, "second_pass": second,
                       "first_pass_tokens": first_tokens, "second_pass_tokens": second_tokens}, ensure_ascii=False)


def read_two_pass(response: str) -> dict[str, Any]:
    """The passes of a :func:`two_pass_response` (a one-line error for anything else: the task needs a model that
    runs follow-ups, such as ``snapstream``)."""
    try:
        data = json.loads(response)
    except (TypeError, ValueError):
        data = None
    if not isinstance(data, dict) or data.get("format") != RESPONSE_FORMAT:
        raise SnapevalError("this task makes two model calls per item (generation_kwargs.followup); run it with a "
                            "model that runs follow-ups (lm-eval model 'snapstream'; method=full is the plain model)")
    return data
