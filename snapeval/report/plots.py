"""PNG plots of a sweep: accuracy vs budget, accuracy vs simulated KV memory, accuracy / throughput Pareto front.

One figure per model and plot kind, one panel per task; error bars are the headline metric's stderr. Figures are
drawn with matplotlib's Agg backend (no display needed) and returned so notebooks can show them inline.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from snapeval.report.tables import METHOD_ORDER, budget_label

COLORS = {"full": "black", "snapstream": "tab:blue", "snapkv": "tab:green", "streamingllm": "tab:orange"}
MARKERS = {"full": "s", "snapstream": "o", "snapkv": "^", "streamingllm": "v"}


def _figure(n_panels: int):
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = min(3, n_panels)
    nrows = math.ceil(n_panels / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.0 * nrows), squeeze=False)
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n_panels])


def _plain_x_axis(ax, values) -> None:
    """Log x axis when the values span more than a decade, else linear; plain-number labels either way."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    values = [float(v) for v in values if v and v > 0]
    if values and max(values) / min(values) > 10:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.3g}"))


def _methods(frame: pd.DataFrame) -> list[str]:
    return sorted(frame["method"].unique(), key=lambda m: METHOD_ORDER.get(m, 9))


def _yerr(frame: pd.DataFrame):
    return frame["stderr"].fillna(0).to_numpy()


def _metric_label(frame: pd.DataFrame) -> str:
    return f"accuracy ({frame['metric'].iloc[0].replace(',none', '')})"


def _panels(frame: pd.DataFrame, suptitle: str, draw):
    """One panel per task (in the sweep's order): ``draw(ax, task, rows)`` plots and sets title and x label."""
    tasks = list(dict.fromkeys(frame["task"]))
    fig, axes = _figure(len(tasks))
    for ax, task in zip(axes, tasks):
        sub = frame[frame["task"] == task].reset_index(drop=True)
        draw(ax, task, sub)
        ax.set_ylabel(_metric_label(sub))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def _label(method: str) -> str:
    return "full cache" if method == "full" else method


def accuracy_vs_budget(pts: pd.DataFrame, model: str):
    """Accuracy vs KV budget (log2 axis), one line per method; the full cache as a dashed line with its ±1 se band."""

    def draw(ax, task, sub):
        for method in _methods(sub):
            m = sub[sub["method"] == method]
            if method == "full":
                v, se = float(m["value"].iloc[0]), float(m["stderr"].fillna(0).iloc[0])
                ax.axhline(v, color=COLORS["full"], ls="--", lw=1.2, label=f"full cache ({v:.2f})")
                ax.axhspan(v - se, v + se, color=COLORS["full"], alpha=0.08)
                continue
            m = m.sort_values("budget")
            ax.errorbar(m["budget"].astype(float), m["value"], yerr=_yerr(m), marker=MARKERS.get(method, "o"),
                        color=COLORS.get(method), capsize=3, label=method)
        if sub["budget"].notna().any():
            ax.set_xscale("log", base=2)
        ax.set_title(task)
        ax.set_xlabel("KV budget (tokens per layer and KV head)")

    return _panels(pts[pts["model"] == model], f"Accuracy vs KV-cache budget: {model}", draw)


def accuracy_vs_sim_memory(pts: pd.DataFrame, model: str):
    """Accuracy vs simulated KV-cache memory per sequence of the full-size deployment (MiB)."""
    frame = pts[(pts["model"] == model) & pts["sim_kv_bytes_per_seq"].notna()]
    if frame.empty:
        return None

    def draw(ax, task, sub):
        for method in _methods(sub):
            m = sub[sub["method"] == method].sort_values("sim_kv_bytes_per_seq")
            ax.errorbar(m["sim_kv_bytes_per_seq"] / 2 ** 20, m["value"], yerr=_yerr(m),
                        marker=MARKERS.get(method, "o"), color=COLORS.get(method), capsize=3,
                        ls="none" if method == "full" else "-", label=_label(method))
        row = sub.iloc[0]
        _plain_x_axis(ax, sub["sim_kv_bytes_per_seq"] / 2 ** 20)
        ax.set_title(f"{task} (sim: {row['sim_prompt_len']:,} in / {row['sim_gen_len']:,} out tokens)", fontsize=9)
        ax.set_xlabel(f"simulated KV cache per sequence (MiB), {row['sim_model']}")

    return _panels(frame, f"Accuracy vs simulated KV memory on {frame['sim_hardware'].iloc[0]}: {model}", draw)


def pareto_front(xs, ys) -> list[int]:
    """Indices of the points no other point beats on both axes (higher x and higher y are better), by x."""
    order = sorted(range(len(xs)), key=lambda i: (-xs[i], -ys[i]))
    front, best = [], -math.inf
    for i in order:
        if ys[i] > best:
            front.append(i)
            best = ys[i]
    return sorted(front, key=lambda i: xs[i])


def accuracy_throughput_pareto(pts: pd.DataFrame, model: str):
    """Accuracy vs simulated decode throughput at the largest batch that fits; the Pareto front drawn as a line."""
    frame = pts[(pts["model"] == model) & pts["sim_decode_tokens_per_s"].notna()]
    if frame.empty:
        return None

    def draw(ax, task, sub):
        for method in _methods(sub):
            m = sub[sub["method"] == method]
            ax.errorbar(m["sim_decode_tokens_per_s"], m["value"], yerr=_yerr(m), marker=MARKERS.get(method, "o"),
                        color=COLORS.get(method), capsize=3, ls="none", label=_label(method))
            for _, r in m.iterrows():
                ax.annotate(budget_label(r["method"], r["budget"]), (r["sim_decode_tokens_per_s"], r["value"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=7)
        xs, ys = sub["sim_decode_tokens_per_s"].tolist(), sub["value"].tolist()
        front = pareto_front(xs, ys)
        ax.plot([xs[i] for i in front], [ys[i] for i in front], color="gray", lw=1, ls=":", label="Pareto front",
                zorder=0)
        _plain_x_axis(ax, xs)
        ax.set_title(task)
        ax.set_xlabel("simulated decode throughput (tokens/s, largest batch that fits)")

    return _panels(frame, f"Accuracy / simulated throughput on {frame['sim_hardware'].iloc[0]}: {model}", draw)


PLOTS = {
    "accuracy_vs_budget": accuracy_vs_budget,
    "accuracy_vs_sim_kv_memory": accuracy_vs_sim_memory,
    "pareto_accuracy_sim_throughput": accuracy_throughput_pareto,
}


def paired_difference_vs_budget(pair: pd.DataFrame, model: str):
    """Paired accuracy difference vs the full cache (error bars: the paired bootstrap 95% CI) vs budget."""
    frame = pair[(pair["model"] == model) & pair["paired_diff"].notna()]
    if frame.empty:
        return None

    def draw(ax, task, sub):
        ax.axhline(0.0, color=COLORS["full"], ls="--", lw=1.2, label="full cache")
        for method in _methods(sub):
            m = sub[sub["method"] == method].sort_values("budget")
            diff = m["paired_diff"].to_numpy(dtype=float)
            err = [diff - m["paired_ci_low"].to_numpy(dtype=float), m["paired_ci_high"].to_numpy(dtype=float) - diff]
            ax.errorbar(m["budget"].astype(float), diff, yerr=err, marker=MARKERS.get(method, "o"),
                        color=COLORS.get(method), capsize=3, label=method)
        ax.set_xscale("log", base=2)
        ax.set_title(task)
        ax.set_xlabel("KV budget (tokens per layer and KV head)")

    fig = _panels(frame, f"Paired difference vs full cache (95% CI): {model}", draw)
    for ax in fig.axes:
        ax.set_ylabel("accuracy - full cache (paired)")
    return fig


def write_plots(pts: pd.DataFrame, out_dir: Path, pair: pd.DataFrame | None = None) -> list[Path]:
    """Every plot for every model as PNG under ``out_dir``; returns the files written."""
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    models = list(dict.fromkeys(pts["model"]))
    written = []
    for model in models:
        suffix = "" if len(models) == 1 else "_" + "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
        for name, draw in PLOTS.items():
            fig = draw(pts, model)
            if fig is None:
                continue
            path = out_dir / f"{name}{suffix}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
        if pair is not None:
            fig = paired_difference_vs_budget(pair, model)
            if fig is not None:
                path = out_dir / f"paired_difference_vs_budget{suffix}.png"
                fig.savefig(path, dpi=110)
                plt.close(fig)
                written.append(path)
    return written
