"""Compare the SN40L simulator with every published figure in shared/reference/sn40l.md.

Writes results/bench/simulator_calibration.json (predicted, published, relative error, points used) and prints a
Markdown table (copied into docs/simulator.md). Also measures the cost of one simulated point.

    PYTHONPATH=. python benchmarks/simulator_calibration.py
"""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from snapeval.simulator import simulate_point
from snapeval.simulator.core import Deployment, KVPolicy, simulate

GIB = 2**30
R1_PROMPT, R1_GEN = 131072, 1024   # "128K prompt"; generation length of the decode measurement is not published
TOLERANCE = 0.15
LOOP_MODELS = ["llama-3.1-8b-instruct", "deepseek-r1-distill-llama-70b"]  # Llama-3.1-8B and Llama-3.x-70B shapes


def rel(pred: float, pub: float) -> float:
    return (pred - pub) / pub


def row(figure: str, predicted: float, published: float, unit: str, points: str, kind: str = "value",
        note: str = "") -> dict:
    if kind == "lower_bound":  # published "over X": no error while the prediction is above X
        error = 0.0 if predicted >= published else rel(predicted, published)
    else:
        error = rel(predicted, published)
    return {"figure": figure, "predicted": predicted, "published": published, "unit": unit, "kind": kind,
            "relative_error": error, "within_15pct": abs(error) <= TOLERANCE, "points": points, "note": note}


def decode_point(model: str, hardware: str, looping: bool, sockets: int | None = None):
    return simulate_point(model, hardware, prompt_len=4096, gen_len=1, batch=1, kernel_looping=looping,
                          sockets=sockets)


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
    share = snap.prefill_kernel_share
    overhead_layer = share["SnapKV compression"] + share["ring buffer"]
    rows.append(row("SnapStream prefill overhead (whole prefill, paper: 2-5%)", snap.prefill_overhead_fraction * 100,
                    3.5, "% of prefill", pts + ", observation_length 32",
                    note="published as a 2-5% range; 3.5% is its midpoint"))
    for name, published in [("QKV projections", 4.10), ("attention", 69.40), ("output projection", 5.84),
                            ("router", 3.15), ("MoE FFN", 14.67), ("SnapKV compression", 2.52),
                            ("ring buffer", 0.32)]:
        rows.append(row(f"share of one 128K MoE-layer prefill: {name}", share[name] * 100, published, "%",
                        pts + ", prefill TP16 batch 1"))
    # observation window that would reproduce the published SnapKV share (the paper does not state it)
    needed = None
    for w in (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
        s = simulate_point("deepseek-r1", "sn40l-16", R1_PROMPT, R1_GEN, budget=32768, batch=64,
                           observation_length=w).prefill_kernel_share["SnapKV compression"]
        if s * 100 >= 2.52:
            needed = w
            break

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
    rows.append(row("achieved fraction of peak bandwidth with looping, 8 and 16 sockets (min)", min(frac.values()),
                    0.90, "fraction", f"batch 1, context 4096, models {LOOP_MODELS}", kind="lower_bound",
                    note=json.dumps({k: round(v, 3) for k, v in frac.items()})))
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

    within = sum(r["within_15pct"] for r in rows)
    out = {
        "tolerance": TOLERANCE,
        "within_tolerance": within,
        "figures": len(rows),
        "rows": rows,
        "snapkv_observation_length_reproducing_published_share": needed,
        "seconds_per_point": {"deepseek-r1 sn40l-16": per_point, "llama-3.1-8b sn40l-8 (batch sweep)": per_point_llama},
        "python": platform.python_version(),
    }
    path = Path("results/bench/simulator_calibration.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print("| figure | predicted | published | unit | rel. error | within 15% |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['figure']} | {r['predicted']:.4g} | {r['published']:.4g} | {r['unit']} | "
              f"{r['relative_error'] * 100:+.1f}% | {'yes' if r['within_15pct'] else '**no**'} |")
    print(f"\n{within}/{len(rows)} figures within 15%. One point: {per_point * 1e6:.0f} us (R1), "
          f"{per_point_llama * 1e6:.0f} us (Llama batch sweep). SnapKV window reproducing 2.52%: {needed}")
    return out


if __name__ == "__main__":
    main()
