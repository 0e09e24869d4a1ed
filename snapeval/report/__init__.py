"""Reports: the tidy results table (:mod:`~snapeval.report.results_table`: cells joined to simulated cost and paired
statistics), and the markdown and CSV comparison tables and PNG plots built from it."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from snapeval.errors import SnapevalError


@dataclass
class ReportPaths:
    """Files a report wrote."""

    markdown: Path
    csvs: list[Path] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    foreign_cells: list[str] = field(default_factory=list)  # cell files of another configuration, not reported


def build_report(results_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
                 rebuild: bool = True, decision=None) -> ReportPaths:
    """Write ``report.md``, ``comparison.csv``, ``accuracy_vs_budget.csv``, ``paired.csv``, ``decisions.csv`` and the
    PNG plots.

    ``out_dir`` defaults to ``<results_dir>/report``. With ``rebuild`` the tidy table is first re-derived from the
    cell files (so the current simulator and statistics compute it) and saved; otherwise ``results.parquet`` is used
    as is. ``decision``: a :class:`~snapeval.stats.DecisionRule` replacing the sweep's own margin and alpha (the
    table is then rebuilt with it for this report only: a what-if, never saved over the results directory's table,
    which keeps the sweep's own rule for every later reader).
    """
    from snapeval.report import plots, tables
    from snapeval.report.results_table import load_table, rebuild_table
    from snapeval.results.store import ResultsStore, atomic_write_text

    store = ResultsStore(results_dir)
    rebuilt = rebuild or decision is not None
    table = (rebuild_table(results_dir, write=decision is None, decision=decision) if rebuilt
             else load_table(results_dir))
    if table.empty or not table["primary"].any():
        raise SnapevalError(f"{results_dir}: no finished cells to report on")
    out = Path(out_dir) if out_dir is not None else store.root / "report"
    out.mkdir(parents=True, exist_ok=True)

    comp = tables.comparison(table)
    comp_csv = out / "comparison.csv"
    atomic_write_text(comp_csv, comp.to_csv(index=False))
    pivots = tables.accuracy_vs_budget(table)
    acc_csv = out / "accuracy_vs_budget.csv"
    acc_long = tables.points(table)[["model", "task", "metric", "method", "budget", "value", "stderr", "n_samples",
                                     "seeds"]]
    atomic_write_text(acc_csv, acc_long.to_csv(index=False))
    pair = tables.paired(table)
    pair_csv = out / "paired.csv"
    atomic_write_text(pair_csv, pair.to_csv(index=False))
    decision_csv = out / "decisions.csv"
    atomic_write_text(decision_csv, tables.decisions(pair).to_csv(index=False))
    pngs = plots.write_plots(comp, out, pair)

    manifest = store.read_manifest() if store.manifest_path.is_file() else {}
    name = manifest.get("sweep", store.root.name) if manifest else store.root.name
    md = [f"# snapeval report: {name}", ""]
    deploy = tables.decision_markdown(pair, _nothing_to_decide(manifest.get("cells") or [], table))
    if deploy:
        md += ["## Which budget can I deploy?", ""] + deploy + [""]
    md += ["## What the numbers are", "",
          f"Results: `{store.root}` ({table['cell_id'].nunique()} cells, {len(table)} metric rows). Accuracy is each "
          "task's headline metric; its uncertainty is given as paired intervals against the full cache at the "
          "decision's level (lm-eval's unpaired stderr stays in the CSV files). `sim` columns are the SN40L "
          "simulation of the matching full-size deployment (the model preset at its real size, the task's typical "
          "prompt/output lengths, "
          "the budget); measured KV bytes are this run's cache. Reductions are full / compressed; gains are "
          "compressed / full.", ""]
    summary = tables.significance_summary(pair)
    if summary:
        md += ["## Which differences are significant", ""] + tables.paired_legend(pair) + [""] + summary + [""]
    paired_md = tables.paired_markdown(pair)
    items = tables.items_summary(pair)
    sims = comp.drop_duplicates(["model", "task"])
    for (model, task), text in tables.comparison_markdown(comp, pair).items():
        pivot = pivots[(model, task)]
        md += [f"## {model} — {task}", "", "Accuracy vs budget:", "", _pivot_markdown(pivot), "", "Paired difference vs the full cache, memory and simulated throughput:", "", text, ""]
        if (model, task) in paired_md:
            md += ["Paired difference vs the full cache:", "", items.get((model, task), ""), "",
                   paired_md[(model, task)], ""]
        row = sims[(sims["model"] == model) & (sims["task"] == task)].iloc[0]
        if not _isna(row["sim_model"]) and not _isna(row["sim_prompt_len"]):
            md += [f"Simulated deployment: `{row['sim_model']}` on `{row['sim_hardware']}`, "
                   f"{int(row['sim_prompt_len']):,} prompt / {int(row['sim_gen_len']):,} output tokens, "
                   f"batch = largest that fits (capped).", ""]
    foreign = store.foreign_cells() if store.manifest_path.is_file() else []
    if foreign:
        md += ["## Cells not in this report", "",
               f"{len(foreign)} finished cell file(s) in `{store.cells_dir}` belong to another configuration of this "
               f"directory (not in its manifest) and are not reported: {', '.join(foreign[:10])}"
               + (" ..." if len(foreign) > 10 else "") + ".", ""]
    notes = table.loc[table["sim_note"].fillna("") != "", ["model", "task", "sim_note"]].drop_duplicates()
    if not notes.empty:
        md += ["## Simulation notes", ""] + [f"- {r.model} / {r.task}: {r.sim_note}" for r in notes.itertuples()] + [""]
    if pngs:
        md += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    md_path = out / "report.md"
    atomic_write_text(md_path, "\n".join(md))
    return ReportPaths(markdown=md_path, csvs=[comp_csv, acc_csv, pair_csv, decision_csv], plots=pngs,
                       foreign_cells=foreign)


def _nothing_to_decide(views: list[dict], table) -> list[str]:
    """Lines for the decision section about the sweep's (model, task) groups that cannot be decided in full: no
    finished cell at all, unfinished cells (named), or no compressed cell finished."""
    from snapeval.report.style import is_reference
    from snapeval.report.tables import budget_label

    finished = set(table["cell_id"])
    lines = []
    groups: dict[tuple[str, str], list[dict]] = {}
    for v in views:
        groups.setdefault((v.get("model"), v.get("task")), []).append(v)
    for (model, task), cells in groups.items():
        done = [v for v in cells if v.get("cell_id") in finished]
        todo = [f"{v.get('method')}@{budget_label(v.get('method'), v.get('budget'))}" for v in cells
                if v.get("cell_id") not in finished]
        if not done:
            lines.append(f"{model} / {task}: no finished cell ({len(cells)} in the sweep): no decision")
            continue
        if todo:
            lines.append(f"{model} / {task}: {len(todo)} of {len(cells)} cells unfinished, not decided on: "
                         + ", ".join(todo[:12]) + (" ..." if len(todo) > 12 else ""))
        if not any(not is_reference(v.get("method")) for v in done):
            lines.append(f"{model} / {task}: no compressed cell finished: nothing to compare with the full cache")
    return lines


def _isna(value) -> bool:
    import pandas as pd

    return value is None or bool(pd.isna(value))


def _pivot_markdown(pivot) -> str:
    cols = [str(c) for c in pivot.columns]
    lines = ["| method | " + " | ".join(cols) + " |", "|" + " --- |" * (len(cols) + 1)]
    for method, row in pivot.iterrows():
        lines.append(f"| {method} | " + " | ".join(str(v) for v in row.tolist()) + " |")
    return "\n".join(lines)
