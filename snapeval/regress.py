"""``snapeval regress``: accuracy regression check of a results directory against a committed baseline.

Cells are matched on (model, task, method, budget split, seed). For every metric of every baseline cell:

* when both cells scored the same items (per-item scores on both sides), a metric fails when its paired drop is
  significant: the paired bootstrap 95% CI of the per-item difference lies entirely below zero (items resampled
  jointly, :mod:`snapeval.results.paired`) and, for 0/1 metrics, the exact McNemar test agrees (p < 0.05). Pairing
  removes the between-item variance that unpaired error bars carry, so real drops on few items are caught;
* otherwise (no per-item scores, or different items: never silently paired) an accuracy drop larger than
  ``max(z * sqrt(se_base^2 + se_cur^2), floor)`` fails (for a lower-is-better metric a rise is a drop); an equally
  large gain is reported but passes;
* for cells decoded greedily on both sides, any change of any generated text fails, whatever the accuracy did
  (greedy decoding is deterministic: a changed text is a changed code path), with a diff of the first changes;
* a baseline cell or metric missing from the current results fails.

Exit codes: 0 no regression, 1 regression, 2 unusable input (unreadable files, nothing to compare, or cells that
ran under different conditions: another sample limit, generation settings, task parameters or data files).

Baselines are JSON files written by ``snapeval regress --current DIR --baseline FILE --write-baseline``; a results
directory is accepted as a baseline too.
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

from snapeval.errors import SnapevalError

BASELINE_FORMAT = "snapeval-baseline/1"
KEY_FIELDS = ("model", "task", "method", "budget", "sink", "recent", "topk", "observation", "kernel", "pooling",
              "seed")
DEFAULT_Z = 3.0
DEFAULT_FLOOR = 0.02
MAX_DIFFS = 3


class UnusableInput(SnapevalError):
    """Input that cannot be compared (exit code 2)."""


@dataclass
class Entry:
    """One cell: its manifest view (model, task, split, ...) and its result."""

    view: dict[str, Any]
    result: Any  # CellResult

    @property
    def key(self) -> tuple:
        return tuple(self.view.get(f) for f in KEY_FIELDS)

    @property
    def label(self) -> str:
        v = self.view
        point = "full" if v.get("method") == "full" else f"{v.get('method')}@{v.get('budget')}"
        return f"{v.get('model')} | {v.get('task')} | {point} | seed {v.get('seed')}"


def load_entries(path: str | Path, role: str = "--baseline") -> tuple[str, list[Entry]]:
    """Cells of a baseline file or a results directory; ``(description, entries)``."""
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
        raise UnusableInput(f"{path} is not a readable baseline JSON file: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        raise UnusableInput(f"{path}: not a snapeval baseline (format must be {BASELINE_FORMAT!r}); write one with "
                            f"`snapeval regress --current DIR --baseline {path} --write-baseline`")
    try:
        entries = [Entry(c["view"], CellResult.from_dict(c["result"])) for c in data["cells"]]
    except (KeyError, TypeError, SnapevalError) as exc:
        raise UnusableInput(f"{path}: malformed baseline cell: {exc}") from None
    return f"baseline {path}", entries


def write_baseline(results_dir: str | Path, path: str | Path) -> int:
    """Freeze a results directory's finished cells into one baseline JSON file; returns the number of cells."""
    from dataclasses import asdict

    from snapeval.results.store import atomic_write_text

    _, entries = load_entries(results_dir, "--current")
    if not entries:
        raise UnusableInput(f"{results_dir} has no finished cells to freeze")
    cells = [{"view": e.view, "result": asdict(e.result)} for e in entries]
    atomic_write_text(Path(path), json.dumps({"format": BASELINE_FORMAT, "cells": cells}, indent=1, sort_keys=True,
                                             ensure_ascii=False) + "\n")
    return len(cells)


# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Finding:
    kind: str  # "regression", "text", "missing", "improved", "ok"
    label: str
    text: str


@dataclass
class Comparison:
    findings: list[Finding] = field(default_factory=list)
    cells: int = 0

    def count(self, kind: str) -> int:
        return sum(f.kind == kind for f in self.findings)

    @property
    def failed(self) -> bool:
        return any(f.kind in ("regression", "text", "missing") for f in self.findings)


def tolerance(se_base: float | None, se_cur: float | None, z: float, floor: float) -> float:
    """The largest drop that counts as noise: ``max(z * sqrt(se_base^2 + se_cur^2), floor)``."""
    combined = math.sqrt((se_base or 0.0) ** 2 + (se_cur or 0.0) ** 2)
    return max(z * combined, floor)


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


def _text_diff(base, cur) -> Finding | None:
    """A finding when greedy generations differ, with a unified diff of the first few changed documents."""
    if not (base.deterministic and cur.deterministic and base.has_generations):
        return None
    b, c = base.generations_by_doc(), cur.generations_by_doc()
    changed = [k for k in sorted(set(b) | set(c)) if b.get(k) != c.get(k)]
    if not changed:
        return None
    lines = [f"{len(changed)}/{len(b)} greedy generations changed"]
    for subtask, doc in changed[:MAX_DIFFS]:
        old = "\n".join(b.get((subtask, doc), ("<missing>",)))
        new = "\n".join(c.get((subtask, doc), ("<missing>",)))
        lines.append(f"  {subtask} doc {doc}:")
        diff = difflib.unified_diff(old.splitlines() or [""], new.splitlines() or [""], "baseline", "current",
                                    lineterm="", n=1)
        lines += [f"    {d[:200]}" for d in list(diff)[2:]]
    if len(changed) > MAX_DIFFS:
        lines.append(f"  ... and {len(changed) - MAX_DIFFS} more")
    return Finding("text", "", "\n".join(lines))


def compare(baseline: list[Entry], current: list[Entry], *, z: float = DEFAULT_Z,
            floor: float = DEFAULT_FLOOR, paired: bool = True) -> Comparison:
    """Compare every baseline cell with the current cell of the same key (see the module docstring)."""
    cur_by_key = {e.key: e for e in current}
    common = [b for b in baseline if b.key in cur_by_key]
    if not baseline:
        raise UnusableInput("the baseline has no cells")
    if not common:
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
        cur_metrics = {(m.subtask, m.key): m for m in cur.result.metrics}
        cell_ok = True
        for bm in base.result.metrics:
            cm = cur_metrics.get((bm.subtask, bm.key))
            name = bm.key if bm.subtask == base.view.get("task") else f"{bm.subtask}/{bm.key}"
            if bm.value is None:  # e.g. a per-length score of a length this cell does not have: nothing to guard
                continue
            if cm is None or cm.value is None:
                out.findings.append(Finding("missing", base.label, f"{name}: missing from the current results"))
                cell_ok = False
                continue
            drop = (bm.value - cm.value) if bm.higher_is_better else (cm.value - bm.value)
            cmp = _paired(base.result, cur.result, bm) if paired else None
            if cmp is not None:
                lower = cmp.significant and cmp.mean_diff < 0
                higher = cmp.significant and cmp.mean_diff > 0
                worse, better = (lower, higher) if bm.higher_is_better else (higher, lower)
                mcnemar = "" if cmp.mcnemar_p is None else (f"; McNemar p={cmp.mcnemar_p:.3g}, "
                                                            f"{cmp.broke} broke, {cmp.fixed} fixed")
                text = (f"{name}: {bm.value:.4f} -> {cm.value:.4f} (paired over {cmp.n} items: "
                        f"{cmp.mean_diff:+.4f}, 95% CI [{cmp.ci_low:+.4f}, {cmp.ci_high:+.4f}]{mcnemar})")
                if worse:
                    out.findings.append(Finding("regression", base.label, text))
                    cell_ok = False
                elif better:
                    out.findings.append(Finding("improved", base.label, text))
                continue
            tol = tolerance(bm.stderr, cm.stderr, z, floor)
            text = f"{name}: {bm.value:.4f} -> {cm.value:.4f} ({-drop:+.4f}; tolerance {tol:.4f}; unpaired)"
            if drop > tol:
                out.findings.append(Finding("regression", base.label, text))
                cell_ok = False
            elif -drop > tol:
                out.findings.append(Finding("improved", base.label, text))
        diff = _text_diff(base.result, cur.result)
        if diff is not None:
            diff.label = base.label
            out.findings.append(diff)
            cell_ok = False
        if cell_ok:
            out.findings.append(Finding("ok", base.label, "within tolerance" + (
                "; greedy generations identical" if base.result.deterministic and base.result.has_generations else "")))
    return out


def _paired(base, cur, metric):
    """The paired comparison of one metric when both cells scored exactly the same items, else None (the unpaired
    tolerance rule applies: cells over different items are never paired)."""
    from snapeval.results.paired import compare_cells

    key = metric.key
    items = [{(s.subtask, s.doc_id) for s in r.samples if key in s.scores and s.subtask == metric.subtask}
             for r in (base, cur)]
    if not items[0] or items[0] != items[1]:
        return None
    base_only = _subtask_view(base, metric.subtask)
    cur_only = _subtask_view(cur, metric.subtask)
    return compare_cells(base_only, cur_only, key)


def _subtask_view(result, subtask):
    from types import SimpleNamespace

    return SimpleNamespace(samples=[s for s in result.samples if s.subtask == subtask])


def render(comp: Comparison, base_desc: str, cur_desc: str, z: float, floor: float) -> str:
    tags = {"regression": "REGRESSION", "text": "TEXT CHANGED", "missing": "MISSING", "improved": "improved",
            "ok": "ok"}
    lines = [f"snapeval regress: {cur_desc} vs {base_desc}",
             f"per metric: a paired 95% CI of the per-item difference below zero fails when both sides scored the "
             f"same items; otherwise tolerance max({z:g} x sqrt(se_base^2 + se_cur^2), {floor:g})"]
    order = ["regression", "text", "missing", "improved", "ok"]
    for f in sorted(comp.findings, key=lambda f: order.index(f.kind)):
        first, *rest = f.text.splitlines() or [""]
        lines.append(f"{tags[f.kind]:<12} {f.label}: {first}")
        lines += rest
    verdict = "FAIL" if comp.failed else "PASS"
    lines.append(f"{verdict}: {comp.cells} baseline cells; {comp.count('regression')} accuracy regressions, "
                 f"{comp.count('text')} cells with changed text, {comp.count('missing')} missing, "
                 f"{comp.count('improved')} improvements")
    return "\n".join(lines)


def run(baseline: str | Path, current: str | Path, *, z: float = DEFAULT_Z, floor: float = DEFAULT_FLOOR,
        stream: TextIO | None = None, paired: bool = True) -> int:
    """Compare and print; returns the exit code (0 ok, 1 regression, 2 unusable input)."""
    stream = stream if stream is not None else sys.stdout
    if not (z > 0 and floor >= 0):
        raise UnusableInput(f"--z must be > 0 and --floor >= 0; got z={z}, floor={floor}")
    base_desc, base = load_entries(baseline)
    if not Path(current).is_dir():
        raise UnusableInput(f"--current {current} is not a results directory (run `snapeval sweep` first)")
    cur_desc, cur = load_entries(current, "--current")
    comp = compare(base, cur, z=z, floor=floor, paired=paired)
    print(render(comp, base_desc, cur_desc, z, floor), file=stream)
    return 1 if comp.failed else 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "regress", help="fail when accuracy drops (beyond noise) or greedy text changes vs a baseline",
        description="Compare every (model, task, method, budget) cell of a results directory with a baseline. Exit "
                    "0: no regression; 1: regression; 2: unusable input.")
    p.add_argument("--baseline", required=True, help="baseline JSON file (or a results directory)")
    p.add_argument("--current", required=True, help="results directory written by `snapeval sweep`")
    p.add_argument("--z", type=float, default=DEFAULT_Z,
                   help=f"stderr multiple a drop must exceed to fail (default {DEFAULT_Z})")
    p.add_argument("--floor", type=float, default=DEFAULT_FLOOR,
                   help=f"smallest tolerance, in metric units (default {DEFAULT_FLOOR})")
    p.add_argument("--unpaired", action="store_true",
                   help="compare every metric with the stderr tolerance rule only, even where both sides scored the "
                        "same items (default: a paired test there)")
    p.add_argument("--write-baseline", action="store_true",
                   help="instead of comparing, freeze --current into the --baseline file")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.write_baseline:
        n = write_baseline(args.current, args.baseline)
        print(f"wrote baseline {args.baseline} ({n} cells from {args.current})")
        return 0
    return run(args.baseline, args.current, z=args.z, floor=args.floor, paired=not args.unpaired)
