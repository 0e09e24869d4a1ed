"""The prefill studies of the SN40L calibration: the least overhead any compression cost growing at most linearly with
the prompt can give (:func:`prefill_bound`), SnapStream's top-k priced as a static graph's bitonic selection network
(:func:`selection_network`, :func:`topk_seconds`), the hypotheses that rank them (:func:`prefill_hypotheses`) and a
fixed cost per prefill kernel. Run by :mod:`benchmarks.studies.simulator_calibration`."""
from __future__ import annotations

import math

from benchmarks.studies.sn40l_points import CONTEXTS, PUBLISHED_SHARES, R1_LAYERS, R1_PROMPT, WINDOW_GRID, r1, rel
from snapeval.models.presets import get_preset
from snapeval.simulator import get_hardware


def prefill_bound() -> dict:
    """The least prefill overhead at 64K and 32K of any compression cost that grows at most linearly with the
    prompt (a fixed part plus a part proportional to it: every window and every kernel cost) once it matches the
    published 128K shares (SnapKV 2.52% + ring buffer 0.32% of a MoE layer): at a prompt L its cost is at least
    its 128K cost x L / 128K, over the prefill without compression at L. Two ways: from the published shares alone
    (attention ~ L^2, the other kernels ~ L) and from the simulator's own prefill. Also the exponent a compression
    cost ~ L^a would need for 5% at 32K."""
    compressed = PUBLISHED_SHARES["scoring"] + PUBLISHED_SHARES["gather"]
    rest = 100 - PUBLISHED_SHARES["attention"] - compressed
    snap = r1(R1_PROMPT, R1_PROMPT // 4, 1)
    share = snap.prefill_kernel_share
    layer = snap.prefill_compression_seconds / R1_LAYERS / (share["scoring"] + share["gather"])  # one MoE layer
    at_128k = compressed / 100 * layer * R1_LAYERS
    shares_only, simulated, base = {}, {}, {}
    for prompt in CONTEXTS:
        f = R1_PROMPT / prompt
        shares_only[f"{prompt // 1024}K"] = compressed / f / (rest / f + PUBLISHED_SHARES["attention"] / f ** 2) * 100
        base[prompt] = r1(prompt, None, 1).prefill_seconds  # the full cache: nothing compressed
        simulated[f"{prompt // 1024}K"] = at_128k * prompt / R1_PROMPT / base[prompt] * 100
    needed = math.log(0.05 * base[32768] / at_128k) / math.log(32768 / R1_PROMPT)
    return {"least_overhead_percent_from_the_published_shares": shares_only,
            "least_overhead_percent_from_the_simulator_prefill": simulated,
            "compression_seconds_at_128k_from_the_shares": at_128k,
            "exponent_needed_for_5_percent_at_32k": needed}


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def selection_network(width: int, keep: int, topk: bool) -> tuple[int, float]:
    """(stages, element passes) of a data-independent selection network over ``width`` scores (a power of two),
    the only way a static graph ranks without branching on data. A bitonic sort has log2(w)(log2(w)+1)/2 stages
    of w/2 compare-exchanges, each stage reading and writing every element. A bitonic top-k (``topk``) sorts runs of
    ``keep`` (a power of two) the same way, then halves the runs until ``keep`` are left: each round one stage
    keeps the larger half of two sorted runs (reads n, writes n/2) and log2(keep) stages sort the kept half again."""
    if not topk:
        s = width.bit_length() - 1
        return s * (s + 1) // 2, width * s * (s + 1) / 2
    k = keep.bit_length() - 1
    stages, passes, n = k * (k + 1) // 2, width * k * (k + 1) / 2, width
    while n > keep:
        stages += 1 + k
        passes += 0.75 * n + k * n / 2  # the halving stage (n read, n / 2 written: 1.5 n element moves / 2) + resort
        n //= 2
    return stages, passes


def bitonic(values: list[float], topk: int | None = None) -> tuple[list[float], int, int]:
    """The textbook bitonic network, run: a full sort (``topk`` None) or a bitonic top-k (sort runs of ``topk``
    in alternating directions; then, round after round, keep the larger of each pair of elements of two adjacent runs
    and merge the kept bitonic run again). Returns (the result, stages, element reads + writes)."""
    a, n = list(values), len(values)
    stages = moved = 0

    def merge_stages(length: int, size: int) -> None:  # the compare-exchange stages for blocks of ``size``
        nonlocal stages, moved
        j = size // 2
        while j:
            for i in range(length):
                partner = i ^ j
                if partner > i and (a[i] > a[partner]) == ((i & size) == 0):
                    a[i], a[partner] = a[partner], a[i]
            stages, moved, j = stages + 1, moved + 2 * length, j // 2

    size = 2
    while size <= (topk or n):
        merge_stages(n, size)
        size *= 2
    while topk and len(a) > topk:  # keep the larger half of each (ascending, descending) pair of runs
        kept = []
        for start in range(0, len(a), 2 * topk):
            kept += [max(a[start + i], a[start + topk + i]) for i in range(topk)]
        stages, moved, a = stages + 1, moved + len(a) + len(kept), kept
        merge_stages(len(a), topk)
    return a, stages, moved


#: (width, keep) of the networks :func:`check_selection_network` runs.
CHECKED_NETWORKS = ((16, 4), (64, 8), (256, 32), (1024, 1024))


def check_selection_network() -> list[dict]:
    """:func:`selection_network`'s counts against the networks run (:func:`bitonic`) on random scores at
    :data:`CHECKED_NETWORKS`: the full sort sorts and has log2(w)(log2(w)+1)/2 stages of w/2 compare-exchanges, the
    top-k keeps the ``keep`` largest, and each count is the network's (element passes: reads and writes / 2). A
    ``ValueError`` naming the first that differs; else what was checked."""
    import random

    out = []
    for width, keep in CHECKED_NETWORKS:
        scores = [random.Random(i * 7919 + width).random() for i in range(width)]
        ranked, stages, moved = bitonic(scores)
        s = width.bit_length() - 1
        full = selection_network(width, keep, topk=False)
        if ranked != sorted(scores) or full != (stages, moved / 2) or stages != s * (s + 1) // 2:
            raise ValueError(f"selection_network({width}, {keep}, topk=False) = {full}; the network run: "
                             f"({stages}, {moved / 2}), sorted: {ranked == sorted(scores)}")
        entry = {"width": width, "keep": keep, "sort": list(full)}
        if keep < width:
            kept, stages, moved = bitonic(scores, keep)
            top = selection_network(width, keep, topk=True)
            if sorted(kept) != sorted(scores)[-keep:] or top[0] != stages or not math.isclose(top[1], moved / 2) \
                    or not top[1] < full[1]:
                right = sorted(kept) == sorted(scores)[-keep:]
                raise ValueError(f"selection_network({width}, {keep}, topk=True) = {top}; the network run: "
                                 f"({stages}, {moved / 2}), kept the top {keep}: {right}")
            entry["topk"] = list(top)
        out.append(entry)
    return out


#: Bytes of one ranked element: an fp32 score and an int32 token index travel together.
RANKED_ELEMENT_BYTES = 8.0


def topk_seconds(prompt: int, variant: dict, hw) -> float:
    """Seconds per layer on one socket of SnapStream's top-k (budget = prompt / 4) done by a selection network
    (``variant``: ``topk`` bitonic top-k or full sort; ``vectors`` ranked per socket: its 8 query heads' own scores
    under TP16 prefill, or 1 vector of scores summed over every head, all-reduced over the sockets first; ``where``
    each stage's elements go: ``hbm`` (a round trip per stage at HBM bandwidth), ``sram`` (on-chip bandwidth) or
    ``call`` (on chip, but each stage a kernel call paying one call boundary))."""
    from snapeval.cache import resolve_method

    method = resolve_method("snapstream", prompt // 4)
    scored = method.prefill_work(prompt).scored_tokens
    width, keep = _pow2_ceil(scored), _pow2_ceil(method.topk)
    stages, passes = selection_network(width, keep, variant["topk"])
    s, a = hw.socket, hw.assumptions
    heads = get_preset("deepseek-r1").num_attention_heads / hw.sockets
    vectors = heads if variant["vectors"] == "per head" else 1
    moved = vectors * passes * RANKED_ELEMENT_BYTES * 2  # every stage reads and writes its elements
    if variant["where"] == "hbm":
        seconds = moved / (s.hbm_bandwidth * a.bandwidth_efficiency)
    elif variant["where"] == "sram":
        seconds = moved / s.sram_bandwidth
    else:
        seconds = stages * (a.kernel_call_sync_s + a.cross_socket_sync_s) + moved / s.sram_bandwidth
    if variant["vectors"] != "per head":  # the socket's partial sums over its heads, all-reduced over the sockets
        link = hw.link_bandwidth or a.assumed_link_bandwidth
        seconds += 2 * (hw.sockets - 1) / hw.sockets * scored * 4.0 / link
    return seconds


TOPK_VARIANTS = [
    {"name": "bitonic sort, per-head scores (8 per socket), every stage through HBM", "topk": False,
     "vectors": "per head", "where": "hbm"},
    {"name": "bitonic top-k, per-head scores, every stage through HBM", "topk": True, "vectors": "per head",
     "where": "hbm"},
    {"name": "bitonic sort, one score vector summed over the 128 heads (MLA's shared latent), through HBM",
     "topk": False, "vectors": "shared", "where": "hbm"},
    {"name": "bitonic sort, per-head scores held on chip (8.4 MB of 520 MB), stages at on-chip bandwidth",
     "topk": False, "vectors": "per head", "where": "sram"},
    {"name": "bitonic sort, per-head scores on chip, one kernel call per stage (19 us each)", "topk": False,
     "vectors": "per head", "where": "call"},
]


def prefill_hypotheses() -> dict:
    """SnapStream's top-k priced as a selection network (a static graph cannot branch on data), added to the
    simulator's scoring kernel: per variant, its time per layer at 128K / 64K / 32K, its growth from 32K to 128K,
    the SnapKV share and overhead with SnapKV's own window (32), and the overhead once the window is set again from
    the 2.52% share. Also, whatever the variant, the least 32K overhead a network cost ~ L log^2 L can give once the
    share is matched with the window at 32."""
    hw = get_hardware("sn40l-16")
    layers = {}
    for prompt in CONTEXTS:
        r = r1(prompt, prompt // 4, 1, settings={"observation": 32})
        share = r.prefill_kernel_share
        layers[prompt] = {"layer": r.prefill_compression_seconds / R1_LAYERS / (share["scoring"] + share["gather"]),
                          "base": r.prefill_seconds - r.prefill_compression_seconds}
    windows = {}  # the simulator's compression seconds and 128K scoring share at every window of the grid
    for w in WINDOW_GRID:
        at = {p: r1(p, p // 4, 1, settings={"observation": w}) for p in (CONTEXTS if w == 32 else CONTEXTS[:1])}
        windows[w] = {"compress": {p: x.prefill_compression_seconds for p, x in at.items()},
                      "scoring": at[R1_PROMPT].prefill_kernel_share["scoring"],
                      "layer": at[R1_PROMPT].prefill_compression_seconds / R1_LAYERS / (
                          at[R1_PROMPT].prefill_kernel_share["scoring"] + at[R1_PROMPT].prefill_kernel_share["gather"])}

    def overhead(w: int, extra: dict) -> dict:
        compress = windows[w]["compress"] if len(windows[w]["compress"]) == 3 else \
            {p: r1(p, p // 4, 1, settings={"observation": w}).prefill_compression_seconds for p in CONTEXTS}
        return {f"{p // 1024}K": (compress[p] + R1_LAYERS * extra[p]) / layers[p]["base"] * 100 for p in CONTEXTS}

    def share_at(w: int, extra_128k: float) -> float:
        layer = windows[w]["layer"]
        return (windows[w]["scoring"] * layer + extra_128k) / (layer + extra_128k) * 100

    out = []
    for v in TOPK_VARIANTS:
        extra = {p: topk_seconds(p, v, hw) for p in CONTEXTS}
        refit = min(WINDOW_GRID, key=lambda w: abs(share_at(w, extra[R1_PROMPT]) - PUBLISHED_SHARES["scoring"]))
        out.append({"hypothesis": v["name"], "ms_per_layer": {f"{p // 1024}K": extra[p] * 1e3 for p in CONTEXTS},
                    "growth_32k_to_128k": extra[R1_PROMPT] / extra[32768],
                    "window_32": {"snapkv_share_percent": share_at(32, extra[R1_PROMPT]),
                                  "overhead_percent": overhead(32, extra)},
                    "window_set_from_the_share": refit,
                    "refit": {"snapkv_share_percent": share_at(refit, extra[R1_PROMPT]),
                              "overhead_percent": overhead(refit, extra)}})
    # any network ~ L log^2 L: scaled so that window 32 + network give the published 128K SnapKV share
    growth = out[0]["growth_32k_to_128k"]
    layer = windows[32]["layer"]
    needed = (PUBLISHED_SHARES["scoring"] / 100 * layer - windows[32]["scoring"] * layer) / (
        1 - PUBLISHED_SHARES["scoring"] / 100)
    scaled = {R1_PROMPT: needed, 65536: needed / out[0]["ms_per_layer"]["128K"] * out[0]["ms_per_layer"]["64K"],
              32768: needed / growth}
    # how fast the network would have to grow for 5% at 32K, the rest of the compression (window 32) unchanged
    allowed = (0.05 * layers[32768]["base"] - windows[32]["compress"][32768]) / R1_LAYERS
    return {"variants": out, "least_with_window_32_and_a_network_matching_the_share": {
        "network_ms_per_layer_at_128k": needed * 1e3, "overhead_percent": overhead(32, scaled),
        "network_ms_per_layer_at_32k_for_5_percent": allowed * 1e3,
        "network_exponent_needed_32k_to_128k": math.log(needed / allowed) / math.log(R1_PROMPT / 32768),
        "network_exponent_of_l_log2_l": math.log(growth) / math.log(R1_PROMPT / 32768)},
        "fixed_cost_per_prefill_kernel": prefill_kernel_fixed_cost()}


def prefill_kernel_fixed_cost() -> dict:
    """The other way to 5% at 32K: a prefill that is relatively costlier when short. A fixed cost per prefill
    kernel (the published breakdown has 5 per MoE layer: QKV, attention, output projection, router, MoE FFN; a
    dense layer 4) that lifts the 32K prefill enough for a fixed 320-query window's compression to be 5% of it, and
    what that cost does to the published 128K shares."""
    m = get_preset("deepseek-r1")
    kernels = 5 * m.num_moe_layers + 4 * m.num_dense_layers
    at = {p: r1(p, p // 4, 1, settings={"observation": 320}) for p in CONTEXTS}
    base = {p: r.prefill_seconds - r.prefill_compression_seconds for p, r in at.items()}
    cost = (at[32768].prefill_compression_seconds / 0.05 - base[32768]) / kernels
    share = at[R1_PROMPT].prefill_kernel_share
    layer = at[R1_PROMPT].prefill_compression_seconds / R1_LAYERS / (share["scoring"] + share["gather"])
    five = ("QKV projections", "attention", "output projection", "router", "MoE FFN")
    shares = {k: (share[k] * layer + (cost if k in five else 0.0)) / (layer + 5 * cost) * 100 for k in share}
    return {"prefill_kernels": kernels, "fixed_cost_per_kernel_ms": cost * 1e3,
            "times_the_call_boundary": cost / (get_hardware("sn40l-16").assumptions.kernel_call_sync_s
                                               + get_hardware("sn40l-16").assumptions.cross_socket_sync_s),
            "overhead_percent": {f"{p // 1024}K": at[p].prefill_compression_seconds / (base[p] + kernels * cost) * 100
                                 for p in CONTEXTS},
            "shares_at_128k_percent": shares,
            "share_errors": {k: rel(v, PUBLISHED_SHARES[k]) for k, v in shares.items()}}
