"""The tidy results table: one row per (cell, subtask, metric, filter), joined to SN40L-simulated cost and to the
paired statistics. It sits above the three it joins (results, the simulator's pricing, statistics), so none of them
imports it.

Measured columns come from the run itself (accuracy, stderr, n, KV-cache bytes, tokens/s on this machine). The
``sim_*`` columns price the *matching full-size deployment* on SN40L: :class:`snapeval.simulator.pricing.CellPricing`
computes them (the model preset at its real size, the task's typical lengths, the cell's method); the ``paired_*``
and decision columns come from :mod:`snapeval.stats`. The table only joins them. :func:`rebuild_table` derives it
from a results directory's cells, :func:`load_table` reads the saved one.
"""
from __future__ import annotations

import os
from typing import Any

from snapeval.cache.methods import METHOD_TABLE
from snapeval.errors import SnapevalError
from snapeval.results.schema import CellResult, group_id_of
from snapeval.results.store import ResultsStore
from snapeval.simulator.pricing import CellPricing, SimulateFn, measured_lengths
from snapeval.stats.decision import DecisionRule
from snapeval.stats.headline import headline_metric

_CELL = ["cell_id", "model", "task", "subtask", "method", "budget"]
_MEASURED = [
    "seed", "limit", "dtype", "metric", "filter", "primary", "higher_is_better", "value", "stderr",
    "n_samples", "kv_cache_bytes", "decode_tokens_per_s", "prefill_tokens_per_s", "prompt_tokens", "generated_tokens",
    "wall_s", "deterministic", "generations_sha256",
]
_SIMULATED = [
    "sim_hardware", "sim_model", "sim_prompt_len", "sim_gen_len", "sim_length_source", "sim_fits",
    "sim_kv_bytes_per_seq", "sim_batch", "sim_max_batch", "sim_kv_bytes_total", "sim_decode_tokens_per_s",
    "sim_decode_tokens_per_s_per_seq", "sim_prefill_seconds", "sim_full_kv_bytes_per_seq", "sim_full_max_batch",
    "sim_full_decode_tokens_per_s", "sim_hbm_bytes_per_socket", "sim_note",
]
#: Paired columns (filled on each compressed cell's primary metric against the full-cache cell of its group; see
#: :func:`snapeval.stats.compare_cells`) and the decision columns derived from them over a family: ``paired_p_holm``
#: and ``paired_significant`` (Holm within each (model, task)), ``smallest_ni_budget`` (fixed-sequence walk down each
#: (model, task, method)'s budgets; NA: no budget passed).
PAIRED_COLUMNS = [
    "paired_ref_cell", "paired_n", "paired_clusters", "paired_unpaired", "paired_diff", "paired_ci_low",
    "paired_ci_high", "paired_interval", "paired_test", "paired_p", "paired_p_holm", "paired_significant",
    "items_worse", "items_better", "paired_length_change", "paired_mdd", "ni_margin", "ni_alpha", "ni_p",
    "ni_drop_bound", "non_inferior", "ni_items_needed", "ni_design_effect", "smallest_ni_budget", "paired_note",
]


def columns(methods=()) -> list[str]:
    """Column order of the table of cells that ran ``methods``: the cell, the settings columns (snapeval's own
    methods' settings always, then those of any other method among ``methods``:
    :meth:`~snapeval.cache.methods.MethodTable.column_settings`; empty where a method has none), the measured columns,
    the ``sim_*`` ones (simulated on the configured hardware), the group and the paired and decision columns."""
    return [*_CELL, *METHOD_TABLE.column_settings(methods), *_MEASURED, *_SIMULATED, "group_id", *PAIRED_COLUMNS]


def paired_columns(view: dict[str, Any], result: CellResult, metric: str, reference: tuple[str, CellResult] | None,
                   rule: DecisionRule, higher_is_better: bool = True, family: int = 1,
                   layout_design_effect: float | None = None) -> dict[str, Any]:
    """The paired comparison of one compressed cell's ``metric`` with the full-cache cell of its group, or a note
    saying why there is none (no full-cache cell in the group; no shared item). ``family``: the compressed cells of
    its (model, task) that are Holm-adjusted together (the level of its minimum detectable drop);
    ``layout_design_effect``: the task's whole layout's (:func:`task_design_effect`), which the items that would
    settle its decision are planned with."""
    from snapeval.stats import compare_cells

    if METHOD_TABLE.is_reference(view.get("method")):
        return {}
    if reference is None:
        return {"paired_note": "no full-cache reference cell answered the same items (same model, task, seed, limit)"}
    ref_id, ref_result = reference
    try:
        cmp = compare_cells(ref_result, result, metric, rule=rule, higher_is_better=higher_is_better, family=family,
                            layout_design_effect=layout_design_effect)
    except SnapevalError as exc:
        return {"paired_ref_cell": ref_id, "paired_note": str(exc)}
    notes = []
    if cmp.unpaired:
        notes.append(f"{cmp.unpaired} items in only one of the two cells were left unpaired")
    if cmp.few_clusters:
        notes.append(f"only {cmp.clusters} clusters: the bootstrap interval is too narrow below 10")
    return {"paired_ref_cell": ref_id, "paired_n": cmp.n, "paired_clusters": cmp.clusters,
            "paired_unpaired": cmp.unpaired, "paired_diff": cmp.mean_diff, "paired_ci_low": cmp.ci_low,
            "paired_ci_high": cmp.ci_high, "paired_interval": cmp.interval, "paired_test": cmp.test,
            "paired_p": cmp.p_value, "items_worse": cmp.worse, "items_better": cmp.better,
            "paired_length_change": cmp.length_change, "paired_mdd": cmp.mdd, "ni_margin": rule.margin,
            "ni_alpha": rule.alpha, "ni_p": cmp.ni_p, "ni_drop_bound": cmp.drop_bound,
            "non_inferior": cmp.non_inferior, "ni_items_needed": cmp.n_for_margin,
            "ni_design_effect": cmp.planning_design_effect, "paired_note": "; ".join(notes)}


def task_design_effect(task: str) -> float | None:
    """The worst-case design effect of a task's whole item set (``sum(m^2) / n`` over its clusters: LongBench-v2's
    395 local questions in 367 documents give 1.32), computed from its family's cluster layout and local data; None
    when the task has no cluster layout or its data is not here (the paired items' own design effect is then used)."""
    from snapeval.stats.binary import worst_case_design_effect
    from snapeval.tasks.families import layout_cluster_sizes

    sizes = layout_cluster_sizes(task)
    return worst_case_design_effect(sizes) if sizes else None


def add_decisions(table, rule: DecisionRule) -> None:
    """Fill the family-level decision columns in place: Holm-adjusted p-values and significance within each
    (model, task), and each (model, task, method)'s smallest non-inferior budget (every seed of a budget must be
    non-inferior; budgets walked from the largest down, stopping at the first that is not: fixed-sequence)."""
    import pandas as pd

    from snapeval.stats import fixed_sequence, holm

    tested = table["primary"] & table["paired_p"].notna()
    for _, rows in table[tested].groupby(["model", "task"], sort=False):
        adjusted = holm(rows["paired_p"].tolist())
        table.loc[rows.index, "paired_p_holm"] = adjusted
        table.loc[rows.index, "paired_significant"] = [p < rule.alpha for p in adjusted]
    decided = tested & table["budget"].notna()
    for _, rows in table[decided].groupby(["model", "task", "method"], sort=False):
        passed = {int(b): bool(group["non_inferior"].astype(bool).all()) for b, group in rows.groupby("budget")}
        smallest = fixed_sequence(passed)
        table.loc[rows.index, "smallest_ni_budget"] = pd.NA if smallest is None else smallest



def build_table(views: list[dict[str, Any]], results: dict[str, CellResult], simulate_settings: dict[str, Any],
                simulate: SimulateFn | None | str = "default", decision: DecisionRule | None = None):
    """The tidy table of the finished cells among ``views`` (manifest entries, grid order), as a DataFrame.

    ``simulate``: the simulator function (``simulate_point``'s signature); "default" imports snapeval's; None
    leaves the ``sim_*`` columns empty with a note (see :class:`~snapeval.simulator.pricing.CellPricing`).
    ``decision``: the margin and alpha of the paired and decision columns (default
    :class:`~snapeval.stats.DecisionRule`'s).
    """
    rule = decision if decision is not None else DecisionRule()
    import pandas as pd

    views = [v.to_dict() if hasattr(v, "to_dict") else v for v in views]  # CellView objects or manifest dicts
    sim = CellPricing(simulate_settings, simulate)
    lengths = measured_lengths(views, results)
    # manifests from before group ids: the group follows from each finished cell's own identity
    views = [v if v.get("group_id") or v["cell_id"] not in results
             else {**v, "group_id": group_id_of(results[v["cell_id"]].identity)} for v in views]
    references = {v.get("group_id"): (v["cell_id"], results[v["cell_id"]]) for v in views
                  if METHOD_TABLE.is_reference(v.get("method")) and v.get("group_id") and v["cell_id"] in results}
    methods = [v.get("method") for v in views if v["cell_id"] in results]
    settings = METHOD_TABLE.column_settings(methods)
    families: dict[tuple, int] = {}  # (model, task): compressed cells with a reference, the Holm family
    for view in views:
        if view["cell_id"] in results and not METHOD_TABLE.is_reference(view.get("method")) \
                and view.get("group_id") in references:
            families[(view["model"], view["task"])] = families.get((view["model"], view["task"]), 0) + 1
    rows = []
    layouts = {task: task_design_effect(task) for task in {v["task"] for v in views if v["cell_id"] in results}}
    for view in views:
        result = results.get(view["cell_id"])
        if result is None:
            continue
        primary = headline_metric(view, result)
        cell_cols = {k: view.get(k)
                     for k in ("cell_id", "model", "task", "method", "budget", *settings, "seed", "limit", "dtype")}
        cell_cols.update(
            kv_cache_bytes=result.kv_cache_bytes, decode_tokens_per_s=result.decode_tokens_per_s,
            prefill_tokens_per_s=result.prefill_tokens_per_s, prompt_tokens=result.prompt_tokens,
            generated_tokens=result.generated_tokens, wall_s=result.wall_s, deterministic=result.deterministic,
            generations_sha256=result.generations_sha256,
            **sim.columns(view, lengths.get((view["model"], view["task"])), result.identity.get("policy")),
            group_id=view.get("group_id"),
        )
        for m in result.metrics:
            is_primary = (m.subtask, m.key) == primary
            paired = paired_columns(view, result, m.key, references.get(view.get("group_id")), rule,
                                    m.higher_is_better, families.get((view["model"], view["task"]), 1),
                                    layouts[view["task"]]) \
                if is_primary else {}
            rows.append({**cell_cols, **paired, "subtask": m.subtask, "metric": m.metric, "filter": m.filter,
                         "primary": (m.subtask, m.key) == primary, "higher_is_better": m.higher_is_better,
                         "value": m.value, "stderr": m.stderr, "n_samples": m.n})
    table = pd.DataFrame(rows, columns=columns(methods))
    integer_settings = [s.stored for s in METHOD_TABLE.settings([*METHOD_TABLE.builtin_names(), *methods])
                        if s.type is int and s.stored in settings]
    for col in ("budget", *integer_settings, "limit", "kv_cache_bytes",
                "prompt_tokens", "generated_tokens", "sim_prompt_len", "sim_gen_len", "sim_batch", "sim_max_batch",
                "sim_full_max_batch", "n_samples", "seed", "paired_n", "paired_clusters", "items_worse", "items_better",
                "paired_unpaired", "smallest_ni_budget"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("Int64")
    for col in ("value", "stderr", "decode_tokens_per_s", "prefill_tokens_per_s", "wall_s", "sim_kv_bytes_per_seq",
                "sim_kv_bytes_total", "sim_decode_tokens_per_s", "sim_decode_tokens_per_s_per_seq",
                "sim_prefill_seconds", "sim_full_kv_bytes_per_seq", "sim_full_decode_tokens_per_s",
                "sim_hbm_bytes_per_socket", "paired_diff", "paired_ci_low", "paired_ci_high", "paired_p",
                "paired_p_holm", "paired_length_change", "paired_mdd", "ni_margin", "ni_alpha", "ni_p", "ni_drop_bound",
                "ni_items_needed", "ni_design_effect"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("float64")
    for col in ("primary", "higher_is_better", "deterministic"):
        table[col] = table[col].astype("bool")
    table["sim_fits"] = table["sim_fits"].astype("boolean")
    table["paired_significant"] = table["paired_significant"].astype("boolean")
    table["non_inferior"] = table["non_inferior"].astype("boolean")
    add_decisions(table, rule)
    return table



def sweep_decision(results_dir: str | os.PathLike) -> DecisionRule:
    """The decision rule (margin, alpha) a results directory's sweep declared (its ``decision:`` key), else the
    default."""
    store = ResultsStore(results_dir)
    return DecisionRule.from_mapping(store.read_manifest().get("decision"), f"{store.manifest_path}: decision")


def rebuild_table(results_dir: str | os.PathLike, write: bool = True, decision: DecisionRule | None = None):
    """Re-derive the table of a results directory from its manifest and cell files (with the current simulator and
    statistics), and save it (``results.parquet`` and ``results.csv``). ``decision``: the margin and alpha to use
    (default: the sweep's own, :func:`sweep_decision`)."""
    store = ResultsStore(results_dir)
    manifest = store.read_manifest()
    if decision is None:
        decision = sweep_decision(results_dir)
    table = build_table(manifest["cells"], {r.cell_id: r for r in store.finished()}, manifest.get("simulate") or {},
                        decision=decision)
    if write and not table.empty:
        store.write_table(table)
    return table


def load_table(results_dir: str | os.PathLike):
    """The tidy table (a pandas DataFrame) of a results directory: ``results.parquet`` if present, else rebuilt from
    the manifest and the cell files (not saved)."""
    import pandas as pd

    parquet, _ = ResultsStore(results_dir).table_paths
    if parquet.is_file():
        return pd.read_parquet(parquet)
    return rebuild_table(results_dir, write=False)
