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
    """The ``--model_args`` (or ``-a``) of an lm-eval command line as lm-eval reads them (values typed by its own
    rules: ``2`` an int, ``true`` a bool, ``{...}`` a dict); None when none is given. A malformed one raises
    :class:`SnapevalError`. lm-eval refuses a ``{`` in ``key=value`` pairs (it takes the text for broken JSON);
    here such a value is read as lm-eval reads any value (:func:`with_json_model_args` then hands lm-eval the
    whole model_args as the one JSON object it accepts)."""
    import argparse

    from lm_eval._cli import utils as lm_eval_cli_utils  # lm-eval's argument parsing only: no model, no torch

    class MergeDictAction(lm_eval_cli_utils.MergeDictAction):
        """lm-eval's, but ``key=value`` values kept as the text typed (checked as ``snapeval run`` checks its
        flags' text: ``-3`` is not lm-eval's ``-3.0``), a ``{...}`` or ``[...]`` value read as lm-eval reads it."""

        def __call__(self, parser, namespace, values, option_string=None):
            if not values or values[0].lstrip().startswith("{"):  # one JSON object: its values typed as given
                return super().__call__(parser, namespace, values, option_string)
            current = vars(namespace).setdefault(self.dest, {}) or {}
            for value in values:
                for item in lm_eval_cli_utils.split_top_level(value):
                    key, sep, text = item.partition("=")
                    if not sep:
                        parser.error(f"expected `key=value`, got {item!r}")
                    typed = text.lstrip().startswith(("{", "["))
                    current[key] = lm_eval_cli_utils.handle_cli_value_string(text) if typed else text
            setattr(namespace, self.dest, current)

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # lm-eval's own message, one line
            raise SnapevalError(f"--model_args is invalid ({message.split(': ', 1)[-1]}); allowed: "
                                "key=value pairs separated by commas, or one JSON object")

    parser = Parser(add_help=False, allow_abbrev=False)
    parser.add_argument("--model_args", "-a", default=None, nargs="+", action=MergeDictAction)
    try:
        known, _ = parser.parse_known_args(argv)
    except ValueError as exc:  # lm-eval's "Invalid JSON: ..."
        raise SnapevalError(f"--model_args is invalid ({str(exc).splitlines()[0]}); allowed: key=value pairs "
                            "separated by commas, or one JSON object") from None
    return known.model_args


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

    return sorted({*METHOD_TABLE.setting_names(), *RunArgs.names("model_args"), *OWN_ARGS, *hflm_arguments()})


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
    given = {n: raw.pop(n) for n in [n for n in raw if n in METHOD_TABLE.setting_names()]}
    given = {n: v for n, v in given.items() if not (v is None or v == "" or v == "None")}
    settings = settings_from_text(method, given)
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
    from lm_eval._cli.utils import handle_cli_value_string

    typed = {k: handle_cli_value_string(v) if isinstance(v, str) else v for k, v in model_args.items()}
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
