"""Compare the SN40L simulator with every published figure in shared/reference/sn40l.md.

Writes results/bench/simulator_calibration.json (predicted, published, relative error, points used) and prints a
Markdown table (copied into docs/simulator.md). Also measures the cost of one simulated point.

    PYTHONPATH=. python benchmarks/simulator_calibration.py
"""
from __future__ import annotations

import json
import math
import platform
from dataclasses import replace
import time
from pathlib import Path

from snapeval.simulator import get_hardware, simulate_point
from snapeval.simulator.core import Deployment, KVPolicy, simulate

GIB = 2**30
R1_PROMPT, R1_GEN = 131072, 1024   # "128K prompt"; generation length of the decode measurement is not published
TOLERANCE = 0.10
LOOP_MODELS = ["llama-3.1-8b-instruct", "deepseek-r1-distill-llama-70b"]  # Llama-3.1-8B and Llama-3.x-70B shapes


def rel(pred: float, pub: float) -> float:
    return (pred - pub) / pub


def row(figure: str, predicted: float, published: float, unit: str, points: str, kind: str = "value",
        note: str = "") -> dict:
    if kind == "lower_bound":  # published "over X": no error while the prediction is above X
        error = 0.0 if predicted >= published else rel(predicted, published)
    elif kind == "range":  # published as a range (low, high): no error inside it
        low, high = published
        error = 0.0 if low <= predicted <= high else rel(predicted, low if predicted < low else high)
    else:
        error = rel(predicted, published)
    return {"figure": figure, "predicted": predicted, "published": published, "unit": unit, "kind": kind,
            "relative_error": error, "within_tolerance": abs(error) <= TOLERANCE, "points": points, "note": note}


def decode_point(model: str, hardware: str, looping: bool, sockets: int | None = None):
    return simulate_point(model, hardware, prompt_len=4096, gen_len=1, batch=1, kernel_looping=looping,
                          sockets=sockets)


def llama_405b():
    """Llama 3.1 405B shape (public config: 126 layers, hidden 16384, FFN 53248, 128 heads, 8 KV heads)."""
    from snapeval.models.presets import get_preset, with_overrides

    return with_overrides(get_preset("deepseek-r1-distill-llama-70b"), name="llama-3.1-405b",
                          hub_id="meta-llama/Llama-3.1-405B-Instruct", num_layers=126, hidden_size=16384,
                          intermediate_size=53248, num_attention_heads=128, num_kv_heads=8,
                          published_params=405_853_388_800, reasoning=False, chat_format="llama3")


def _hw(name: str, **assumptions):
    hw = get_hardware(name)
    return replace(hw, assumptions=replace(hw.assumptions, **assumptions)) if assumptions else hw


def r1_max_batch_point(prompt: int, budget: int | None, hardware=None):
    hw = hardware or "sn40l-16"
    first = simulate_point("deepseek-r1", hw, prompt, R1_GEN, budget=budget, batch=1)
    return simulate_point("deepseek-r1", hw, prompt, R1_GEN, budget=budget, batch=max(1, first.max_batch))


CLOUD = dict(prompt_len=4096, gen_len=1024, batch=1, compiled_context=8192)  # cloud served 8K-class contexts
CLOUD_PUBLISHED = {("llama-3.1-8b-instruct", 16): 1042, ("deepseek-r1-distill-llama-70b", 16): 457,
                   ("llama-3.1-405b", 16): 129}


def predict() -> list[dict]:
    """Held-out predictions: R1 at 64K and 32K prompts (full and SnapStream at prompt/4), Llama per-user speeds."""
    out = []
    for prompt in (65536, 32768):
        full = r1_max_batch_point(prompt, None)
        snap = r1_max_batch_point(prompt, prompt // 4)
        tag = f"R1 {prompt // 1024}K"
        for label, r in (("full", full), (f"SnapStream {prompt // 4 // 1024}K", snap)):
            per_socket = r.kv_bytes_per_seq * math.ceil(r.batch / 16) / 1e9
            out.append({"prediction": f"{tag} {label}: max decode batch", "value": r.max_batch,
                        "mechanism": f"HBM left after FP8 weights ({r.hbm.weights / 1e9:.1f} GB) and the prefill "
                        f"workspace planned for the 128K compiled context ({r.hbm.activations / 1e9:.1f} GB), "
                        f"divided by the KV slot ({r.kv_bytes_per_seq / 1e9:.2f} GB), x16 sockets (DP16), "
                        f"power-of-two batch (exact {r.max_batch_exact})"})
            kern = {k.name: k.seconds * 1e3 for k in r.decode_kernels}
            out.append({"prediction": f"{tag} {label}: decode throughput at that batch (x2.4 MTP)",
                        "value": r.decode_tokens_per_s,
                        "mechanism": f"step {r.decode_step_seconds * 1e3:.1f} ms: MLA attention compute on "
                        f"{per_socket:.1f} GB of KV per socket with 3 query tokens/sequence "
                        f"({kern['attention (KV cache)']:.1f} ms) + expert-parallel MoE streaming "
                        f"({kern['MoE FFN (router + experts)']:.1f} ms)"})
        gain = snap.decode_tokens_per_s / full.decode_tokens_per_s
        out.append({"prediction": f"{tag}: SnapStream throughput gain at max batch", "value": gain,
                    "mechanism": "batch ratio x step ratio: both max-batch points hold ~128K tokens per socket, "
                    "so the gain is the batch ratio less the extra expert streaming of the larger batch"})
    r1 = simulate_point("deepseek-r1", "sn40l-16", **CLOUD)
    out.append({"prediction": "DeepSeek-R1 per-user speed, 16 sockets, batch 1 (x2.4 MTP)",
                "value": r1.decode_tokens_per_s, "published": 198,
                "mechanism": f"step {r1.decode_step_seconds * 1e3:.2f} ms: the busiest socket streams whole experts "
                "(EP16, 3 tokens x 8 experts) + collectives"})
    for model in ("llama-3.1-8b-instruct", "deepseek-r1-distill-llama-70b", llama_405b()):
        name = getattr(model, "name", model)
        for sockets, hw in ((8, "sn40l-8"), (16, "sn40l-16")):
            r = simulate_point(model, hw, **CLOUD)
            how = ""
            if not r.fits:
                r = simulate_point(model, hw, placement="hbm+ddr", **CLOUD)
                how = "BF16 weights exceed HBM: spill to DDR (hbm+ddr); "
            coll = 2 * get_preset_layers(model) * 2 * (sockets - 1) * get_hardware(hw).assumptions.link_hop_latency_s
            pub = CLOUD_PUBLISHED.get((name, sockets))
            out.append({"prediction": f"{name.replace('deepseek-r1-distill-llama-70b', 'llama-3.1-70b (shape)')} "
                        f"per-user speed, {sockets} sockets, BF16, batch 1, no speculative decoding",
                        "value": r.decode_tokens_per_s, "published": pub,
                        "implied_speculation_factor": None if pub is None else pub / r.decode_tokens_per_s,
                        "mechanism": f"{how}step {r.decode_step_seconds * 1e3:.2f} ms = weight streaming "
                        f"{(r.decode_step_seconds - coll) * 1e3:.2f} ms + collectives {coll * 1e3:.2f} ms "
                        f"(2 per layer, {2 * (sockets - 1)} link hops each); speculation not included"
                        + ("" if pub is None else f": the published figure implies {pub / r.decode_tokens_per_s:.2f}x")})
    return out


def get_preset_layers(model) -> int:
    from snapeval.models.presets import get_preset

    return (model if not isinstance(model, str) else get_preset(model)).num_layers


def sensitivity_plots(window: int | None) -> list[str]:
    """Sweeps of the figures against the parameters the sources cannot pin (PNG under results/bench/)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    # 1. decode_attention_efficiency -> R1 throughputs and gain (as ratios to the published figures)
    effs = [0.08, 0.1, 0.12, 0.14, 0.17, 0.2, 0.25, 0.3, 0.4]
    series = {"full 128K, b16 / 434": [], "SnapStream 32K, b64 / 1832": [], "gain / 4.22": []}
    for e in effs:
        hw = _hw("sn40l-16", decode_attention_efficiency=e)
        f = simulate_point("deepseek-r1", hw, R1_PROMPT, R1_GEN, batch=16).decode_tokens_per_s
        sn = simulate_point("deepseek-r1", hw, R1_PROMPT, R1_GEN, budget=32768, batch=64).decode_tokens_per_s
        series["full 128K, b16 / 434"].append(f / 434)
        series["SnapStream 32K, b64 / 1832"].append(sn / 1832)
        series["gain / 4.22"].append(sn / f / (1832 / 434))
    paths.append(_plot("simulator_sensitivity_attention_efficiency.png", effs, series,
                       "decode_attention_efficiency (SN40L MLA decode)", "predicted / published",
                       "R1 decode vs the MLA attention efficiency (default 0.17)", ref=0.17))
    # 2. link_hop_latency_s -> Llama per-user speeds
    hops = [0.0, 0.05e-6, 0.1e-6, 0.2e-6, 0.4e-6, 0.8e-6]
    series = {}
    for model, label in (("llama-3.1-8b-instruct", "8B"), ("deepseek-r1-distill-llama-70b", "70B")):
        for sockets in (8, 16):
            series[f"{label}, {sockets} sockets"] = [
                simulate_point(model, _hw(f"sn40l-{sockets}", link_hop_latency_s=h), **CLOUD).decode_tokens_per_s
                for h in hops]
    paths.append(_plot("simulator_sensitivity_link_latency.png", [h * 1e6 for h in hops], series,
                       "link_hop_latency_s (us per link traversal)", "per-user tokens/s (no speculation)",
                       "Llama per-user decode speed vs collective hop latency (default 0.1 us)", ref=0.1,
                       logy=True))
    # 3. SnapKV observation window -> SnapKV share and prefill overhead
    ws = [32, 64, 128, 256, 512, 1024]
    series = {"SnapKV share of a 128K MoE layer (%)": [], "whole-prefill overhead (%)": []}
    for w in ws:
        r = simulate_point("deepseek-r1", "sn40l-16", R1_PROMPT, R1_GEN, budget=32768, batch=64, observation_length=w)
        series["SnapKV share of a 128K MoE layer (%)"].append(r.prefill_kernel_share["SnapKV compression"] * 100)
        series["whole-prefill overhead (%)"].append(r.prefill_overhead_fraction * 100)
    paths.append(_plot("simulator_sensitivity_snapkv_window.png", ws, series, "SnapKV observation_length (tokens)",
                       "% of prefill", f"SnapKV cost vs observation window (2.52% at {window})", ref=window,
                       hlines=(2.52,), logx=True))
    # 4. prefill_activation_buffers -> max batch at 128K / 64K / 32K (full and prompt/4)
    bufs = [0, 1, 2, 4, 6, 8]
    series = {}
    for prompt in (131072, 65536, 32768):
        for budget in (None, prompt // 4):
            key = f"{prompt // 1024}K " + ("full" if budget is None else f"SnapStream {budget // 1024}K")
            series[key] = [simulate_point("deepseek-r1", "sn40l-16", prompt, R1_GEN, budget=budget, batch=1,
                                          prefill_activation_buffers=b).max_batch for b in bufs]
    paths.append(_plot("simulator_sensitivity_prefill_buffers.png", bufs, series,
                       "prefill_activation_buffers ([128K, hidden] buffers planned per socket)", "max decode batch",
                       "R1 max batch vs the planned prefill workspace (default 4)", ref=4, logy=True))
    return paths


def _plot(name, xs, series, xlabel, ylabel, title, ref=None, hlines=(), logx=False, logy=False) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, ys in series.items():
        ax.plot(xs, ys, "o-", label=label)
    if ref is not None:
        ax.axvline(ref, color="gray", linestyle=":", label="default")
    for y in hlines:
        ax.axhline(y, color="black", linestyle="--", alpha=0.5)
    if ylabel == "predicted / published":
        ax.axhspan(0.9, 1.1, color="green", alpha=0.1, label="within 10%")
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path("results/bench") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def main() -> dict:
    rows = []
    # --- SnapStream deployment: DeepSeek-R1 on SN40L-16 -------------------------------------------------------
    full = simulate_point("deepseek-r1", "sn40l-16", R1_PROMPT, R1_GEN, budget=None, batch=16)
    snap = simulate_point("deepseek-r1", "sn40l-16", R1_PROMPT, R1_GEN, budget=32768, batch=64)
    pts = f"deepseek-r1, sn40l-16, prompt {R1_PROMPT}, gen {R1_GEN}, DP16 attention, TP16 GEMMs, fp8 weights"
    rows.append(row("max decode batch, 128K prompt, full cache", full.max_batch, 16, "sequences", pts,
                    note=f"exact (non power-of-two) limit {full.max_batch_exact}"))
    rows.append(row("max decode batch, 128K prompt, SnapStream 32K", snap.max_batch, 64, "sequences", pts,
                    note=f"exact (non power-of-two) limit {snap.max_batch_exact}"))
    rows.append(row("decode throughput, 128K, full cache, batch 16 (x2.4 MTP)", full.decode_tokens_per_s, 434,
                    "tokens/s", pts, note=f"step {full.decode_step_seconds * 1e3:.1f} ms"))
    rows.append(row("decode throughput, 128K, SnapStream 32K, batch 64 (x2.4 MTP)", snap.decode_tokens_per_s, 1832,
                    "tokens/s", pts, note=f"step {snap.decode_step_seconds * 1e3:.1f} ms"))
    rows.append(row("SnapStream throughput gain at max batch", snap.gain_vs_full()["throughput_gain_max_batch"],
                    1832 / 434, "x", pts))
    # observation window that reproduces the published SnapKV share (the paper does not state it)
    # (the window, in multiples of 32 tokens up to 4096, whose SnapKV share is closest to 2.52%)
    needed = min(range(32, 4097, 32), key=lambda w: abs(simulate_point(
        "deepseek-r1", "sn40l-16", R1_PROMPT, R1_GEN, budget=32768, batch=64,
        observation_length=w).prefill_kernel_share["SnapKV compression"] * 100 - 2.52))
    snap_w = simulate_point("deepseek-r1", "sn40l-16", R1_PROMPT, R1_GEN, budget=32768, batch=64,
                            observation_length=needed)
    share = snap_w.prefill_kernel_share
    pts_w = pts + f", observation_length {needed} (the window found above; default 32 gives " \
        f"{snap.prefill_kernel_share['SnapKV compression'] * 100:.2f}%)"
    rows.append(row("SnapStream prefill overhead (whole prefill, paper: 2-5%)", snap_w.prefill_overhead_fraction * 100,
                    (2.0, 5.0), "% of prefill", pts_w, kind="range",
                    note=f"default window 32: {snap.prefill_overhead_fraction * 100:.2f}%"))
    for name, published in [("QKV projections", 4.10), ("attention", 69.40), ("output projection", 5.84),
                            ("router", 3.15), ("MoE FFN", 14.67), ("SnapKV compression", 2.52),
                            ("ring buffer", 0.32)]:
        rows.append(row(f"share of one 128K MoE-layer prefill: {name}", share[name] * 100, published, "%",
                        pts_w + ", prefill TP16 batch 1"))

    # --- Kernel Looping, Table 1 first row: Llama-3.1-8B BF16, batch 1, 4096 context, one socket -------------------
    lp = simulate_point("llama-3.1-8b-instruct", "sn40l", prompt_len=4096, gen_len=0, batch=1)
    w_gib = lp.weights_bytes_total / GIB
    kv_gib = lp.kv_bytes_per_seq / GIB
    total_gib = lp.decode_bytes_per_step / GIB
    gflops = lp.decode_flops_per_step / 1e9
    pts_l = "llama-3.1-8b-instruct BF16, batch 1, context 4096 (the paper's 'GB' are GiB: 8.03e9 x 2 B = 14.96 GiB)"
    rows.append(row("Llama-3.1-8B weights per token", w_gib, 14.9, "GiB", pts_l))
    rows.append(row("Llama-3.1-8B KV cache at 4096", kv_gib, 0.5, "GiB", pts_l))
    rows.append(row("Llama-3.1-8B bytes per token", total_gib, 15.4, "GiB", pts_l))
    rows.append(row("Llama-3.1-8B GFLOPs per token", gflops, 20, "GFLOP", pts_l))
    rows.append(row("Llama-3.1-8B arithmetic intensity", gflops / total_gib, 1.3, "FLOP/byte", pts_l,
                    note="GFLOP per GiB, as the paper's ratio 20/15.4"))

    # --- Kernel looping speedups and achieved bandwidth --------------------------------------------------------
    one = {m: decode_point(m, "sn40l", False).decode_step_seconds / decode_point(m, "sn40l", True).decode_step_seconds
           for m in LOOP_MODELS if decode_point(m, "sn40l", True).fits}
    rows.append(row("kernel looping speedup, one socket (max over models that fit)", max(one.values()), 2.2, "x",
                    f"batch 1, context 4096, models {sorted(one)}", note=json.dumps({k: round(v, 2) for k, v in one.items()})))
    multi, frac = {}, {}
    for hw in ("sn40l-8", "sn40l-16"):
        for m in LOOP_MODELS:
            looped = decode_point(m, hw, True)
            if not looped.fits:
                continue
            multi[f"{m}@{hw}"] = decode_point(m, hw, False).decode_step_seconds / looped.decode_step_seconds
            frac[f"{m}@{hw}"] = looped.achieved_bandwidth_fraction
    rows.append(row("kernel looping speedup, 8 and 16 sockets (max)", max(multi.values()), 2.5, "x",
                    f"batch 1, context 4096, models {LOOP_MODELS}",
                    note=json.dumps({k: round(v, 2) for k, v in multi.items()})))
    big = {k: v for k, v in frac.items() if k.startswith("deepseek-r1-distill-llama-70b")}
    rows.append(row("achieved fraction of peak bandwidth with looping, 8 and 16 sockets (min, Llama-70B shape)",
                    min(big.values()), 0.90, "fraction", "batch 1, context 4096, Llama-70B shape", kind="lower_bound",
                    note="all: " + json.dumps({k: round(v, 3) for k, v in frac.items()})
                    + " (the 8B model is below: its collectives are a larger share of a short step)"))
    gpu = {m: decode_point(m, "dgx-h100", False) for m in LOOP_MODELS}
    gpu_frac = gpu["deepseek-r1-distill-llama-70b"].achieved_bandwidth_fraction
    rows.append(row("GPU achieved fraction of peak bandwidth in decode", gpu_frac, 0.21, "fraction",
                    "Llama-70B shape, DGX H100 TP8, batch 1, context 4096",
                    note=json.dumps({m: round(r.achieved_bandwidth_fraction, 3) for m, r in gpu.items()})))
    over = {}
    for m in LOOP_MODELS:
        for hw in ("sn40l-8", "sn40l-16"):
            r = decode_point(m, hw, True)
            if r.fits and gpu[m].fits:
                over[f"{m}@{hw}"] = gpu[m].decode_step_seconds / r.decode_step_seconds
    rows.append(row("SN40L speedup over DGX H100 (max)", max(over.values()), 3.7, "x",
                    "batch 1, context 4096, kernel looping on", note=json.dumps({k: round(v, 2) for k, v in over.items()})))

    # --- cost of one point -------------------------------------------------------------------------------------
    dep = Deployment(batch=64, prompt_len=R1_PROMPT, gen_len=R1_GEN)
    pol = KVPolicy(method="snapstream", budget=32768)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        simulate("sn40l-16", "deepseek-r1", dep, pol)
    per_point = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for b in range(1, n + 1):
        simulate_point("llama-3.1-8b-instruct", "sn40l-8", 8192, 512, budget=2048, batch=b % 256 + 1)
    per_point_llama = (time.perf_counter() - t0) / n

    within = sum(r["within_tolerance"] for r in rows)
    predictions = predict()
    plots = sensitivity_plots(needed)
    out = {
        "tolerance": TOLERANCE,
        "within_tolerance": within,
        "figures": len(rows),
        "rows": rows,
        "snapkv_observation_length_reproducing_published_share": needed,
        "aux_kernel_fixed_s_note": "set from the ring-buffer share: 4 gather/concat kernels = 0.32% of the layer",
        "predictions": predictions,
        "sensitivity_plots": plots,
        "seconds_per_point": {"deepseek-r1 sn40l-16": per_point, "llama-3.1-8b sn40l-8 (batch sweep)": per_point_llama},
        "python": platform.python_version(),
    }
    path = Path("results/bench/simulator_calibration.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print("| figure | predicted | published | unit | rel. error | within 10% |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        pub = "{}-{}".format(*r["published"]) if isinstance(r["published"], tuple) else f"{r['published']:.4g}"
        print(f"| {r['figure']} | {r['predicted']:.4g} | {pub} | {r['unit']} | "
              f"{r['relative_error'] * 100:+.1f}% | {'yes' if r['within_tolerance'] else '**no**'} |")
    print("\n| prediction | value | published (held out) | mechanism that sets it |")
    print("| --- | --- | --- | --- |")
    for p in predictions:
        pub = "-" if p.get("published") is None else f"{p['published']:.4g}"
        val = "-" if p["value"] is None else f"{p['value']:.4g}"
        print(f"| {p['prediction']} | {val} | {pub} | {p['mechanism']} |")
    print(f"\n{within}/{len(rows)} figures within 10%. One point: {per_point * 1e6:.0f} us (R1), "
          f"{per_point_llama * 1e6:.0f} us (Llama batch sweep). SnapKV window reproducing 2.52%: {needed}")
    return out


if __name__ == "__main__":
    main()
