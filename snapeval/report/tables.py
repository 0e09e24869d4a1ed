"""Comparison tables from the tidy results table: accuracy vs budget, delta vs full cache, memory, throughput.

All tables use each cell's headline metric (``primary`` rows). Several seeds of one point are averaged: the value
is the mean, the stderr that of the mean of independent estimates (``sqrt(sum se_i^2) / k``) and ``n`` the total.
"""
from __future__ import annotations

import math

import pandas as pd

from snapeval.report.style import is_reference, method_rank

POINT = ["model", "task", "method", "budget"]

_SIM_COLS = ["sim_model", "sim_hardware", "sim_prompt_len", "sim_gen_len", "sim_kv_bytes_per_seq",
             "sim_full_kv_bytes_per_seq", "sim_max_batch", "sim_full_max_batch", "sim_decode_tokens_per_s",
             "sim_full_decode_tokens_per_s", "sim_batch"]


def _sort(frame: pd.DataFrame) -> pd.DataFrame:
    """Models and tasks in the sweep's order, then methods in the style table's order (full cache first), then
    budget."""
    rank = {col: {v: i for i, v in enumerate(dict.fromkeys(frame[col]))} for col in ("model", "task")}
    keys = frame.assign(_model=frame["model"].map(rank["model"]), _task=frame["task"].map(rank["task"]),
                        _m=frame["method"].map(method_rank),
                        _b=frame["budget"].astype("Float64").fillna(-1.0))
    return (keys.sort_values(["_model", "_task", "_m", "method", "_b"], kind="stable")
            .drop(columns=["_model", "_task", "_m", "_b"]).reset_index(drop=True))


def points(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, task, method, budget): headline accuracy (seed-averaged), measured and simulated cost."""
    primary = table[table["primary"]].copy()
    if primary.empty:
        return pd.DataFrame(columns=POINT + ["metric", "value", "stderr", "n_samples", "seeds"])
    primary["metric_name"] = primary["metric"] + "," + primary["filter"]
    primary["_se2"] = primary["stderr"] ** 2
    grouped = primary.groupby(POINT, dropna=False, sort=False)
    out = grouped.agg(metric=("metric_name", "first"), value=("value", "mean"), _se2=("_se2", "sum"),
                      _se_missing=("stderr", lambda s: s.isna().any()), n_samples=("n_samples", "sum"),
                      seeds=("seed", "nunique"), kv_cache_bytes=("kv_cache_bytes", "mean"),
                      decode_tokens_per_s=("decode_tokens_per_s", "mean"),
                      **{c: (c, "first") for c in _SIM_COLS}).reset_index()
    out["stderr"] = (out["_se2"] ** 0.5 / out["seeds"]).where(~out["_se_missing"].astype(bool))
    return _sort(out.drop(columns=["_se2", "_se_missing"]))


def comparison(table: pd.DataFrame) -> pd.DataFrame:
    """Every point with its delta vs the full cache of the same model and task, memory reduction and throughput gain.

    ``delta`` = value - full value, ``delta_stderr`` = sqrt(se^2 + se_full^2). Reductions are full / compressed
    (2.0 = half the memory); gains are compressed / full (2.0 = twice the throughput). Measured ratios use this
    machine's KV bytes; simulated ones the SN40L deployment of the ``sim_model``.
    """
    pts = points(table)
    full = pts[pts["method"].map(is_reference)].set_index(["model", "task"])

    def ref(row, col):
        key = (row["model"], row["task"])
        return full.at[key, col] if key in full.index else float("nan")

    rows = []
    for _, row in pts.iterrows():
        fv, fse, fkv = ref(row, "value"), ref(row, "stderr"), ref(row, "kv_cache_bytes")
        rows.append({
            "delta": row["value"] - fv,
            "delta_stderr": math.sqrt(row["stderr"] ** 2 + fse ** 2),
            "kv_reduction_measured": fkv / row["kv_cache_bytes"] if row["kv_cache_bytes"] else float("nan"),
            "kv_reduction_sim": _ratio(row["sim_full_kv_bytes_per_seq"], row["sim_kv_bytes_per_seq"]),
            "batch_gain_sim": _ratio(row["sim_max_batch"], row["sim_full_max_batch"]),
            "throughput_gain_sim": _ratio(row["sim_decode_tokens_per_s"], row["sim_full_decode_tokens_per_s"]),
        })
    return pd.concat([pts, pd.DataFrame(rows, index=pts.index)], axis=1)


def _ratio(num, den) -> float:
    try:
        num, den = float(num), float(den)
    except (TypeError, ValueError):
        return float("nan")
    return num / den if den and not (math.isnan(num) or math.isnan(den)) else float("nan")


PAIRED = ["paired_n", "paired_clusters", "paired_unpaired", "paired_diff", "paired_ci_low", "paired_ci_high",
          "paired_interval", "paired_test", "paired_p", "paired_p_holm", "paired_significant", "items_worse",
          "items_better", "paired_length_change", "paired_mdd", "ni_margin", "ni_alpha", "ni_p", "ni_drop_bound",
          "non_inferior", "ni_items_needed", "smallest_ni_budget", "paired_note"]


def paired(table: pd.DataFrame) -> pd.DataFrame:
    """Every compressed cell's headline metric paired item by item with the full-cache cell of its group (one row
    per cell: seeds are not averaged, each seed is its own paired experiment)."""
    rows = table[table["primary"] & ~table["method"].map(is_reference).astype(bool)]
    cols = ["model", "task", "method", "budget", "seed", "metric", "filter", "higher_is_better", "value"] + PAIRED
    return _sort(rows[cols].reset_index(drop=True))


def _rule(pair: pd.DataFrame) -> tuple[float, float] | None:
    """(margin, alpha) the table was built with, None when no cell was paired."""
    known = pair[pair["ni_margin"].notna()]
    if known.empty:
        return None
    return float(known["ni_margin"].iloc[0]), float(known["ni_alpha"].iloc[0])


def _items(value) -> str:
    if value is None or pd.isna(value):
        return "–"
    return "unreachable" if math.isinf(value) else f"{int(value):,}"


def _drop(value) -> str:
    if value is None or pd.isna(value):
        return "–"
    return "unbounded" if math.isinf(value) else f"{value:.3f}"


def decisions(pair: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, task, method): the smallest non-inferior budget (NA: none in the grid) and the cell that
    decided it (that budget, or the largest budget when even it is not non-inferior), with that cell's drop, its
    one-sided upper bound, its items and clusters, and the items the margin would need."""
    rows = []
    scored = pair[pair["paired_diff"].notna() & pair["budget"].notna()]
    for (model, task, method), frame in scored.groupby(["model", "task", "method"], sort=False):
        smallest = frame["smallest_ni_budget"].dropna()
        budget = int(smallest.iloc[0]) if not smallest.empty else int(frame["budget"].max())
        cell = frame[frame["budget"] == budget].sort_values("ni_drop_bound", ascending=False).iloc[0]
        rows.append({"model": model, "task": task, "method": method,
                     "smallest_ni_budget": budget if not smallest.empty else pd.NA, "deciding_budget": budget,
                     "drop": -cell["paired_diff"] if cell["higher_is_better"] else cell["paired_diff"], "drop_bound": cell["ni_drop_bound"],
                     "n": cell["paired_n"], "clusters": cell["paired_clusters"],
                     "items_needed": cell["ni_items_needed"], "ni_margin": cell["ni_margin"],
                     "ni_alpha": cell["ni_alpha"]})
    return pd.DataFrame(rows, columns=["model", "task", "method", "smallest_ni_budget", "deciding_budget", "drop",
                                       "drop_bound", "n", "clusters", "items_needed", "ni_margin", "ni_alpha"])


def decision_markdown(pair: pd.DataFrame) -> list[str]:
    """The report's first section: per (model, task, method) the smallest budget non-inferior to the full cache at
    the declared margin, or "none in the grid" with the items the margin would need."""
    rule = _rule(pair)
    if rule is None:
        return []
    margin, alpha = rule
    confidence = f"{(1 - alpha) * 100:g}%"
    lines = [f"Non-inferiority margin δ = {margin:g} (a drop of at most {margin * 100:g} points of the headline "
             f"metric), α = {alpha:g}. A budget is non-inferior to the full cache when the one-sided {confidence} "
             f"upper confidence bound of its paired drop is below δ (Tango's score test for 0/1 metrics, the "
             f"sign-flip test over clusters otherwise). A method's budgets are tested from the largest down, each at "
             f"α, stopping at the first that is not non-inferior (fixed-sequence: the family-wise error per "
             f"(model, task, method) stays at most α); with several seeds every seed must pass. \"not significantly "
             f"different\" is not the same claim: a cell can be neither.", "",
             f"| model | task | method | smallest non-inferior budget | deciding cell | drop | upper {confidence} "
             f"bound | items (clusters) | items needed for δ |", "|" + " --- |" * 9]
    for r in decisions(pair).itertuples():
        answer = "none in the grid" if pd.isna(r.smallest_ni_budget) else f"**{int(r.smallest_ni_budget)}**"
        lines.append(f"| {r.model} | {r.task} | {r.method} | {answer} | {r.method}@{r.deciding_budget} | "
                     f"{r.drop + 0.0:+.3f} | {_drop(r.drop_bound)} | {int(r.n)} ({int(r.clusters)}) | "
                     f"{_items(r.items_needed)} |")
    lines += ["", "Items needed: for 80% power to show non-inferiority at δ if the true difference were 0, at the "
                  "deciding cell's rate of discordant items (Nam 1997; at zero discordance z²(1 − δ)/δ)."]
    return lines


def paired_markdown(pair: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Per (model, task): a markdown table of paired differences vs the full cache, significance (Holm-adjusted)
    and non-inferiority spelled out, with the minimum detectable drop next to every "no"."""
    out = {}
    for (model, task), frame in pair.groupby(["model", "task"], sort=False):
        lines = ["| method | budget | seed | accuracy | Δ vs full (paired) | 95% CI | test p | Holm p | significant | "
                 "drop bound | non-inferior | worse / better | items (clusters) | unpaired | Δ output chars |",
                 "|" + " --- |" * 15]
        for r in frame.itertuples():
            if pd.isna(r.paired_diff):
                lines.append(f"| {r.method} | {budget_label(r.method, r.budget)} | {r.seed} | {r.value:.3f} | "
                             f"n/a | | | | | | | | | | {r.paired_note} |")
                continue
            ci = f"[{r.paired_ci_low:+.3f}, {r.paired_ci_high:+.3f}]"
            detectable = ("none at this n" if not pd.isna(r.paired_mdd) and math.isinf(r.paired_mdd)
                          else _drop(r.paired_mdd))
            sig = "**yes**" if bool(r.paired_significant) else f"no (detectable: {detectable})"
            ni = "**yes**" if bool(r.non_inferior) else f"no (needs {_items(r.ni_items_needed)} items)"
            length = "" if pd.isna(r.paired_length_change) else f"{r.paired_length_change:+.1f}"
            lines.append(f"| {r.method} | {budget_label(r.method, r.budget)} | {r.seed} | {r.value:.3f} | "
                         f"{r.paired_diff:+.3f} | {ci} | {r.paired_p:.3g} | {r.paired_p_holm:.3g} | {sig} | "
                         f"{_drop(r.ni_drop_bound)} | {ni} | {int(r.items_worse)} / {int(r.items_better)} | "
                         f"{int(r.paired_n)} ({int(r.paired_clusters)}) | {int(r.paired_unpaired)} | {length} |")
        out[(model, task)] = "\n".join(lines)
    return out


def paired_legend(pair: pd.DataFrame) -> list[str]:
    """What the columns of the paired tables mean, with the tests and intervals that were used."""
    rule = _rule(pair)
    if rule is None:
        return []
    margin, alpha = rule
    tests = ", ".join(sorted({"sign-flip permutation test over clusters (mid-p)" if str(t).startswith("sign-flip")
                              else str(t) for t in pair["paired_test"].dropna()}))
    intervals = ", ".join(sorted(set(pair["paired_interval"].dropna())))
    return [f"Paired differences: every compressed cell against the full-cache cell that answered the same items (same "
            f"model, task, seed, limit), item by item. Tests of \"no difference\" (two-sided): {tests}; intervals "
            f"({(1 - alpha) * 100:g}%): {intervals}. **Family**: the compressed cells of one (model, task); p-values "
            f"are Holm-adjusted within it and *significant* means Holm p < α = {alpha:g}. \"detectable\": the "
            f"smallest drop the test would catch with 80% power at this n. *Drop bound*: one-sided "
            f"{(1 - alpha) * 100:g}% upper bound of the drop; *non-inferior*: bound < δ = {margin:g} (\"needs\": "
            "the items for 80% power at δ). *Worse / better*: items the budget scored lower / higher than the full "
            "cache. Items in only one of the two cells are counted as unpaired, never paired."]


def significance_summary(pair: pd.DataFrame) -> list[str]:
    """One sentence per (model, task): which compressed cells differ significantly (Holm) from the full cache."""
    out = []
    for (model, task), frame in pair.groupby(["model", "task"], sort=False):
        scored = frame[frame["paired_diff"].notna()]
        sig = scored[scored["paired_significant"].fillna(False).astype(bool)]
        names = ", ".join(f"{r.method}@{budget_label(r.method, r.budget)} ({r.paired_diff:+.3f})" for r in sig.itertuples())
        out.append(f"- {model} / {task}: {len(sig)} of {len(scored)} compressed cells differ significantly from the "
                   f"full cache (Holm within this task)" + (f": {names}." if names else "."))
    return out


def items_summary(pair: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Per (model, task): how many items and clusters were paired and how many were left unpaired."""
    out = {}
    for (model, task), frame in pair.groupby(["model", "task"], sort=False):
        scored = frame[frame["paired_n"].notna()]
        if scored.empty:
            continue
        n = sorted({int(v) for v in scored["paired_n"]})
        k = sorted({int(v) for v in scored["paired_clusters"]})
        unpaired = int(scored["paired_unpaired"].sum())
        out[(model, task)] = (f"Items: {'/'.join(map(str, n))} paired items per cell in {'/'.join(map(str, k))} "
                              f"clusters; {unpaired} unpaired items in all.")
    return out


def budget_label(method: str, budget) -> str:
    """A point's budget as a column heading: its tokens, or "full" for a method without a budget."""
    return "full" if pd.isna(budget) else str(int(budget))


def accuracy_vs_budget(table: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """Per (model, task): methods as rows, budgets as columns, "value ± stderr" cells."""
    pts = points(table)
    out = {}
    for (model, task), frame in pts.groupby(["model", "task"], sort=False):
        frame = frame.assign(budget_label=[budget_label(m, b) for m, b in zip(frame["method"], frame["budget"])],
                             cell=[_pm(v, s) for v, s in zip(frame["value"], frame["stderr"])])
        budgets = sorted({int(b) for b in frame["budget"].dropna()})
        cols = (["full"] if frame["budget"].isna().any() else []) + [str(b) for b in budgets]
        pivot = frame.pivot(index="method", columns="budget_label", values="cell").reindex(columns=cols).fillna("")
        pivot = pivot.loc[sorted(pivot.index, key=method_rank)]
        pivot.columns.name = f"budget ({frame['metric'].iloc[0]})"
        out[(model, task)] = pivot
    return out


def _pm(value, stderr, digits: int = 3) -> str:
    if value is None or pd.isna(value):
        return "n/a"
    return f"{value:.{digits}f}" + ("" if stderr is None or pd.isna(stderr) else f" ± {stderr:.{digits}f}")


def _fmt(value, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value):
        return "–"
    if kind == "x":
        return f"{value:.2f}x"
    if kind == "bytes":
        return _bytes(value)
    if kind == "signed":
        return f"{value:+.3f}"
    if kind == "int":
        return f"{int(value):,}"
    return f"{value:,.1f}"


def _bytes(value: float) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def comparison_markdown(comp: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Per (model, task): a markdown table of accuracy, delta vs full, memory reduction and throughput gain."""
    header = ("| method | budget | accuracy | Δ vs full | measured KV | KV reduction (measured) | sim KV / seq "
              "| KV reduction (sim) | sim max batch | sim decode tok/s | throughput gain (sim) |")
    rule = "|" + " --- |" * (header.count("|") - 1)
    out = {}
    for (model, task), frame in comp.groupby(["model", "task"], sort=False):
        lines = [header, rule]
        for _, r in frame.iterrows():
            delta = "" if is_reference(r["method"]) else (
                f"{_fmt(r['delta'], 'signed')} ± {r['delta_stderr']:.3f}" if not pd.isna(r["delta_stderr"])
                else _fmt(r["delta"], "signed"))
            lines.append("| " + " | ".join([
                r["method"], budget_label(r["method"], r["budget"]), _pm(r["value"], r["stderr"]), delta or "–",
                _fmt(r["kv_cache_bytes"], "bytes"), _fmt(r["kv_reduction_measured"], "x"),
                _fmt(r["sim_kv_bytes_per_seq"], "bytes"), _fmt(r["kv_reduction_sim"], "x"),
                _fmt(r["sim_max_batch"], "int"), _fmt(r["sim_decode_tokens_per_s"], "num"),
                _fmt(r["throughput_gain_sim"], "x")]) + " |")
        out[(model, task)] = "\n".join(lines)
    return out
