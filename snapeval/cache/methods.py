"""The one table of methods: every name the CLI, the sweep, the lm-eval model and the engine accept.

Each entry (:class:`MethodInfo`) answers everything about its method: its configuration class and its cache class
as lazy ``"module:Class"`` strings (as lm-eval's registry does, so the table can be read without importing torch),
its settings (declared once on the configuration class, :meth:`MethodInfo.settings`), whether its cache branches
from a shared prefill and whether it decodes in the engine's static rows, whether it is the uncompressed reference
the others are paired with, and how reports draw it (:class:`MethodStyle`). A method is resolved exactly once, by
:func:`resolve_method`, into a configuration object (:mod:`snapeval.cache.config`); everything downstream receives
that object and asks it (``config.method``, ``config.budget``) or this table (:func:`method_info`), never a string
literal. A new method is one file (its configuration and cache) plus its entry (``CONTRIBUTING.md``).

Other families of methods register here too (``kvpress:<Press>``, see :mod:`snapeval.cache.kvpress` when kvpress is
installed): a family is a prefix whose names are resolved by a function of the family.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from snapeval.cache.config import MethodConfig, Setting
from snapeval.errors import SnapevalError
from snapeval.run_args import DecodeChoices, RunArgs


def load_object(path: str):
    """Import ``"module:Attribute"``."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class MethodStyle:
    """How reports draw a method: its label, colour and marker (matplotlib names) and its place in tables and legends
    (``rank``: lower first)."""

    label: str
    color: str
    marker: str
    rank: int


@dataclass(frozen=True)
class MethodInfo:
    """One row of the table.

    Attributes:
        name: what users write (``method=snapstream``).
        config: ``"module:Class"`` of its configuration (a :class:`~snapeval.cache.config.MethodConfig`).
        cache: ``"module:Class"`` of its cache, built as ``Cache(model, config)``.
        branches: its cache can be built from a shared prefill (:mod:`snapeval.branching`).
        summary: one line for ``--help`` and the docs.
        static_cache: ``"module:Class"`` of the cache in the engine's static rows, when it differs from ``cache``
            (a growing cache then gets rows of its kept prompt plus the tokens to decode); empty: ``cache``.
        prefill_hook: ``"module:Class"`` of the hooks through which it compresses inside the prefill (on the
            attention layers; kvpress's presses: :class:`snapeval.cache.kvpress_cache.PressBranches`), loaded when a
            prefill installs them: ``with Hooks(model, configs, prompt_length, capture, release=...) as hooks:``,
            then ``hooks.branches`` maps each configuration to its branch. Plain ``generate`` cannot apply such a
            method: its prompts go through :class:`snapeval.branching.BranchSet`. Empty: none (the method compresses
            from the cache or the shared capture).
        style: how reports draw it (None: a spare colour and marker, chosen per figure).
        reference: the uncompressed baseline: every other cell of a group is paired with its cell.
    """

    name: str
    config: str
    cache: str
    branches: bool
    summary: str
    static_cache: str = ""
    prefill_hook: str = ""
    style: MethodStyle | None = None
    reference: bool = False

    def config_class(self) -> type[MethodConfig]:
        return load_object(self.config)

    def settings(self) -> tuple[Setting, ...]:
        """What a user may set besides the budget (declared on the configuration class)."""
        return self.config_class().settings()

    def setting_names(self) -> tuple[str, ...]:
        """The names of :meth:`settings`."""
        return tuple(s.name for s in self.settings())

    @property
    def fixed_size(self) -> bool:
        """The cache never grows while decoding (its rows have ``budget`` slots): the configuration class says."""
        return self.config_class().FIXED_SIZE

    def cache_class(self) -> type:
        return load_object(self.cache)

    def on_engine(self, run_args: RunArgs, device) -> bool:
        """Whether this method's generations run on the continuous-batching engine (:mod:`snapeval.engine`) under
        ``run_args`` on ``device`` (a torch device or its text): the one resolution of the run argument ``engine``.

        ``true``: yes, for a method with a static-row layout (a one-line :class:`SnapevalError` for another, or for
        one that compresses in its own prefill hooks: a kvpress press); ``false``: never; ``auto``: for the
        fixed-size caches (snapstream, streamingllm) and, where the decode step is captured
        (:meth:`~snapeval.run_args.RunArgs.capture_on`: CUDA, unless ``capture`` is false), for every method with a
        static-row layout: the full cache and SnapKV then decode in the engine's captured rows too. Elsewhere (the
        CPU) they keep the padded batches, the reference path every committed result was produced on."""
        in_rows = self.static_rows and not self.prefill_hook  # a press's rows come from a shared prefill's branch
        if run_args.engine == "true" and not in_rows:
            allowed = ", ".join(name for name in METHOD_TABLE.names() if METHOD_TABLE.get(name).static_rows)
            raise SnapevalError(f"engine=true needs a method with a static-row layout; method={self.name!r} "
                                f"allowed: {allowed}")
        if run_args.engine != "auto":
            return run_args.engine == "true"
        return self.fixed_size or (in_rows and run_args.capture_on(device))

    def prefill_hook_class(self) -> type:
        """The class of :attr:`prefill_hook` (imported now; its module may need torch or an optional extra)."""
        if not self.prefill_hook:
            raise ValueError(f"method {self.name!r} has no prefill hook")
        return load_object(self.prefill_hook)

    def static_cache_class(self) -> type:
        """The cache class the engine allocates static rows of (a :class:`~snapeval.cache.base.CompressedKVCache`)."""
        return load_object(self.static_cache or self.cache)

    @property
    def static_rows(self) -> bool:
        """The engine can hold its cache in static rows (its static cache class is a compressed-cache layout): a
        fixed-size cache gets ``budget`` slots, an appending one its kept prompt plus the tokens to decode. Imports
        the cache (torch)."""
        from snapeval.cache.base import CompressedKVCache

        return issubclass(self.static_cache_class(), CompressedKVCache)


#: Names no setting may take: the keys beside a method's settings in a sweep's method entry, the lm-eval model's
#: own model_args, the ``snapeval run`` flags, a cell view's fields and the results table's fixed columns (a setting
#: named ``seed`` would shadow the run's seed everywhere). Refused when a method is registered.
RESERVED_SETTING_NAMES = frozenset({
    # a sweep's method entry, a method's resolution
    "method", "budget", "budgets", "press", "settings", "config", "cache_config", "policy",
    # the lm-eval model's model_args and the `snapeval run` flags: the run arguments (snapeval.run_args) and the rest
    *RunArgs.names(), "run_args",
    "pretrained", "model", "loaded", "shared", "tokenizer", "task", "tasks", "limit", "seed", "seeds", "metadata",
    "data_dir", "output", "method_arg", "press_arg", "generation",
    # a cell view's fields and the results table's fixed columns
    "cell_id", "label", "simulate_as", "metric", "group_id", "subtask", "filter", "primary", "higher_is_better",
    "value", "stderr", "n_samples", "kv_cache_bytes", "decode_tokens_per_s", "prefill_tokens_per_s",
    "prompt_tokens", "generated_tokens", "wall_s", "deterministic", "generations_sha256", "items_worse",
    "items_better", "non_inferior", "smallest_ni_budget",
})
#: Prefixes no setting may start with (lm-eval model_args and results-table column families).
RESERVED_SETTING_PREFIXES = ("press_", "specprefill_", "sim_", "paired_", "ni_")
#: What a setting's name looks like: a lower-case identifier (the same key in YAML, model_args and --method-arg).
SETTING_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

#: A plugin that takes longer than this to load (seconds) is named in a warning.
SLOW_PLUGIN_S = 2.0

#: The entry-point group of the methods installed packages add (``[project.entry-points."snapeval.methods"]``).
METHODS_GROUP = "snapeval.methods"


def check_setting_names(info: MethodInfo) -> None:
    """A one-line ``ValueError`` when a setting of ``info``'s method is named as something else snapeval reads
    (:data:`RESERVED_SETTING_NAMES`, :data:`RESERVED_SETTING_PREFIXES`) or is not a lower-case identifier."""
    allowed = (f"a lower-case identifier that snapeval does not read beside the settings (not seed, budget, method, "
               f"model, task, limit, ...: snapeval.cache.methods.RESERVED_SETTING_NAMES; not starting with "
               f"{', '.join(RESERVED_SETTING_PREFIXES)})")
    for name in dict.fromkeys(n for declared in info.settings() for n in (declared.name, declared.stored)):
        if name in RESERVED_SETTING_NAMES or name.startswith(RESERVED_SETTING_PREFIXES):
            raise ValueError(f"method {info.name!r}: setting name {name!r} is reserved; allowed: {allowed}")
        if not SETTING_NAME.match(name):
            raise ValueError(f"method {info.name!r}: setting name {name!r} is invalid; allowed: {allowed}")


def entry_points_of(group: str) -> list:
    """The installed entry points of ``group`` (``importlib.metadata``), by name; none loaded."""
    from importlib.metadata import entry_points

    return sorted(entry_points(group=group), key=lambda ep: ep.name)


class MethodTable:
    """Methods by name, plus families (``prefix:Name``) that resolve their names on demand, plus the methods of
    installed packages (the ``snapeval.methods`` entry-point group, each naming a :class:`MethodInfo`: found when a
    name is first looked up, loaded when first used)."""

    def __init__(self, plugin_group: str | None = None) -> None:
        self._methods: dict[str, MethodInfo] = {}
        self._builtin: tuple[str, ...] = ()
        self._families: dict[str, Callable[[str], MethodInfo]] = {}
        self._family_styles: dict[str, dict[str, MethodStyle]] = {}
        self._plugin_group = plugin_group
        self._plugins: dict[str, Any] | None = None  # name -> entry point, until loaded
        self._loaded_plugins: list[str] = []
        self._broken: dict[str, str] = {}  # plugins that could not be loaded: why

    def register(self, info: MethodInfo) -> MethodInfo:
        """Add ``info`` to the table (one-line ``ValueError`` for a taken name or a reserved setting name)."""
        if info.name in self._methods:
            raise ValueError(f"method {info.name!r} is already registered")
        if not isinstance(info.name, str) or not info.name or ":" in info.name:
            raise ValueError(f"method name {info.name!r} is invalid; allowed: a non-empty name without ':'")
        check_setting_names(info)
        self._methods[info.name] = info
        return info

    def seal_builtin(self) -> None:
        """The methods registered so far are snapeval's own: their settings are the results table's fixed setting
        columns (:meth:`column_settings`)."""
        self._builtin = tuple(self._methods)

    def builtin_names(self) -> tuple[str, ...]:
        """snapeval's own method names (:meth:`seal_builtin`)."""
        return self._builtin

    def rediscover(self) -> None:
        """Forget the plugins found so far (loaded ones are unregistered) and look again on next use: a package
        installed while the process runs (tests)."""
        for name in self._loaded_plugins:
            self.unregister(name)
        self._loaded_plugins = []
        self._plugins = None

    def _discovered(self) -> dict[str, Any]:
        """The plugin entry points not loaded yet (found once, on first use: building a parser never loads one)."""
        if self._plugins is None:
            self._plugins = {}
            if self._plugin_group:
                from snapeval.errors import warn_shadowed_plugin

                for ep in entry_points_of(self._plugin_group):
                    if ep.name in self._builtin:
                        warn_shadowed_plugin("method", ep.name, ep)
                    elif ep.name not in self._methods:
                        self._plugins[ep.name] = ep
        return self._plugins

    def _load_plugin(self, name: str) -> None:
        entry = self._discovered().pop(name)
        import time

        started = time.perf_counter()
        try:
            info = entry.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # raised or exited (SystemExit): a broken plugin is named, in one line
            raise SnapevalError(f"method {name!r} (entry point {entry.value!r} of {self._plugin_group}) cannot be "
                                f"loaded: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
        seconds = time.perf_counter() - started
        if seconds > SLOW_PLUGIN_S:  # named, so a slow listing or run has its cause on screen
            import sys

            print(f"snapeval: warning: method {name!r} (entry point {entry.value!r} of {self._plugin_group}) took "
                  f"{seconds:.1f} s to load (it imports heavy packages when imported; snapeval loads a plugin only "
                  "where it is named or listed)", file=sys.stderr)
        if not isinstance(info, MethodInfo) or info.name != name:
            raise SnapevalError(f"entry point {name!r} of {self._plugin_group} must name a MethodInfo called {name!r}; "
                                f"got {info!r}")
        try:
            self.register(info)
        except ValueError as exc:
            raise SnapevalError(str(exc)) from None
        self._loaded_plugins.append(name)

    def _load_plugins(self) -> None:
        """Every plugin (a listing): one that cannot be loaded is named in one warning and skipped, so the built-ins
        and the other plugins keep working (asked for by name, it is the one-line error of :meth:`get`)."""
        import sys

        for name in list(self._discovered()):
            self.load_listed(name, stream=sys.stderr)

    def load_listed(self, name: str, stream=None) -> bool:
        """Load plugin ``name`` for a listing: False where it cannot be loaded, named in one warning on ``stream``
        and skipped (asked for by name later, it is the same one-line error)."""
        import sys

        try:
            self._load_plugin(name)
        except SnapevalError as exc:
            self._broken[name] = str(exc)
            print(f"snapeval: warning: {exc}; skipped", file=stream or sys.stderr)
            return False
        return True

    def plugin_entry_points(self) -> dict[str, Any]:
        """The installed plugins not loaded yet, by name: their entry points (none loaded by asking)."""
        return dict(self._discovered())

    def loaded_names(self) -> tuple[str, ...]:
        """The methods in the table now, in table order (snapeval's own, then the plugins loaded so far)."""
        return tuple(self._methods)

    def unregister(self, name: str) -> None:
        self._methods.pop(name, None)

    @contextmanager
    def registered(self, info: MethodInfo) -> Iterator[MethodInfo]:
        """``with METHOD_TABLE.registered(info):`` the method is in the table inside the block only (tests, plugins
        tried out)."""
        self.register(info)
        try:
            yield info
        finally:
            self.unregister(info.name)

    def register_family(self, prefix: str, resolve: Callable[[str], MethodInfo],
                        styles: Mapping[str, MethodStyle] | None = None) -> None:
        """``resolve(name)`` returns the :class:`MethodInfo` of ``prefix:...`` or raises a one-line SnapevalError;
        ``styles``: how reports draw some of the family's methods, by full name (read without resolving them)."""
        self._families[prefix] = resolve
        self._family_styles[prefix] = dict(styles or {})

    def style(self, name: str) -> MethodStyle | None:
        """How reports draw ``name``: its entry's style, or its family's, without resolving a family's method (so a
        report never imports an optional package). None: not declared."""
        if name in self._methods or name in self._discovered():
            return self.get(name).style
        prefix = name.split(":", 1)[0] if isinstance(name, str) and ":" in name else None
        return self._family_styles.get(prefix, {}).get(name)

    def is_reference(self, name: str) -> bool:
        """Whether ``name`` is the uncompressed reference every other cell of its group is paired with (a registered
        method only: a family's methods never are)."""
        if isinstance(name, str) and name in self._discovered():
            self._load_plugin(name)
        return name in self._methods and self._methods[name].reference

    def names(self) -> tuple[str, ...]:
        """The method names, in table order, installed plugins' after snapeval's own (families' names are resolved
        on demand). Loads every plugin."""
        self._load_plugins()
        return tuple(self._methods)

    def settings(self, methods=None) -> tuple[Setting, ...]:
        """The settings of ``methods`` (default: every method of the table), in table order, each name once (its
        first declaration)."""
        first: dict[str, Setting] = {}
        for name in self.names() if methods is None else methods:
            for declared in self.get(name).settings():
                first.setdefault(declared.name, declared)
        return tuple(first.values())

    def setting_names(self, methods=None) -> tuple[str, ...]:
        """The names of :meth:`settings` (``methods``: default every method of the table)."""
        return tuple(s.name for s in self.settings(methods))

    def user_keys(self, methods=None) -> tuple[str, ...]:
        """The keys a user may write for the settings of ``methods`` (default: every method of the table): each
        setting's name, then the old spellings still accepted (:meth:`~snapeval.cache.config.MethodConfig.typed`)."""
        declared = self.settings(methods)
        return tuple(dict.fromkeys([*(s.name for s in declared), *(s.stored for s in declared)]))

    def column_settings(self, methods=()) -> tuple[str, ...]:
        """The setting columns of a results table or a cell view whose cells ran ``methods``, by the key each
        setting is stored under (:attr:`~snapeval.cache.config.Setting.stored`): snapeval's own methods' settings,
        always (so the shipped tables' columns never move), then the settings of the other ``methods`` (a plugin's
        settings are columns only of the tables that ran it). A family's method adds none."""
        others = [m for m in dict.fromkeys(methods) if m not in self._builtin and isinstance(m, str) and ":" not in m
                  and m in self]
        return tuple(dict.fromkeys(s.stored for s in [*self.settings(self._builtin), *self.settings(others)]))

    def allowed(self) -> str:
        """Every method name, without loading a plugin (``--help``, error messages)."""
        families = [f"{prefix}:<Name>" for prefix in self._families]
        return ", ".join([*self._methods, *self._discovered(), *families])

    def get(self, name: Any) -> MethodInfo:
        if isinstance(name, str) and name in self._methods:
            return self._methods[name]
        if isinstance(name, str) and name in self._discovered():
            self._load_plugin(name)
            return self._methods[name]
        if isinstance(name, str) and name in self._broken:  # skipped by a listing: the same line again
            raise SnapevalError(self._broken[name])
        if isinstance(name, str) and ":" in name:
            prefix = name.split(":", 1)[0]
            if prefix in self._families:
                info = self._families[prefix](name)
                style = self._family_styles[prefix].get(name)
                return info if info.style is not None or style is None else dataclasses.replace(info, style=style)
        raise SnapevalError(f"method={name!r} is not allowed; choose one of: {self.allowed()}")

    def __contains__(self, name: str) -> bool:
        try:
            self.get(name)
        except SnapevalError:
            return False
        return True


METHOD_TABLE = MethodTable(plugin_group=METHODS_GROUP)
for _info in (
    MethodInfo("full", "snapeval.cache.config:FullConfig", "snapeval.cache.full:FullCache",
               branches=True, summary="every token (static rows written by index; a DynamicCache for log-likelihoods)",
               static_cache="snapeval.cache.full:StaticFullCache",
               style=MethodStyle("full cache", "black", "s", rank=0), reference=True),
    MethodInfo("snapstream", "snapeval.cache.config:SnapStreamConfig", "snapeval.cache.snapstream:SnapStreamCache",
               branches=True, summary="[sink | ring | top-k], fixed size, written by index",
               style=MethodStyle("snapstream", "tab:blue", "o", rank=1)),
    MethodInfo("streamingllm", "snapeval.cache.config:StreamingLLMConfig",
               "snapeval.cache.streamingllm:StreamingLLMCache", branches=True,
               summary="[sink | ring] in the same fixed layout (no pos-shift)",
               style=MethodStyle("streamingllm", "tab:orange", "v", rank=3)),
    MethodInfo("snapkv", "snapeval.cache.config:SnapKVConfig", "snapeval.cache.snapkv:SnapKVCache",
               branches=True, summary="SnapKV selection + observation window, grows during decoding",
               style=MethodStyle("snapkv", "tab:green", "^", rank=2)),
):
    METHOD_TABLE.register(_info)
METHOD_TABLE.seal_builtin()

#: How reports draw the kvpress presses of the baselines (any other press gets a spare colour per figure).
_PRESS_STYLES = {f"kvpress:{press}": MethodStyle(f"kvpress:{press}", color, marker, rank)
                 for rank, (press, color, marker) in enumerate((
                     ("SnapKVPress", "tab:olive", "D"), ("StreamingLLMPress", "tab:red", "<"),
                     ("TOVAPress", "tab:purple", ">"), ("ExpectedAttentionPress", "tab:brown", "P"),
                     ("KnormPress", "tab:pink", "X"), ("RandomPress", "tab:gray", "x"),
                     ("ObservedAttentionPress", "tab:cyan", "h")), start=4)}
METHOD_TABLE.register_family("kvpress", lambda name: load_object("snapeval.cache.kvpress:resolve_family")(name),
                             styles=_PRESS_STYLES)

#: The built-in method names (the kvpress family and installed plugins come on top).
METHODS = METHOD_TABLE.builtin_names()


def method_info(method: str | MethodConfig) -> MethodInfo:
    """The table row of a method name or of a configuration object."""
    name = method.method if isinstance(method, MethodConfig) else method
    return METHOD_TABLE.get(name)


def resolve_method(method: str, budget: int | None = None, **settings) -> MethodConfig:
    """The configuration of ``method`` at a total ``budget`` with optional settings: the one place where a name, a
    budget and settings become a validated configuration object (one-line :class:`SnapevalError` otherwise).

    ``settings``: the method's own (:meth:`MethodInfo.settings`, for example ``sink``, ``recent``, ``observation``
    for ``snapstream``), each checked against its declaration; anything else is an error naming the allowed ones.
    A family's method (``kvpress:<Press>``) takes its own arguments instead.
    """
    info = METHOD_TABLE.get(method)
    config_class = info.config_class()
    try:
        if ":" in method:  # a family's method (kvpress:<Press>): its config class reads the name and its arguments
            return config_class.from_method_name(method, budget, **settings)
        settings = config_class.typed(settings)  # an old spelling: its name, warned once (if a surface has not)
        declared = {s.name: s for s in config_class.settings()}
        unknown = sorted(set(settings) - set(declared))
        if unknown:
            names = ", ".join(declared) if declared else "none"
            raise ValueError(f"method {method!r} takes no {unknown[0]!r}; allowed settings: {names}")
        for name, value in settings.items():
            declared[name].check(value, config_class.__name__)
        return config_class.from_budget(budget, **settings)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, SnapevalError):
            raise
        raise SnapevalError(str(exc).splitlines()[0]) from None


def settings_from_text(method: str, given: Mapping[str, Any], *, warn: bool = True) -> dict[str, Any]:
    """Settings given as text (``snapeval run`` flags, lm-eval model_args) as their declared types, by their names
    (an old spelling replaced by its name, :meth:`~snapeval.cache.config.MethodConfig.typed`: warned once where
    ``warn``): each one the method declares is parsed and checked (one-line :class:`SnapevalError` naming it); the
    others are passed on unchanged, for :func:`resolve_method` to name."""
    info = METHOD_TABLE.get(method)
    declared = {s.name: s for s in info.settings()} if ":" not in method else {}
    given = info.config_class().typed(given, warn=warn)
    out = {}
    for name, value in given.items():
        try:
            out[name] = declared[name].parse(value) if name in declared else value
        except ValueError as exc:
            raise SnapevalError(str(exc)) from None
    return out


def make_cache(model, config: MethodConfig, *, decode_kernel: str = "auto"):
    """A fresh cache for one ``generate``/forward sequence: the cache class of ``config.method``, decoding with
    ``decode_kernel`` (a user's choice, as the run argument of that name: :mod:`snapeval.run_args`; a cache that grows
    as Hugging Face's ``DynamicCache`` decodes through Hugging Face's own attention and takes none). Inside a run,
    caches are built from the run's :class:`~snapeval.run_args.DecodeChoices` (:func:`build_cache`)."""
    return build_cache(model, config, decoding=DecodeChoices(decode_kernel=decode_kernel))


def build_cache(model, config: MethodConfig, cache_class=None, *, decoding: DecodeChoices | None = None, **options):
    """``cache_class(model, config, **options)`` (``cache_class``: the method's own cache class when None, or another
    layout of it, such as the engine's static rows), decoding as the run's ``decoding`` says
    (:class:`~snapeval.run_args.DecodeChoices`; None: the defaults) where the class decodes through snapeval's
    kernels (a :class:`~snapeval.cache.base.CompressedKVCache`): the one place a cache is handed its kernel, so that
    every builder passes on the run's one object."""
    from snapeval.cache.base import CompressedKVCache

    if not isinstance(config, MethodConfig):
        raise SnapevalError(f"config={config!r} is not a method configuration; build one with resolve_method()")
    cache_class = cache_class or method_info(config).cache_class()
    if issubclass(cache_class, CompressedKVCache):
        options["decode_kernel"] = (decoding or DecodeChoices()).decode_kernel
    return cache_class(model, config, **options)
