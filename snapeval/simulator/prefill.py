"""Prefill of one prompt (batch 1, tensor parallel over all sockets): the same max(memory, compute) per kernel, plus
the kernels of the method's own prefill work when it compresses the prompt (:func:`prefill_time`)."""
from __future__ import annotations

from snapeval.cache.config import DEFAULT_KERNEL, MethodConfig, PrefillWork
from snapeval.models.presets import ModelPreset
from snapeval.simulator.deployment import DTYPE_BYTES, Deployment
from snapeval.simulator.hardware import HardwareSpec
from snapeval.simulator.plan import Plan, call_boundary, expected_distinct_experts, weight_bytes


def _prompt_kv_per_token(model: ModelPreset, sockets: int, kv_bytes: float) -> float:
    """Bytes of one prompt token's KV for one layer on one socket of a tensor-parallel prefill: MLA's whole latent
    (every socket holds it: the up-projection of its heads' keys and values reads every latent), else the KV heads
    the socket holds (at least one)."""
    if model.is_mla:
        return model.kv_values_per_token_per_layer * kv_bytes
    return 2 * max(1.0, model.num_kv_heads / sockets) * model.head_dim * kv_bytes


def _compression(hardware: HardwareSpec, model: ModelPreset, dep: Deployment, plan: Plan, work: PrefillWork,
                 t) -> tuple[float, float]:
    """(scoring, gathering) seconds per layer on one socket of what a method computes at the end of prefill,
    priced from its own :class:`~snapeval.cache.config.PrefillWork` (nothing when ``work.none``).

    Scoring, per head on this socket (prefill is TP over every socket): with a window, (1) the window queries'
    scores against every prompt key are recomputed (the fused flash-attention kernel never materialises them) and
    (2) softmaxed over the keys; scores read from the layer's hidden states (a press) add (3) a pass over the
    scored tokens' hidden states and the window queries' projection; materialised attention weights (4) are read
    back; then (5) one score per scored token is reduced over the window and pooled and (6) the top tokens kept.
    Gathering: one kernel per contiguous piece the kept tokens come from, plus one concatenation when there are
    several. A static-shape graph gathers by a masked select over the prompt, not by moving only the kept rows:
    each piece's kernel streams the whole prompt's KV as this socket holds it (MLA: the whole latent, which every
    socket keeps to up-project its heads' keys and values; GQA: its KV heads) and writes its piece; the
    concatenation reads and writes the kept tokens. Every kernel also pays one call boundary, as every other
    prefill kernel does (``kernel_call_sync_s`` + ``cross_socket_sync_s`` on several sockets)."""
    if work.none:
        return 0.0, 0.0
    a = hardware.assumptions
    P = plan.sockets
    L = dep.prompt_len
    lin_b, _ = weight_bytes(model, plan.weight_dtype)
    act_b = DTYPE_BYTES[dep.activation_dtype]
    kv_b = DTYPE_BYTES[dep.kv_dtype]
    h, n = model.hidden_size, model.num_attention_heads
    hl = n / P
    qk_dim = model.qk_nope_head_dim + model.qk_rope_head_dim if model.is_mla else model.head_dim
    kv_heads_local = hl if model.is_mla else max(1.0, model.num_kv_heads / P)
    k_local = L * kv_heads_local * qk_dim * act_b
    w, scored, kept = work.window_queries, work.scored_tokens, work.gathered_tokens
    score_bytes = hl * w * L * 4.0  # fp32 scores of the window's queries against every key
    scoring: list[float] = []
    if w:
        scoring.append(t(k_local + hl * w * qk_dim * act_b + score_bytes, 2 * hl * qk_dim * w * L,
                         a.prefill_attention_efficiency))
        scoring.append(t(2 * score_bytes, 5 * hl * w * L, a.gemm_efficiency))
    if "hidden_states" in work.score_inputs:
        q_params = h * n * qk_dim if not model.q_lora_rank else h * model.q_lora_rank + model.q_lora_rank * n * qk_dim
        scoring.append(t(scored * h * act_b + q_params * lin_b / P, 2 * q_params * w / P + 2 * scored * h,
                         a.gemm_efficiency))
    if "attention_weights" in work.score_inputs:
        scoring.append(t(hl * L * (L + 1) / 2 * 4.0, hl * L * (L + 1) / 2, a.gemm_efficiency))
    if scored:
        row = hl * scored * 4.0  # one fp32 score per scored token and head
        source = score_bytes if w else k_local  # window scores, or the keys themselves
        scoring.append(t(source + 2 * row, hl * w * L + 2 * hl * scored * DEFAULT_KERNEL, a.gemm_efficiency))
        scoring.append(t(row + hl * kept * 4.0, 0.0, 1.0))
    gathers: list[float] = []
    if kept:
        token_kv = _prompt_kv_per_token(model, P, kv_b)
        pieces = work.gathered_segments
        gathers = [t(L * token_kv + kept / pieces * token_kv, 0.0, 1.0)] * pieces
        if pieces > 1:
            gathers.append(t(2 * kept * token_kv, 0.0, 1.0))
    call = call_boundary(hardware, P)
    return sum(scoring) + len(scoring) * call, sum(gathers) + len(gathers) * call


def prefill_time(hardware: HardwareSpec, model: ModelPreset, dep: Deployment, plan: Plan, method: MethodConfig
             ) -> tuple[float, float, dict[str, float]]:
    """Prefill of one prompt at batch 1, tensor parallel over all sockets. Returns (seconds, seconds of the
    method's own prefill work, share of each kernel in one (MoE) layer: ``scoring`` and ``gather`` are the
    method's compression, SnapStream's "SnapKV" and "ring buffer" kernels)."""
    a = hardware.assumptions
    s = hardware.socket
    P = plan.sockets  # prefill runs TP over every socket (SnapStream: TP16, batch 1)
    L = dep.prompt_len
    lin_b, emb_b = weight_bytes(model, plan.weight_dtype)
    act_b = DTYPE_BYTES[dep.activation_dtype]
    bw = s.hbm_bandwidth * a.bandwidth_efficiency
    h, n = model.hidden_size, model.num_attention_heads

    def t(nbytes: float, flops: float, eff: float) -> float:
        return max(nbytes / bw, flops / (s.peak_flops * eff))

    hidden_bytes = L * h * act_b  # replicated on every socket between TP kernels
    if model.is_mla:
        qk_dim, v_dim = model.qk_nope_head_dim + model.qk_rope_head_dim, model.v_head_dim
    else:
        qk_dim = v_dim = model.head_dim
    kv_heads_local = n / P if model.is_mla else max(1.0, model.num_kv_heads / P)
    q_local = L * (n / P) * qk_dim * act_b
    k_local = L * kv_heads_local * qk_dim * act_b
    v_local = L * kv_heads_local * v_dim * act_b
    attn_p = model.attention_params_per_layer()
    o_p = n * v_dim * h
    qkv_p = attn_p - o_p
    dense_ffn = t(model.dense_ffn_params() * lin_b / P + 2 * hidden_bytes, 2 * model.dense_ffn_params() * L / P,
                  a.gemm_efficiency)
    shares: dict[str, float] = {}
    shares["QKV projections"] = t(qkv_p * lin_b / P + hidden_bytes + q_local + k_local + v_local,
                                  2 * qkv_p * L / P, a.gemm_efficiency)
    causal_pairs = L * (L + 1) / 2
    shares["attention"] = t(q_local + k_local + v_local + L * (n / P) * v_dim * act_b,
                            2 * (n / P) * (qk_dim + v_dim) * causal_pairs, a.prefill_attention_efficiency)
    shares["output projection"] = t(o_p * lin_b / P + L * (n / P) * v_dim * act_b + hidden_bytes,
                                    2 * o_p * L / P, a.gemm_efficiency)
    if model.is_moe:
        r = model.router_params()
        # routing is computed for every token on every socket (the top-k needs all expert scores)
        shares["router"] = t(r * lin_b + hidden_bytes + L * model.n_routed_experts * 4.0, 2 * r * L,
                             a.gemm_efficiency)
        active = model.experts_per_token + model.n_shared_experts
        touched = expected_distinct_experts(model, L) + model.n_shared_experts
        ffn = t(touched * model.expert_params() * lin_b / P + 2 * hidden_bytes
                + 2 * L * active * model.moe_intermediate_size / P * act_b,
                2 * active * model.expert_params() * L / P, a.gemm_efficiency)
        shares["MoE FFN"] = ffn
    else:
        shares["FFN"] = dense_ffn
    # Sequence-parallel TP prefill: between kernels each socket holds 1/P of the tokens' hidden states; the
    # normed input is all-gathered before the QKV projections and before the FFN block (the router reads it
    # first), and the outputs of the output projection and of the FFN are reduce-scattered. Each moves
    # (P - 1) / P of one [L, hidden] activation through a socket's links; it delays the kernel that waits on it.
    link = hardware.link_bandwidth or a.assumed_link_bandwidth
    collective = (P - 1) / P * hidden_bytes / link if P > 1 and link else 0.0
    shares["QKV projections"] += collective
    shares["output projection"] += collective
    if model.is_moe:
        shares["router"] += collective
        shares["MoE FFN"] += collective
    else:
        shares["FFN"] += 2 * collective
    dense_ffn += 2 * collective
    scoring, gather = _compression(hardware, model, dep, plan, method.prefill_work(L), t)
    compress = 0.0
    if scoring or gather:
        shares["scoring"] = scoring
        shares["gather"] = gather
        compress = (scoring + gather) * model.num_layers
    layer_moe = sum(shares.values())
    base_layer = layer_moe - (compress / model.num_layers if compress else 0.0)
    if model.is_moe:
        dense_layer = base_layer - shares["router"] - shares["MoE FFN"] + dense_ffn
        total_layers = model.num_moe_layers * base_layer + model.num_dense_layers * dense_layer
    else:
        total_layers = model.num_layers * base_layer
    lm = model.vocab_size * h
    lm_head = t(lm * emb_b / P, 2 * lm / P, a.gemm_efficiency)  # logits of the last position only
    calls = model.num_layers * (a.kernels_per_layer_mla_moe if (model.is_mla or model.is_moe)
                                else a.kernels_per_layer_dense)
    sync = (calls + 1) * call_boundary(hardware, P)
    seconds = total_layers + compress + lm_head + sync
    share = {k: v / layer_moe for k, v in shares.items()}
    return seconds, compress, share


# ---------------------------------------------------------------------------------------------------------------
