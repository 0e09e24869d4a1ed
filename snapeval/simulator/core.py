"""Analytical memory and time model of LLM inference on SN40L (and GPUs for comparison).

Everything is closed-form arithmetic on the model architecture (``ModelPreset``), the hardware spec, the deployment
and the cache method's own description of itself (a resolved :class:`~snapeval.cache.config.MethodConfig`: its KV
slots, its kept tokens over the decode, its prefill work), so one point costs well under a millisecond.
docs/simulator.md explains each term and the source of each default; ``benchmarks/studies/simulator_calibration.py``
compares the results with every published figure.

Decode step, per socket (the slowest socket sets the pace):
    t_step = sum over kernels of max(bytes / (BW * bandwidth_efficiency), flops / (peak * efficiency))
             + the merge of a sequence's split attention + collectives + call-boundary costs
With a draft model (speculative decoding) one step is the target's verification of ``draft_tokens`` drafts plus the
draft model's own steps, each costed by the same step model.
Prefill of one prompt (batch 1, tensor parallel over all sockets): the same max(memory, compute) per kernel, plus
the kernels of the method's own prefill work (scoring, gathering) when it compresses the prompt.

The modules, in the order ``simulate`` calls them (this module is their table of contents):
:mod:`~snapeval.simulator.deployment` (what is deployed), :mod:`~snapeval.simulator.plan` (sockets, parallelism,
what each socket holds), :mod:`~snapeval.simulator.memory` (memory per socket, the largest batch),
:mod:`~snapeval.simulator.decode` (one decode step), :mod:`~snapeval.simulator.prefill` (one prompt's prefill) and
:mod:`~snapeval.simulator.records` (the :class:`SimResult` they fill in).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from snapeval.cache.config import MethodConfig
from snapeval.errors import SnapevalError
from snapeval.models.presets import ModelPreset
from snapeval.simulator.decode import decode_step_time, expected_tokens, speculative_step
from snapeval.simulator.deployment import DTYPE_BYTES, Deployment, int_field
from snapeval.simulator.hardware import HardwareSpec, get_hardware
from snapeval.simulator.memory import draft_for, memory_use, method_or_full
from snapeval.simulator.plan import activation_bytes, plan_deployment, resolve_model
from snapeval.simulator.prefill import prefill_time
from snapeval.simulator.records import KernelTime, SimResult, TierUsage  # noqa: F401

__all__ = ["DTYPE_BYTES", "Deployment", "KernelTime", "SimResult", "TierUsage", "at_batch", "forward_flops_per_token",
           "gain_vs_full", "simulate", "simulate_point"]


def simulate(hardware: str | HardwareSpec, model: str | ModelPreset, deployment: Deployment | None = None,
             method: MethodConfig | None = None) -> SimResult:
    """Simulate one point of ``model`` with the cache ``method`` (a resolved configuration, e.g.
    ``snapeval.cache.resolve_method("snapstream", 32768)``; None: the full cache). The simulator reads the method's
    own description (its KV slots, mean kept tokens over the decode and prefill work), never its name. Raises
    :class:`SnapevalError` for invalid specs; a point that does not fit returns a result with ``fits=False`` and a
    ``reason`` (and ``None`` throughputs)."""
    hw = get_hardware(hardware)
    m = resolve_model(model)
    dep = deployment or Deployment()
    method = method_or_full(method)
    plan = plan_deployment(hw, m, dep)
    draft = draft_for(hw, dep, plan)
    mem = memory_use(hw, m, dep, plan, method, draft)
    final_context = dep.prompt_len + dep.gen_len
    capacity = mem.hbm_capacity + mem.ddr_capacity
    gib = 1e9
    reason = ""
    if mem.weights_socket > capacity:
        reason = (f"weights need {mem.weights_socket / gib:.1f} GB per socket ({m.name}, {plan.weight_dtype}, "
                  f"tp={plan.tp}{', with the draft model' if draft else ''}) but a socket of {hw.name} holds "
                  f"{capacity / gib:.1f} GB")
    elif mem.need > capacity:
        reason = (f"needs {mem.need / gib:.1f} GB per socket (weights {mem.weights_socket / gib:.1f} + KV "
                  f"{mem.kv_socket / gib:.1f} + activations {mem.activations / gib:.1f}) but a socket holds "
                  f"{capacity / gib:.1f} GB; largest batch that fits: {mem.max_batch}")
    elif final_context > m.max_context:
        reason = f"prompt_len + gen_len = {final_context} exceeds the {m.max_context}-token context of {m.name}"
    elif draft is not None and final_context > draft.model.max_context:
        reason = (f"prompt_len + gen_len = {final_context} exceeds the {draft.model.max_context}-token context of "
                  f"the draft model {draft.model.name}")
    fits = not reason
    kv_per_token = m.num_layers * m.kv_values_per_token_per_layer * DTYPE_BYTES[dep.kv_dtype]
    kept = method.mean_kept_tokens(dep.prompt_len, dep.gen_len)
    base = dict(
        hardware=hw.name, model=m.name, method=method.label, budget=method.budget, batch=dep.batch,
        prompt_len=dep.prompt_len, gen_len=dep.gen_len, sockets=plan.sockets, tp=plan.tp,
        attention_parallel=plan.attention_parallel, weight_dtype=plan.weight_dtype, kv_dtype=dep.kv_dtype,
        kernel_looping=plan.kernel_looping, fits=fits, reason=reason, hbm=mem.hbm, ddr=mem.ddr,
        hbm_capacity=mem.hbm_capacity, ddr_capacity=mem.ddr_capacity, weights_bytes_total=mem.weights_total,
        kv_bytes_total=mem.kv_total, kv_bytes_per_seq=mem.kv_seq, kv_bytes_per_token=kv_per_token, kept_tokens=kept,
        max_batch=mem.max_batch, max_batch_exact=mem.max_batch_exact, mtp_factor=plan.mtp_factor,
        includes_mtp=plan.mtp_factor != 1.0, draft_model=draft.model.name if draft else None,
        inputs=(hw, m, dep, method),
    )
    if not fits:
        return SimResult(**base, decode_step_seconds=None, decode_tokens_per_s=None,
                         decode_tokens_per_s_per_seq=None, decode_tokens_per_s_raw=None,
                         achieved_bandwidth_fraction=None, decode_bytes_per_step=None, decode_flops_per_step=None,
                         decode_kernels=[], attention_units=1, draft_tokens=plan.draft_tokens, tokens_per_step=1.0,
                         draft_seconds_per_step=None, prefill_seconds=None, prefill_compression_seconds=0.0,
                         prefill_overhead_fraction=0.0, prefill_kernel_share={})

    w_ddr = mem.ddr.weights / mem.weights_socket if mem.weights_socket and mem.ddr_capacity else 0.0
    kv_ddr = mem.ddr.kv_cache / mem.kv_socket if mem.kv_socket and mem.ddr_capacity else 0.0
    draft_seconds, tokens = None, 1.0
    if draft is None:
        step = decode_step_time(hw, m, dep, plan, kept, w_ddr, kv_ddr)
    else:
        def fits_with(k: int) -> bool:  # the target's decode buffers grow with the tokens it verifies
            buffers = activation_bytes(m, dep, replace(plan, draft_tokens=k), kv_per_token)
            return mem.need - mem.activations + buffers <= capacity

        step, draft_seconds, lookahead = speculative_step(hw, m, dep, plan, draft, kept, w_ddr, kv_ddr, fits_with)
        tokens = expected_tokens(lookahead, dep.draft_acceptance)
        if lookahead != plan.draft_tokens:  # the verification buffers of the chosen lookahead
            plan = replace(plan, draft_tokens=lookahead)
            mem = memory_use(hw, m, dep, plan, method, draft)
            base.update(hbm=mem.hbm, ddr=mem.ddr, max_batch=mem.max_batch, max_batch_exact=mem.max_batch_exact)
    seconds = step.seconds + (draft_seconds or 0.0)
    raw = dep.batch * tokens / seconds
    peak_bw = hw.socket.hbm_bandwidth * plan.sockets
    prefill_s, compress_s, shares = prefill_time(hw, m, dep, plan, method)
    return SimResult(
        **base,
        decode_step_seconds=seconds,
        decode_tokens_per_s=raw * plan.mtp_factor,
        decode_tokens_per_s_per_seq=raw * plan.mtp_factor / dep.batch,
        decode_tokens_per_s_raw=raw,
        achieved_bandwidth_fraction=step.bytes / step.seconds / peak_bw,
        decode_bytes_per_step=step.bytes,
        decode_flops_per_step=step.flops,
        decode_kernels=step.kernels,
        decode_overheads=step.overheads,
        attention_units=step.attention_units,
        draft_tokens=plan.draft_tokens,
        tokens_per_step=tokens,
        draft_seconds_per_step=draft_seconds,
        prefill_seconds=prefill_s,
        prefill_compression_seconds=compress_s,
        prefill_overhead_fraction=compress_s / (prefill_s - compress_s) if compress_s else 0.0,
        prefill_kernel_share=shares,
    )


def forward_flops_per_token(model: str | ModelPreset, context: int) -> float:
    """FLOPs of one token's forward pass at ``context`` cached tokens, by the textbook count: ``2 N + 4 L H Q T``
    with ``N`` every parameter (embedding and LM head included), ``L`` layers, ``H`` heads, ``Q`` head dimension,
    ``T`` the context. It is the forward third of the ``6 N + 12 L H Q T`` FLOPs per training token of PaLM
    (arXiv 2204.02311, Appendix B) and nanoGPT's ``estimate_mfu``. A reporting convention, for comparing with
    figures counted that way (Kernel Looping's Table 1 counts every weight per token: 14.9 GiB = 8.03e9 x 2 B); the
    step model's own ``decode_flops_per_step`` counts what a step computes (the embedding rows are gathered, not
    multiplied; MLA and GQA attention by their real shapes)."""
    m = resolve_model(model)
    int_field("context", context, 0)
    return 2.0 * m.param_count() + 4.0 * m.num_layers * m.num_attention_heads * m.head_dim * context


def simulate_point(model: str | ModelPreset, hardware: str | HardwareSpec = "sn40l-16", prompt_len: int = 4096,
                   gen_len: int = 1024, budget: int | None = None, batch: int = 1, *,
                   method: str | MethodConfig | None = None, settings: dict[str, Any] | None = None,
                   split: dict[str, Any] | None = None, **deployment_overrides: Any) -> SimResult:
    """Convenience wrapper: ``simulate_point("deepseek-r1", "sn40l-16", 131072, 1024, budget=32768, batch=64)``.

    ``method``: a resolved configuration, or a method name resolved with ``budget`` and ``settings`` (its
    settings, e.g. ``{"observation": 288}``; ``split`` is their deprecated name) by
    :func:`snapeval.cache.resolve_method`; None = ``snapstream`` when a budget is given, else the full cache. ``deployment_overrides`` are :class:`Deployment` fields (``sockets``,
    ``tp``, ``weight_dtype``, ``kernel_looping``, ``mtp_factor``, ``draft_model``, ...)."""
    allowed = set(Deployment.__dataclass_fields__)
    bad = sorted(set(deployment_overrides) - allowed)
    if bad:
        raise SnapevalError(f"unknown deployment field(s): {', '.join(bad)}; allowed: {', '.join(sorted(allowed))}")
    if split is not None:
        import warnings

        warnings.warn("simulate_point(split=...) is deprecated; pass settings=...", DeprecationWarning, 2)
        settings = {**split, **(settings or {})}
    if not isinstance(method, MethodConfig):
        from snapeval.cache import resolve_method

        name = method if method is not None else ("full" if budget is None else "snapstream")
        method = resolve_method(name, budget, **(settings or {}))
    elif budget is not None or settings:
        raise SnapevalError("budget and settings are part of a resolved method configuration; give one or the other")
    dep = Deployment(batch=batch, prompt_len=prompt_len, gen_len=gen_len, **deployment_overrides)
    return simulate(hardware, model, dep, method)


def gain_vs_full(result: SimResult) -> dict[str, float | None]:
    """``result``'s method's gain over the full cache at the same point (1.0 everywhere for a full-cache result),
    from a new simulation of the full cache at the point of ``result`` (and of both at their largest batches).

    ``kv_memory_reduction`` and ``memory_reduction`` are full / this; ``batch_gain`` is the ratio of the
    largest batches that fit; ``throughput_gain_same_batch`` compares this batch; ``throughput_gain_max_batch``
    compares each method at its own largest batch (the paper's 434 -> 1832 tok/s comparison).
    """
    hardware, model, deployment, _ = result.inputs
    from snapeval.cache.config import FullConfig

    full = simulate(hardware, model, deployment, FullConfig())

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else a / b

    mine_max = at_batch(result, result.max_batch)
    full_max = at_batch(full, full.max_batch)
    return {
        "kv_memory_reduction": ratio(full.kv_bytes_total, result.kv_bytes_total),
        "memory_reduction": ratio(full.memory_per_socket, result.memory_per_socket),
        "batch_gain": ratio(result.max_batch, full.max_batch),
        "throughput_gain_same_batch": ratio(result.decode_tokens_per_s, full.decode_tokens_per_s)
        if result.fits and full.fits else None,
        "throughput_gain_max_batch": ratio(mine_max.decode_tokens_per_s if mine_max else None,
                                           full_max.decode_tokens_per_s if full_max else None),
        "full_max_batch": full.max_batch,
        "max_batch": result.max_batch,
    }


def at_batch(result: SimResult, batch: int) -> SimResult | None:
    """``result``'s point simulated again at ``batch`` (None below 1; ``result`` itself at its own batch)."""
    if batch < 1:
        return None
    if batch == result.batch:
        return result
    hardware, model, deployment, method = result.inputs
    return simulate(hardware, model, replace(deployment, batch=batch), method)
