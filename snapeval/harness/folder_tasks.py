"""Whether the include folders alone define the tasks a run asks for: the one rule by which snapeval builds lm-eval's
``TaskManager`` without lm-eval's built-in tasks (~14,000 YAML, ~25 s of a core to index; the folders take
milliseconds). :func:`snapeval.harness.evaluate`, ``snapeval-lm-eval``
(:mod:`snapeval.harness.lm_eval_cli`) and :func:`snapeval.sweep.shards.count_items` all decide by it. Nothing here
imports lm-eval at module level."""
from __future__ import annotations

import os
from collections.abc import Iterable


def folders_define(folders: Iterable[str | os.PathLike] | None, names: Iterable) -> bool:
    """True when every name in ``names`` is a task of ``folders`` that reads nothing of lm-eval's built-in index: a
    plain task of the folders, or a group or tag of the folders whose every member (recursively) is one. A task of an
    include folder overrides a built-in one of its name, so such a run loads the same tasks from the same YAML either
    way. Anything else (a built-in task, a group or tag reaching one, a path, a pattern, a task object, no folder)
    is False: lm-eval's whole index is needed."""
    names = list(names)
    if not folders or not names:
        return False
    from pathlib import Path

    from lm_eval.tasks._index import Kind, TaskIndex

    index = TaskIndex.build([Path(folder) for folder in folders])
    seen: set[str] = set()

    def defined(member) -> bool:
        if isinstance(member, dict):  # a group's inline entry: a sub-group, or a task (overridden) by its name
            return defined_all(member["task"]) if "group" in member else defined(member.get("task"))
        if not isinstance(member, str) or member not in index:
            return False
        if member in seen:
            return True
        seen.add(member)
        entry = index[member]
        if entry.kind in (Kind.TASK, Kind.PY_TASK):
            return True
        if entry.kind is Kind.TAG:
            return defined_all(sorted(entry.tags))
        if entry.kind is Kind.GROUP:
            return defined_all((entry.cfg or {}).get("task"))
        return False

    def defined_all(members) -> bool:
        members = [members] if isinstance(members, (str, dict)) else list(members or ())
        return bool(members) and all(defined(m) for m in members)

    return all(defined(name) for name in names)


def task_manager_for(folders: list[str] | None, names: Iterable, *, metadata: dict | None = None):
    """lm-eval's ``TaskManager`` for a run of ``names`` (:func:`snapeval.tasks.folders.task_manager`): over
    ``folders`` alone where they define every name (:func:`folders_define`), else with lm-eval's built-in tasks too."""
    from snapeval.tasks.folders import task_manager

    return task_manager(folders, defaults=not folders_define(folders, names), metadata=metadata)
