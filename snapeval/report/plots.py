"""PNG plots of a sweep: accuracy vs budget, paired difference vs budget, accuracy vs simulated KV memory, and the
accuracy / simulated-throughput Pareto front.

One figure per model and plot kind, one panel per task, one legend per figure (beside the panels, never over the
data). Every method keeps one colour and marker (:mod:`snapeval.report.style`); methods sharing a budget are offset
a little along the budget axis so their bars do not overlap; every error bar says in the figure what it is. Error
bars are paired: each compressed point's interval of its difference with the full cache on the same items, at the
decision's level (the end on the worse side is the one-sided non-inferiority bound, the other the two-sided
``1 - 2 alpha`` interval's), drawn around the point (:func:`snapeval.report.tables.paired_bars`); the full cache has
no bar of its own (it is the reference). On the budget plots a ringed point is non-inferior to the full cache at
the report's margin, a filled one differs significantly (Holm), a hollow one does not, and each panel states every
method's decision under its axis.
Figures are drawn with matplotlib's Agg backend (no display needed) and returned so notebooks can show them inline.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd

from snapeval.report.style import is_reference, method_label, method_rank, styles_for
from snapeval.report.tables import (
    INCONCLUSIVE,
    NO_COMPARISON,
    NON_INFERIOR,
    budget_label,
    decisions,
    paired_bars,
)

OFFSET = 0.045  # log2 units between neighbouring methods at one budget


def _bars_note(pair: pd.DataFrame | None, clip: bool = False) -> str:
    """What the error bars of a figure are, at the report's alpha (``clip``: drawn around accuracies, cut at 0 and
    1)."""
    alpha = float(pair["ni_alpha"].dropna().iloc[0]) if pair is not None and pair["ni_alpha"].notna().any() else 0.05
    return (f"error bars: paired {(1 - 2 * alpha) * 100:g}% interval of the difference with the full cache on the "
            f"same items (worse end: the one-sided {(1 - alpha) * 100:g}% non-inferiority bound)"
            + (", around each point, cut at 0 and 1" if clip else ""))


def _plt():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _methods(frame: pd.DataFrame) -> list[str]:
    return sorted(frame["method"].unique(), key=lambda m: (method_rank(m), m))


def _metric_label(frame: pd.DataFrame) -> str:
    return f"accuracy ({frame['metric'].iloc[0].replace(',none', '')})"


def _decision_line(pair: pd.DataFrame | None, model: str, task: str, methods: list[str]) -> str:
    """"decision (δ = 0.02): snapstream non-inferior at 512, snapkv inconclusive, ..." for one panel ("" without
    a paired table)."""
    if pair is None or pair.empty:
        return ""
    rows = pair[(pair["model"] == model) & (pair["task"] == task)]
    if rows.empty or not rows["ni_margin"].notna().any():
        return ""
    decided = {r.method: r for r in decisions(rows).itertuples()}
    words = {NON_INFERIOR: "non-inferior at {b}", INCONCLUSIVE: "inconclusive", NO_COMPARISON: "not paired"}
    parts = [f"{m} " + words.get(decided[m].decision, "not non-inferior").format(
        b=None if pd.isna(decided[m].smallest_ni_budget) else int(decided[m].smallest_ni_budget))
        for m in methods if m in decided]
    margin = float(rows["ni_margin"].dropna().iloc[0])
    return f"decision (δ = {margin:g}): " + ", ".join(parts)


def _yerr(values, keys, bars, clip: bool = False) -> list:
    """Asymmetric error bars around ``values`` from the paired intervals of ``keys`` (0 where a point has none).
    ``clip``: values are accuracies in [0, 1], and a bar drawn around one stops at 0 and 1 (the interval of the
    difference, moved onto the accuracy, can pass them; no accuracy can)."""
    low, high = [], []
    for v, key in zip(values, keys):
        bar = bars.get(key)
        down = 0.0 if bar is None else max(0.0, bar[0] - bar[1])
        up = 0.0 if bar is None else max(0.0, bar[2] - bar[0])
        if clip:
            down, up = min(down, float(v)), min(up, 1.0 - float(v))
        low.append(max(0.0, down))
        high.append(max(0.0, up))
    return [low, high]


def _unit(values) -> bool:
    """Whether every value lies in [0, 1] (an accuracy-like metric)."""
    values = pd.Series(values, dtype="float64").dropna()
    return bool(len(values)) and bool(((values >= 0) & (values <= 1)).all())


def _keys(model: str, frame: pd.DataFrame) -> list[tuple]:
    return [(model, t, m, None if pd.isna(b) else float(b))
            for t, m, b in zip(frame["task"], frame["method"], frame["budget"])]


def _budget_xlabel(ax, pair, model: str, task: str, methods: list[str]) -> None:
    line = _decision_line(pair, model, task, methods)
    width = int(ax.figure.get_figwidth() * 9.5 / max(1, len(ax.figure.axes)))
    text = "KV budget (tokens per layer and KV head)"
    ax.set_xlabel(text + ("\n" + "\n".join(textwrap.wrap(line, max(40, width), break_on_hyphens=False)) if line
                          else ""), fontsize=9)


def _offsets(methods: list[str]) -> dict[str, float]:
    """Multiplicative x offsets (log2 axis) that spread the methods of one budget symmetrically."""
    compressed = [m for m in methods if not is_reference(m)]
    mid = (len(compressed) - 1) / 2
    return {m: 2 ** ((i - mid) * OFFSET) for i, m in enumerate(compressed)}


def _figure(n_panels: int, title: str, legend_rows: int):
    """Panels in a row (up to 3), a title wrapped to the figure's width, room below for one legend."""
    plt = _plt()
    ncols = min(3, n_panels)
    nrows = math.ceil(n_panels / ncols)
    width = max(7.5, 4.8 * ncols + 0.6)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, 3.9 * nrows + 0.22 * math.ceil(legend_rows / 3) + 0.6),
                             squeeze=False, layout="constrained")
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    fig.suptitle("\n".join(textwrap.wrap(title, width=int(width * 9.5))), fontsize=11)
    return fig, list(axes.flat[:n_panels])


def _legend(fig, axes, note: str) -> None:
    """One legend for the figure, below the panels, with ``note`` (what the error bars are) as its title."""
    handles, labels = {}, {}
    for ax in axes:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels and not l.startswith("_"):
                labels[l] = l
                handles[l] = h
    title = "\n".join(textwrap.wrap(note, int(fig.get_figwidth() * 13)))  # about 13 characters an inch at 8 pt
    fig.legend(list(handles.values()), list(labels), loc="outside lower center", fontsize=8, ncols=3,
               title=title, title_fontsize=8, frameon=False)


def _panels(frame: pd.DataFrame, title: str, draw, note: str):
    """One panel per task (in the sweep's order): ``draw(ax, task, rows)`` plots and sets title and x label."""
    tasks = list(dict.fromkeys(frame["task"]))
    fig, axes = _figure(len(tasks), title, legend_rows=frame["method"].nunique() + 6)
    for ax, task in zip(axes, tasks):
        sub = frame[frame["task"] == task].reset_index(drop=True)
        draw(ax, task, sub)
        if not ax.get_ylabel():
            ax.set_ylabel(_metric_label(sub))
        ax.grid(alpha=0.3)
    _legend(fig, axes, note)
    return fig


def _budget_axis(ax, budgets) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ticks = sorted({float(b) for b in pd.Series(budgets).dropna() if b > 0})
    if ticks:
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(ticks[0] / 2 ** 0.4, ticks[-1] * 2 ** 0.4)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))


def _plain_x_axis(ax, values) -> None:
    """Log x axis when the values span more than a decade, else linear; plain-number labels either way."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    values = [float(v) for v in values if v and v > 0]
    if values and max(values) / min(values) > 10:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(_plain_number))


def _plain_number(value: float, _=None) -> str:
    """500000 -> "500k", 1.5e6 -> "1.5M", 12.5 -> "12.5": tick labels without exponents."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:,.3g}{suffix}"
    return f"{value:,.3g}"


def _status(pair: pd.DataFrame | None, model: str) -> dict[tuple[str, str, float], tuple[bool, bool]]:
    """``{(task, method, budget): (significant, non_inferior)}`` of every paired cell (seeds: all must agree)."""
    if pair is None or pair.empty:
        return {}
    out = {}
    scored = pair[(pair["model"] == model) & pair["paired_diff"].notna()]
    for (task, method, budget), rows in scored.groupby(["task", "method", "budget"], sort=False):
        out[(task, method, float(budget))] = (bool(rows["paired_significant"].fillna(False).astype(bool).all()),
                                              bool(rows["non_inferior"].fillna(False).astype(bool).all()))
    return out


def _mark(ax, xs, ys, status_of, style, size=7) -> None:
    """Overlay the decision markers: filled = significant difference, hollow = not, ring = non-inferior."""
    for x, y, key in zip(xs, ys, status_of):
        if key is None:
            continue
        significant, non_inferior = key
        ax.plot([x], [y], marker=style.marker, ms=size, ls="none", color=style.color,
                markerfacecolor=style.color if significant else "white", markeredgewidth=1.4, zorder=4)
        if non_inferior:
            ax.plot([x], [y], marker="o", ms=size + 8, ls="none", markerfacecolor="none", markeredgecolor="0.25",
                    markeredgewidth=1.2, zorder=5)


def _marker_legend(ax, pair) -> None:
    """Legend entries that explain the decision markers (drawn off-data so only the legend shows them)."""
    if pair is None or pair.empty:
        return
    ax.plot([], [], marker="o", ls="none", color="0.3", label="filled: differs significantly (Holm)")
    ax.plot([], [], marker="o", ls="none", color="0.3", markerfacecolor="white", label="hollow: no significant "
            "difference")
    ax.plot([], [], marker="o", ms=14, ls="none", markerfacecolor="none", markeredgecolor="0.25",
            label="ringed: non-inferior at δ")


def accuracy_vs_budget(pts: pd.DataFrame, model: str, pair: pd.DataFrame | None = None):
    """Accuracy vs KV budget (log2 axis), one line per method with paired error bars; the full cache as a dashed
    line."""
    frame = pts[pts["model"] == model]
    styles = styles_for(frame["method"])
    status = _status(pair, model)
    bars = paired_bars(pair)
    clip = _unit(frame["value"])

    def draw(ax, task, sub):
        methods = _methods(sub)
        offsets = _offsets(methods)
        for method in methods:
            m = sub[sub["method"] == method]
            style = styles[method]
            if is_reference(method):
                ax.axhline(float(m["value"].iloc[0]), color=style.color, ls="--", lw=1.2, label=method_label(method))
                continue
            m = m.sort_values("budget")
            xs = m["budget"].astype(float).to_numpy() * offsets[method]
            ax.errorbar(xs, m["value"], yerr=_yerr(m["value"], _keys(model, m), bars, clip),
                        marker=style.marker, color=style.color, capsize=3, label=method)
            _mark(ax, xs, m["value"], [status.get((task, method, float(b))) for b in m["budget"]], style)
        _marker_legend(ax, pair)
        _budget_axis(ax, sub["budget"])
        _budget_xlabel(ax, pair, model, task, methods)
        ax.set_title(task, fontsize=10)

    return _panels(frame, f"Accuracy vs KV-cache budget: {model}", draw,
                   _bars_note(pair, clip) + "; the full cache: dashed line")


def paired_difference_vs_budget(pair: pd.DataFrame, model: str):
    """Paired accuracy difference vs the full cache against the budget, each cell's interval at the decision's level
    as error bars (:func:`~snapeval.report.tables.paired_bars`: the worse end is the non-inferiority bound) and the
    margin as a line: a bar that stays above the line is a non-inferior cell."""
    frame = pair[(pair["model"] == model) & pair["paired_diff"].notna() & pair["budget"].notna()]
    if frame.empty:
        return None
    styles = styles_for(frame["method"])
    status = _status(pair, model)
    bars = paired_bars(pair)
    margin = float(frame["ni_margin"].dropna().iloc[0]) if frame["ni_margin"].notna().any() else None

    def draw(ax, task, sub):
        ax.axhline(0.0, color="black", ls="--", lw=1.2, label="full cache")
        if margin is not None:
            side = -1.0 if sub["higher_is_better"].all() else 1.0
            ax.axhline(side * margin, color="0.45", ls=":", lw=1.2,
                       label=f"non-inferiority margin {'-' if side < 0 else '+'}δ = {side * margin:+g}")
        methods = _methods(sub)
        offsets = _offsets(methods)
        for method in methods:
            m = sub[sub["method"] == method].sort_values("budget").drop_duplicates("budget")
            style = styles[method]
            keys = _keys(model, m)
            diff = [bars[k][0] for k in keys]
            xs = m["budget"].astype(float).to_numpy() * offsets[method]
            ax.errorbar(xs, diff, yerr=_yerr(diff, keys, bars), marker=style.marker, color=style.color, capsize=3,
                        label=method)
            _mark(ax, xs, diff, [status.get((task, method, float(b))) for b in m["budget"]], style)
        _marker_legend(ax, pair)
        _budget_axis(ax, sub["budget"])
        _budget_xlabel(ax, pair, model, task, methods)
        ax.set_title(task, fontsize=10)
        ax.set_ylabel("accuracy − full cache (paired)")

    return _panels(frame, f"Paired difference vs the full cache: {model}", draw,
                   _bars_note(pair) + " (Tango score for 0/1 scores; sign-flip bound and cluster bootstrap otherwise)")


def accuracy_vs_sim_memory(pts: pd.DataFrame, model: str, pair: pd.DataFrame | None = None):
    """Accuracy vs simulated KV-cache memory per sequence of the full-size deployment (MiB)."""
    frame = pts[(pts["model"] == model) & pts["sim_kv_bytes_per_seq"].notna()]
    if frame.empty:
        return None
    styles = styles_for(frame["method"])
    bars = paired_bars(pair)
    clip = _unit(frame["value"])

    def draw(ax, task, sub):
        for method in _methods(sub):
            m = sub[sub["method"] == method].sort_values("sim_kv_bytes_per_seq")
            style = styles[method]
            ax.errorbar(m["sim_kv_bytes_per_seq"] / 2 ** 20, m["value"],
                        yerr=_yerr(m["value"], _keys(model, m), bars, clip),
                        marker=style.marker, color=style.color, capsize=3, ls="none" if is_reference(method) else "-",
                        label=method_label(method))
        row = sub.iloc[0]
        _plain_x_axis(ax, sub["sim_kv_bytes_per_seq"] / 2 ** 20)
        ax.set_title(f"{task}\n(sim: {row['sim_prompt_len']:,} in / {row['sim_gen_len']:,} out tokens)", fontsize=9)
        ax.set_xlabel(f"simulated KV cache per sequence (MiB), {row['sim_model']}")

    return _panels(frame, f"Accuracy vs simulated KV memory on {frame['sim_hardware'].iloc[0]}: {model}", draw,
                   _bars_note(pair, clip))


def pareto_front(xs, ys) -> list[int]:
    """Indices of the points no other point beats on both axes (higher x and higher y are better), by x."""
    order = sorted(range(len(xs)), key=lambda i: (-xs[i], -ys[i]))
    front, best = [], -math.inf
    for i in order:
        if ys[i] > best:
            front.append(i)
            best = ys[i]
    return sorted(front, key=lambda i: xs[i])


#: Candidate label offsets (points) tried in order until a label overlaps no label placed before it.
_LABEL_OFFSETS = [(5, 4), (5, -11), (-22, 4), (-22, -11), (5, 13), (-22, 13), (5, -20), (-22, -20), (14, -4),
                  (-32, -4), (5, 22), (5, -29)]


def place_labels(ax, points: list[tuple[float, float, str]]) -> list:
    """Annotate ``(x, y, text)`` points so that no label overlaps another label or a point: each label takes the
    first offset in :data:`_LABEL_OFFSETS` whose box collides with nothing placed before it (the first offset if
    every one collides). Returns the annotations."""
    from matplotlib.transforms import Bbox

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    placed = []
    radius = 4.0  # pixels around each point that a label must not cover
    boxes = [Bbox.from_bounds(px - radius, py - radius, 2 * radius, 2 * radius)
             for px, py in ax.transData.transform([(x, y) for x, y, _ in points])] if points else []
    for x, y, text in points:
        chosen = None
        for dx, dy in _LABEL_OFFSETS:
            ann = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=7, zorder=6)
            box = ann.get_window_extent(renderer).expanded(1.05, 1.1)
            if not any(box.overlaps(b) for b in boxes):
                chosen = ann
                boxes.append(box)
                break
            ann.remove()
        if chosen is None:
            chosen = ax.annotate(text, (x, y), textcoords="offset points", xytext=_LABEL_OFFSETS[0], fontsize=7,
                                 zorder=6)
            boxes.append(chosen.get_window_extent(renderer))
        placed.append(chosen)
    return placed


def accuracy_throughput_pareto(pts: pd.DataFrame, model: str, pair: pd.DataFrame | None = None):
    """Accuracy vs simulated decode throughput at the largest batch that fits; the Pareto front drawn as a line."""
    frame = pts[(pts["model"] == model) & pts["sim_decode_tokens_per_s"].notna()]
    if frame.empty:
        return None
    styles = styles_for(frame["method"])
    bars = paired_bars(pair)
    clip = _unit(frame["value"])
    labels_of: dict = {}

    def draw(ax, task, sub):
        labels = labels_of.setdefault(ax, [])
        for method in _methods(sub):
            m = sub[sub["method"] == method].sort_values("sim_decode_tokens_per_s")
            style = styles[method]
            ax.errorbar(m["sim_decode_tokens_per_s"], m["value"],
                        yerr=_yerr(m["value"], _keys(model, m), bars, clip),
                        marker=style.marker, color=style.color, capsize=3, ls="none", label=method_label(method))
            labels += [(r["sim_decode_tokens_per_s"], r["value"], budget_label(r["method"], r["budget"]))
                       for _, r in m.iterrows()]
        xs, ys = sub["sim_decode_tokens_per_s"].tolist(), sub["value"].tolist()
        front = pareto_front(xs, ys)
        ax.plot([xs[i] for i in front], [ys[i] for i in front], color="gray", lw=1, ls=":", label="Pareto front",
                zorder=0)
        _plain_x_axis(ax, xs)
        ax.margins(x=0.08, y=0.1)
        ax.set_title(task, fontsize=10)
        ax.set_xlabel("simulated decode throughput (tokens/s, largest batch that fits)")

    fig = _panels(frame, f"Accuracy / simulated throughput on {frame['sim_hardware'].iloc[0]}: {model}", draw,
                  _bars_note(pair, clip) + "; labels: KV budget")
    fig.canvas.draw()  # lay the figure out once, then freeze it: label boxes measured now stay where they are
    fig.set_layout_engine("none")
    for ax, labels in labels_of.items():
        place_labels(ax, sorted(labels, key=lambda t: (-t[1], t[0])))
    return fig


PLOTS = {
    "accuracy_vs_budget": accuracy_vs_budget,
    "accuracy_vs_sim_kv_memory": accuracy_vs_sim_memory,
    "pareto_accuracy_sim_throughput": accuracy_throughput_pareto,
}


def write_plots(pts: pd.DataFrame, out_dir: Path, pair: pd.DataFrame | None = None) -> list[Path]:
    """Every plot for every model as PNG under ``out_dir``; returns the files written."""
    plt = _plt()
    out_dir.mkdir(parents=True, exist_ok=True)
    models = list(dict.fromkeys(pts["model"]))
    written = []
    for model in models:
        suffix = "" if len(models) == 1 else "_" + "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
        figures = [(name, draw(pts, model, pair)) for name, draw in PLOTS.items()]
        if pair is not None:
            figures.append(("paired_difference_vs_budget", paired_difference_vs_budget(pair, model)))
        for name, fig in figures:
            if fig is None:
                continue
            path = out_dir / f"{name}{suffix}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written
