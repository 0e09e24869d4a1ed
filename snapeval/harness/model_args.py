"""The ``snapeval`` lm-eval model's ``model_args``, read and checked without lm-eval's models, torch or a model.

``snapeval-lm-eval`` reads ``--model_args`` from its command line before lm-eval imports its models
(:func:`model_args_of`, lm-eval's own parsing: ``key=value`` pairs split on the commas outside brackets, braces and
quotes, or one JSON object) and checks them with the same declarations as ``snapeval run`` and a sweep
(:func:`check_model_args`): the run arguments (:class:`snapeval.run_args.RunArgs`), the method, its budget and its
settings (:func:`snapeval.cache.resolve_method`), the model reference, and every other name against what the model
takes. A mistake is then the same one line, exit 2, as on the two other surfaces, in a second instead of after
lm-eval has loaded.

A JSON ``device_map`` passes through lm-eval's command line as it is: its commas sit inside braces, which lm-eval
does not split on (quote the whole argument for the shell)::

    --model_args 'pretrained=smollm2-135m-instruct,method=full,device_map={"model.embed_tokens": "cpu", "": "cpu"}'
"""
from __future__ import annotations

import ast
import os
from functools import lru_cache
from typing import Any

from snapeval.errors import SnapevalError

#: The model's own model_args besides the run arguments and a method's settings (``config``, ``cache_config``,
#: ``run_args``, ``loaded`` and ``shared`` are Python-only: a sweep hands objects).
OWN_ARGS = ("pretrained", "method", "budget")
#: What lm-eval's command line passes to the model itself beside model_args (``--batch_size``, ``--device``, ...).
LM_EVAL_FLAGS = {"batch_size": "--batch_size", "device": "--device"}


def model_args_of(argv: list[str]) -> dict[str, Any] | None:
    """The ``--model_args`` (or ``-a``, repeatable, several values each) of an lm-eval command line, read as lm-eval
    0.4.13's ``MergeDictAction`` reads them (one JSON object, or ``key=value`` pairs split on the commas outside
    brackets, braces and quotes) without importing lm-eval; None when none is given. ``key=value`` values are kept
    as the text typed (checked as ``snapeval run`` checks its flags' text: ``-3`` is not lm-eval's ``-3.0``), a
    ``{...}`` or ``[...]`` value read as lm-eval reads values (lm-eval itself refuses braces among pairs, taking the
    text for broken JSON: :func:`with_json_model_args` hands them on as the one JSON object it accepts). A malformed
    one raises :class:`SnapevalError`."""
    import json

    found, out, i = False, {}, 0
    while i < len(argv):
        item = argv[i]
        values = []
        if item in ("--model_args", "-a"):
            i += 1
            while i < len(argv) and not argv[i].startswith("-"):
                values.append(argv[i])
                i += 1
        elif item.startswith("--model_args="):
            values, i = [item.split("=", 1)[1]], i + 1
        else:
            i += 1
            continue
        found = True
        if values and values[0].lstrip().startswith("{"):  # one JSON object: its values typed as given
            try:
                parsed = json.loads(values[0])
            except ValueError as exc:
                raise SnapevalError(f"--model_args={values[0]!r} is not valid JSON ({exc}); allowed: key=value "
                                    "pairs separated by commas, or one JSON object") from None
            if not isinstance(parsed, dict):
                raise SnapevalError(f"--model_args={values[0]!r} is invalid; allowed: key=value pairs separated by "
                                    "commas, or one JSON object")
            out.update(parsed)
            continue
        for value in values:
            for pair in split_top_level(value):
                key, sep, text = pair.partition("=")
                if not sep:
                    raise SnapevalError(f"--model_args item {pair!r} is invalid; allowed: key=value pairs separated "
                                        "by commas, or one JSON object")
                out[key] = typed_value(text) if text.lstrip().startswith(("{", "[")) else text
    return out if found else None


def split_top_level(text: str) -> list[str]:
    """``text`` split on the commas outside brackets, braces and quotes (lm-eval 0.4.13's ``split_top_level``)."""
    parts, buf, depth, quote = [], [], 0, None
    for char in text:
        if quote is not None:
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char in "[({":
            depth += 1
        elif char in "])}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            parts.append("".join(buf))
            buf = []
            continue
        buf.append(char)
    parts.append("".join(buf))
    return [part for part in parts if part]


def typed_value(text: str) -> Any:
    """A model_args value as lm-eval 0.4.13 types it (``handle_cli_value_string``): true/false, an integer, a
    number, a Python literal ({...}, [...]), else the text."""
    if text.lower() == "true":
        return True
    if text.lower() == "false":
        return False
    if text.isnumeric():
        return int(text)
    try:
        return float(text)
    except ValueError:
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text


@lru_cache(maxsize=1)
def hflm_arguments() -> frozenset[str]:
    """The arguments of lm-eval's Hugging Face model (``HFLM.__init__``), read from its source without importing it
    (importing it imports torch and transformers)."""
    from importlib.util import find_spec

    spec = find_spec("lm_eval")
    path = os.path.join(list(spec.submodule_search_locations)[0], "models", "huggingface.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "HFLM":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    arguments = item.args
                    names = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
                    return frozenset(n for n in names if n not in ("self", "kwargs"))
    return frozenset()


def allowed_names() -> list[str]:
    from snapeval.cache import METHOD_TABLE
    from snapeval.run_args import RunArgs

    return sorted({*METHOD_TABLE.setting_names(METHOD_TABLE.builtin_names()), *RunArgs.names("model_args"), *OWN_ARGS,
                   *hflm_arguments()})


def check_model_args(raw: dict[str, Any]) -> None:
    """``raw`` (model_args as lm-eval hands them to the model) checked as the model will check them, without
    loading anything: the model reference, the run arguments, the method with its budget and settings (or a
    kvpress press's ``press_*`` arguments), engine with the method, and every other name (an argument of lm-eval's
    Hugging Face model, else a one-line error listing the allowed names)."""
    from snapeval.cache import METHOD_TABLE, resolve_method
    from snapeval.cache.methods import settings_from_text
    from snapeval.models.loading import check_model_reference
    from snapeval.run_args import RunArgs

    raw = dict(raw)
    for name in ("config", "cache_config", "run_args", "loaded", "shared"):
        if name in raw:
            raise SnapevalError(f"model_args: {name!r} is an argument of the Python API (an object); allowed here: "
                                "the run arguments, the method's settings, pretrained, method, budget")
    method = raw.pop("method", "snapstream")
    if not isinstance(method, str):
        raise SnapevalError(f"method={method!r} is not allowed; allowed: {METHOD_TABLE.allowed()}")
    METHOD_TABLE.get(method)  # an unknown method: its own line, with suggestions
    budget = raw.pop("budget", None)
    if isinstance(budget, str) and budget.strip().lower() in ("", "none", "null"):
        budget = None
    elif isinstance(budget, str) and budget.strip().lstrip("+-").isdigit():
        budget = int(budget)
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise SnapevalError(f"budget={budget!r} is invalid; allowed: an integer")
    run_args = RunArgs.from_mapping({n: raw.pop(n) for n in RunArgs.names("model_args") if n in raw},
                                    surface="model_args")
    names = {*METHOD_TABLE.user_keys(METHOD_TABLE.builtin_names()), *(METHOD_TABLE.user_keys([method])
             if ":" not in method else ())}  # no other plugin loaded; old spellings too (warned once, as typed)
    given = {n: raw.pop(n) for n in [n for n in raw if n in names]}
    given = {n: v for n, v in given.items() if not (v is None or v == "" or v == "None")}
    # an old spelling: warned by the model, which lm-eval builds next from the same model_args, not twice
    settings = settings_from_text(method, given, warn=False)
    press = {n[len("press_"):]: raw.pop(n) for n in [n for n in raw if n.startswith("press_")]}
    config = resolve_method(method, budget, **settings, **press)
    pretrained = raw.pop("pretrained", "smollm2-135m-instruct")
    context = check_model_reference(str(pretrained))
    if context is not None and hasattr(config, "check_context"):
        config.check_context(context)
    if run_args.engine == "true":  # the rule reads the cache class (torch): only where it can refuse
        from snapeval.cache import method_info
        from snapeval.models.devices import usable_device

        method_info(config).on_engine(run_args, usable_device(run_args.device))
    unknown = sorted(set(raw) - hflm_arguments())
    if unknown:
        raise SnapevalError(f"model_args: unknown argument {unknown[0]!r}; allowed: {', '.join(allowed_names())}")


def with_json_model_args(argv: list[str], model_args: dict[str, Any]) -> list[str]:
    """``argv`` with its ``--model_args`` replaced by one JSON object of ``model_args`` (lm-eval's own form of a
    mapping): how a ``device_map={...}`` given among ``key=value`` pairs reaches lm-eval, which refuses braces there."""
    import json

    out, i = [], 0
    while i < len(argv):
        item = argv[i]
        if item in ("--model_args", "-a"):
            i += 1
            while i < len(argv) and not argv[i].startswith("-"):
                i += 1
            continue
        if item.startswith("--model_args="):
            i += 1
            continue
        out.append(item)
        i += 1
    typed = {k: typed_value(v) if isinstance(v, str) else v for k, v in model_args.items()}
    return [*out, "--model_args", json.dumps(typed, default=str)]


def needs_json(model_args: dict[str, Any]) -> bool:
    """Whether a value of ``model_args`` is a mapping or a list (which lm-eval takes only in one JSON object)."""
    return any(isinstance(v, (dict, list, tuple)) for v in model_args.values())


def flag_conflicts(argv_value, model_arg, name: str) -> None:
    """A value given both as lm-eval's flag (``--batch_size 4``) and in model_args (``batch_size=2``) that differ:
    one line (which one would win is not obvious; lm-eval itself crashed on it)."""
    if argv_value is not None and model_arg is not None and str(argv_value) != str(model_arg):
        raise SnapevalError(f"{name} is given twice: {LM_EVAL_FLAGS[name]} {argv_value} and model_args "
                            f"{name}={model_arg!r}; allowed: one of them, or the same value")
