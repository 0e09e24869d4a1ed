"""The sequential budget search, live: ``snapeval sweep CONFIG --until-decided`` evaluates a group's items in batches
and stops each cell once it is settled (the search itself, its replay over a finished sweep and its account are
:mod:`snapeval.report.search`).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from snapeval.errors import SnapevalError
from snapeval.report.search import GROUP_SEQUENTIAL, GroupReplay, SearchSettings, reach, render, steps
from snapeval.stats.decision import DecisionRule


def items_of(cell) -> int:
    """The items a cell's task answers: its ``limit``, else its metadata's ``num_samples`` (the generated tasks');
    one-line error when neither is set (the search must know the items it batches)."""
    metadata = dict(cell.task.metadata_dict or {})
    count = cell.task.limit if cell.task.limit is not None else metadata.get("num_samples")
    if not (isinstance(count, int) and not isinstance(count, bool) and count >= 1):
        raise SnapevalError(f"--until-decided: task {cell.task.name} has no item count (limit={cell.task.limit!r}, "
                            f"metadata num_samples={metadata.get('num_samples')!r}); allowed: set the task's limit to "
                            "the items the search may use")
    return count


def _equal_looks(settings: SearchSettings) -> int:
    """The live search's looks: equal item shards, so a count (shares given as a tuple are refused in one line)."""
    if not isinstance(settings.looks, int):
        raise SnapevalError(f"--until-decided: looks={settings.looks!r}; allowed: a number of equal looks (the live "
                            "search's batches are equal item shards), e.g. 5")
    return settings.looks


def run_live(settings: SearchSettings, rule: DecisionRule, cells: list, pending: set[str], cell_fn, executor,
             started, store, outcomes: list):
    """The search over a sweep's groups, yielding ``(cell, ShardResult | None, error)`` as an executor does (the
    runner writes each shard, and merges a cell whose batches all ran into its result); ``outcomes`` receives a
    :class:`GroupReplay`-like record per group (``seconds`` measured). Batches are the sweep's item shards: with
    ``S = ceil(items / batch)``, batch ``k`` holds documents ``i % S == k`` (items spread over the task's order),
    taken in a random order of ``k`` drawn with ``settings.seed``. Tasks whose items share clusters (a family with a
    cluster layout) would split a cluster over batches: refused in one line unless one batch holds all their items
    (replay their full sweep instead). With ``settings.run_ahead`` a batch's unit also runs every budget below each
    open method's current one, and a later request for a batch's scores that ran is read, not run again: the walk,
    its requests and its decisions are the same either way (what the walk never read is counted in the account)."""
    from snapeval.cache.methods import METHOD_TABLE
    from snapeval.stats.headline import headline_metric
    from snapeval.sweep.planning import WorkUnit
    from snapeval.sweep.shards import Shard
    from snapeval.tasks.families import task_family

    groups: dict[str, list] = {}
    for cell in cells:
        groups.setdefault(cell.group_id, []).append(cell)
    for members in groups.values():
        reference = next((c for c in members if METHOD_TABLE.is_reference(c.config.method)), None)
        compressed = [c for c in members if c is not reference and c.config.budget is not None]
        todo = [c for c in compressed if c.cell_id in pending]
        if reference is None or not todo:
            continue
        n = items_of(reference)
        count = min(n, _equal_looks(settings)) if settings.design == GROUP_SEQUENTIAL else max(
            1, math.ceil(n / settings.batch))
        family = task_family(reference.task.name)
        if count > 1 and family is not None and family.cluster is not None:
            raise SnapevalError(f"--until-decided: task {reference.task.name}'s items share clusters (documents), "
                                f"which {count} item shards (looks) would split; allowed: tasks whose items are "
                                f"independent, or one look (--looks 1, or --design e-process with a --batch of at "
                                f"least its {n} items), or run the full sweep and `snapeval report DIR "
                                "--search-replay`")
        order = [int(k) for k in np.random.default_rng(settings.seed).permutation(count)]
        plan = [[(i, i) for i in range(k, n, count)] for k in order]
        plan = [b for b in plan if b]
        by_key = {(c.config.method, int(c.config.budget)): c for c in compressed}
        known: dict[int, float] = {}
        view = reference.view().to_dict()
        if reference.cell_id not in pending:  # finished before: its items are read, never run again
            done = store.read(reference.cell_id)
            subtask, metric = headline_metric(view, done)
            up = next(m.higher_is_better for m in done.metrics if (m.subtask, m.key) == (subtask, metric))
            known = {s.doc_id: s.scores[metric] if up else 1.0 - s.scores[metric] for s in done.samples
                     if s.subtask == subtask}
        walk = steps({i: [i] for i in range(n)}, list(by_key), rule=rule, settings=settings, plan=plan)
        request = next(walk)
        seconds = 0.0
        ran: dict[int, dict[Any, dict]] = {}  # per batch, every key's scores run so far (a later request reads them)
        read: dict[int, set] = {}  # per batch, the keys the walk asked for
        while True:
            items, wanted = request
            batch = next(k for k, b in zip(order, plan) if b[0][1] == items[0])
            scores = ran.setdefault(batch, {})
            read.setdefault(batch, set()).update(wanted)
            if None in wanted and known:
                scores.setdefault(None, {i: known[i] for i in items})
            missing = [w for w in wanted if w not in scores]  # none: every score asked for ran ahead, read here
            ahead = [k for k in by_key if k not in scores and k not in missing
                     and any(w is not None and w[0] == k[0] and k[1] < w[1] for w in missing)] \
                if settings.run_ahead else []
            run = [c for c in ([reference] if None in missing else [])
                   + [by_key[w] for w in missing + ahead if w is not None]]
            for cell, result, error in (executor.run([WorkUnit(tuple(run), shared=len(run) > 1,
                                                               shard=Shard(batch, count))], cell_fn, started)
                                        if run else ()):
                yield cell, result, error
                if result is None or result.cell is None:
                    last = (error or "no result").strip().splitlines()[-1]
                    raise SnapevalError(f"--until-decided: {cell.label} failed on batch {batch + 1} of {count} "
                                        f"({last}); the search stops")
                seconds += float(result.wall_s or 0.0)
                subtask, metric = headline_metric(view, result.cell)
                higher = next(m.higher_is_better for m in result.cell.metrics if (m.subtask, m.key) == (subtask,
                                                                                                         metric))
                key = None if cell is reference else (cell.config.method, int(cell.config.budget))
                # oriented so that higher is better: 1 - score for a lower-is-better metric (scores lie in [0, 1])
                scores[key] = {s.doc_id: s.scores[metric] if higher else 1.0 - s.scores[metric]
                               for s in result.cell.samples if s.subtask == subtask}
            try:
                request = walk.send({w: scores[w] for w in wanted})
            except StopIteration as finished:
                outcome = finished.value
                break
        ahead_unread = sum(len(plan_batch) * len(set(ran.get(k, {})) - read.get(k, set()) - {None})
                           for k, plan_batch in zip(order, plan))
        outcomes.append(GroupReplay(reference.model.name, reference.task.name, reference.seed, outcome,
                                    spent_seconds=seconds,
                                    cell_ids={key: c.cell_id for key, c in by_key.items()},
                                    reach=reach(n, None, rule, settings), ahead_evaluations=ahead_unread))


def plan_lines(cells: list, rule: DecisionRule, settings: SearchSettings | None) -> list[str]:
    """``--dry-run``'s decision plan, one line per (model, task, seed) group with a full-cache and a compressed cell:
    whether non-inferiority at the sweep's margin is reachable at the task's items at all (every item tied, the
    task's cluster layout's worst-case design effect), under the fixed grid and, with ``--until-decided``, under the
    search's design, and the items each needs."""
    from snapeval.cache.methods import METHOD_TABLE
    from snapeval.tasks.families import layout_cluster_sizes

    out, seen = [], set()
    for cell in cells:
        if cell.group_id in seen or METHOD_TABLE.is_reference(cell.config.method):
            continue
        group = [c for c in cells if c.group_id == cell.group_id]
        if not any(METHOD_TABLE.is_reference(c.config.method) for c in group):
            continue
        seen.add(cell.group_id)
        where = f"{cell.model.name} | {cell.task.name} | seed {cell.seed}"
        try:
            n = items_of(cell)
        except SnapevalError:
            out.append(f"  plan  {where}: item count unknown (no limit or num_samples): reach not computed")
            continue
        layout = layout_cluster_sizes(cell.task.name)
        parts = []
        for name, design in (("fixed grid", SearchSettings(design=GROUP_SEQUENTIAL, looks=1)),
                             *((("search", settings),) if settings is not None else ())):
            ok, needed = reach(n, layout, rule, design)
            parts.append(f"{name}: " + (f"reachable (from {needed} items)" if ok else
                                        f"OUT OF REACH (needs {needed} items even if every item ties)"))
        out.append(f"  plan  {where}: non-inferiority at margin {rule.margin:g} with {n} items: " + "; ".join(parts))
    return out


def write_account(path, groups: list[GroupReplay], rule: DecisionRule, settings: SearchSettings) -> None:
    """``search.md`` of a live search: :func:`render` under a title."""
    from snapeval.results.store import atomic_write_text

    atomic_write_text(path, "\n".join(["# Sequential budget search", ""] + render(groups, rule, settings)) + "\n")
