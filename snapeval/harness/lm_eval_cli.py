"""``snapeval-lm-eval``: lm-eval's own command line with the ``snapeval`` model registered.

lm-eval 0.4.13 discovers models only from its built-in table, so the stock ``lm_eval`` command cannot see a model
defined in another package. This entry point registers it and hands over to lm-eval's CLI, with two differences
before lm-eval loads (:func:`prepare_argv`): without a GPU, ``--device`` defaults to ``cpu`` (lm-eval's own default,
``cuda:0``, would be refused), and for ``--model snapeval`` the ``--model_args`` (as ``snapeval run``'s flags and a
sweep's keys are: :mod:`snapeval.harness.model_args`), the task names and task folders are checked first (one line,
exit 2). Where the ``--include_path`` folders define every ``--tasks`` name (a plain task of theirs, or a group or
tag of only such tasks), lm-eval's built-in tasks are not indexed
(:func:`_skip_builtin_tasks_when_the_folders_define_them`: the same tasks, ~25 s sooner).
``snapeval run`` applies the model's chat template; lm-eval does so only with ``--apply_chat_template``, which the
same scores need:

    snapeval-lm-eval --model snapeval --model_args pretrained=smollm2-135m-instruct,method=snapstream,budget=1024 \\
        --include_path tasks/ --tasks snapeval_passkey --apply_chat_template
"""
from __future__ import annotations

import os
import sys

PROG = "snapeval-lm-eval"
#: Printed before lm-eval's ``--help``: what this command changes and how to match ``snapeval run``.
HELP_NOTE = (f"{PROG}: lm-eval's command line with the `snapeval` model registered (--model snapeval). --device "
             "defaults to cpu on a machine without a GPU (lm-eval's default: cuda:0). `snapeval run` applies the "
             "model's chat template: add --apply_chat_template here for the same prompts and scores.")


def _flag(argv: list[str], name: str) -> str | None:
    """The value of ``name`` (``--name V`` or ``--name=V``) in ``argv``, the last one given; None when absent."""
    value = None
    for i, item in enumerate(argv):
        if item == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif item.startswith(name + "="):
            value = item.split("=", 1)[1]
    return value


def _task_names(argv: list[str]) -> list[str]:
    """The ``--tasks`` names in ``argv`` (comma-separated, blanks dropped)."""
    return [t.strip() for t in (_flag(argv, "--tasks") or "").split(",") if t.strip()]


def prepare_argv(argv: list[str]) -> list[str]:
    """``argv`` as lm-eval gets it, checked first (no lm-eval or torch import): ``--device cpu`` added where no
    ``--device`` is given and this machine has no GPU (for ``run``, the default command); for ``--model snapeval``
    (or its old name) the task folder variables and each plain task name (not a path, not a pattern) checked against
    the task folders' YAML and lm-eval's (:mod:`snapeval.preflight`), then ``--model_args`` checked as the model
    checks them (:mod:`snapeval.harness.model_args`; a ``device_map={...}`` among the pairs handed on as one JSON
    object, and ``--device`` following a model_args ``device``). Raises :class:`SnapevalError`."""
    from snapeval import preflight
    from snapeval.models.devices import gpu_count

    argv = list(argv)
    command = argv[0] if argv and not argv[0].startswith("-") else "run"
    if command != "run" or any(a in ("-h", "--help") for a in argv):
        return argv
    ours = _flag(argv, "--model") in ("snapeval", "snapstream")
    if ours:
        preflight.check_task_folder_env()
        include = _flag(argv, "--include_path")
        if include is not None:
            for folder in include.split(os.pathsep):
                preflight._check_folder("--include_path", folder)
        names = _task_names(argv)
        plain = [t for t in names if not any(c in t for c in "/*?[") and not t.endswith((".yaml", ".yml"))]
        if plain:
            extra = [include] if include else []
            folders = os.pathsep.join(extra + [str(f) for f in _default_folders()])
            preflight.check_task_names(plain, folders, field="--tasks")
    model_args = None
    if ours:  # model_args as lm-eval will hand them on, checked as the model checks them (nothing loads)
        from snapeval.harness.model_args import (check_model_args, flag_conflicts, model_args_of, needs_json,
                                                   with_json_model_args)
        from snapeval.models.devices import check_device

        model_args = model_args_of(argv) or {}
        if _flag(argv, "--device") is not None:
            check_device(_flag(argv, "--device"), "--device")
        for name, flag in (("batch_size", "--batch_size"), ("device", "--device")):
            flag_conflicts(_flag(argv, flag), model_args.get(name), name)
        check_model_args(model_args)
        if needs_json(model_args):  # a JSON device_map among key=value pairs: lm-eval takes it as one JSON object
            argv = with_json_model_args(argv, model_args)
    if _flag(argv, "--device") is None and (model_args or {}).get("device") is not None:
        argv += ["--device", str(model_args["device"])]  # lm-eval's own device follows the model's
    elif _flag(argv, "--device") is None and gpu_count() == 0:
        argv += ["--device", "cpu"]
    return argv


def _skip_builtin_tasks_when_the_folders_define_them(argv: list[str]) -> None:
    """Where the ``--include_path`` folders define every ``--tasks`` name
    (:func:`snapeval.harness.folder_tasks.folders_define`: a plain task of the folders, or a group or tag of theirs
    whose every member is one), lm-eval's ``TaskManager`` is built without its ~14,000 built-in task YAML (indexing
    them takes ~25 s of a core, the folders milliseconds), by the rule :func:`snapeval.harness.evaluate` follows. The
    tasks run are the same: a task of the include path overrides a built-in one of its name, and such a task reads no
    other index entry (a built-in task, a path, a pattern, or a group or tag reaching one keeps lm-eval's whole
    index)."""
    from snapeval.harness.folder_tasks import folders_define
    from snapeval.tasks.folders import include_folders

    if not folders_define(include_folders(_flag(argv, "--include_path")), _task_names(argv)):
        return
    import lm_eval.tasks

    stock = lm_eval.tasks.TaskManager

    class FolderTaskManager(stock):
        def __init__(self, *args, include_defaults: bool = False, **kwargs):
            super().__init__(*args, include_defaults=include_defaults, **kwargs)

    lm_eval.tasks.TaskManager = FolderTaskManager  # lm-eval's run command imports it when it builds one


def _default_folders():
    from snapeval.tasks.folders import task_folders

    return task_folders()


def main() -> None:
    from snapeval.errors import SnapevalError

    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(HELP_NOTE, file=sys.stderr)
    try:
        sys.argv[1:] = prepare_argv(sys.argv[1:])
    except SnapevalError as exc:  # bad input: one line, exit 2, before lm-eval loads
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)

    if _flag(sys.argv[1:], "--model") in ("snapeval", "snapstream"):
        from snapeval import threads

        threads.apply()  # the cores free now, before torch is imported
    import snapeval.harness.lm_eval_model  # noqa: F401  (registers "snapeval" and its deprecated alias "snapstream")
    from lm_eval.__main__ import cli_evaluate

    if _flag(sys.argv[1:], "--model") in ("snapeval", "snapstream"):
        _skip_builtin_tasks_when_the_folders_define_them(sys.argv[1:])

    try:
        cli_evaluate()
    except SnapevalError as exc:  # bad input: one line, exit 2, as the snapeval command does
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
