"""Sweep configuration files: a YAML grid of models x tasks x methods x budgets (x seeds), validated on load.

A config is plain YAML (see ``configs/quickstart.yaml`` for a commented example)::

    name: quickstart
    models: [smollm2-135m-instruct]            # or mappings: {pretrained, dtype, batch_size, decode_kernel, ...}
    tasks:                                      # or bare task names
      - {name: passkey, limit: 20, metadata: {context_len: 2048}, generation: {max_gen_toks: 16}}
    methods:
      - full
      - {method: snapstream, budgets: [256, 512], sink: 4, recent: 0.5}
    seeds: [0]
    decision: {margin: 0.02, alpha: 0.05}       # the report's non-inferiority margin and test level (the defaults)

Scale (docs/sweeps.md): ``shards: N`` or ``shard_size: N`` (items per shard) splits every group's items into shards,
each its own work unit (default: one per worker of the executor); a model's ``max_memory`` (``20GiB``, or per
device ``{cuda:0: 70GiB, cpu: 64GiB}``) is the memory budget of its shared groups (default: in use plus free, less a
margin).

A model entry's keys besides ``pretrained``, ``simulate_as``, ``resources``, ``share_prefill`` and ``max_memory``
are the run arguments (:class:`snapeval.run_args.RunArgs`: ``dtype``, ``batch_size``, ``max_gen_toks``,
``engine``, ``decode_kernel``, ``capture``, ...), with the same names and values as ``snapeval run``'s flags and
lm-eval's model_args; the device comes from ``resources``.

Every mistake (an unknown key, a wrong type, a value out of range) raises :class:`~snapeval.errors.SnapevalError`
with one line that names the field by its path in the file (``methods[1].recent``) and what is allowed.

Settings. A budgeted method keeps ``budget`` KV entries per layer and KV head. Its settings are resolved here, with
the cache's own rules (:func:`snapeval.cache.resolve_method`), so that it is part of every cell's identity (a changed
default can never silently reuse an old result):

* ``snapstream``: ``sink`` + ``recent`` (ring buffer) + ``topk`` (SnapKV-selected middle tokens) = ``budget``;
  ``recent`` and ``observation`` are token counts (int) or fractions of the budget (float in (0, 1]: a window
  that grows with the budget); ``topk`` is what is left.
* ``streamingllm``: ``sink`` + ``recent`` = ``budget`` (no selection).
* ``snapkv``: ``budget`` prompt entries chosen by SnapKV at prefill (the observation window included, tokens or
  a fraction of the budget); the cache grows again while decoding, as in the original method.
* ``full``: no budget; one cell per (model, task, seed) whatever the budgets are.

A method entry's keys besides ``method``, ``budgets`` and ``press`` are the settings its method declares
(:class:`~snapeval.cache.config.Setting` on its configuration class), each checked as declared; a new method's
settings are keys here without a change to this file. Fields left out take the cache's documented defaults (:mod:`snapeval.cache.config`): 4 sinks, a ring of half the
budget (at least the observation window), an observation window of 32 (SnapKV: at most half the budget) and an
average pooling of width 5 (``pool_kernel``, stored as ``kernel``).
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import re
from pathlib import Path
from typing import Any

from snapeval.cache import METHOD_TABLE
from snapeval.cache.config import MIN_BUDGET
from snapeval.errors import SnapevalError, is_int
from snapeval.paths import repo_root
from snapeval.run_args import RunArgs
from snapeval.sweep.spec import (
    SIM_HARDWARE_DEFAULT,
    MethodSpec,
    ModelSpec,
    Resources,
    SimLengths,
    SimulateSpec,
    SweepConfig,
    TaskSpec,
)


# --------------------------------------------------------------------------------------------------------------------
# validation helpers: every one raises a one-line SnapevalError naming the field path


class _Ctx:
    """Field path for error messages (``tasks[2].limit``), prefixed with the config file name."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, message: str) -> SnapevalError:
        return SnapevalError(f"{self.source}: {path}: {message}")

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping with keys {', '.join(allowed)}; got {type(value).__name__}")
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise self.fail(path, f"unknown key {key!r}{hint}; allowed keys: {', '.join(allowed)}")
        for key in required:
            if key not in value:
                raise self.fail(path, f"missing required key {key!r}")
        return value

    def integer(self, value: Any, path: str, *, minimum: int | None = None, optional: bool = False) -> int | None:
        if value is None and optional:
            return None
        if not is_int(value):
            raise self.fail(path, f"expected an integer{' or null' if optional else ''}; got {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(path, f"must be >= {minimum}; got {value}")
        return value

    def string(self, value: Any, path: str, *, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string; got {value!r}")
        if choices is not None and value not in choices:
            raise self.fail(path, f"{value!r} is not allowed; choose one of: {', '.join(choices)}")
        return value

    def listof(self, value: Any, path: str, *, allow_scalar: bool = True, nonempty: bool = True) -> list:
        if allow_scalar and not isinstance(value, list):
            value = [value]
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list; got {type(value).__name__}")
        if nonempty and not value:
            raise self.fail(path, "must not be empty")
        return value

    def scalar_mapping(self, value: Any, path: str) -> dict[str, Any]:
        """A flat mapping of names to JSON scalars (task metadata, generation kwargs)."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping; got {type(value).__name__}")
        for key, item in value.items():
            if not isinstance(key, str):
                raise self.fail(path, f"keys must be strings; got {key!r}")
            if not _is_json_value(item):
                raise self.fail(f"{path}.{key}", f"expected a number, string, bool, null or a list of them; got {item!r}")
        return dict(value)


def _is_json_value(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_is_json_value(v) for v in value)
    return False


# --------------------------------------------------------------------------------------------------------------------
# parsing

_TOP_KEYS = ("name", "description", "out", "data_dir", "include_path", "models", "tasks", "methods", "budgets",
             "seeds", "limit", "generation", "resources", "simulate", "decision", "shards", "shard_size")
#: A model entry's own keys; besides them, every run argument of the ``sweep`` surface (:mod:`snapeval.run_args`).
_MODEL_KEYS = ("pretrained", "simulate_as", "resources", "share_prefill", "max_memory")
_DEVICE_RE = re.compile(r"^(\*|cpu|cuda(:[0-9]+)?)$")
_TASK_KEYS = ("name", "limit", "metadata", "generation", "metric", "data_files", "sim")
#: A method entry's own keys; besides them, every setting a method of the table declares (``sink``, ``recent``, ...).
_METHOD_KEYS = ("method", "budgets", "press")
_RESOURCE_KEYS = ("num_cpus", "num_gpus")
_SIM_KEYS = ("hardware", "batch", "batch_cap", "enabled")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def _parse_resources(ctx: _Ctx, raw: Any, path: str, default: Resources) -> Resources:
    if raw is None:
        return default
    raw = ctx.mapping(raw, path, _RESOURCE_KEYS)
    values = {}
    for key in _RESOURCE_KEYS:
        if key in raw:
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ctx.fail(f"{path}.{key}", f"expected a number >= 0; got {v!r}")
            values[key] = float(v)
    return dataclasses.replace(default, **values)


def _parse_model(ctx: _Ctx, raw: Any, path: str, resources: Resources) -> ModelSpec:
    """A model entry: its own keys (:data:`_MODEL_KEYS`) and the run arguments, every one parsed as
    :class:`snapeval.run_args.RunArgs` declares it (the same names and values as ``snapeval run``'s flags and
    lm-eval's model_args)."""
    if isinstance(raw, str):
        raw = {"pretrained": raw}
    raw = ctx.mapping(raw, path, (*_MODEL_KEYS, *RunArgs.names("sweep")), required=("pretrained",))
    for declaration in RunArgs.declarations("sweep"):  # each one named by its path in the file
        if declaration.name in raw:
            try:
                declaration.parse(raw[declaration.name])
            except SnapevalError as exc:
                raise ctx.fail(f"{path}.{declaration.name}", str(exc)) from None
    model_resources = _parse_resources(ctx, raw.get("resources"), f"{path}.resources", resources)
    try:  # resolved with the device its resources give it (capture true needs one with a GPU)
        run_args = RunArgs.from_mapping(raw, surface="sweep", device="cuda" if model_resources.num_gpus >= 1 else "cpu")
    except SnapevalError as exc:  # a combination of arguments (capture on the CPU, ...)
        raise ctx.fail(path, str(exc)) from None
    return ModelSpec(
        pretrained=ctx.string(raw["pretrained"], f"{path}.pretrained"),
        run_args=run_args,
        simulate_as=(ctx.string(raw["simulate_as"], f"{path}.simulate_as") if raw.get("simulate_as") else None),
        resources=model_resources,
        share_prefill=_parse_bool(ctx, raw.get("share_prefill", True), f"{path}.share_prefill"),
        max_memory=_parse_max_memory(ctx, raw.get("max_memory"), f"{path}.max_memory"),
    )


def _parse_max_memory(ctx: _Ctx, raw: Any, path: str):
    """``20GiB`` (every device) or ``{cuda:0: 70GiB, cpu: 64GiB}`` (an integer key N means ``cuda:N``)."""
    from snapeval.memory_plan import parse_bytes

    if raw is None:
        return None
    entries = raw if isinstance(raw, dict) else {"*": raw}
    out = []
    for key, value in entries.items():
        device = f"cuda:{key}" if is_int(key) else key
        if not isinstance(device, str) or not _DEVICE_RE.match(device):
            raise ctx.fail(path, f"device {key!r} is not allowed; allowed: cpu, cuda, cuda:N (or N) as keys, or one "
                                 "size for every device")
        try:
            out.append((device, parse_bytes(value, field_name="max_memory")))
        except SnapevalError as exc:
            raise ctx.fail(f"{path}" if device == "*" else f"{path}.{device}", str(exc)) from None
    return tuple(sorted(out))


def _parse_bool(ctx: _Ctx, raw: Any, path: str) -> bool:
    if not isinstance(raw, bool):
        raise ctx.fail(path, f"expected true or false; got {raw!r}")
    return raw


def _parse_task(ctx: _Ctx, raw: Any, path: str, limit: int | None, generation: dict) -> TaskSpec:
    if isinstance(raw, str):
        raw = {"name": raw}
    raw = ctx.mapping(raw, path, _TASK_KEYS, required=("name",))
    name = ctx.string(raw["name"], f"{path}.name")
    if not _NAME_RE.match(name):
        raise ctx.fail(f"{path}.name", f"{name!r} is not a task name (letters, digits, '_', '-', '.')")
    gen = {**generation, **ctx.scalar_mapping(raw.get("generation"), f"{path}.generation")}
    data_files = None
    if "data_files" in raw:
        data_files = tuple(ctx.string(f, f"{path}.data_files[{i}]")
                           for i, f in enumerate(ctx.listof(raw["data_files"], f"{path}.data_files", nonempty=False)))
    sim = SimLengths()
    if raw.get("sim") is not None:
        s = ctx.mapping(raw["sim"], f"{path}.sim", ("prompt_len", "gen_len"))
        sim = SimLengths(ctx.integer(s.get("prompt_len"), f"{path}.sim.prompt_len", minimum=1, optional=True),
                         ctx.integer(s.get("gen_len"), f"{path}.sim.gen_len", minimum=1, optional=True))
    return TaskSpec(
        name=name,
        limit=ctx.integer(raw.get("limit", limit), f"{path}.limit", minimum=1, optional=True),
        metadata=tuple(sorted(ctx.scalar_mapping(raw.get("metadata"), f"{path}.metadata").items())),
        generation=tuple(sorted(gen.items())),
        metric=ctx.string(raw["metric"], f"{path}.metric") if raw.get("metric") is not None else None,
        data_files=data_files,
        sim=sim,
    )


def _parse_budgets(ctx: _Ctx, raw: Any, path: str) -> tuple[int, ...]:
    budgets = ctx.listof(raw, path)
    for i, b in enumerate(budgets):  # as `snapeval run --budget` and model_args say it
        if not is_int(b) or b < MIN_BUDGET:
            raise ctx.fail(f"{path}[{i}]", f"budget={b!r} is invalid; allowed: an integer >= {MIN_BUDGET}")
    if len(set(budgets)) != len(budgets):
        raise ctx.fail(path, f"duplicate budgets in {budgets}")
    return tuple(budgets)


def _parse_method(ctx: _Ctx, raw: Any, path: str, budgets: tuple[int, ...] | None) -> MethodSpec:
    if isinstance(raw, str):
        raw = {"method": raw}
    # the keys: the entry's own, the shipped methods' settings and the named method's (no other plugin is loaded)
    named = raw.get("method") if isinstance(raw, dict) else None
    own = ()
    if isinstance(named, str) and named in METHOD_TABLE:
        own = METHOD_TABLE.user_keys([named])
    keys = (*_METHOD_KEYS, *dict.fromkeys([*METHOD_TABLE.user_keys(METHOD_TABLE.builtin_names()), *own]))
    raw = ctx.mapping(raw, path, keys, required=("method",))
    method = ctx.string(raw["method"], f"{path}.method")
    try:
        info = METHOD_TABLE.get(method)
    except SnapevalError as exc:
        raise ctx.fail(f"{path}.method", str(exc)) from None
    if METHOD_TABLE.is_reference(method):
        extra = [k for k in raw if k != "method"]
        if extra:
            raise ctx.fail(path, f"method {method!r} takes no {', '.join(extra)} (it keeps the whole cache)")
        return MethodSpec(method)
    if "budgets" in raw:
        own = _parse_budgets(ctx, raw["budgets"], f"{path}.budgets")
    elif budgets:
        own = budgets
    else:
        raise ctx.fail(f"{path}.budgets", f"method {method!r} needs budgets (here or in the top-level 'budgets')")
    declared = {s.name: s for s in info.settings()}
    try:  # an old spelling (pool_kernel's "kernel"): its name, warned once
        raw = {**{k: v for k, v in raw.items() if k in _METHOD_KEYS},
               **info.config_class().typed({k: v for k, v in raw.items() if k not in _METHOD_KEYS}, where=f"{path}.")}
    except ValueError as exc:
        raise ctx.fail(path, str(exc)) from None
    settings = []
    for key in [k for k in raw if k not in _METHOD_KEYS]:  # a setting: checked as its method declares it
        if key not in declared:
            raise ctx.fail(f"{path}.{key}", f"method {method!r} takes no {key!r}; allowed settings: "
                                            f"{', '.join(declared) or 'none'}")
        try:
            settings.append((key, declared[key].check(raw[key])))
        except ValueError as exc:
            raise ctx.fail(f"{path}.{key}", str(exc)) from None
    spec = MethodSpec(method=method, budgets=own, settings=tuple(settings),
                      press=tuple(sorted(ctx.scalar_mapping(raw.get("press"), f"{path}.press").items())))
    try:
        spec.points()
    except SnapevalError as exc:
        raise ctx.fail(path, str(exc)) from None
    return spec


def _parse_simulate(ctx: _Ctx, raw: Any) -> SimulateSpec:
    if raw is None:
        return SimulateSpec()
    raw = ctx.mapping(raw, "simulate", _SIM_KEYS)
    batch = raw.get("batch", "max")
    if batch != "max":
        ctx.integer(batch, "simulate.batch", minimum=1)
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ctx.fail("simulate.enabled", f"expected true or false; got {enabled!r}")
    return SimulateSpec(
        hardware=ctx.string(raw.get("hardware", SIM_HARDWARE_DEFAULT), "simulate.hardware",
                            choices=tuple(_hardware_names())),
        batch=batch,
        batch_cap=ctx.integer(raw.get("batch_cap", 1024), "simulate.batch_cap", minimum=1),
        enabled=enabled,
    )


def _parse_decision(ctx: _Ctx, raw: Any):
    """``decision: {margin, alpha}``: the report's non-inferiority margin and test level (defaults: 0.02, 0.05)."""
    from snapeval.stats.decision import KEYS, DecisionRule

    if raw is None:
        return DecisionRule()
    raw = ctx.mapping(raw, "decision", KEYS)
    try:
        return DecisionRule(**raw)
    except SnapevalError as exc:
        field, _, rest = str(exc).partition("=")
        raise ctx.fail(field, rest) from None


def _hardware_names() -> list[str]:
    from snapeval.simulator.hardware import list_hardware

    return list_hardware()


def _check_engine(ctx: _Ctx, models, methods) -> None:
    """``engine: true`` puts every cell of the model on the engine: each method of the grid needs a static-row
    layout (a press compresses through its own prefill hooks)."""
    for i, model in enumerate(models):
        if model.engine != "true":
            continue
        for j, spec in enumerate(methods):
            for config in spec.points():
                try:
                    METHOD_TABLE.get(config.method).on_engine(model.run_args, "cpu")  # the run argument's own rule
                except SnapevalError:
                    allowed = ", ".join(n for n in METHOD_TABLE.names() if METHOD_TABLE.get(n).static_rows)
                    raise ctx.fail(f"models[{i}].engine", f"engine='true' cannot run methods[{j}] "
                                   f"({config.method!r}); allowed with engine true: {allowed}; or engine auto") from None
                break


def _check_distinct(ctx: _Ctx, methods) -> None:
    """Two method entries that give the same configuration (``kvpress:SnapKVPress`` listed twice, the same
    settings spelt twice) would make the same cell twice: one line naming both."""
    import json

    seen: dict[str, int] = {}
    for i, spec in enumerate(methods):
        for config in spec.points():
            key = json.dumps(config.to_dict(), sort_keys=True, default=str)
            if key in seen and seen[key] != i:
                budget = f"@{config.budget}" if getattr(config, "budget", None) is not None else ""
                raise ctx.fail(f"methods[{i}]", f"gives the same cells as methods[{seen[key]}] ({config.method}"
                                               f"{budget}); allowed: each configuration once")
            seen.setdefault(key, i)


def _check_budgets_fit(ctx: _Ctx, models, methods) -> None:
    """A budget beyond a preset model's context can never be used: say so before anything loads."""
    from snapeval.models.presets import get_preset, list_presets

    for i, spec in enumerate(methods):
        for j, budget in enumerate(spec.budgets):
            for model in models:
                if model.pretrained in list_presets():
                    context = get_preset(model.pretrained).max_context
                    if budget > context:
                        raise ctx.fail(f"methods[{i}].budgets[{j}]", f"{budget} exceeds the {context:,}-token context "
                                       f"of {model.pretrained}; allowed: 2..{context}")
        for model in models:  # a method's arguments that must fit the model's prompts (a press's window)
            if model.pretrained in list_presets():
                for config in spec.points():
                    if hasattr(config, "check_context"):
                        try:
                            config.check_context(get_preset(model.pretrained).max_context)
                        except SnapevalError as exc:
                            raise ctx.fail(f"methods[{i}]", str(exc)) from None


def parse_config(raw: Any, source: str = "<config>") -> SweepConfig:
    """Validate a parsed YAML document into a :class:`SweepConfig` (one-line errors naming the field)."""
    ctx = _Ctx(Path(source).name if source != "<config>" else source)
    raw = ctx.mapping(raw, "config", _TOP_KEYS, required=("models", "tasks", "methods"))
    name = ctx.string(raw.get("name", Path(source).stem if source != "<config>" else "sweep"), "name")
    if not _NAME_RE.match(name):
        raise ctx.fail("name", f"{name!r} must be letters, digits, '_', '-', '.'")
    resources = _parse_resources(ctx, raw.get("resources"), "resources", Resources())
    top_limit = ctx.integer(raw.get("limit"), "limit", minimum=1, optional=True)
    generation = ctx.scalar_mapping(raw.get("generation"), "generation")
    budgets = _parse_budgets(ctx, raw["budgets"], "budgets") if raw.get("budgets") is not None else None
    models = tuple(_parse_model(ctx, m, f"models[{i}]", resources)
                   for i, m in enumerate(ctx.listof(raw["models"], "models")))
    tasks = tuple(_parse_task(ctx, t, f"tasks[{i}]", top_limit, generation)
                  for i, t in enumerate(ctx.listof(raw["tasks"], "tasks")))
    methods = tuple(_parse_method(ctx, m, f"methods[{i}]", budgets)
                    for i, m in enumerate(ctx.listof(raw["methods"], "methods")))
    _check_distinct(ctx, methods)
    _check_budgets_fit(ctx, models, methods)
    _check_engine(ctx, models, methods)
    seeds = tuple(ctx.integer(s, f"seeds[{i}]", minimum=0)
                  for i, s in enumerate(ctx.listof(raw.get("seeds", [0]), "seeds")))
    for i, seed in enumerate(seeds):  # lm-eval seeds numpy with it: 32 bits (snapeval run's --seed the same)
        if seed > 2**32 - 1:
            raise ctx.fail(f"seeds[{i}]", f"seed={seed} is invalid; allowed: an integer in 0..{2**32 - 1} (numpy's "
                                          "seeds)")
    for axis, values in (("models", [m.pretrained for m in models]), ("tasks", [t.name for t in tasks]),
                         ("seeds", list(seeds))):
        dup = sorted({v for v in values if values.count(v) > 1}, key=str)
        if dup:
            raise ctx.fail(axis, f"duplicate entries {dup}")
    for key in ("description", "out", "data_dir", "include_path"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ctx.fail(key, f"expected a string; got {raw[key]!r}")
    shards = ctx.integer(raw.get("shards"), "shards", minimum=1, optional=True)
    shard_size = ctx.integer(raw.get("shard_size"), "shard_size", minimum=1, optional=True)
    if shards is not None and shard_size is not None:
        raise ctx.fail("shards", f"shards={shards} and shard_size={shard_size} are exclusive; allowed: one of them "
                                 "(shards: how many per group, shard_size: items per shard)")
    return SweepConfig(
        name=name, models=models, tasks=tasks, methods=methods, seeds=seeds,
        description=str(raw.get("description") or ""), out=raw.get("out"), data_dir=raw.get("data_dir"),
        include_path=raw.get("include_path"), simulate=_parse_simulate(ctx, raw.get("simulate")),
        decision=_parse_decision(ctx, raw.get("decision")), source=source, shards=shards, shard_size=shard_size,
    )


def resolve_config_path(name_or_path: str | os.PathLike) -> Path:
    """A config file path, or a bare name looked up as ``configs/<name>.yaml`` (current directory, then the repo)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if path.suffix == "" and len(path.parts) == 1:
        for base in (Path.cwd(), repo_root()):
            candidate = base / "configs" / f"{path.name}.yaml"
            if candidate.is_file():
                return candidate
    raise SnapevalError(f"config {str(name_or_path)!r} not found; give a YAML file or a name from configs/ "
                        f"(e.g. quickstart)")


MAX_CONFIG_BYTES = 1 << 20
MAX_YAML_ALIASES = 100


def _bounded_loader():
    """A ``yaml.SafeLoader`` that refuses more than :data:`MAX_YAML_ALIASES` aliases (a 1 KB "billion laughs"
    file expands exponentially through aliases of aliases; a sweep config needs a handful at most)."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self.aliases_seen = getattr(self, "aliases_seen", 0) + 1
                if self.aliases_seen > MAX_YAML_ALIASES:
                    mark = self.peek_event().start_mark
                    raise SnapevalError(f"line {mark.line + 1}: more than {MAX_YAML_ALIASES} YAML aliases; allowed: at "
                                        f"most {MAX_YAML_ALIASES} (an alias bomb?)")
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            """A key given twice in one mapping is an error (PyYAML keeps the last one silently)."""
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # a merge key (<<: *base): the mapping's own keys win
                    continue
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise SnapevalError(f"line {key_node.start_mark.line + 1}: key {key!r} is given twice in one mapping "
                                        f"(first on line {seen[key] + 1}); allowed: each key once")
                if isinstance(key, (str, int, float, bool)):
                    seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep=deep)

    return BoundedLoader


def load_config(name_or_path: str | os.PathLike) -> SweepConfig:
    """Read and validate a sweep YAML (a path, or a name in ``configs/``)."""
    import yaml

    path = resolve_config_path(name_or_path)
    try:
        data = path.read_bytes()
        if len(data) > MAX_CONFIG_BYTES:
            raise SnapevalError(f"{path.name}: {len(data):,} bytes is not a sweep config; allowed: at most "
                                f"{MAX_CONFIG_BYTES:,} bytes of YAML")
        text = data.decode("utf-8")
        if "\x00" in text:
            raise UnicodeDecodeError("utf-8", data, text.index("\x00"), text.index("\x00") + 1, "NUL byte")
        raw = yaml.load(text, Loader=_bounded_loader())
    except OSError as exc:
        raise SnapevalError(f"{path}: cannot read the config ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise SnapevalError(f"{path.name}: not a text YAML file (byte {exc.start} is not UTF-8 text); allowed: a "
                            "UTF-8 YAML sweep config") from None
    except RecursionError:
        raise SnapevalError(f"{path.name}: YAML nested too deeply") from None
    except SnapevalError as exc:  # the loader's own refusals (aliases, a key given twice)
        raise SnapevalError(f"{path.name}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SnapevalError(f"{path.name}:{where} is not valid YAML: {problem}") from None
    return parse_config(raw, source=str(path))
