"""The tidy results table: one row per (cell, subtask, metric, filter), joined to SN40L-simulated cost.

Measured columns come from the run itself (accuracy, stderr, n, KV-cache bytes, tokens/s on this machine). The
``sim_*`` columns price the *matching full-size deployment* on SN40L with :func:`snapeval.simulator.simulate_point`:
the model preset at its real size, the task's real typical prompt and output lengths, and the cell's budget (``full``
cells: no budget; SnapKV: the budget plus the generated tokens, since its cache grows while decoding).
``sim_full_*`` columns price the same deployment with a full cache, so that every row carries its
own memory reduction and throughput gain.

Typical lengths, in order of precedence: the task's ``sim`` entry in the config; the mean lengths of the SnapStream
paper's own run for the real benchmarks (:data:`TYPICAL_LENGTHS`); otherwise the run's measured mean prompt and
generated tokens per sample (synthetic tasks, whose lengths are set by the config).
"""
from __future__ import annotations

from typing import Any, Callable

from snapeval.errors import SnapevalError
from snapeval.results.schema import CellResult, group_id_of
from snapeval.stats.decision import DecisionRule
from snapeval.tasks.families import task_family

#: Mean input/output tokens per sample of DeepSeek-R1-0528 with SnapStream (arXiv 2511.03092, Table 3; restated in
#: shared/reference/benchmarks.md).
TYPICAL_LENGTHS: dict[str, tuple[int, int]] = {
    "longbench_v2": (84_762, 1_296),
    "aime24": (140, 15_424),
    "livecodebench": (476, 10_634),
}

#: Column order of the table (``sim_*``: simulated on the configured hardware; the rest measured here).
COLUMNS = [
    "cell_id", "model", "task", "subtask", "method", "budget", "sink", "recent", "topk", "observation", "kernel",
    "pooling", "seed", "limit", "dtype", "metric", "filter", "primary", "higher_is_better", "value", "stderr",
    "n_samples", "kv_cache_bytes", "decode_tokens_per_s", "prefill_tokens_per_s", "prompt_tokens", "generated_tokens",
    "wall_s", "deterministic", "generations_sha256",
    "sim_hardware", "sim_model", "sim_prompt_len", "sim_gen_len", "sim_length_source", "sim_fits",
    "sim_kv_bytes_per_seq", "sim_batch", "sim_max_batch", "sim_kv_bytes_total", "sim_decode_tokens_per_s",
    "sim_decode_tokens_per_s_per_seq", "sim_prefill_seconds", "sim_full_kv_bytes_per_seq", "sim_full_max_batch",
    "sim_full_decode_tokens_per_s", "sim_hbm_bytes_per_socket", "sim_note",
    "group_id", "paired_ref_cell", "paired_n", "paired_clusters", "paired_unpaired", "paired_diff", "paired_ci_low",
    "paired_ci_high", "paired_interval", "paired_test", "paired_p", "paired_p_holm", "paired_significant",
    "items_worse", "items_better", "paired_length_change", "paired_mdd", "ni_margin", "ni_alpha", "ni_p",
    "ni_drop_bound", "non_inferior", "ni_items_needed", "smallest_ni_budget", "paired_note",
]

#: Paired columns (filled on each compressed cell's primary metric against the full-cache cell of its group; see
#: :func:`snapeval.stats.compare_cells`) and the decision columns derived from them over a family: ``paired_p_holm``
#: and ``paired_significant`` (Holm within each (model, task)), ``smallest_ni_budget`` (fixed-sequence walk down each
#: (model, task, method)'s budgets; NA: none in the grid).
PAIRED_COLUMNS = COLUMNS[COLUMNS.index("paired_ref_cell"):]


def paired_columns(view: dict[str, Any], result: CellResult, metric: str, reference: tuple[str, CellResult] | None,
                   rule: DecisionRule, higher_is_better: bool = True) -> dict[str, Any]:
    """The paired comparison of one compressed cell's ``metric`` with the full-cache cell of its group, or a note
    saying why there is none (no full-cache cell in the group; no shared item)."""
    from snapeval.stats import compare_cells

    if view.get("method") == "full":
        return {}
    if reference is None:
        return {"paired_note": "no full-cache reference cell answered the same items (same model, task, seed, limit)"}
    ref_id, ref_result = reference
    try:
        cmp = compare_cells(ref_result, result, metric, rule=rule, higher_is_better=higher_is_better)
    except SnapevalError as exc:
        return {"paired_ref_cell": ref_id, "paired_note": str(exc)}
    notes = []
    if cmp.unpaired:
        notes.append(f"{cmp.unpaired} items in only one of the two cells were left unpaired")
    if cmp.few_clusters:
        notes.append(f"only {cmp.clusters} clusters: the bootstrap interval is too narrow below 10")
    return {"paired_ref_cell": ref_id, "paired_n": cmp.n, "paired_clusters": cmp.clusters,
            "paired_unpaired": cmp.unpaired, "paired_diff": cmp.mean_diff, "paired_ci_low": cmp.ci_low,
            "paired_ci_high": cmp.ci_high, "paired_interval": cmp.interval, "paired_test": cmp.test,
            "paired_p": cmp.p_value, "items_worse": cmp.worse, "items_better": cmp.better,
            "paired_length_change": cmp.length_change, "paired_mdd": cmp.mdd, "ni_margin": rule.margin,
            "ni_alpha": rule.alpha, "ni_p": cmp.ni_p, "ni_drop_bound": cmp.drop_bound,
            "non_inferior": cmp.non_inferior, "ni_items_needed": cmp.n_for_margin, "paired_note": "; ".join(notes)}


def add_decisions(table, rule: DecisionRule) -> None:
    """Fill the family-level decision columns in place: Holm-adjusted p-values and significance within each
    (model, task), and each (model, task, method)'s smallest non-inferior budget (every seed of a budget must be
    non-inferior; budgets walked from the largest down, stopping at the first that is not: fixed-sequence)."""
    import pandas as pd

    from snapeval.stats import fixed_sequence, holm

    tested = table["primary"] & table["paired_p"].notna()
    for _, rows in table[tested].groupby(["model", "task"], sort=False):
        adjusted = holm(rows["paired_p"].tolist())
        table.loc[rows.index, "paired_p_holm"] = adjusted
        table.loc[rows.index, "paired_significant"] = [p < rule.alpha for p in adjusted]
    decided = tested & table["budget"].notna()
    for _, rows in table[decided].groupby(["model", "task", "method"], sort=False):
        passed = {int(b): bool(group["non_inferior"].astype(bool).all()) for b, group in rows.groupby("budget")}
        smallest = fixed_sequence(passed)
        table.loc[rows.index, "smallest_ni_budget"] = pd.NA if smallest is None else smallest


SimulateFn = Callable[..., Any]


def _default_simulate() -> SimulateFn | None:
    try:
        from snapeval.simulator import simulate_point
    except ImportError:
        return None
    return simulate_point


def _max_context(model: str) -> int | None:
    try:
        from snapeval.models.presets import get_preset

        return int(get_preset(model).max_context)
    except Exception:  # not a preset (a local directory): the simulator will say so
        return None


def fit_context(prompt: int, gen: int, context: int | None) -> tuple[int, int, bool]:
    """Lengths that fit a model's context, as a deployment of it would run the task; ``(prompt, gen, clamped)``.

    The output keeps at least half the context (or what the prompt leaves); the prompt is cut to the rest, as
    LongBench-v2's middle truncation does: LongBench-v2 (84,762 in / 1,296 out) on an 8k model -> 6,896 / 1,296;
    AIME (140 / 15,424) -> 140 / 8,052.
    """
    if context is None or prompt + gen <= context:
        return prompt, gen, False
    gen = min(gen, context - min(prompt, context // 2))
    return min(prompt, context - gen), gen, True


def measured_lengths(views: list[dict[str, Any]], results: dict[str, CellResult]) -> dict[tuple, tuple[int, int]]:
    """Mean prompt and generated tokens per sample of each (model, task), from its full-cache cells.

    One pair per (model, task), so that every method of a task is priced at the same deployment; the full cache's
    output length is the task's natural one (a compressed cache can change how long a model talks). Without a
    full-cache cell, the mean over all the task's cells.
    """
    full: dict[tuple, list[int]] = {}
    every: dict[tuple, list[int]] = {}
    for view in views:
        result = results.get(view["cell_id"])
        if result is None or not result.prompt_tokens or result.generated_tokens is None:
            continue
        docs = len({(s.subtask, s.doc_id) for s in result.samples}) or 1
        for bucket in ([full] if view["method"] == "full" else []) + [every]:
            acc = bucket.setdefault((view["model"], view["task"]), [0, 0, 0])
            acc[0] += result.prompt_tokens
            acc[1] += result.generated_tokens
            acc[2] += docs
    out = {}
    for key, sums in every.items():
        prompt, gen, docs = full.get(key, sums)
        out[key] = (max(1, round(prompt / docs)), max(1, round(gen / docs)))
    return out


def sim_lengths(view: dict[str, Any], measured: tuple[int, int] | None) -> tuple[int | None, int | None, str]:
    """(prompt_len, gen_len, source) of the simulated deployment for one cell (see the module docstring)."""
    if view.get("sim_prompt_len") and view.get("sim_gen_len"):
        return int(view["sim_prompt_len"]), int(view["sim_gen_len"]), "config"
    family = task_family(view["task"])
    if family in TYPICAL_LENGTHS:
        prompt, gen = TYPICAL_LENGTHS[family]
        return view.get("sim_prompt_len") or prompt, view.get("sim_gen_len") or gen, "paper-table-3"
    if measured is not None:
        return view.get("sim_prompt_len") or measured[0], view.get("sim_gen_len") or measured[1], "measured-mean"
    return None, None, "unknown"


def sim_budget(method: str | None, budget: int | None, gen_len: int) -> int | None:
    """The simulator's cache cap for a policy: fixed-size caches (SnapStream, StreamingLLM) stop at the budget; the
    others (SnapKV, kvpress presses) compress the prompt only and keep every generated token, so their cache ends at
    ``budget + gen_len`` (the method table says which is which)."""
    from snapeval.cache import method_info

    if budget is None:
        return None
    return budget if method_info(method).fixed_size else budget + gen_len


class _Simulator:
    """Memoized SN40L pricing of (model, prompt, gen, budget) points, with the batch policy of the sweep."""

    def __init__(self, settings: dict[str, Any], simulate: SimulateFn | None,
                 max_context: Callable[[str], int | None] = _max_context):
        self.hardware = settings.get("hardware", "sn40l-16")
        self.batch = settings.get("batch", "max")
        self.batch_cap = int(settings.get("batch_cap", 1024))
        self.enabled = settings.get("enabled", True)
        self.simulate = simulate
        self.max_context = max_context
        self._memo: dict[tuple, dict[str, Any]] = {}

    def _point(self, model: str, prompt: int, gen: int, budget: int | None) -> dict[str, Any]:
        key = (model, prompt, gen, budget)
        if key in self._memo:
            return self._memo[key]
        one = self.simulate(model, hardware=self.hardware, prompt_len=prompt, gen_len=gen, budget=budget, batch=1)
        # per sequence: the cache's logical size (the simulator's kv_bytes_total also counts replicas across sockets)
        per_seq = getattr(one, "kv_bytes_per_seq", one.kv_bytes_total)
        out: dict[str, Any] = {"fits": bool(one.fits), "kv_per_seq": per_seq,
                               "max_batch": int(one.max_batch or 0)}
        if not one.fits:
            out.update(batch=None, kv_total=None, tps=None, tps_seq=None, prefill=None, hbm=None,
                       reason=getattr(one, "reason", "does not fit"))
        else:
            batch = min(out["max_batch"], self.batch_cap) if self.batch == "max" else int(self.batch)
            run = self.simulate(model, hardware=self.hardware, prompt_len=prompt, gen_len=gen, budget=budget,
                                batch=max(batch, 1))
            fits = bool(run.fits)
            out.update(batch=batch, kv_total=run.kv_bytes_total if fits else None,
                       tps=run.decode_tokens_per_s if fits else None,
                       tps_seq=run.decode_tokens_per_s_per_seq if fits else None,
                       prefill=one.prefill_seconds, fits=fits,
                       hbm=run.hbm.total if fits and hasattr(run, "hbm") else None,
                       reason="" if fits else getattr(run, "reason", "does not fit"))
        self._memo[key] = out
        return out

    def columns(self, view: dict[str, Any], measured: tuple[int, int] | None) -> dict[str, Any]:
        cols: dict[str, Any] = {"sim_hardware": self.hardware}
        model = view.get("simulate_as") or view["model"]
        prompt, gen, source = sim_lengths(view, measured)
        if prompt is not None:
            context = self.max_context(model)
            prompt, gen, clamped = fit_context(prompt, gen, context)
            if clamped:
                source += f", fit to {context}-token context"
        cols.update(sim_model=model, sim_prompt_len=prompt, sim_gen_len=gen, sim_length_source=source)
        if not self.enabled:
            return {**cols, "sim_note": "simulation disabled in the config"}
        if self.simulate is None:
            return {**cols, "sim_note": "snapeval.simulator is not installed"}
        if prompt is None:
            return {**cols, "sim_note": "no prompt/output lengths for this task (set tasks[].sim in the config)"}
        try:
            point = self._point(model, prompt, gen, sim_budget(view.get("method"), view.get("budget"), gen))
            full = self._point(model, prompt, gen, None)
        except Exception as exc:  # a model that is not a preset, a length past its context: say so in the row
            return {**cols, "sim_note": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
        cols.update(
            sim_fits=point["fits"], sim_kv_bytes_per_seq=point["kv_per_seq"], sim_batch=point["batch"],
            sim_max_batch=point["max_batch"], sim_kv_bytes_total=point["kv_total"],
            sim_decode_tokens_per_s=point["tps"], sim_decode_tokens_per_s_per_seq=point["tps_seq"],
            sim_prefill_seconds=point["prefill"], sim_full_kv_bytes_per_seq=full["kv_per_seq"],
            sim_full_max_batch=full["max_batch"], sim_full_decode_tokens_per_s=full["tps"],
            sim_hbm_bytes_per_socket=point["hbm"], sim_note=point["reason"] or (f"full cache: {full['reason']}" if full["reason"] else ""),
        )
        return cols


def _primary_keys(view: dict[str, Any], result: CellResult) -> tuple[str, str]:
    """(subtask, "metric,filter") of the cell's headline number: the config's ``metric`` or the first reported."""
    subtasks = [m.subtask for m in result.metrics]
    subtask = view["task"] if view["task"] in subtasks else subtasks[0]
    mine = [m for m in result.metrics if m.subtask == subtask]
    wanted = view.get("metric")
    if wanted:
        for m in mine:
            if wanted in (m.metric, m.key):
                return subtask, m.key
    return subtask, mine[0].key


def build_table(views: list[dict[str, Any]], results: dict[str, CellResult], simulate_settings: dict[str, Any],
                simulate: SimulateFn | None | str = "default", decision: DecisionRule | None = None):
    """The tidy table of the finished cells among ``views`` (manifest entries, grid order), as a DataFrame.

    ``simulate``: the simulator function (``simulate_point``'s signature); "default" imports snapeval's; None
    leaves the ``sim_*`` columns empty with a note. ``decision``: the margin and alpha of the paired and decision
    columns (default :class:`~snapeval.stats.DecisionRule`'s).
    """
    rule = decision if decision is not None else DecisionRule()
    import pandas as pd

    views = [v.to_dict() if hasattr(v, "to_dict") else v for v in views]  # CellView objects or manifest dicts
    sim = _Simulator(simulate_settings, _default_simulate() if simulate == "default" else simulate)
    lengths = measured_lengths(views, results)
    # manifests from before group ids: the group follows from each finished cell's own identity
    views = [v if v.get("group_id") or v["cell_id"] not in results
             else {**v, "group_id": group_id_of(results[v["cell_id"]].identity)} for v in views]
    references = {v.get("group_id"): (v["cell_id"], results[v["cell_id"]]) for v in views
                  if v.get("method") == "full" and v.get("group_id") and v["cell_id"] in results}
    rows = []
    for view in views:
        result = results.get(view["cell_id"])
        if result is None:
            continue
        primary = _primary_keys(view, result)
        cell_cols = {k: view.get(k) for k in ("cell_id", "model", "task", "method", "budget", "sink", "recent", "topk",
                                              "observation", "kernel", "pooling", "seed", "limit", "dtype")}
        cell_cols.update(
            kv_cache_bytes=result.kv_cache_bytes, decode_tokens_per_s=result.decode_tokens_per_s,
            prefill_tokens_per_s=result.prefill_tokens_per_s, prompt_tokens=result.prompt_tokens,
            generated_tokens=result.generated_tokens, wall_s=result.wall_s, deterministic=result.deterministic,
            generations_sha256=result.generations_sha256,
            **sim.columns(view, lengths.get((view["model"], view["task"]))),
            group_id=view.get("group_id"),
        )
        for m in result.metrics:
            is_primary = (m.subtask, m.key) == primary
            paired = paired_columns(view, result, m.key, references.get(view.get("group_id")), rule,
                                    m.higher_is_better) if is_primary else {}
            rows.append({**cell_cols, **paired, "subtask": m.subtask, "metric": m.metric, "filter": m.filter,
                         "primary": (m.subtask, m.key) == primary, "higher_is_better": m.higher_is_better,
                         "value": m.value, "stderr": m.stderr, "n_samples": m.n})
    table = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("budget", "sink", "recent", "topk", "observation", "kernel", "limit", "kv_cache_bytes",
                "prompt_tokens", "generated_tokens", "sim_prompt_len", "sim_gen_len", "sim_batch", "sim_max_batch",
                "sim_full_max_batch", "n_samples", "seed", "paired_n", "paired_clusters", "items_worse", "items_better",
                "paired_unpaired", "smallest_ni_budget"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("Int64")
    for col in ("value", "stderr", "decode_tokens_per_s", "prefill_tokens_per_s", "wall_s", "sim_kv_bytes_per_seq",
                "sim_kv_bytes_total", "sim_decode_tokens_per_s", "sim_decode_tokens_per_s_per_seq",
                "sim_prefill_seconds", "sim_full_kv_bytes_per_seq", "sim_full_decode_tokens_per_s",
                "sim_hbm_bytes_per_socket", "paired_diff", "paired_ci_low", "paired_ci_high", "paired_p",
                "paired_p_holm", "paired_length_change", "paired_mdd", "ni_margin", "ni_alpha", "ni_p", "ni_drop_bound",
                "ni_items_needed"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("float64")
    for col in ("primary", "higher_is_better", "deterministic"):
        table[col] = table[col].astype("bool")
    table["sim_fits"] = table["sim_fits"].astype("boolean")
    table["paired_significant"] = table["paired_significant"].astype("boolean")
    table["non_inferior"] = table["non_inferior"].astype("boolean")
    add_decisions(table, rule)
    return table

