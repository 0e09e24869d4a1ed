"""Sweeps over one deployment or method parameter: a table of points and a plot."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from snapeval.errors import SnapevalError
from snapeval.simulator.core import Deployment, SimResult, simulate

SWEEPABLE = ("batch", "prompt_len", "gen_len", "budget", "sockets", "tp")
COLUMNS = ("fits", "max_batch", "memory_per_socket_gb", "kv_gb_total", "decode_step_ms", "decode_tokens_per_s",
           "decode_tokens_per_s_per_seq", "achieved_bandwidth_fraction", "prefill_s")


def parse_sweep(spec: str) -> tuple[str, list[int | None]]:
    """``"batch=1,2,4"`` -> ("batch", [1, 2, 4]); ``budget`` accepts ``full`` for no budget."""
    name, sep, values = spec.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not values.strip():
        raise SnapevalError(f"--sweep={spec!r} must look like NAME=V1,V2,... with NAME one of: {', '.join(SWEEPABLE)}")
    if name not in SWEEPABLE:
        raise SnapevalError(f"--sweep parameter {name!r} is not allowed; choose one of: {', '.join(SWEEPABLE)}")
    out: list[int | None] = []
    for raw in values.split(","):
        raw = raw.strip()
        if name == "budget" and raw.lower() in ("full", "none"):
            out.append(None)
            continue
        try:
            number = int(raw.lower().replace("k", "")) * (1024 if raw.lower().endswith("k") else 1)
        except ValueError:
            raise SnapevalError(f"--sweep value {raw!r} for {name} must be an integer (or 'full' for budget)") from None
        out.append(number)
    return name, out


def run_sweep(hardware: Any, model: Any, deployment: Deployment, method: Any, name: str,
              values: Sequence[int | None], method_for_budget: Callable[[int | None], Any] | None = None,
              ) -> list[SimResult]:
    """One point per value of ``name``; a ``budget`` sweep builds each point's method with ``method_for_budget``
    (None: the method of ``method`` at that budget), and ``full`` (None) is the full cache."""
    from snapeval.cache import resolve_method

    results = []
    for value in values:
        if name == "budget":
            if value is None:
                point = resolve_method("full")
            elif method_for_budget is None:
                point = resolve_method(method.method, value)
            else:
                point = method_for_budget(value)
            results.append(simulate(hardware, model, deployment, point))
        else:
            results.append(simulate(hardware, model, replace(deployment, **{name: value}), method))
    return results


def row(result: SimResult) -> dict[str, Any]:
    """The table columns of one point (GB = 1e9 bytes)."""
    def opt(x, scale=1.0):
        return None if x is None else x * scale

    return {
        "fits": result.fits,
        "max_batch": result.max_batch,
        "memory_per_socket_gb": result.memory_per_socket / 1e9,
        "kv_gb_total": result.kv_bytes_total / 1e9,
        "decode_step_ms": opt(result.decode_step_seconds, 1e3),
        "decode_tokens_per_s": result.decode_tokens_per_s,
        "decode_tokens_per_s_per_seq": result.decode_tokens_per_s_per_seq,
        "achieved_bandwidth_fraction": result.achieved_bandwidth_fraction,
        "prefill_s": result.prefill_seconds,
    }


def plot_sweep(results: Sequence[SimResult], name: str, values: Sequence[int | None], path: str) -> None:
    """Two panels: decode throughput and memory per socket against the swept parameter."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = results[0]
    labels = [("full" if v is None else v) for v in values]
    xs = list(range(len(values))) if name == "budget" else [v for v in values]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    tput = [r.decode_tokens_per_s for r in results]
    ok = [(x, t) for x, t in zip(xs, tput) if t is not None]
    mtp = f" (x{first.mtp_factor:g} MTP)" if first.includes_mtp else ""
    ax1.plot([x for x, _ in ok], [t for _, t in ok], "o-", label=f"whole batch{mtp}")
    per = [(x, r.decode_tokens_per_s_per_seq) for x, r in zip(xs, results) if r.decode_tokens_per_s_per_seq]
    ax1.plot([x for x, _ in per], [t for _, t in per], "s--", label="per sequence")
    bad = [x for x, r in zip(xs, results) if not r.fits]
    for x in bad:
        ax1.axvline(x, color="red", alpha=0.2)
    if bad:
        ax1.plot([], [], color="red", alpha=0.4, label="does not fit")
    ax1.set_ylabel("decode throughput (tokens/s)")
    ax1.set_title("Decode throughput")
    ax2.stackplot(xs, [r.hbm.weights / 1e9 + r.ddr.weights / 1e9 for r in results],
                  [r.hbm.kv_cache / 1e9 + r.ddr.kv_cache / 1e9 for r in results],
                  [r.hbm.activations / 1e9 + r.ddr.activations / 1e9 for r in results],
                  labels=["weights", "KV cache", "activations"], alpha=0.8)
    ax2.axhline(first.hbm_capacity / 1e9, color="black", linestyle=":", label="HBM per socket")
    ax2.set_ylabel("memory per socket (GB)")
    ax2.set_title("Memory per socket")
    unit = {"batch": "sequences", "prompt_len": "tokens", "gen_len": "tokens", "budget": "tokens",
            "sockets": "sockets", "tp": "degree"}[name]
    for ax in (ax1, ax2):
        ax.set_xlabel(f"{name} ({unit})")
        if name == "budget":
            ax.set_xticks(xs, [str(v) for v in labels])
        elif name in ("batch", "prompt_len", "gen_len", "budget") and len(xs) > 2 and min(xs) > 0:
            ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fixed = {"prompt_len": f"prompt {first.prompt_len}", "gen_len": f"gen {first.gen_len}",
             "batch": f"batch {first.batch}",
             "budget": "full cache" if first.budget is None else f"{first.method}"}
    fixed.pop(name, None)
    fig.suptitle(f"{first.model} on {first.hardware}: sweep over {name} ({', '.join(fixed.values())})", fontsize=10)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise SnapevalError(f"--plot {path!r}: cannot write: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
