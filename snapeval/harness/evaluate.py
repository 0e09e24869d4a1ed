"""One lm-eval run through the ``snapeval`` model, returned with full provenance and measured cost."""
from __future__ import annotations

import copy
from pathlib import Path

from snapeval.errors import SnapevalError
from snapeval.run_args import RunArgs
from snapeval.harness.folder_tasks import task_manager_for
from snapeval.tasks.folders import task_folders


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
    max_gen_toks_cap: int | None = None,
    lm=None,
    shard: tuple[int, int] | None = None,
) -> dict:
    """Run lm-eval's ``simple_evaluate`` on ``tasks`` with a :class:`SnapStreamLM` built from ``model_args``.

    Returns lm-eval's results dict plus ``out["snapeval"]``: the model's full configuration (``config``), the
    measured KV-cache bytes and prefill/decode speed of this run, and the data files read (path, sha256, rows).
    ``chat`` applies the tokenizer's chat template (default: when the tokenizer has one). The task metadata gets
    ``pretrained``, from which the tasks tell a reasoning model (an R1 distill, by preset or by its own files:
    :func:`snapeval.tasks.hooks.reasoning`) whose answers are read after the thinking section. ``max_gen_toks_cap`` lowers every task's own generation budget to at most that many tokens
    (``snapeval run --max-gen-toks``; None: each task's own). ``lm`` reuses an already loaded model (its configuration must match ``model_args``).

    ``shard=(k, S)`` evaluates only the documents ``i`` with ``i % S == k`` among those ``limit`` selects (lm-eval's
    ``samples``; a task group is refused): one item shard of a sweep cell (:mod:`snapeval.sweep.shards` merges the
    shards). ``out["snapeval"]["shard"]`` then records the documents, each metric's aggregation function (as
    ``module:name``) and the bootstrap iterations, what the merge needs to recompute lm-eval's aggregates; a shard
    with no documents returns no ``results``.
    """
    import lm_eval
    from snapeval.harness.lm_eval_model import SnapStreamLM

    folders = task_folders(include_path)
    for folder in folders:
        if not folder.is_dir():
            raise SnapevalError(f"include_path={str(folder)!r} is not a directory; allowed: a folder of lm-eval task "
                                "YAML (set SNAPEVAL_TASKS_DIR, default: tasks/ of the checkout, or the copy a wheel "
                                "installed)")
    include = [str(folder) for folder in folders]
    if lm is None:
        from snapeval.harness.shared import load_once

        # the run arguments resolved once (a sweep hands a RunArgs; a dict of model_args is parsed as declared),
        # then used unchanged by the model, its engine and its caches
        run_args = model_args.get("run_args") or RunArgs.from_mapping(model_args, surface="model_args")
        rest = {k: v for k, v in model_args.items() if k not in (*RunArgs.names("model_args"), "run_args")}
        run_args.check_machine()  # capture true or the triton kernel without a GPU: one line, nothing loaded
        loaded = load_once(rest.get("pretrained", "smollm2-135m-instruct"), run_args.dtype, run_args.device,
                           run_args.device_map_value)
        lm = SnapStreamLM(**rest, run_args=run_args, loaded=loaded)
    lm.seed = seed  # the base of every request's sampling seed
    lm.gen_toks_cap = max_gen_toks_cap  # `snapeval run --max-gen-toks`: a task's own budget lowered to it
    # the tasks read whether the model reasons from its name (snapeval.tasks.hooks.reasoning), as they do under
    # snapeval-lm-eval, whose metadata holds the same pretrained
    meta = {"pretrained": lm.pretrained_name, "max_length": lm.max_length, **(metadata or {})}
    if chat is None:
        chat = bool(getattr(lm.tokenizer, "chat_template", None))
    # The repository's own task folder indexes in milliseconds; lm-eval's built-in tasks take seconds, so they are
    # indexed only when the folders do not define every task (snapeval.harness.folder_tasks.folders_define).
    manager = task_manager_for(include, tasks, metadata=meta)
    unknown = [t for t in tasks if not manager.match_tasks([t])]
    if unknown:
        raise SnapevalError(f"task={unknown[0]!r} is unknown; see `lm_eval ls tasks --include_path {include[0]}`")
    samples, shard_record = None, None
    lm.documents = None
    if shard is not None:
        tasks, samples, shard_record = _shard_of(manager, tasks, limit, shard)
        lm.documents = samples  # a request's sampling seed names its document as the whole task numbers it
        limit = None
        if not any(samples.values()):  # more shards than documents: nothing to evaluate here
            return {"snapeval": {"shard": shard_record, "config": lm.describe()}}
    _environment_info_once_per_process()
    before = copy.copy(lm.stats)
    results = lm_eval.simple_evaluate(
        model=lm, tasks=list(tasks), limit=limit, samples=samples, gen_kwargs=gen_kwargs, log_samples=log_samples,
        task_manager=manager, metadata=meta, use_cache=use_cache, random_seed=seed, numpy_random_seed=seed,
        torch_random_seed=seed, fewshot_random_seed=seed, bootstrap_iters=BOOTSTRAP_ITERS, apply_chat_template=chat,
    )
    if results is None:  # non-zero rank in distributed runs
        return {}
    from snapeval.tasks.data import loaded_data_records

    run = lm.stats.since(before).to_dict()
    results["snapeval"] = {"config": lm.describe(), **run, "data": loaded_data_records(), "seed": seed,
                           "limit": limit, "tasks": [getattr(t, "task_name", t) for t in tasks], "metadata": meta,
                           "chat_template": chat}
    if shard_record is not None:
        results["snapeval"]["shard"] = shard_record
    return results


_ENVIRONMENT_INFO: dict = {}


def _environment_info_once_per_process() -> None:
    """Make lm-eval's ``add_env_info`` collect the environment once per process instead of once per run.

    ``simple_evaluate`` ends every run with ``add_env_info``: torch's ``collect_env`` (pip, conda, nvidia-smi and
    other subprocesses) and git calls, about 1 s each time, for fields that cannot change inside one process
    (versions, the machine) and that snapeval's cells do not keep. A sweep calls it once per cell and per item shard,
    so it was a fixed cost of every work unit (16 s of a 16-cell group of 10 items: 12% of its time). The first call
    runs lm-eval's own function; later calls copy its fields."""
    import lm_eval.evaluator

    original = lm_eval.evaluator.add_env_info
    if getattr(original, "snapeval_once_per_process", False):
        return

    def add_env_info(storage: dict) -> None:
        if not _ENVIRONMENT_INFO:
            original(_ENVIRONMENT_INFO)
        storage.update(copy.deepcopy(_ENVIRONMENT_INFO))

    add_env_info.snapeval_once_per_process = True
    lm_eval.evaluator.add_env_info = add_env_info


#: Bootstrap resamples for the stderr of metrics lm-eval bootstraps (its ``bootstrap_iters``).
BOOTSTRAP_ITERS = 1000


def _shard_of(manager, tasks, limit, shard: tuple[int, int]):
    """The built tasks, lm-eval's ``samples`` of shard ``k`` of ``S`` (documents ``i % S == k`` among the first
    ``limit``) and what the merge needs: the documents, each metric's aggregation and the bootstrap iterations."""
    from lm_eval.evaluator_utils import get_sample_size

    index, count = shard
    loaded = manager.load(list(tasks))
    if loaded["groups"]:
        raise SnapevalError(f"task {', '.join(loaded['groups'])!r} is a group of tasks; sweep its tasks one by one to "
                            "shard them, or set shards: 1")
    built = list(loaded["tasks"].values())
    samples, aggregations, original = {}, {}, {}
    for name, task in loaded["tasks"].items():
        size = len(task.eval_docs)
        wanted = size if limit is None else min(size, get_sample_size(task, limit))
        samples[name] = list(range(index, wanted, count))
        aggregations[name] = {metric: _reference(fn) for metric, fn in task.aggregation().items()}
        original[name] = size
    record = {"index": index, "count": count, "documents": samples, "aggregations": aggregations,
              "original_documents": original, "bootstrap_iters": BOOTSTRAP_ITERS}
    return built, samples, record


def _reference(fn) -> str | None:
    """``module:qualified name`` of an aggregation function when it imports back to the same object, else None."""
    import importlib

    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not name:
        return None
    try:
        target = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{name}" if target is fn else None
