"""One lm-eval run through the ``snapstream`` model, returned with full provenance and measured cost."""
from __future__ import annotations

import copy
from pathlib import Path

from snapeval.errors import SnapevalError
from snapeval.paths import tasks_dir


def evaluate(
    model_args: dict,
    tasks: list[str],
    *,
    limit: int | float | None = None,
    gen_kwargs: dict | None = None,
    seed: int = 0,
    metadata: dict | None = None,
    log_samples: bool = True,
    include_path: str | Path | None = None,
    use_cache: str | None = None,
    chat: bool | None = None,
    lm=None,
) -> dict:
    """Run lm-eval's ``simple_evaluate`` on ``tasks`` with a :class:`SnapStreamLM` built from ``model_args``.

    Returns lm-eval's results dict plus ``out["snapeval"]``: the model's full configuration (``config``), the
    measured KV-cache bytes and prefill/decode speed of this run, and the data files read (path, sha256, rows).
    ``chat`` applies the tokenizer's chat template (default: when the tokenizer has one). The task metadata gets
    ``pretrained`` and, for reasoning presets (R1 distills), ``reasoning=True`` so answers are extracted after the
    thinking section. ``lm`` reuses an already loaded model (its configuration must match ``model_args``).
    """
    import lm_eval
    from lm_eval.tasks import TaskManager

    from snapeval.harness.lm_eval_model import SnapStreamLM

    include = Path(include_path) if include_path else tasks_dir()
    if not include.is_dir():
        raise SnapevalError(f"include_path={str(include)!r} is not a directory; allowed: a folder of lm-eval task YAML "
                            "(set SNAPEVAL_TASKS_DIR, default snapeval/tasks)")
    if lm is None:
        from snapeval.harness.shared import load_once

        loaded = load_once(model_args.get("pretrained", "smollm2-135m-instruct"), model_args.get("dtype"),
                           model_args.get("device", "cpu"), model_args.get("device_map"))
        lm = SnapStreamLM(**model_args, loaded=loaded)
    lm.seed = seed  # the base of every request's sampling seed
    meta = {"pretrained": lm.pretrained_name, "max_length": lm.max_length, "reasoning": _is_reasoning(lm.pretrained_name),
            **(metadata or {})}
    if chat is None:
        chat = bool(getattr(lm.tokenizer, "chat_template", None))
    # The repository's own task folder indexes in milliseconds; lm-eval's built-in tasks take seconds, so they are
    # indexed only when a task is not found in the folder.
    manager = TaskManager(include_path=str(include), include_defaults=False, metadata=meta)
    if any(not manager.match_tasks([t]) for t in tasks):
        manager = TaskManager(include_path=str(include), metadata=meta)
    unknown = [t for t in tasks if not manager.match_tasks([t])]
    if unknown:
        raise SnapevalError(f"task={unknown[0]!r} is unknown; see `lm_eval ls tasks --include_path {include}`")
    before = copy.copy(lm.stats)
    results = lm_eval.simple_evaluate(
        model=lm, tasks=list(tasks), limit=limit, gen_kwargs=gen_kwargs, log_samples=log_samples,
        task_manager=manager, metadata=meta, use_cache=use_cache, random_seed=seed, numpy_random_seed=seed,
        torch_random_seed=seed, fewshot_random_seed=seed, bootstrap_iters=1000, apply_chat_template=chat,
    )
    if results is None:  # non-zero rank in distributed runs
        return {}
    from snapeval.tasks.data import loaded_data_records

    run = lm.stats.since(before).to_dict()
    results["snapeval"] = {"config": lm.describe(), **run, "data": loaded_data_records(), "seed": seed,
                           "limit": limit, "tasks": list(tasks), "metadata": meta, "chat_template": chat}
    return results


def _is_reasoning(name: str) -> bool:
    from snapeval.models.presets import get_preset, list_presets

    return name in list_presets() and get_preset(name).reasoning
