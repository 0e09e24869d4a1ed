"""``snapeval regress``: accuracy regression check of a results directory against a committed baseline.

Cells are matched on (model, task, the method's identity, seed: :func:`key_fields`, :func:`method_identity`). A
baseline fixes its items, so every current cell must **pair** with its baseline cell, or the check fails with one line
naming what is missing (exit 1):

* the current cell must cover exactly the baseline's items (``(subtask, doc_id)``): none missing, none other, and
  each with the baseline's target (the same doc id over another item does not pair);
* every item of both cells must carry a per-item score on the headline metric (a cell without them could hide any
  drop; one that drops some items' scores would silently pair over the rest);
* the baseline must have a headline aggregate with a value (the cell's headline metric: the config's ``metric``,
  else the task's first), and the current cell must report it and every other aggregate the baseline has a value
  for;
* both cells must come from the same task source (``task_source_sha256``; a baseline written before it was recorded
  gets a note, not a failure);
* each file holds one cell per key (a second cell with the key of another is refused at load, exit 2);
* its greedy status must be the baseline's: a greedy baseline is checked by the greedy rule and a current run that
  sampled even one item is not the same experiment (it would otherwise slip to the weaker sampled test).

Then, per baseline cell:

* **greedy cells** (both sides decoded greedily): decoding is deterministic, so *any* change of a per-item score or
  a generated text fails, named item by item (a scoring-code change that keeps every text is caught as well as a
  cache change that alters an answer). One broken item is caught with certainty;
* **sampled cells**: the one-sided paired test of a drop of the headline metric
  (:func:`snapeval.stats.paired.drop_check`: McNemar mid-p for 0/1 scores of single items, the sign-flip test over
  clusters otherwise), **Holm-adjusted over the sampled cells of the run** (family-wise false-alarm rate at most
  ``alpha`` when nothing changed, whatever the churn between two sampled runs); a cell fails at adjusted ``p <
  alpha``. Each line states the test's power against ``--drop`` (default 10 points) at the churn it measured (the
  share of items the current run scored better on: two sampled runs disagree in both directions), at Holm's most
  stringent level ``alpha / m``. Where the test cannot reject at all at that level (its smallest possible p is not
  below it), it says so and a drop beyond the tolerance rule fails too.

The tolerance rule, ``max(z * sqrt(se_base^2 + se_cur^2), margin)``, is otherwise used only with
``--allow-unpaired``, an exploration mode for comparing runs that do not pair (other items, no per-item samples):
it turns the pairing failures above into notes, pairs what is shared and falls back to the tolerance rule where
nothing is; its verdict says it is not a regression guard.

Exit codes: 0 no regression, 1 regression (or a cell that does not pair), 2 unusable input (unreadable or invalid
files, nothing to compare, or cells that ran under different conditions: another sample limit, generation
settings, task parameters or data).

Baselines are JSON files written by ``snapeval regress --current DIR --baseline FILE --write-baseline``; a results
directory is accepted as a baseline too.

``--exact-sampled`` applies the greedy rule to sampled cells too: a sampled request draws from a stream seeded by its
item and the run's seed (:func:`snapeval.harness.lm_eval_model.request_seeds`), so the same code samples the same
text, and a changed sampler, like a changed cache, changes items.

What CI runs: ``configs/regression.yaml``'s greedy cells and its sampled LongBench-v2 slice (temperature 0.1, as
pred.py samples), compared with ``--exact-sampled``: any per-item change fails; the sampled test and its power are
what a sampled run compared across machines or seeds gets.
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from snapeval.cache.methods import METHOD_TABLE
from snapeval.errors import SnapevalError
from snapeval.stats.decision import DEFAULT_ALPHA, DEFAULT_MARGIN, DecisionRule
from snapeval.stats.headline import headline_metric
from snapeval.stats.multiplicity import holm
from snapeval.stats.power import REGRESSION_DROP

BASELINE_FORMAT = "snapeval-baseline/1"
DEFAULT_Z = 3.0
MAX_ITEMS = 20  # changed items named one by one; the rest are counted
MAX_DIFF_LINES = 6


def key_fields() -> tuple[str, ...]:
    """What two cells must share to be compared, besides their method's identity (:func:`method_identity`): model,
    task and seed."""
    return ("model", "task", "seed")


def method_identity(view: dict[str, Any], result: Any) -> str:
    """The identity of a cell's method configuration (its name, budget and every setting, as hashed into the cell
    id: ``identity["policy"]``), as canonical JSON; from the view's method, budget and setting columns for a result
    without one. Two cells of one method differ in any setting; no method's settings enter another's key."""
    policy = (getattr(result, "identity", None) or {}).get("policy")
    if not isinstance(policy, dict):
        settings = set(METHOD_TABLE.column_settings([view.get("method")]))
        policy = {k: v for k, v in view.items() if k in {"method", "budget", *settings} and v is not None}
    return json.dumps(policy, sort_keys=True, default=str)


class UnusableInput(SnapevalError):
    """Input that cannot be compared (exit code 2)."""


@dataclass
class Entry:
    """One cell: its manifest view (model, task, method, budget, settings, ...) and its result."""

    view: dict[str, Any]
    result: Any  # CellResult

    @property
    def key(self) -> tuple:
        model, task, seed = (self.view.get(f) for f in key_fields())
        return model, task, method_identity(self.view, self.result), seed

    @property
    def label(self) -> str:
        v = self.view
        point = v.get("method") if v.get("budget") is None else f"{v.get('method')}@{v.get('budget')}"
        return f"{v.get('model')} | {v.get('task')} | {point} | seed {v.get('seed')}"


def load_entries(path: str | Path, role: str = "--baseline") -> tuple[str, list[Entry]]:
    """Cells of a baseline file or a results directory; ``(description, entries)``. Every cell is validated as it
    is read (:meth:`snapeval.results.store.ResultsStore.read`): bad input is a one-line :class:`UnusableInput`."""
    from snapeval.results.schema import CellResult
    from snapeval.results.store import ResultsStore

    path = Path(path)
    if path.is_dir():
        store = ResultsStore(path)
        try:
            views = store.read_manifest()["cells"]
            entries = [Entry(v, store.read(v["cell_id"])) for v in views if store.cell_path(v["cell_id"]).is_file()]
        except SnapevalError as exc:
            raise UnusableInput(str(exc)) from None
        return f"results directory {path}", _unique(entries, f"{role} {path}")
    if not path.is_file():
        what = "a results directory" if role == "--current" else "a baseline JSON file or a results directory"
        raise UnusableInput(f"{role} {path} does not exist (give {what})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UnusableInput(f"{path} is not a readable baseline JSON file ({str(exc).splitlines()[0]}); write it again "
                            f"with `snapeval regress --current DIR --baseline {path} --write-baseline`") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        raise UnusableInput(f"{path}: not a snapeval baseline (format must be {BASELINE_FORMAT!r}); write one with "
                            f"`snapeval regress --current DIR --baseline {path} --write-baseline`")
    entries = []
    for i, cell in enumerate(data.get("cells") if isinstance(data.get("cells"), list) else []):
        where = f"{path}: cells[{i}]"
        if not isinstance(cell, dict) or not isinstance(cell.get("view"), dict) or "result" not in cell:
            raise UnusableInput(f"{where}: malformed baseline cell (needs 'view' and 'result'); write the baseline "
                                f"again with --write-baseline")
        try:
            entries.append(Entry(cell["view"], CellResult.from_dict(cell["result"])))
        except SnapevalError as exc:
            raise UnusableInput(f"{where}: {exc}; write the baseline again with --write-baseline from a good "
                                "results directory") from None
    return f"baseline {path}", _unique(entries, f"{role} {path}")


def _unique(entries: list[Entry], where: str) -> list[Entry]:
    """``entries``, refused (one line, :class:`UnusableInput`) when two cells share a key: one of them would be
    compared and the other silently ignored."""
    seen: dict[tuple, Entry] = {}
    for entry in entries:
        first = seen.setdefault(entry.key, entry)
        if first is not entry:
            raise UnusableInput(f"{where}: two cells with one key ({entry.label}): cell ids {first.result.cell_id} "
                                f"and {entry.result.cell_id}; allowed: one cell per (model, task, method settings, "
                                "seed)")
    return entries


def write_baseline(results_dir: str | Path, path: str | Path) -> int:
    """Freeze a results directory's finished cells into one baseline JSON file; returns the number of cells. The
    file's directory must exist (a mistyped path is an error, not a new directory tree)."""
    from dataclasses import asdict

    from snapeval.results.store import atomic_write_text

    path = Path(path)
    if not path.parent.is_dir():
        raise UnusableInput(f"--baseline {path}: directory {path.parent} does not exist; create it first "
                            f"(mkdir -p {path.parent}) or give another path")
    _, entries = load_entries(results_dir, "--current")
    if not entries:
        raise UnusableInput(f"{results_dir} has no finished cells to freeze")
    cells = [{"view": e.view, "result": asdict(e.result)} for e in entries]
    atomic_write_text(path, json.dumps({"format": BASELINE_FORMAT, "cells": cells}, indent=1, sort_keys=True,
                                       ensure_ascii=False) + "\n")
    return len(cells)


# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Finding:
    kind: str  # "regression", "changed", "missing", "unpaired", "mismatch", "note", "improved", "ok"
    label: str
    text: str


FAILING = ("inconsistent", "unguarded", "regression", "changed", "missing", "unpaired", "mismatch")
TAGS = {"inconsistent": "INCONSISTENT", "unguarded": "UNGUARDED", "regression": "REGRESSION", "changed": "CHANGED",
        "missing": "MISSING", "unpaired": "UNPAIRED", "mismatch": "MISMATCH", "note": "note", "improved": "improved",
        "ok": "ok"}


@dataclass
class Comparison:
    findings: list[Finding] = field(default_factory=list)
    cells: int = 0
    allow_unpaired: bool = False
    sampled_tests: int = 0  # the Holm family: sampled cells whose headline metric was tested

    def count(self, kind: str) -> int:
        return sum(f.kind == kind for f in self.findings)

    @property
    def failed(self) -> bool:
        return any(f.kind in FAILING for f in self.findings)


def tolerance(se_base: float | None, se_cur: float | None, z: float, margin: float) -> float:
    """The largest drop that counts as noise: ``max(z * sqrt(se_base^2 + se_cur^2), margin)``."""
    combined = math.sqrt((se_base or 0.0) ** 2 + (se_cur or 0.0) ** 2)
    return max(z * combined, margin)


def _comparable(base: Entry, cur: Entry) -> str | None:
    """Why two cells with the same key did not measure the same thing (None when they did)."""
    b, c = base.result.identity, cur.result.identity
    checks = [("sample limit", b["task"].get("limit"), c["task"].get("limit")),
              ("generation settings", b["task"].get("generation"), c["task"].get("generation")),
              ("task parameters", b["task"].get("metadata"), c["task"].get("metadata")),
              ("data files", b["task"].get("data"), c["task"].get("data")),
              ("model settings", b.get("model"), c.get("model"))]
    for what, x, y in checks:
        if x != y:
            return f"{what} differ: baseline {json.dumps(x, sort_keys=True)} vs current {json.dumps(y, sort_keys=True)}"
    return None


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def _docs(keys, limit: int = 5) -> str:
    """``"doc 3, doc 7, ... (+12 more)"`` for a set of ``(subtask, doc_id)`` items."""
    ordered = sorted(keys)
    shown = ", ".join(f"doc {d}" if s == ordered[0][0] else f"{s} doc {d}" for s, d in ordered[:limit])
    return shown + (f" (+{len(ordered) - limit} more)" if len(ordered) > limit else "")


def _headline(entry: Entry):
    """The cell's headline :class:`~snapeval.results.schema.MetricValue` (None when it reports no metric)."""
    if not entry.result.metrics:
        return None
    subtask, key = headline_metric(entry.view, entry.result)
    return next(m for m in entry.result.metrics if (m.subtask, m.key) == (subtask, key))


def pairing_problems(base: Entry, cur: Entry) -> list[tuple[str, str]]:
    """Why ``cur`` does not pair with ``base``, one ``(kind, line)`` per problem (empty: it pairs): a baseline
    without a headline aggregate (none or null), an item of either side without the headline per-item score, another
    task source, another greedy status, other or fewer items, an item of the same id with another target, a
    baseline aggregate missing. A ``note`` (a baseline from before task source hashes) does not fail."""
    problems = []
    b, c = base.result, cur.result
    head = _headline(base)
    if head is None or head.value is None:
        what = "reports no aggregate" if head is None else f"has a null headline aggregate {_metric_name(base, head)}"
        return [("missing", f"the baseline cell {what}: nothing to guard; write the baseline again with "
                            "--write-baseline from a finished run")]
    scored = _unscored(b, head.key, head.subtask)
    if scored[0] == 0:
        return [("unpaired", f"the baseline has no per-item samples scored on the headline metric "
                             f"{_metric_name(base, head)}: write it again with --write-baseline from a run that "
                             "logs samples")]
    if _unscored(c, head.key, head.subtask)[0] == 0:
        return [("unpaired", f"no per-item samples scored on the headline metric {_metric_name(base, head)} in "
                             f"the current run (the baseline has {len(b.samples)}): it cannot be paired")]
    for side, result in (("baseline", b), ("current run", c)):
        total, unscored = _unscored(result, head.key, head.subtask)
        if unscored:
            problems.append(("unpaired", f"{len(unscored)} of the {side}'s {total} items carry no per-item "
                                         f"{_metric_name(base, head)} score: {_docs(unscored)}; every item must "
                                         "carry the headline score"))
    if b.task_source_sha256 is None:
        problems.append(("note", "the baseline records no task source hash (written before issue #48): the task's "
                                 "source is not compared; write the baseline again with --write-baseline"))
    elif b.task_source_sha256 != c.task_source_sha256:
        problems.append(("mismatch", f"task source differs: baseline {b.task_source_sha256[:12]} vs current "
                                     f"{(c.task_source_sha256 or 'none')[:12]} (the task's prompts or scoring "
                                     "changed: not the same items); write the baseline again if the change is "
                                     "intended"))
    if b.deterministic != c.deterministic:
        sampled = [(s.subtask, s.doc_id) for s in (c if b.deterministic else b).samples if not s.greedy]
        side = "current" if b.deterministic else "baseline"
        status = {True: "greedy", False: "sampled"}
        problems.append(("mismatch", f"greedy status differs: the baseline is {status[b.deterministic]}, the current "
                                     f"run is {status[c.deterministic]} ({len(sampled)} {side} item(s) not greedy: "
                                     f"{_docs(sampled)}); rerun with the baseline's generation settings"))
    bi = {(s.subtask, s.doc_id) for s in b.samples}
    ci = {(s.subtask, s.doc_id) for s in c.samples}
    if bi != ci:
        missing, other = bi - ci, ci - bi
        parts = [f"the current run scored {len(bi & ci)} of the baseline's {len(bi)} items"]
        if missing:
            parts.append(f"{len(missing)} missing: {_docs(missing)}")
        if other:
            parts.append(f"{len(other)} not in the baseline: {_docs(other)}")
        problems.append(("unpaired", "; ".join(parts)))
    targets = {(s.subtask, s.doc_id): s.target for s in b.samples}
    moved = [(s.subtask, s.doc_id) for s in c.samples if (s.subtask, s.doc_id) in targets
             and targets[(s.subtask, s.doc_id)] != s.target]
    if moved:
        problems.append(("unpaired", f"{len(moved)} item(s) have another target in the current run: {_docs(moved)} "
                                     "(the same doc ids hold other items)"))
    cur_metrics = {(m.subtask, m.key): m for m in c.metrics}
    absent = [_metric_name(base, m) for m in b.metrics if m.value is not None
              and (cur_metrics.get((m.subtask, m.key)) is None or cur_metrics[(m.subtask, m.key)].value is None)]
    if absent:
        lead = "the headline aggregate " if head is not None and _metric_name(base, head) in absent else "aggregates "
        problems.append(("missing", f"{lead}missing from the current cell: {', '.join(absent[:6])}"
                                    + (f" (+{len(absent) - 6} more)" if len(absent) > 6 else "")))
    return problems


def _unscored(result, metric: str, subtask: str) -> tuple[int, list[tuple[str, int]]]:
    """``(items of subtask, those without a per-item score on metric)`` of one cell."""
    items = [s for s in result.samples if s.subtask == subtask]
    return len(items), [(s.subtask, s.doc_id) for s in items if metric not in s.scores]


def _item_changes(base, cur) -> tuple[list[str], int]:
    """Every per-item difference of two greedy cells, one line per item: an item on one side only, a changed score
    (every metric), a changed generated text (with a short diff). Returns ``(lines, items compared)``."""
    b = {(s.subtask, s.doc_id): s for s in base.samples}
    c = {(s.subtask, s.doc_id): s for s in cur.samples}
    lines = []
    for key in sorted(set(b) | set(c)):
        subtask, doc = key
        where = f"{subtask} doc {doc}"
        if key not in c:
            lines.append(f"{where}: missing from the current run")
            continue
        if key not in b:
            lines.append(f"{where}: not in the baseline")
            continue
        sb, sc = b[key], c[key]
        scores = [f"{m} {_fmt(sb.scores.get(m))} -> {_fmt(sc.scores.get(m))}"
                  for m in sorted(set(sb.scores) | set(sc.scores)) if sb.scores.get(m) != sc.scores.get(m)]
        parts = []
        if scores:
            parts.append("score " + ", ".join(scores))
        if sb.generations != sc.generations:
            parts.append("text changed")
        if parts:
            lines.append(f"{where}: {'; '.join(parts)}")
            if sb.generations != sc.generations:
                old, new = "\n".join(sb.generations), "\n".join(sc.generations)
                diff = list(difflib.unified_diff(old.splitlines() or [""], new.splitlines() or [""], "baseline",
                                                 "current", lineterm="", n=0))[2:]
                lines += [f"    {d[:200]}" for d in diff if not d.startswith("@@")][:MAX_DIFF_LINES]
    return lines, len(set(b) | set(c))


def _metric_name(base: Entry, metric) -> str:
    return metric.key if metric.subtask == base.view.get("task") else f"{metric.subtask}/{metric.key}"


def _greedy_findings(base: Entry, cur: Entry, sampled: bool = False) -> list[Finding]:
    lines, compared = _item_changes(base.result, cur.result)
    rule = "sampled from seeded streams" if sampled else "greedy"
    items = [line for line in lines if not line.startswith("    ")]
    cur_metrics = {(m.subtask, m.key): m for m in cur.result.metrics}
    aggregates = [f"{_metric_name(base, m)} {_fmt(m.value)} -> {_fmt(cur_metrics[(m.subtask, m.key)].value)}"
                  for m in base.result.metrics
                  if (m.subtask, m.key) in cur_metrics and cur_metrics[(m.subtask, m.key)].value != m.value]
    if not items and not aggregates:
        return [Finding("ok", base.label, f"{rule}: all {compared} items have identical scores and texts")]
    text = [f"{len(items)} of {compared} items changed ({rule} decoding reproduces every item)"
            + (f"; metrics {', '.join(aggregates)}" if aggregates else "")]
    shown = 0
    for line in lines:
        if not line.startswith("    "):
            shown += 1
        if shown > MAX_ITEMS:
            text.append(f"  ... and {len(items) - MAX_ITEMS} more items")
            break
        text.append(f"  {line}")
    return [Finding("changed", base.label, "\n".join(text))]


@dataclass
class _SampledTest:
    """One sampled cell's headline test, held until the whole family is known (Holm)."""

    base: Entry
    cur: Entry
    metric: Any  # the baseline's MetricValue
    p: float


def _stderrs(base: Entry, cur: Entry, bm) -> tuple[float | None, float | None]:
    """Both cells' standard errors of ``bm``'s mean recomputed from their items (never read from a file; None
    without items, which the tolerance then counts as 0: the margin alone)."""
    from snapeval.stats.consistency import item_stderr

    return item_stderr(base.result, bm.subtask, bm.key), item_stderr(cur.result, bm.subtask, bm.key)


def _tolerance_finding(base: Entry, cur: Entry, bm, cm, rule: DecisionRule, z: float, why: str) -> Finding:
    drop = (bm.value - cm.value) if bm.higher_is_better else (cm.value - bm.value)
    tol = tolerance(*_stderrs(base, cur, bm), z, rule.margin)
    kind = "regression" if drop > tol else "improved" if -drop > tol else "ok"
    return Finding(kind, base.label, f"{_metric_name(base, bm)}: {bm.value:.4f} -> {cm.value:.4f} ({-drop:+.4f}; "
                                     f"tolerance {tol:.4f}; {why})")


def _sampled_tests(base: Entry, cur: Entry, rule: DecisionRule, z: float) -> list[_SampledTest | Finding]:
    """The paired test of a drop of the headline metric and of every other metric with a value and per-item scores
    in both cells (a metric whose per-item scores equal the headline's on both sides is the same test and is not
    repeated; one where no item differs cannot reject and does not enter the family, Tarone 1990); a tolerance-rule
    :class:`Finding` where nothing can be paired (only reached with ``--allow-unpaired``)."""
    head = _headline(base)
    if head is None or head.value is None:
        return []
    out = []
    first = _sampled_test(base, cur, head, rule, z)
    if first is not None:
        out.append(first)
    signature = {_item_signature(base, cur, head)}
    for bm in base.result.metrics:
        if bm is head or bm.value is None or not any(bm.key in s.scores for s in cur.result.samples
                                                     if s.subtask == bm.subtask):
            continue
        sig = _item_signature(base, cur, bm)
        if sig in signature or len(set(sig[0]) | set(sig[1])) == 0:
            continue
        signature.add(sig)
        if sig[0] == sig[1]:  # no item differs: the test cannot reject (p = 1)
            continue
        test = _sampled_test(base, cur, bm, rule, z)
        if isinstance(test, _SampledTest):
            out.append(test)
    return out


def _item_signature(base: Entry, cur: Entry, metric) -> tuple[tuple, tuple]:
    """A metric's per-item scores in both cells, in item order (equal signatures: the same paired test)."""
    def scores(result):
        return tuple(sorted(((s.doc_id, s.scores[metric.key]) for s in result.samples
                             if s.subtask == metric.subtask and metric.key in s.scores)))
    return scores(base.result), scores(cur.result)


def _sampled_test(base: Entry, cur: Entry, bm, rule: DecisionRule, z: float) -> _SampledTest | Finding | None:
    """``bm``'s paired test of a drop (None: no value to guard); a tolerance-rule :class:`Finding` where nothing can
    be paired (only reached with ``--allow-unpaired``)."""
    from snapeval.stats.paired import drop_check

    if bm is None or bm.value is None:
        return None
    cm = next((m for m in cur.result.metrics if (m.subtask, m.key) == (bm.subtask, bm.key)), None)
    try:
        check = drop_check(base.result, cur.result, bm.key, alpha=rule.alpha, higher_is_better=bm.higher_is_better,
                           subtask=bm.subtask)
    except SnapevalError:  # nothing shared: the tolerance rule, if the aggregate is there
        if cm is None or cm.value is None:
            return Finding("note", base.label, f"{_metric_name(base, bm)}: nothing to compare (no shared item, no "
                                               "aggregate)")
        return _tolerance_finding(base, cur, bm, cm, rule, z, "unpaired: --allow-unpaired")
    return _SampledTest(base, cur, bm, check.p_value)


def _sampled_findings(tests: list[_SampledTest], rule: DecisionRule, z: float, drop: float) -> list[Finding]:
    """Holm over the family of sampled headline tests: a cell fails at adjusted p < alpha. Power is stated at Holm's
    first level ``alpha / m`` against ``drop``, at the churn each cell measured."""
    from snapeval.stats.paired import drop_check

    m = len(tests)
    cells = len({id(t.base) for t in tests})
    level = rule.alpha / max(1, m)
    out = []
    for t, adjusted in zip(tests, holm([t.p for t in tests])):
        bm, base, cur = t.metric, t.base, t.cur
        check = drop_check(base.result, cur.result, bm.key, alpha=level, drop=drop,
                           higher_is_better=bm.higher_is_better, subtask=bm.subtask)
        cm = next((x for x in cur.result.metrics if (x.subtask, x.key) == (bm.subtask, bm.key)), None)
        cur_value = None if cm is None else cm.value
        shown = "none" if cur_value is None else f"{cur_value:.4f}"
        text = (f"{_metric_name(base, bm)}: {bm.value:.4f} -> {shown} (paired over {check.n} items in "
                f"{check.clusters} clusters: {check.mean_diff:+.4f}, {check.worse} worse, {check.better} better; "
                f"{check.test} p={check.p_value:.3g}, Holm p={adjusted:.3g} over {m} sampled "
                f"{'cells' if m == cells else 'tests'}; power "
                f"{check.power:.0%} against a {drop * 100:g}-point drop at {check.churn:.0%} churn, level "
                f"{level:.3g})")
        kind = "regression" if adjusted < rule.alpha else "ok"
        if kind == "ok" and check.smallest_p >= level and cur_value is not None:
            observed = (bm.value - cur_value) if bm.higher_is_better else (cur_value - bm.value)
            tol = tolerance(*_stderrs(base, cur, bm), z, rule.margin)
            text += (f"; the paired test cannot reject at n={check.n} (smallest possible p {check.smallest_p:.3g} >= "
                     f"level {level:.3g}), so the tolerance rule applies too: drop {observed:+.4f} vs tolerance "
                     f"{tol:.4f}")
            kind = "regression" if observed > tol else "ok"
        if kind == "ok" and drop_check(cur.result, base.result, bm.key, alpha=level,
                                       higher_is_better=bm.higher_is_better, subtask=bm.subtask).p_value < level:
            kind = "improved"
        out.append(Finding(kind, base.label, text))
    return out


def compare(baseline: list[Entry], current: list[Entry], *, rule: DecisionRule = DecisionRule(),
            z: float = DEFAULT_Z, allow_unpaired: bool = False, drop: float = REGRESSION_DROP,
            exact_sampled: bool = False) -> Comparison:
    """Compare every baseline cell with the current cell of the same key (see the module docstring).
    ``exact_sampled``: sampled cells too must reproduce every item (the greedy rule)."""
    cur_by_key = {e.key: e for e in current}
    if not baseline:
        raise UnusableInput("the baseline has no cells")
    if not any(b.key in cur_by_key for b in baseline):
        raise UnusableInput("no cell of the baseline is in the current results (different models, tasks or budgets?)")
    from snapeval.stats.consistency import folder_problems, pair_problems

    out = Comparison(cells=len(baseline), allow_unpaired=allow_unpaired)
    inconsistent: dict[tuple, list[str]] = {}
    for role, entries in (("the baseline", baseline), ("the current run", current)):
        for entry, line in folder_problems(entries, role):
            inconsistent.setdefault(entry.key, []).append(f"{role}: {line}")
    base_keys = {b.key for b in baseline}
    for cur in current:
        if cur.key not in base_keys:
            out.findings.append(Finding(
                "note" if allow_unpaired else "unguarded", cur.label,
                "a current cell with no baseline cell (an extra seed or configuration): nothing guards it; allowed: "
                "the baseline's cells only (write the baseline again with --write-baseline to guard it)"))
    sampled: list[_SampledTest] = []
    for base in baseline:
        cur = cur_by_key.get(base.key)
        if cur is None:
            out.findings.append(Finding("missing", base.label, "cell missing from the current results"))
            continue
        why = _comparable(base, cur)
        if why:
            raise UnusableInput(f"{base.label}: cannot compare: {why}")
        problems = pairing_problems(base, cur)
        out.findings += [Finding(kind, base.label, line) for kind, line in problems if kind == "note"]
        problems = [(kind, line) for kind, line in problems if kind != "note"]
        if not problems:  # a cell that pairs: its folder's consistency, and the same text scored the same on both
            exact = exact_sampled or (base.result.deterministic and cur.result.deterministic)
            own = inconsistent.get(base.key, []) + ([] if exact else pair_problems(base, cur))
            out.findings += [Finding("inconsistent", base.label, line) for line in own]
        if problems and not allow_unpaired:
            out.findings += [Finding(kind, base.label, line) for kind, line in problems]
            continue
        out.findings += [Finding("note", base.label, f"{line} (--allow-unpaired: compared anyway)")
                         for _, line in problems]
        if exact_sampled or (base.result.deterministic and cur.result.deterministic):
            out.findings += _greedy_findings(base, cur, exact_sampled and not base.result.deterministic)
            continue
        for test in _sampled_tests(base, cur, rule, z):
            if isinstance(test, Finding):
                out.findings.append(test)
            else:
                sampled.append(test)
    out.sampled_tests = len(sampled)
    out.findings += _sampled_findings(sampled, rule, z, drop)
    return out


def render(comp: Comparison, base_desc: str, cur_desc: str, rule: DecisionRule, z: float,
           drop: float = REGRESSION_DROP) -> str:
    lines = [f"snapeval regress: {cur_desc} vs {base_desc}",
             "every current cell must pair with its baseline cell (the same items with the same targets, every item "
             "scored on the headline metric, the baseline's aggregates, the same task source and greedy status); "
             "greedy cells: any change of a per-item score or text fails, item "
             f"by item; sampled cells: a one-sided paired test of a drop of the headline metric, Holm-adjusted over "
             f"the {comp.sampled_tests} sampled cells at family-wise alpha={rule.alpha:g} (power against a "
             f"{drop * 100:g}-point drop at the churn measured shown); where the paired test cannot reject at all: a "
             f"drop beyond max({z:g} x sqrt(se_base^2 + se_cur^2), margin {rule.margin:g}) fails"]
    if comp.allow_unpaired:
        lines.append("--allow-unpaired: EXPLORATION ONLY, not a regression guard: cells that do not pair are "
                     "compared on what they share, or by the tolerance rule")
    order = list(TAGS)
    for f in sorted(comp.findings, key=lambda f: order.index(f.kind)):
        first, *rest = f.text.splitlines() or [""]
        lines.append(f"{TAGS[f.kind]:<11} {f.label}: {first}")
        lines += rest
    verdict = "FAIL" if comp.failed else "PASS"
    lines.append(f"{verdict}{' (exploration, --allow-unpaired)' if comp.allow_unpaired else ''}: {comp.cells} "
                 f"baseline cells; {comp.count('regression')} accuracy regressions, {comp.count('changed')} greedy "
                 f"cells with changed items, {comp.count('unpaired') + comp.count('mismatch')} not paired, "
                 f"{comp.count('missing')} missing, {comp.count('improved')} improvements")
    return "\n".join(lines)


def run(baseline: str | Path, current: str | Path, *, rule: DecisionRule = DecisionRule(), z: float = DEFAULT_Z,
        stream: TextIO | None = None, allow_unpaired: bool = False, drop: float = REGRESSION_DROP,
        exact_sampled: bool = False) -> int:
    """Compare and print; returns the exit code (0 ok, 1 regression or unpaired cells, 2 unusable input)."""
    stream = stream if stream is not None else sys.stdout
    if not (isinstance(z, (int, float)) and z > 0 and math.isfinite(z)):
        raise UnusableInput(f"--z={z} is invalid; allowed: a number > 0")
    if not (isinstance(drop, (int, float)) and 0 < drop < 1):
        raise UnusableInput(f"--drop={drop} is invalid; allowed: a number in (0, 1), e.g. {REGRESSION_DROP}")
    base_desc, base = load_entries(baseline)
    if not Path(current).is_dir():
        raise UnusableInput(f"--current {current} is not a results directory (run `snapeval sweep` first)")
    cur_desc, cur = load_entries(current, "--current")
    comp = compare(base, cur, rule=rule, z=z, allow_unpaired=allow_unpaired, drop=drop, exact_sampled=exact_sampled)
    print(render(comp, base_desc, cur_desc, rule, z, drop), file=stream)
    return 1 if comp.failed else 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "regress", help="fail when a greedy cell changes any item or accuracy drops significantly vs a baseline",
        description="Compare every (model, task, method, budget) cell of a results directory with a baseline. Every "
                    "cell must pair with the baseline's (same items and targets, every item scored on the headline "
                    "metric, aggregates, task source, greedy status). "
                    "Greedy cells fail on any per-item score or text change; sampled cells on a significant "
                    "one-sided paired drop, Holm-adjusted over the sampled cells. Exit 0: no regression; 1: "
                    "regression or a cell that does not pair; 2: unusable input.")
    p.add_argument("--baseline", required=True, help="baseline JSON file (or a results directory)")
    p.add_argument("--current", required=True, help="results directory written by `snapeval sweep`")
    p.add_argument("--alpha", type=float, default=None,
                   help=f"level of the one-sided paired test of a drop (default {DEFAULT_ALPHA})")
    p.add_argument("--margin", type=float, default=None,
                   help=f"drops up to this size (metric units) never fail the tolerance rule (default {DEFAULT_MARGIN})")
    p.add_argument("--z", type=float, default=DEFAULT_Z,
                   help=f"tolerance rule: stderr multiple a drop must exceed to fail (default {DEFAULT_Z})")
    p.add_argument("--drop", type=float, default=REGRESSION_DROP,
                   help=f"the drop (metric units) whose detection power each sampled cell states (default "
                        f"{REGRESSION_DROP})")
    p.add_argument("--allow-unpaired", action="store_true",
                   help="EXPLORATION ONLY: compare cells that do not pair with the baseline (other or fewer items, "
                        "no per-item samples, another greedy status) on what they share or by the tolerance rule, "
                        "instead of failing; not a regression guard")
    p.add_argument("--exact-sampled", action="store_true",
                   help="sampled cells must reproduce every item too, as greedy ones do: each sampled request draws "
                        "from a stream seeded by its item and the run's seed, so the same code on the same machine "
                        "samples the same text (what CI checks: a change of the sampler fails)")
    p.add_argument("--write-baseline", action="store_true",
                   help="instead of comparing, freeze --current into the --baseline file (its directory must exist)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from snapeval import preflight

    preflight.check_results_to_read(args.current, "--current")
    if args.write_baseline:
        preflight.check_output_file(args.baseline, "--baseline")
        n = write_baseline(args.current, args.baseline)
        print(f"wrote baseline {args.baseline} ({n} cells from {args.current})")
        return 0
    try:
        rule = DecisionRule().with_overrides(margin=args.margin, alpha=args.alpha)
    except SnapevalError as exc:
        raise UnusableInput(str(exc).replace("decision.", "--", 1)) from None
    return run(args.baseline, args.current, rule=rule, z=args.z, allow_unpaired=args.allow_unpaired, drop=args.drop,
               exact_sampled=args.exact_sampled)
