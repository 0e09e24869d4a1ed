"""SN40L pricing of a results-table cell: the ``sim_*`` columns of one row.

A cell ran a small model on a few items; its row is priced as the *matching full-size deployment*: the model preset
at its real size (``simulate_as``), the task's typical prompt and output lengths, the cell's cache method, on the
configured hardware, at the largest batch that fits (capped) or a fixed batch. The ``sim_full_*`` columns price the
same deployment with a full cache, so that every row carries its own memory reduction and throughput gain.

The method is the cell's own resolved configuration (rebuilt from its identity, :func:`method_from_identity`), and
the simulator prices what that configuration says it holds and computes: its KV slots, its mean kept tokens over
the decode (a cache that grows while decoding is priced at its mean, as the full cache is), its prefill work. A
budget that holds the whole prompt is priced as what the method then does (a fixed-size cache still reserves its
budget) and the row's ``sim_note`` says that nothing was compressed.

Typical lengths, in order of precedence: the task's ``sim`` entry in the config; the benchmark family's typical
lengths (:data:`snapeval.tasks.families.TYPICAL_LENGTHS`, the SnapStream paper's own run); otherwise the run's
measured mean prompt and generated tokens per sample (synthetic tasks, whose lengths are set by the config). Lengths
past the model's context are fit to it as a deployment of that model would run the task (:func:`fit_context`).

:class:`CellPricing` is what the results table calls; it reads only the cell's flat view (``CellView.to_dict()``)
and the measured lengths, never the results table's internals.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from snapeval.cache import METHOD_TABLE, MethodConfig, method_info, resolve_method
from snapeval.errors import SnapevalError
from snapeval.tasks.families import typical_lengths

SimulateFn = Callable[..., Any]


def default_simulate() -> SimulateFn | None:
    """snapeval's simulator (:func:`snapeval.simulator.simulate_point`), or None when it cannot be imported."""
    try:
        from snapeval.simulator import simulate_point
    except ImportError:
        return None
    return simulate_point


def preset_context(model: str) -> int | None:
    """The context length of a model preset; None for a name that is not a preset (the simulator says why)."""
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


def measured_lengths(views: list[Mapping[str, Any]], results: Mapping[str, Any]) -> dict[tuple, tuple[int, int]]:
    """Mean prompt and generated tokens per sample of each (model, task), from its full-cache cells.

    ``results`` maps a cell id to its result (anything with ``prompt_tokens``, ``generated_tokens`` and ``samples``
    carrying ``subtask`` and ``doc_id``). One pair per (model, task), so that every method of a task is priced at the
    same deployment; the full cache's output length is the task's natural one (a compressed cache can change how
    long a model talks). Without a full-cache cell, the mean over all the task's cells.
    """
    full: dict[tuple, list[int]] = {}
    every: dict[tuple, list[int]] = {}
    for view in views:
        result = results.get(view["cell_id"])
        if result is None or not result.prompt_tokens or result.generated_tokens is None:
            continue
        docs = len({(s.subtask, s.doc_id) for s in result.samples}) or 1
        for bucket in ([full] if METHOD_TABLE.is_reference(view["method"]) else []) + [every]:
            acc = bucket.setdefault((view["model"], view["task"]), [0, 0, 0])
            acc[0] += result.prompt_tokens
            acc[1] += result.generated_tokens
            acc[2] += docs
    out = {}
    for key, sums in every.items():
        prompt, gen, docs = full.get(key, sums)
        out[key] = (max(1, round(prompt / docs)), max(1, round(gen / docs)))
    return out


def sim_lengths(view: Mapping[str, Any], measured: tuple[int, int] | None) -> tuple[int | None, int | None, str]:
    """(prompt_len, gen_len, source) of the simulated deployment for one cell (see the module docstring)."""
    if view.get("sim_prompt_len") and view.get("sim_gen_len"):
        return int(view["sim_prompt_len"]), int(view["sim_gen_len"]), "config"
    typical = typical_lengths(view["task"])
    if typical is not None:
        prompt, gen = typical
        return view.get("sim_prompt_len") or prompt, view.get("sim_gen_len") or gen, "paper-table-3"
    if measured is not None:
        return view.get("sim_prompt_len") or measured[0], view.get("sim_gen_len") or measured[1], "measured-mean"
    return None, None, "unknown"


def method_from_identity(policy: Mapping[str, Any]) -> MethodConfig:
    """The resolved configuration a cell ran, rebuilt from its identity's ``policy`` (``config.identity()``:
    ``{"method": ..., "budget": ..., <fields>}``). The fields go through :func:`snapeval.cache.resolve_method`, the
    one place a configuration is built; fields the method derives from its budget (StreamingLLM's ``recent``) are
    left to it, and the rebuilt configuration must have exactly the identity it came from."""
    fields = dict(policy)
    name, budget = fields.pop("method", None), fields.pop("budget", None)
    if not isinstance(name, str):
        raise SnapevalError(f"a cell's policy {dict(policy)!r} names no method")
    fields = method_info(name).config_class().typed(fields, warn=False)  # stored keys (pool_kernel's "kernel")
    try:
        config = resolve_method(name, budget, **fields)
    except SnapevalError:
        allowed = method_info(name).setting_names()
        config = resolve_method(name, budget, **{k: v for k, v in fields.items() if k in allowed})
    if config.identity() != dict(policy):
        raise SnapevalError(f"a cell's policy {dict(policy)!r} does not rebuild into the same configuration "
                            f"({config.identity()!r})")
    return config


def view_method(view: Mapping[str, Any]) -> MethodConfig:
    """The configuration of a cell from its flat view (``method``, ``budget`` and the settings it lists), for
    cells whose result carries no policy identity."""
    name = view["method"]
    settings = {s.name: view[s.stored] for s in method_info(name).settings() if view.get(s.stored) is not None}
    return resolve_method(name, view.get("budget"), **settings)


class CellPricing:
    """Memoized SN40L pricing of (model, prompt, gen, method) points, with the batch policy of the sweep.

    ``settings``: the sweep's ``simulate`` section (``hardware``, ``batch`` = ``"max"`` or a number, ``batch_cap``,
    ``enabled``). ``simulate``: a function with :func:`snapeval.simulator.simulate_point`'s signature; ``"default"``
    = snapeval's; None leaves the columns empty with a note.
    """

    def __init__(self, settings: Mapping[str, Any], simulate: SimulateFn | None | str = "default",
                 max_context: Callable[[str], int | None] = preset_context):
        self.hardware = settings.get("hardware", "sn40l-16")
        self.batch = settings.get("batch", "max")
        self.batch_cap = int(settings.get("batch_cap", 1024))
        self.enabled = settings.get("enabled", True)
        self.simulate = default_simulate() if isinstance(simulate, str) and simulate == "default" else simulate
        self.max_context = max_context
        self._memo: dict[tuple, dict[str, Any]] = {}

    def _point(self, model: str, prompt: int, gen: int, method: MethodConfig | None) -> dict[str, Any]:
        key = (model, prompt, gen, method)
        if key in self._memo:
            return self._memo[key]
        one = self.simulate(model, hardware=self.hardware, prompt_len=prompt, gen_len=gen, method=method, batch=1)
        # per sequence: the cache's logical size (the simulator's kv_bytes_total also counts replicas across sockets)
        per_seq = getattr(one, "kv_bytes_per_seq", one.kv_bytes_total)
        out: dict[str, Any] = {"fits": bool(one.fits), "kv_per_seq": per_seq,
                               "max_batch": int(one.max_batch or 0)}
        if not one.fits:
            out.update(batch=None, kv_total=None, tps=None, tps_seq=None, prefill=None, hbm=None,
                       reason=getattr(one, "reason", "does not fit"))
        else:
            batch = min(out["max_batch"], self.batch_cap) if self.batch == "max" else int(self.batch)
            run = self.simulate(model, hardware=self.hardware, prompt_len=prompt, gen_len=gen, method=method,
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

    def columns(self, view: Mapping[str, Any], measured: tuple[int, int] | None,
                policy: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The ``sim_*`` columns of one cell: its flat view, its task's measured mean lengths and its method's
        identity (``result.identity["policy"]``; None: the method is read from the view)."""
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
            method = method_from_identity(policy) if policy is not None else view_method(view)
            point = self._point(model, prompt, gen, method)
            full = self._point(model, prompt, gen, resolve_method("full"))
        except Exception as exc:  # a model that is not a preset, a length past its context: say so in the row
            return {**cols, "sim_note": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
        notes = [point["reason"] or (f"full cache: {full['reason']}" if full["reason"] else "")]
        if method.budget is not None and method.prefill_work(prompt).none:
            notes.append(f"the {method.budget}-token budget holds the whole {prompt}-token prompt: nothing is "
                         "compressed at these lengths")
        cols.update(
            sim_fits=point["fits"], sim_kv_bytes_per_seq=point["kv_per_seq"], sim_batch=point["batch"],
            sim_max_batch=point["max_batch"], sim_kv_bytes_total=point["kv_total"],
            sim_decode_tokens_per_s=point["tps"], sim_decode_tokens_per_s_per_seq=point["tps_seq"],
            sim_prefill_seconds=point["prefill"], sim_full_kv_bytes_per_seq=full["kv_per_seq"],
            sim_full_max_batch=full["max_batch"], sim_full_decode_tokens_per_s=full["tps"],
            sim_hbm_bytes_per_socket=point["hbm"], sim_note="; ".join(n for n in notes if n),
        )
        return cols
