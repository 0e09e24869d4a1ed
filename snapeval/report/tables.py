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
            "kv_reduction_measured": _ratio(fkv, row["kv_cache_bytes"]),
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
          "non_inferior", "ni_items_needed", "ni_design_effect", "smallest_ni_budget", "paired_note"]


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


def _drop(value) -> str:
    if value is None or pd.isna(value):
        return "–"
    return "unbounded" if math.isinf(value) else f"{value:.3f}"


DECISION_COLUMNS = ["model", "task", "method", "decision", "smallest_ni_budget", "deciding_budget", "drop",
                    "drop_low", "drop_bound", "n", "clusters", "unpaired", "items_to_settle", "design_effect",
                    "ni_margin", "ni_alpha", "note"]
NON_INFERIOR, NOT_NON_INFERIOR, INCONCLUSIVE, NO_COMPARISON = ("non-inferior", "not non-inferior", "inconclusive",
                                                               "no paired comparison")


def _worst(frame: pd.DataFrame) -> pd.Series:
    """The seed of a budget that decides it: the one with the largest drop bound (every seed must pass)."""
    return frame.sort_values("ni_drop_bound", ascending=False, na_position="first").iloc[0]


def _oriented_drop(row) -> float:
    return -row["paired_diff"] if row["higher_is_better"] else row["paired_diff"]


def smallest_drop(row) -> float:
    """The interval's end on the better side, as a drop (``1 - 2 alpha`` two-sided: the one-sided ``1 - alpha`` lower
    bound of the drop). Above the margin, the whole interval lies beyond it: the cell is shown not non-inferior."""
    return -row["paired_ci_high"] if row["higher_is_better"] else row["paired_ci_low"]


def cell_label(row) -> str:
    """One paired cell's answer: NON_INFERIOR (the drop's upper bound is below the margin), NOT_NON_INFERIOR (the
    drop's lower bound is above it: the whole interval lies beyond the margin) or INCONCLUSIVE (the interval holds
    the margin)."""
    if bool(row["non_inferior"]):
        return NON_INFERIOR
    if float(smallest_drop(row)) > float(row["ni_margin"]):
        return NOT_NON_INFERIOR
    return INCONCLUSIVE


def decisions(pair: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, task, method) with one of three answers, from the fixed-sequence walk down its budgets:

    - ``non-inferior``: ``smallest_ni_budget`` passed (and every larger budget before it): the interval's drop end
      is below the margin;
    - ``not non-inferior``: the largest budget (the first tested) failed and its whole interval lies beyond the
      margin (``drop_low``, the drop's lower bound, is above it);
    - ``inconclusive``: the largest budget failed and its interval holds the margin; ``items_to_settle`` is the
      number of items that would settle it with 80% power if the true difference were the observed one (show
      non-inferiority when the observed drop is inside the margin, show the reverse when it is beyond), under the
      task's own design effect (``design_effect``: its whole item layout's, LongBench-v2's 1.32);
    - ``no paired comparison``: none of the method's cells could be paired (``note`` says why).

    The deciding cell is the smallest non-inferior budget, else the largest budget (its worst seed); ``unpaired``
    counts its items that only one of the two cells scored (never paired, never silently dropped)."""
    rows = []
    for (model, task, method), frame in pair.groupby(["model", "task", "method"], sort=False):
        scored = frame[frame["paired_diff"].notna() & frame["budget"].notna()]
        base = {"model": model, "task": task, "method": method, "smallest_ni_budget": pd.NA}
        if scored.empty:
            notes = [str(n) for n in frame["paired_note"].dropna() if str(n)]
            rows.append({**base, "decision": NO_COMPARISON, "note": notes[0] if notes else
                         "no compressed cell with a budget was paired"})
            continue
        smallest = scored["smallest_ni_budget"].dropna()
        budget = int(smallest.iloc[0]) if not smallest.empty else int(scored["budget"].max())
        cell = _worst(scored[scored["budget"] == budget])
        drop = float(_oriented_drop(cell))
        decision = NON_INFERIOR if not smallest.empty else cell_label(cell)
        settle = float(cell["ni_items_needed"]) if decision == INCONCLUSIVE else float("nan")
        if decision == NON_INFERIOR:
            base["smallest_ni_budget"] = budget
        rows.append({**base, "decision": decision, "deciding_budget": budget, "drop": drop,
                     "drop_low": float(smallest_drop(cell)), "drop_bound": cell["ni_drop_bound"],
                     "design_effect": cell.get("ni_design_effect", float("nan")), "n": cell["paired_n"], "clusters": cell["paired_clusters"],
                     "unpaired": cell["paired_unpaired"], "items_to_settle": settle, "ni_margin": cell["ni_margin"],
                     "ni_alpha": cell["ni_alpha"], "note": cell["paired_note"] if isinstance(cell["paired_note"], str)
                     else ""})
    return pd.DataFrame(rows, columns=DECISION_COLUMNS)


def verdict(row) -> str:
    """The decision of one :func:`decisions` row in words."""
    if row.decision == NO_COMPARISON:
        return f"no paired comparison ({row.note})"
    unpaired = int(row.unpaired) if not pd.isna(row.unpaired) else 0
    extra = f"; {unpaired} items unpaired, not compared" if unpaired else ""
    if row.decision == NON_INFERIOR:
        return f"**non-inferior at budget {int(row.smallest_ni_budget)}**{extra}"
    if row.decision == NOT_NON_INFERIOR:
        return f"not non-inferior (drop {row.drop:.3f}, at least {row.drop_low:.3f}: the whole interval is beyond " \
               f"the margin){extra}"
    deff = "" if pd.isna(row.design_effect) or row.design_effect <= 1 else f", design effect {row.design_effect:.2f}"
    return f"inconclusive at this n (n that would settle it: {_settle(row.items_to_settle)}{deff}){extra}"


def _settle(value) -> str:
    if value is None or pd.isna(value):
        return "unknown (no variance to plan with)"
    return "none (the observed drop is the margin)" if math.isinf(value) else f"{int(value):,}"


def decision_markdown(pair: pd.DataFrame, missing: list[str] | None = None) -> list[str]:
    """The report's first section: per (model, task, method) non-inferior at budget X / not non-inferior / inconclusive
    at this n (with the n that would settle it), every method and task said, none dropped; ``missing``: lines about
    tasks or cells of the sweep with nothing to decide on (unfinished, no reference)."""
    rule = _rule(pair)
    if rule is None and not missing:
        return []
    lines = []
    if rule is not None:
        margin, alpha = rule
        confidence = f"{(1 - alpha) * 100:g}%"
        lines += [f"Non-inferiority margin δ = {margin:g} (a drop of at most {margin * 100:g} points of the headline "
                  f"metric), α = {alpha:g}. A budget is non-inferior to the full cache when the one-sided "
                  f"{confidence} upper confidence bound of its paired drop is below δ (Tango's score test for 0/1 metrics, on "
                  f"effective counts when items share a document; the sign-flip test over clusters otherwise). A "
                  f"method's budgets are tested from the largest down, each at α, stopping at the first that is not "
                  f"non-inferior (fixed-sequence: the family-wise error per (model, task, method) stays at most α); "
                  f"with several seeds every seed must pass. Each method gets one of three answers, read off the "
                  f"{(1 - 2 * alpha) * 100:g}% interval of the drop: **non-inferior at budget X** (the smallest that "
                  f"passed: the interval's upper end is below δ); **not non-inferior** (the largest budget's whole "
                  f"interval is beyond δ: its lower end, shown, is above it); **inconclusive at this n** (the "
                  f"interval holds δ: the n that would settle it is the items for 80% power if the true difference "
                  f"were the observed one, under the task's own design effect). \"Not significantly different\" is "
                  f"not non-inferiority: a cell can be neither.", "",
                  f"| model | task | method | decision | deciding cell | observed drop | {(1 - 2 * alpha) * 100:g}% "
                  "interval of the drop | items (clusters) | unpaired items |", "|" + " --- |" * 9]
        for r in decisions(pair).itertuples():
            if r.decision == NO_COMPARISON:
                lines.append(f"| {r.model} | {r.task} | {r.method} | {verdict(r)} | – | – | – | – | – |")
                continue
            lines.append(f"| {r.model} | {r.task} | {r.method} | {verdict(r)} | {r.method}@{r.deciding_budget} | "
                         f"{r.drop + 0.0:+.3f} | [{r.drop_low + 0.0:+.3f}, {_drop(r.drop_bound)}] | "
                         f"{int(r.n)} ({int(r.clusters)}) | "
                         f"{int(r.unpaired)} |")
        lines += ["", "n that would settle it: Nam (1997) / Liu et al. (2002) for Tango's one-sided test at δ (non-"
                      "inferiority when the observed drop is inside δ, the reverse when it is beyond), at the deciding "
                      "cell's observed difference and rate of discordant items, times the worst-case design effect of "
                      "the task's whole item layout (its own items' where the task has no layout here); the normal "
                      "approximation with the cluster-robust variance for other metrics."]
    if missing:
        lines += ["", "Nothing to decide on:", ""] + [f"- {m}" for m in missing]
    return lines


def _ci_label(pair: pd.DataFrame) -> str:
    rule = _rule(pair)
    return f"{(1 - 2 * rule[1]) * 100:g}% CI" if rule is not None else "CI"


def paired_markdown(pair: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Per (model, task): a markdown table of paired differences vs the full cache with their interval at the
    decision's level (two-sided 1 - 2 alpha: its lower end is the decision's bound), significance (Holm-adjusted)
    with the drop detectable at Holm's level next to every "no", and the non-inferiority verdict of each cell."""
    out = {}
    ci_label = _ci_label(pair)
    for (model, task), frame in pair.groupby(["model", "task"], sort=False):
        lines = [f"| method | budget | seed | accuracy | Δ vs full (paired) | {ci_label} | test p | Holm p | "
                 "significant | drop bound | non-inferior | worse / better | items (clusters) | unpaired | Δ output chars |",
                 "|" + " --- |" * 15]
        for r in frame.itertuples():
            if pd.isna(r.paired_diff):
                lines.append(f"| {r.method} | {budget_label(r.method, r.budget)} | {r.seed} | {r.value:.3f} | "
                             f"n/a | | | | | | | | | | {r.paired_note} |")
                continue
            ci = f"[{r.paired_ci_low:+.3f}, {r.paired_ci_high:+.3f}]"
            detectable = ("none at this n" if not pd.isna(r.paired_mdd) and math.isinf(r.paired_mdd)
                          else _drop(r.paired_mdd))
            sig = "**yes**" if bool(r.paired_significant) else f"no (detectable after Holm: {detectable})"
            label = cell_label(frame.loc[r.Index])
            if label == NON_INFERIOR:
                ni = "**yes**"
            elif label == NOT_NON_INFERIOR:
                ni = "no (whole interval beyond δ)"
            else:
                ni = f"inconclusive (n to settle: {_settle(r.ni_items_needed)})"
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
            f"({(1 - 2 * alpha) * 100:g}%, two-sided, so that their lower end is the one-sided {(1 - alpha) * 100:g}% "
            f"bound the non-inferiority decision uses): {intervals}. **Family**: the compressed cells of one (model, "
            f"task); p-values are Holm-adjusted within it and *significant* means Holm p < α = {alpha:g}. "
            f"\"detectable after Holm\": the smallest drop the test would catch with 80% power at this n at Holm's "
            f"most stringent level α / m (m: the cells of the family). *Drop bound*: one-sided {(1 - alpha) * 100:g}% "
            f"upper bound of the drop; *non-inferior*: bound < δ = {margin:g}; \"no\" when the whole interval is beyond "
            "δ; else \"inconclusive\" with the n that would settle it at the observed difference. *Worse / better*: items the "
            "budget scored lower / higher than the full cache. Items in only one of the two cells are counted as "
            "unpaired, never paired."]


def significance_summary(pair: pd.DataFrame) -> list[str]:
    """One sentence per (model, task): which compressed cells differ significantly (Holm) from the full cache."""
    out = []
    for (model, task), frame in pair.groupby(["model", "task"], sort=False):
        scored = frame[frame["paired_diff"].notna()]
        if scored.empty:
            notes = [str(n) for n in frame["paired_note"].dropna() if str(n)]
            out.append(f"- {model} / {task}: none of its {len(frame)} compressed cells could be paired with the full "
                       f"cache ({notes[0] if notes else 'no reference'}).")
            continue
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
    """Per (model, task): methods as rows, budgets as columns, accuracy cells (the paired intervals are in the
    paired table: an unpaired ± stderr beside each value would not be the uncertainty of any comparison)."""
    pts = points(table)
    out = {}
    for (model, task), frame in pts.groupby(["model", "task"], sort=False):
        frame = frame.assign(budget_label=[budget_label(m, b) for m, b in zip(frame["method"], frame["budget"])],
                             cell=[_value(v) for v in frame["value"]])
        budgets = sorted({int(b) for b in frame["budget"].dropna()})
        cols = (["full"] if frame["budget"].isna().any() else []) + [str(b) for b in budgets]
        pivot = frame.pivot(index="method", columns="budget_label", values="cell").reindex(columns=cols).fillna("")
        pivot = pivot.loc[sorted(pivot.index, key=method_rank)]
        pivot.columns.name = f"budget ({frame['metric'].iloc[0]})"
        out[(model, task)] = pivot
    return out


def _value(value, digits: int = 3) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.{digits}f}"


def _fmt(value, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value):
        return "–"
    if kind == "x":
        return f"{value:.2f}x"
    if kind == "bytes":
        return _bytes(value)
    if kind == "int":
        return f"{int(value):,}"
    return f"{value:,.1f}"


def _bytes(value: float) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def paired_bars(pair: pd.DataFrame | None) -> dict[tuple, tuple[float, float, float]]:
    """``{(model, task, method, budget): (difference, low, high)}``: each compressed point's paired difference vs
    the full cache (candidate - reference, the metric's units) and its interval at the decision's level, whose end
    on the worse side is the non-inferiority decision's one-sided bound and whose other end is the two-sided
    ``1 - 2 alpha`` interval's. Several seeds: the seed with the largest drop bound (the one that decides)."""
    if pair is None or pair.empty:
        return {}
    out = {}
    scored = pair[pair["paired_diff"].notna() & pair["ni_drop_bound"].notna()]
    for key, frame in scored.groupby(["model", "task", "method", "budget"], sort=False, dropna=False):
        r = _worst(frame)
        if r["higher_is_better"]:
            low, high = -float(r["ni_drop_bound"]), float(r["paired_ci_high"])
        else:
            low, high = float(r["paired_ci_low"]), float(r["ni_drop_bound"])
        out[(key[0], key[1], key[2], float(key[3]) if not pd.isna(key[3]) else None)] = (
            float(r["paired_diff"]), low, high)
    return out


def _bar_key(row) -> tuple:
    return (row["model"], row["task"], row["method"], None if pd.isna(row["budget"]) else float(row["budget"]))


def comparison_markdown(comp: pd.DataFrame, pair: pd.DataFrame | None = None) -> dict[tuple[str, str], str]:
    """Per (model, task): a markdown table of accuracy, the paired difference vs the full cache with its interval
    at the decision's level (from ``pair``; "–" where a point was not paired), memory reduction and throughput
    gain."""
    ci = _ci_label(pair) if pair is not None and not pair.empty else "CI"
    header = (f"| method | budget | accuracy | Δ vs full (paired) [{ci}] | measured KV | KV reduction (measured) | "
              "sim KV / seq | KV reduction (sim) | sim max batch | sim decode tok/s | throughput gain (sim) |")
    rule = "|" + " --- |" * (header.count("|") - 1)
    bars = paired_bars(pair)
    out = {}
    for (model, task), frame in comp.groupby(["model", "task"], sort=False):
        lines = [header, rule]
        for _, r in frame.iterrows():
            bar = bars.get(_bar_key(r))
            delta = "–" if is_reference(r["method"]) or bar is None else (
                f"{bar[0]:+.3f} [{bar[1]:+.3f}, {bar[2]:+.3f}]")
            lines.append("| " + " | ".join([
                r["method"], budget_label(r["method"], r["budget"]), _value(r["value"]), delta,
                _fmt(r["kv_cache_bytes"], "bytes"), _fmt(r["kv_reduction_measured"], "x"),
                _fmt(r["sim_kv_bytes_per_seq"], "bytes"), _fmt(r["kv_reduction_sim"], "x"),
                _fmt(r["sim_max_batch"], "int"), _fmt(r["sim_decode_tokens_per_s"], "num"),
                _fmt(r["throughput_gain_sim"], "x")]) + " |")
        out[(model, task)] = "\n".join(lines)
    return out
