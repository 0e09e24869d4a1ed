"""The tidy results table: one row per (cell, subtask, metric, filter), joined to SN40L-simulated cost.

Measured columns come from the run itself (accuracy, stderr, n, KV-cache bytes, tokens/s on this machine). The
``sim_*`` columns price the *matching full-size deployment* on SN40L: :class:`snapeval.simulator.pricing.CellPricing`
computes them (the model preset at its real size, the task's typical lengths, the cell's method); the table only
joins them to the measured columns and the paired statistics.
"""
from __future__ import annotations

from typing import Any

from snapeval.results.schema import CellResult, group_id_of
from snapeval.errors import SnapevalError
from snapeval.simulator.pricing import CellPricing, SimulateFn, measured_lengths

#: Column order of the table (``sim_*``: simulated on the configured hardware; the rest measured here).
COLUMNS = [
    "cell_id", "model", "task", "subtask", "method", "budget", "sink", "recent", "topk", "observation", "kernel",
    "pooling", "seed", "limit", "dtype", "metric", "filter", "primary", "higher_is_better", "value", "stderr",
    "n_samples", "kv_cache_bytes", "decode_tokens_per_s", "prefill_tokens_per_s", "prompt_tokens", "generated_tokens",
    "wall_s", "deterministic", "generations_sha256",
    "sim_hardware", "sim_model", "sim_prompt_len", "sim_gen_len", "sim_length_source", "sim_fits",
    "sim_kv_bytes_per_seq", "sim_batch", "sim_max_batch", "sim_kv_bytes_total", "sim_decode_tokens_per_s",
    "sim_decode_tokens_per_s_per_seq", "sim_prefill_seconds", "sim_full_kv_bytes_per_seq", "sim_full_max_batch",
    "sim_full_decode_tokens_per_s", "sim_hbm_bytes_per_socket", "sim_note",
    "group_id", "paired_ref_cell", "paired_n", "paired_diff", "paired_ci_low", "paired_ci_high", "paired_significant",
    "mcnemar_p", "flips_broke", "flips_fixed", "paired_length_change", "paired_unpaired", "paired_note",
]

#: Paired columns (filled on each compressed cell's primary metric against the full-cache cell of its group).
PAIRED_COLUMNS = COLUMNS[COLUMNS.index("paired_ref_cell"):]


def paired_columns(view: dict[str, Any], result: CellResult, metric: str, reference: tuple[str, CellResult] | None,
                   ) -> dict[str, Any]:
    """The paired comparison of one compressed cell's ``metric`` with the full-cache cell of its group, or a note
    saying why there is none (no full-cache cell in the group; no shared item)."""
    from snapeval.results.paired import compare_cells

    if view.get("method") == "full":
        return {}
    if reference is None:
        return {"paired_note": "no full-cache reference cell answered the same items (same model, task, seed, limit)"}
    ref_id, ref_result = reference
    try:
        cmp = compare_cells(ref_result, result, metric)
    except SnapevalError as exc:
        return {"paired_ref_cell": ref_id, "paired_note": str(exc)}
    note = f"{cmp.unpaired} items in only one of the two cells were left unpaired" if cmp.unpaired else ""
    return {"paired_ref_cell": ref_id, "paired_n": cmp.n, "paired_diff": cmp.mean_diff, "paired_ci_low": cmp.ci_low,
            "paired_ci_high": cmp.ci_high, "paired_significant": cmp.significant, "mcnemar_p": cmp.mcnemar_p,
            "flips_broke": cmp.broke if cmp.binary else None, "flips_fixed": cmp.fixed if cmp.binary else None,
            "paired_length_change": cmp.length_change, "paired_unpaired": cmp.unpaired, "paired_note": note}


def _primary_keys(view: dict[str, Any], result: CellResult) -> tuple[str, str]:
    """(subtask, "metric,filter") of the cell's headline number: the config's ``metric`` or the first reported."""
    subtasks = [m.subtask for m in result.metrics]
    subtask = view["task"] if view["task"] in subtasks else subtasks[0]
    mine = [m for m in result.metrics if m.subtask == subtask]
    wanted = view.get("metric")
    if wanted:
        for m in mine:
            if wanted in (m.metric, m.key):
                return subtask, m.key
    return subtask, mine[0].key


def build_table(views: list[dict[str, Any]], results: dict[str, CellResult], simulate_settings: dict[str, Any],
                simulate: SimulateFn | None | str = "default"):
    """The tidy table of the finished cells among ``views`` (manifest entries, grid order), as a DataFrame.

    ``simulate``: the simulator function (``simulate_point``'s signature); "default" imports snapeval's; None
    leaves the ``sim_*`` columns empty with a note (see :class:`~snapeval.simulator.pricing.CellPricing`).
    """
    import pandas as pd

    views = [v.to_dict() if hasattr(v, "to_dict") else v for v in views]  # CellView objects or manifest dicts
    sim = CellPricing(simulate_settings, simulate)
    lengths = measured_lengths(views, results)
    # manifests from before group ids: the group follows from each finished cell's own identity
    views = [v if v.get("group_id") or v["cell_id"] not in results
             else {**v, "group_id": group_id_of(results[v["cell_id"]].identity)} for v in views]
    references = {v.get("group_id"): (v["cell_id"], results[v["cell_id"]]) for v in views
                  if v.get("method") == "full" and v.get("group_id") and v["cell_id"] in results}
    rows = []
    for view in views:
        result = results.get(view["cell_id"])
        if result is None:
            continue
        primary = _primary_keys(view, result)
        cell_cols = {k: view.get(k) for k in ("cell_id", "model", "task", "method", "budget", "sink", "recent", "topk",
                                              "observation", "kernel", "pooling", "seed", "limit", "dtype")}
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
            paired = paired_columns(view, result, m.key, references.get(view.get("group_id"))) if is_primary else {}
            rows.append({**cell_cols, **paired, "subtask": m.subtask, "metric": m.metric, "filter": m.filter,
                         "primary": (m.subtask, m.key) == primary, "higher_is_better": m.higher_is_better,
                         "value": m.value, "stderr": m.stderr, "n_samples": m.n})
    table = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("budget", "sink", "recent", "topk", "observation", "kernel", "limit", "kv_cache_bytes",
                "prompt_tokens", "generated_tokens", "sim_prompt_len", "sim_gen_len", "sim_batch", "sim_max_batch",
                "sim_full_max_batch", "n_samples", "seed", "paired_n", "flips_broke", "flips_fixed", "paired_unpaired"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("Int64")
    for col in ("value", "stderr", "decode_tokens_per_s", "prefill_tokens_per_s", "wall_s", "sim_kv_bytes_per_seq",
                "sim_kv_bytes_total", "sim_decode_tokens_per_s", "sim_decode_tokens_per_s_per_seq",
                "sim_prefill_seconds", "sim_full_kv_bytes_per_seq", "sim_full_decode_tokens_per_s",
                "sim_hbm_bytes_per_socket", "paired_diff", "paired_ci_low", "paired_ci_high", "mcnemar_p",
                "paired_length_change"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("float64")
    for col in ("primary", "higher_is_better", "deterministic"):
        table[col] = table[col].astype("bool")
    table["sim_fits"] = table["sim_fits"].astype("boolean")
    table["paired_significant"] = table["paired_significant"].astype("boolean")
    return table

