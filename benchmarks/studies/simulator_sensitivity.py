"""The sensitivity of the SN40L calibration's figures to every parameter set from a figure, to the decode attention
tiling and to every discrete choice that decides a batch (:func:`sensitivity`), and its two PNGs of panels. Run by
:mod:`benchmarks.studies.simulator_calibration`."""
from __future__ import annotations

import math
from pathlib import Path

from benchmarks.studies.sn40l_points import (ACCEPTANCE, CONTEXTS, GIB, LLAMA_405B, LLAMA_70B, LOOP_MODELS,
                                             PUBLISHED_GAIN, PUBLISHED_SHARES, R1_GEN, R1_PROMPT, TOLERANCE, _hw, cloud,
                                             decode_point, gain_at_max_batch, looping_speedups, r1)
from snapeval.simulator import get_hardware, simulate_point


def _r1_figures(hw, **deployment) -> dict[str, float]:
    mid = sum(PUBLISHED_GAIN) / 2
    return {"434 tok/s (128K full, b16)": r1(R1_PROMPT, None, 16, hw, **deployment).decode_tokens_per_s / 434,
            "1832 tok/s (128K SnapStream, b64)": r1(R1_PROMPT, 32768, 64, hw, **deployment).decode_tokens_per_s / 1832,
            "gain 128K / 4.22": gain_at_max_batch(R1_PROMPT, hw, **deployment) / (1832 / 434),
            f"gain 64K / {mid}": gain_at_max_batch(65536, hw, **deployment) / mid,
            f"gain 32K / {mid}": gain_at_max_batch(32768, hw, **deployment) / mid}


def _overheads(window: float) -> dict[str, float]:
    """The prefill overhead at 64K and 32K (budget a quarter of the prompt) over the top of the paper's 2-5%."""
    return {f"overhead {p // 1024}K / 5%": r1(p, p // 4, 1, settings={"observation": window}).prefill_overhead_fraction
            * 100 / 5.0 for p in CONTEXTS[1:]}


def _shares(hw, window: float, which=("QKV projections", "attention", "output projection", "router", "MoE FFN"),
            ) -> dict[str, float]:
    share = simulate_point("deepseek-r1", hw, R1_PROMPT, R1_GEN, budget=32768,
                           settings={"observation": window}).prefill_kernel_share
    names = {"scoring": "SnapKV", "gather": "ring buffer"}
    return {f"{names.get(k, k)} share / {PUBLISHED_SHARES[k]}": share[k] * 100 / PUBLISHED_SHARES[k] for k in which}


def _looping(**assumptions) -> dict[str, float]:
    one, multi, frac = looping_speedups(lambda name: _hw(name, **assumptions))
    return {"looping, 1 socket / 2.2": max(one.values()) / 2.2,
            "looping, 8/16 sockets / 2.5": max(multi.values()) / 2.5,
            "70B bandwidth fraction / 0.9": min(v for k, v in frac.items() if "70b" in k) / 0.9}


def _cloud(hw16=None, acceptance: float = ACCEPTANCE) -> dict[str, float]:
    return {f"{label}, 16 sockets / {pub}": cloud(model, 16, hw16, True, acceptance)[0].decode_tokens_per_s / pub
            for label, model, pub in (("8B", "llama-3.1-8b-instruct", 1042), ("70B", LLAMA_70B, 457),
                                      ("405B", LLAMA_405B, 129))}


def _gpu(fill: float) -> dict[str, float]:
    gpu = _hw("dgx-h100", call_fill_drain_fraction=fill)
    best = max(decode_point(m, gpu, False).decode_step_seconds / decode_point(m, hw, True).decode_step_seconds
               for m in LOOP_MODELS for hw in ("sn40l-8", "sn40l-16"))
    return {"GPU bandwidth fraction / 0.21":
            decode_point("deepseek-r1-distill-llama-70b", gpu, False).achieved_bandwidth_fraction / 0.21,
            "SN40L over DGX H100 / 3.7": best / 3.7}


def _batches(hardware="sn40l-16", **deployment) -> dict[str, int]:
    """R1's largest batch at 128K / 64K / 32K, full cache and SnapStream at a quarter of the prompt."""
    out = {}
    for prompt in CONTEXTS:
        for budget in (None, prompt // 4):
            key = f"{prompt // 1024}K " + ("full" if budget is None else f"SS {budget // 1024}K")
            out[key] = simulate_point("deepseek-r1", hardware, prompt, R1_GEN, budget=budget, batch=1,
                                      **deployment).max_batch
    return out


def sensitivity(window: float) -> tuple[list[str], dict]:
    """Every parameter set from a figure, and every discrete choice that decides a batch, against the figures it
    moves. Two PNGs of panels under results/bench/: parameters (predicted / published) and choices (max batch)."""
    used = get_hardware("sn40l-16").assumptions
    gpu_used = get_hardware("dgx-h100").assumptions
    parameters = [
        ("decode_attention_efficiency", [0.1, 0.13, used.decode_attention_efficiency, 0.2, 0.25, 0.3],
         used.decode_attention_efficiency, "set from 434 tok/s",
         lambda v: _r1_figures(_hw("sn40l-16", decode_attention_efficiency=v))),
        ("socket.sram_bandwidth (TB/s)", [25, 50, 100, 200, 400, 800],
         get_hardware("sn40l-16").socket.sram_bandwidth / 1e12, 'sourced: "> 100 TB/s", a lower bound',
         lambda v: _r1_figures(_hw("sn40l-16", socket={"sram_bandwidth": v * 1e12}))),
        ("bandwidth_efficiency", [0.8, 0.85, 0.9, 0.95, 1.0], used.bandwidth_efficiency, 'set from "> 90% of peak"',
         lambda v: {**_looping(bandwidth_efficiency=v),
                    "434 tok/s": r1(R1_PROMPT, None, 16, _hw("sn40l-16", bandwidth_efficiency=v))
                    .decode_tokens_per_s / 434}),
        ("gemm_efficiency", [0.3, 0.4, 0.5, 0.6, 0.7], used.gemm_efficiency, "set from the prefill shares",
         lambda v: _shares(_hw("sn40l-16", gemm_efficiency=v), window)),
        ("prefill_attention_efficiency", [0.45, 0.55, 0.65, 0.75, 0.85], used.prefill_attention_efficiency,
         "set from the prefill shares",
         lambda v: _shares(_hw("sn40l-16", prefill_attention_efficiency=v), window)),
        ("assumed_link_bandwidth (GB/s)", [150, 300, 600, 1200, 2400], used.assumed_link_bandwidth / 1e9,
         "set from QKV / output / router shares",
         lambda v: _shares(_hw("sn40l-16", assumed_link_bandwidth=v * 1e9), window)),
        ("call_fill_drain_fraction", [0.6, 0.9, 1.185, 1.5, 1.8], used.call_fill_drain_fraction,
         "set from looping 2.2x (one socket)",
         lambda v: _looping(call_fill_drain_fraction=v)),
        ("cross_socket_sync_s (us)", [0, 5, 10, 14, 20, 30], used.cross_socket_sync_s * 1e6,
         "set from looping 2.5x (8 and 16 sockets)",
         lambda v: {**_looping(cross_socket_sync_s=v * 1e-6),
                    **_shares(_hw("sn40l-16", cross_socket_sync_s=v * 1e-6), window, ("gather",))}),
        ("kernel_call_sync_s (us)", [1, 2.5, 5, 10, 20], used.kernel_call_sync_s * 1e6, "assumption",
         lambda v: {**_looping(kernel_call_sync_s=v * 1e-6),
                    **_shares(_hw("sn40l-16", kernel_call_sync_s=v * 1e-6), window, ("gather",))}),
        ("SnapKV observation window (fraction of the budget)", [1 / 1024, 4 / 1024, 8 / 1024, window, 16 / 1024,
                                                                32 / 1024], window, "set from the SnapKV share",
         lambda v: {**_shares("sn40l-16", v, ("scoring", "gather")), **_overheads(v)}),
        ("attention_tiling (discrete; 'keys' does not fit)", ["auto", "rows"], "auto",
         "the cheapest tiling that fits on-chip", lambda v: _r1_figures("sn40l-16", attention_tiling=v)),
        ("link_hop_latency_s (us)", [0, 0.05, 0.1, 0.2, 0.4], used.link_hop_latency_s * 1e6,
         "assumption (3 us per 16-socket all-reduce)",
         lambda v: _cloud(_hw("sn40l-16", link_hop_latency_s=v * 1e-6))),
        ("draft_acceptance", [0.6, 0.7, 0.8, 0.9], ACCEPTANCE, "the paper's MTP acceptance",
         lambda v: _cloud(acceptance=v)),
        ("GPU call_fill_drain_fraction", [1.5, 2.0, 2.75, 3.5, 4.5], gpu_used.call_fill_drain_fraction,
         "set from the GPUs' 21%", _gpu),
    ]
    panels, data = {}, {}
    for title, xs, ref, source, evaluate in parameters:
        points = [evaluate(x) for x in xs]
        series = {label: [p[label] for p in points] for label in points[0]}
        panels[title] = (xs, ref, series, source)
        data[title] = {"values": xs, "default": ref, "set_from": source, "predicted_over_published": series}
    paths = [_grid("simulator_sensitivity_parameters.png", panels, "predicted / published",
                   "SN40L simulator: every parameter set from a figure, and the decode attention tiling "
                   "(dotted: the value used; green: within 10%)")]

    binary = _hw("sn40l-16", socket={"hbm_bytes": 64 * GIB})
    choices = [
        ("prefill_activation_buffers", [0, 1, 2, 4, 6, 8], 4, "assumption",
         lambda v: _batches(prefill_activation_buffers=v)),
        ("compiled_context (K tokens)", [32, 64, 128, 160], 128, 'the deployment\'s "128k context length"',
         lambda v: _batches(compiled_context=v * 1024)),
        ("batch_granularity", ["pow2", "any"], "pow2", "the paper reports power-of-two batches",
         lambda v: _batches(batch_granularity=v)),
        ("HBM '64 GB' per socket read as", ["10^9 B", "2^30 B"], "10^9 B", "decimal, as vendors count",
         lambda v: _batches({"10^9 B": "sn40l-16", "2^30 B": binary}[v])),
        ("kv_slot", ["exact", "bucket"], "exact", "assumption", lambda v: _batches(kv_slot=v)),
    ]
    chosen = {}
    for title, xs, ref, source, evaluate in choices:
        points = [evaluate(x) for x in xs]
        series = {label: [p[label] for p in points] for label in points[0]}
        chosen[title] = (xs, ref, series, source)
    paths.append(_grid("simulator_sensitivity_choices.png", chosen, "max decode batch (R1, 16 sockets)",
                       "SN40L simulator: every discrete choice that decides a batch (dotted: the choice used)",
                       logy=True))
    data["choices"] = {title: {"values": xs, "default": ref, "set_from": src, "max_batch": series}
                       for title, (xs, ref, series, src) in chosen.items()}
    data["choices"]["gain at max batch, 128K / 64K / 32K"] = {
        "as used (pow2, 10^9 B)": [gain_at_max_batch(p) for p in CONTEXTS],
        "any batch": [gain_at_max_batch(p, batch_granularity="any") for p in CONTEXTS],
        "64 GiB HBM": [gain_at_max_batch(p, binary) for p in CONTEXTS],
    }
    return paths, data


def _grid(name, panels, ylabel, title, logy=False) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(panels)
    cols = 3
    rows_ = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(5.2 * cols, 3.4 * rows_), squeeze=False)
    for ax, (panel, (xs, ref, series, source)) in zip(axes.flat, panels.items()):
        categorical = isinstance(xs[0], str)
        positions = list(range(len(xs))) if categorical else xs
        for i, (label, ys) in enumerate(series.items()):
            if categorical:  # one marker per option, side by side
                ax.plot([x + (i - len(series) / 2) * 0.04 for x in positions], ys, "o", label=label, markersize=5)
            else:
                ax.plot(positions, ys, "o-", label=label, markersize=3)
        ax.axvline(positions[xs.index(ref)] if categorical else ref, color="gray", linestyle=":")
        if categorical:
            ax.set_xticks(positions, xs)
            ax.set_xlim(-0.5, len(xs) - 0.5)
        if ylabel == "predicted / published":
            ax.axhspan(1 - TOLERANCE, 1 + TOLERANCE, color="green", alpha=0.1)
        if logy:  # symmetric log: a batch of 0 (nothing fits) stays on the plot
            ax.set_yscale("symlog", base=2, linthresh=1)
            ax.set_ylim(0, 1.6 * max(max(ys) for ys in series.values()))
        ax.set_title(f"{panel}\n({source})", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
        ax.set_ylabel(ylabel, fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.4 * rows_)))  # room for the suptitle
    path = Path("results/bench") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return str(path)
