"""``snapeval regress``: accuracy regression check of a results directory against a committed baseline.

Cells are matched on (model, task, the method's identity, seed: :func:`key_fields`, :func:`method_identity`). It guards drops
(one-sided), per baseline cell:

* **greedy cells** (both sides decoded greedily): decoding is deterministic, so *any* change of a per-item score or
  a generated text fails, named item by item (a scoring-code change that keeps every text is caught as well as a
  cache change that alters an answer), and so does an item present on one side only;
* **sampled cells**, every metric with per-item scores on both sides: the one-sided paired test of a drop
  (:func:`snapeval.stats.paired.drop_check`: McNemar mid-p for 0/1 scores, the sign-flip test over clusters
  otherwise) fails at ``p < alpha``; its power against a 10-point drop at this n is printed. Below the n at which the
  test can reject at all (its smallest possible p is ``>= alpha``) it says so and the tolerance rule below applies
  too. Items present on one side only are counted as unpaired and left out;
* metrics without per-item scores (or ``--unpaired``): a drop larger than
  ``max(z * sqrt(se_base^2 + se_cur^2), margin)`` fails (for a lower-is-better metric a rise is a drop);
* a baseline cell or metric missing from the current results fails.

No multiplicity adjustment: every paired test runs at ``alpha``, because a guard prefers an alarm to a miss (with no
real change, expect at most ``alpha`` x the number of sampled tests false alarms; greedy cells have none).

Exit codes: 0 no regression, 1 regression, 2 unusable input (unreadable or invalid files, nothing to compare, or
cells that ran under different conditions: another sample limit, generation settings, task parameters or data).

Baselines are JSON files written by ``snapeval regress --current DIR --baseline FILE --write-baseline``; a results
directory is accepted as a baseline too.

Sizing ``configs/regression.yaml``: at 64 items per cell the one-sided mid-p McNemar test at alpha = 0.05 catches a
10-point drop made of broken items (``p_worse = 0.10``, ``p_better = 0``) with probability
``mcnemar_power(64, 0.10, 0.0, 0.05, "less") = 0.894``; at 55 items 0.813, at 40 items 0.577, at the old 4 items it
needed all 4 items broken (``tests/test_regress.py`` recomputes this from the config file).
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
        return f"results directory {path}", entries
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
    return f"baseline {path}", entries


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
    kind: str  # "regression", "changed", "missing", "unpaired", "improved", "ok"
    label: str
    text: str


FAILING = ("regression", "changed", "missing")


@dataclass
class Comparison:
    findings: list[Finding] = field(default_factory=list)
    cells: int = 0

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


def _greedy_findings(base: Entry, cur: Entry) -> list[Finding]:
    lines, compared = _item_changes(base.result, cur.result)
    items = [line for line in lines if not line.startswith("    ")]
    cur_metrics = {(m.subtask, m.key): m for m in cur.result.metrics}
    aggregates = [f"{_metric_name(base, m)} {_fmt(m.value)} -> {_fmt(cur_metrics[(m.subtask, m.key)].value)}"
                  for m in base.result.metrics
                  if (m.subtask, m.key) in cur_metrics and cur_metrics[(m.subtask, m.key)].value != m.value]
    if not items and not aggregates:
        return [Finding("ok", base.label, f"greedy: all {compared} items have identical scores and texts")]
    text = [f"{len(items)} of {compared} items changed (greedy decoding reproduces every item)"
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


def _has_items(result, metric) -> bool:
    return any(metric.key in s.scores for s in result.samples if s.subtask == metric.subtask)


def _sampled_findings(base: Entry, cur: Entry, rule: DecisionRule, z: float, paired: bool) -> list[Finding]:
    from snapeval.stats.paired import drop_check

    out = []
    cur_metrics = {(m.subtask, m.key): m for m in cur.result.metrics}
    bi = {(s.subtask, s.doc_id) for s in base.result.samples}
    ci = {(s.subtask, s.doc_id) for s in cur.result.samples}
    if bi != ci:
        out.append(Finding("unpaired", base.label, f"{len(bi ^ ci)} items in only one of the two runs "
                                                   f"({len(bi - ci)} baseline-only, {len(ci - bi)} current-only) are "
                                                   "left unpaired"))
    for bm in base.result.metrics:
        name = _metric_name(base, bm)
        if bm.value is None:  # e.g. a per-length score of a length this cell does not have: nothing to guard
            continue
        cm = cur_metrics.get((bm.subtask, bm.key))
        if cm is None or cm.value is None:
            out.append(Finding("missing", base.label, f"{name}: missing from the current results"))
            continue
        drop = (bm.value - cm.value) if bm.higher_is_better else (cm.value - bm.value)
        tol = tolerance(bm.stderr, cm.stderr, z, rule.margin)
        head = f"{name}: {bm.value:.4f} -> {cm.value:.4f}"
        check = None
        if paired and _has_items(base.result, bm) and _has_items(cur.result, cm):
            try:
                check = drop_check(base.result, cur.result, bm.key, alpha=rule.alpha,
                                   higher_is_better=bm.higher_is_better, subtask=bm.subtask)
            except SnapevalError:  # no shared item: the unpaired rule below
                check = None
        if check is None:
            text = f"{head} ({-drop:+.4f}; tolerance {tol:.4f}; unpaired)"
            kind = "regression" if drop > tol else "improved" if -drop > tol else "ok"
            out.append(Finding(kind, base.label, text))
            continue
        text = (f"{head} (paired over {check.n} items in {check.clusters} clusters: {check.mean_diff:+.4f}, "
                f"{check.worse} worse, {check.better} better; {check.test} p={check.p_value:.3g}; power "
                f"{check.power:.0%} against a {REGRESSION_DROP * 100:g}-point drop)")
        kind = "regression" if check.p_value < rule.alpha else "ok"
        if kind == "ok" and check.smallest_p >= rule.alpha:
            text += (f"; the paired test cannot reject at n={check.n} (smallest possible p {check.smallest_p:.3g} >= "
                     f"alpha {rule.alpha:g}), so the tolerance rule applies too: drop {drop:+.4f} vs tolerance "
                     f"{tol:.4f}")
            kind = "regression" if drop > tol else "ok"
        if kind == "ok" and drop_check(cur.result, base.result, bm.key, alpha=rule.alpha,
                                       higher_is_better=bm.higher_is_better, subtask=bm.subtask).p_value < rule.alpha:
            kind = "improved"
        out.append(Finding(kind, base.label, text))
    if not out:
        out.append(Finding("ok", base.label, "no metric to compare"))
    return out


def compare(baseline: list[Entry], current: list[Entry], *, rule: DecisionRule = DecisionRule(),
            z: float = DEFAULT_Z, paired: bool = True) -> Comparison:
    """Compare every baseline cell with the current cell of the same key (see the module docstring)."""
    cur_by_key = {e.key: e for e in current}
    if not baseline:
        raise UnusableInput("the baseline has no cells")
    if not any(b.key in cur_by_key for b in baseline):
        raise UnusableInput("no cell of the baseline is in the current results (different models, tasks or budgets?)")
    out = Comparison(cells=len(baseline))
    for base in baseline:
        cur = cur_by_key.get(base.key)
        if cur is None:
            out.findings.append(Finding("missing", base.label, "cell missing from the current results"))
            continue
        why = _comparable(base, cur)
        if why:
            raise UnusableInput(f"{base.label}: cannot compare: {why}")
        if base.result.deterministic and cur.result.deterministic:
            out.findings += _greedy_findings(base, cur)
        else:
            out.findings += _sampled_findings(base, cur, rule, z, paired)
    return out


def render(comp: Comparison, base_desc: str, cur_desc: str, rule: DecisionRule, z: float) -> str:
    tags = {"regression": "REGRESSION", "changed": "CHANGED", "missing": "MISSING", "unpaired": "unpaired",
            "improved": "improved", "ok": "ok"}
    lines = [f"snapeval regress: {cur_desc} vs {base_desc}",
             "greedy cells: any change of a per-item score or text fails, item by item; sampled cells: a one-sided "
             f"paired test of a drop at alpha={rule.alpha:g} per metric (power against a "
             f"{REGRESSION_DROP * 100:g}-point drop shown); where items cannot be paired, or the paired test cannot "
             f"reject at that n: a drop beyond max({z:g} x sqrt(se_base^2 + se_cur^2), margin {rule.margin:g}) fails"]
    order = list(tags)
    for f in sorted(comp.findings, key=lambda f: order.index(f.kind)):
        first, *rest = f.text.splitlines() or [""]
        lines.append(f"{tags[f.kind]:<11} {f.label}: {first}")
        lines += rest
    verdict = "FAIL" if comp.failed else "PASS"
    lines.append(f"{verdict}: {comp.cells} baseline cells; {comp.count('regression')} accuracy regressions, "
                 f"{comp.count('changed')} greedy cells with changed items, {comp.count('missing')} missing, "
                 f"{comp.count('improved')} improvements")
    return "\n".join(lines)


def run(baseline: str | Path, current: str | Path, *, rule: DecisionRule = DecisionRule(), z: float = DEFAULT_Z,
        stream: TextIO | None = None, paired: bool = True) -> int:
    """Compare and print; returns the exit code (0 ok, 1 regression, 2 unusable input)."""
    stream = stream if stream is not None else sys.stdout
    if not (isinstance(z, (int, float)) and z > 0 and math.isfinite(z)):
        raise UnusableInput(f"--z={z} is invalid; allowed: a number > 0")
    base_desc, base = load_entries(baseline)
    if not Path(current).is_dir():
        raise UnusableInput(f"--current {current} is not a results directory (run `snapeval sweep` first)")
    cur_desc, cur = load_entries(current, "--current")
    comp = compare(base, cur, rule=rule, z=z, paired=paired)
    print(render(comp, base_desc, cur_desc, rule, z), file=stream)
    return 1 if comp.failed else 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "regress", help="fail when a greedy cell changes any item or accuracy drops significantly vs a baseline",
        description="Compare every (model, task, method, budget) cell of a results directory with a baseline. Greedy "
                    "cells fail on any per-item score or text change; sampled cells on a significant one-sided "
                    "paired drop. Exit 0: no regression; 1: regression; 2: unusable input.")
    p.add_argument("--baseline", required=True, help="baseline JSON file (or a results directory)")
    p.add_argument("--current", required=True, help="results directory written by `snapeval sweep`")
    p.add_argument("--alpha", type=float, default=None,
                   help=f"level of the one-sided paired test of a drop (default {DEFAULT_ALPHA})")
    p.add_argument("--margin", type=float, default=None,
                   help=f"drops up to this size (metric units) never fail the tolerance rule (default {DEFAULT_MARGIN})")
    p.add_argument("--z", type=float, default=DEFAULT_Z,
                   help=f"tolerance rule: stderr multiple a drop must exceed to fail (default {DEFAULT_Z})")
    p.add_argument("--unpaired", action="store_true",
                   help="compare sampled cells with the tolerance rule only, even where both sides scored the same "
                        "items (default: the paired test there)")
    p.add_argument("--write-baseline", action="store_true",
                   help="instead of comparing, freeze --current into the --baseline file (its directory must exist)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.write_baseline:
        n = write_baseline(args.current, args.baseline)
        print(f"wrote baseline {args.baseline} ({n} cells from {args.current})")
        return 0
    try:
        rule = DecisionRule().with_overrides(margin=args.margin, alpha=args.alpha)
    except SnapevalError as exc:
        raise UnusableInput(str(exc).replace("decision.", "--", 1)) from None
    return run(args.baseline, args.current, rule=rule, z=args.z, paired=not args.unpaired)
