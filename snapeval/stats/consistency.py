"""A results folder's own consistency, checked by ``snapeval regress`` before anything is compared (issue #61).

A regression guard that pairs a current cell with its baseline cell still trusts what each file says about itself.
Each check below closes a way a hand-edited (or broken) folder passed the guard on main 5ff38e2; each failure is one
line naming the cell, the field and what it should be:

- **per-item scores in the metric's range**: every metric snapeval's tasks report is a share, so each per-item score
  lies in [0, 1] (an item scored 21.0 hid 20 broken items in the mean); metrics named as unbounded
  (:data:`UNBOUNDED`, lm-eval's perplexities) only need to be finite and >= 0;
- **aggregates recomputed from their items**: every aggregate with a value is the mean of its per-item scores (every
  shipped task aggregates with ``mean`` or ``aggregate_present``, the mean over the items that carry the score), to
  1e-9; an aggregate without any per-item score is refused (it cannot be checked);
- **stderr recomputed**: the guard never reads a stderr from a file (:func:`item_stderr` recomputes it from the
  items, cluster-robust); a file whose stderr differs from lm-eval's ``mean_stderr`` of its items (sample standard
  deviation / sqrt(n)) is refused, so a stderr set by hand is named;
- **the same text scored the same**: within a folder, and between a baseline cell and its current cell, two records
  of one item (subtask, doc id, target) with the same generated texts carry the same score on every metric they both
  report (a generated text rescored 0 -> 1 is named); log-likelihood items (no text) are not compared;
- **provenance**: each cell's id is the hash of its identity (an edited seed or setting is named), its manifest view
  agrees with its identity (task, seed), every cell of one task in a folder has one task-source hash, and every
  cell of a folder was written by one code (``versions`` of snapeval and lm-eval); a current cell with
  no baseline cell (an extra seed or configuration) is refused by ``regress`` itself (nothing would guard it).
"""
from __future__ import annotations

import math
from typing import Any

#: Metrics whose per-item scores are not shares (lm-eval's rolling log-likelihood metrics): finite and >= 0 only.
UNBOUNDED = ("perplexity", "bits_per_byte", "bits_per_token")
TOLERANCE = 1e-9


def score_range(metric_key: str) -> tuple[float, float]:
    """The allowed per-item range of ``metric,filter``: [0, inf) for :data:`UNBOUNDED` names, else [0, 1]."""
    name = metric_key.split(",", 1)[0]
    return (0.0, math.inf) if any(u in name for u in UNBOUNDED) else (0.0, 1.0)


def item_values(result, subtask: str, key: str) -> list[float]:
    """The per-item scores of ``key`` in ``subtask``, in document order."""
    return [float(s.scores[key]) for s in sorted(result.samples, key=lambda s: s.doc_id)
            if s.subtask == subtask and key in s.scores]


def item_stderr(result, subtask: str, key: str) -> float | None:
    """The standard error of a cell's mean of ``key`` from its per-item scores, cluster-robust over the items'
    clusters (``sqrt(k / (k - 1) sum_c (T_c - mean m_c)^2) / n``; with every item its own cluster this is lm-eval's
    ``mean_stderr``, the sample standard deviation over sqrt(n)); None with fewer than two clusters."""
    totals: dict[Any, list[float]] = {}
    for s in result.samples:
        if s.subtask == subtask and key in s.scores:
            row = totals.setdefault(s.cluster if s.cluster is not None else ("doc", s.doc_id), [0.0, 0.0])
            row[0] += float(s.scores[key])
            row[1] += 1.0
    k = len(totals)
    n = sum(m for _, m in totals.values())
    if k < 2:
        return None
    mean = sum(t for t, _ in totals.values()) / n
    return math.sqrt(k / (k - 1) * math.fsum((t - mean * m) ** 2 for t, m in totals.values())) / n


def _lm_eval_stderr(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)) / math.sqrt(len(values))


def cell_problems(entry) -> list[str]:
    """One cell's own inconsistencies, one line each (empty: consistent)."""
    from snapeval.results.schema import identity_hash

    r = entry.result
    out = []
    expected = identity_hash(r.identity)
    if r.cell_id != expected:
        out.append(f"cell_id={r.cell_id} is not the hash of its identity ({expected}): the identity (a seed, a "
                   "setting) was edited after the run; allowed: a cell as `snapeval sweep` wrote it")
    task = r.identity.get("task") if isinstance(r.identity.get("task"), dict) else {}
    for field, view_value, own in (("seed", entry.view.get("seed"), r.identity.get("seed")),
                                   ("task", entry.view.get("task"), task.get("name"))):
        if view_value is not None and own is not None and view_value != own:
            out.append(f"manifest {field}={view_value!r} but the cell's identity says {own!r}; allowed: the "
                       "manifest's view of the cell as written")
    flagged = set()  # metrics already named: one line each
    for (subtask, key), values in _metric_items(r).items():
        low, high = score_range(key)
        bad = [(s.doc_id, s.scores[key]) for s in r.samples if s.subtask == subtask and key in s.scores
               and not low <= float(s.scores[key]) <= high]
        if bad:
            flagged.add((subtask, key))
            doc, value = bad[0]
            out.append(f"{subtask}/{key}: per-item score {value!r} of doc {doc} is outside [{low:g}, {high:g}]"
                       + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "") + "; allowed: scores in the "
                       "metric's range")
    for m in r.metrics if r.samples else ():  # a cell with no samples at all cannot pair: regress says so itself
        if m.value is None:
            continue
        values = item_values(r, m.subtask, m.key)
        if not values:
            out.append(f"{m.subtask}/{m.key}: aggregate {m.value:g} has no per-item score to be recomputed from; "
                       "allowed: aggregates of the items the cell logged")
            continue
        mean = math.fsum(values) / len(values)
        if abs(mean - m.value) > TOLERANCE * max(1.0, abs(mean)):
            out.append(f"{m.subtask}/{m.key}: aggregate {m.value:g} but the mean of its {len(values)} per-item scores "
                       f"is {mean:g}; allowed: the aggregate its items give")
            continue
        se = _lm_eval_stderr(values)
        if (m.subtask, m.key) not in flagged and m.stderr is not None and se is not None and abs(se - m.stderr) > 1e-6 * max(1.0, se):
            out.append(f"{m.subtask}/{m.key}: stderr {m.stderr:g} in the file but {se:g} from its {len(values)} "
                       "items (lm-eval's mean_stderr); allowed: the stderr its items give (regress recomputes it)")
    return out


def _metric_items(result) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for s in result.samples:
        for key in s.scores:
            out[(s.subtask, key)] = out.get((s.subtask, key), 0) + 1
    return out


def text_score_problems(records: list[tuple[str, Any]]) -> list[str]:
    """Records ``(where, SampleRecord)`` of one task: the same item (subtask, doc id, target) with the same generated
    texts must carry the same score on each metric both report. One line: the first such item and how many more."""
    seen: dict[tuple, tuple[str, Any]] = {}
    out = []
    for where, s in records:
        if not s.generations:
            continue
        key = (s.subtask, s.doc_id, s.target, tuple(s.generations))
        first = seen.setdefault(key, (where, s))
        if first[1] is s:
            continue
        for metric in sorted(set(first[1].scores) & set(s.scores)):
            if first[1].scores[metric] != s.scores[metric]:
                out.append(f"doc {s.doc_id} ({s.subtask}): the same generated text scored {metric} "
                           f"{first[1].scores[metric]:g} in {first[0]} but {s.scores[metric]:g} in {where}")
                break
    if not out:
        return []
    more = f" (and {len(out) - 1} more items)" if len(out) > 1 else ""
    return [f"{out[0]}{more}; allowed: one score per text and metric (the scorer is deterministic)"]


def folder_problems(entries, role: str) -> list[tuple[Any, str]]:
    """Every cell's own problems and the folder's: ``(entry, line)`` pairs (the entry the line is about)."""
    out = [(e, line) for e in entries for line in cell_problems(e)]
    versions: dict[str, list] = {}
    for e in entries:
        versions.setdefault(repr(_code(e)), []).append(e)
    if len(versions) > 1:
        common = max(versions.values(), key=len)
        for group in versions.values():
            if group is not common:
                for e in group:
                    out.append((e, f"written by other code than the rest of {role} (versions {_code(e)} vs "
                                   f"{_code(common[0])}); allowed: one run's cells"))
    by_task: dict[Any, list] = {}
    for e in entries:
        by_task.setdefault(e.view.get("task"), []).append(e)
    for members in by_task.values():
        sources = {e.result.task_source_sha256 for e in members if e.result.task_source_sha256 is not None}
        if len(sources) > 1:
            common = max(sources, key=lambda h: sum(e.result.task_source_sha256 == h for e in members))
            for e in members:
                if e.result.task_source_sha256 not in (None, common):
                    out.append((e, f"task source {e.result.task_source_sha256[:12]} differs from the other cells of "
                                   f"its task in {role} ({common[:12]}); allowed: one task source per task"))
        records = [(f"{e.label} ({role})", s) for e in members for s in e.result.samples]
        for line in text_score_problems(records):
            out.append((members[0], line))
    return out


#: The packages whose versions name the code that ran and scored a cell (a torch build may differ between workers).
CODE = ("snapeval", "lm_eval")


def _code(entry) -> dict[str, Any]:
    return {k: v for k, v in sorted((entry.result.versions or {}).items()) if k in CODE}


def pair_problems(base, cur) -> list[str]:
    """A baseline cell and its current cell (same task source): the same text scored the same."""
    out = []
    if base.result.task_source_sha256 == cur.result.task_source_sha256:
        out += text_score_problems([("the baseline", s) for s in base.result.samples]
                                   + [("the current run", s) for s in cur.result.samples])
    return out
