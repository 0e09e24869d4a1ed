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
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from snapeval.cache.config import MethodConfig, Setting
from snapeval.errors import SnapevalError


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
        prefill_hooks: it compresses inside the prefill through hooks on the attention layers (kvpress's presses),
            so plain ``generate`` cannot apply it: its prompts go through :class:`snapeval.branching.BranchSet`.
        style: how reports draw it (None: a spare colour and marker, chosen per figure).
        reference: the uncompressed baseline: every other cell of a group is paired with its cell.
    """

    name: str
    config: str
    cache: str
    branches: bool
    summary: str
    static_cache: str = ""
    prefill_hooks: bool = False
    style: MethodStyle | None = None
    reference: bool = False

    def config_class(self) -> type[MethodConfig]:
        return load_object(self.config)

    def settings(self) -> tuple[Setting, ...]:
        """What a user may set besides the budget (declared on the configuration class)."""
        return self.config_class().settings()

    @property
    def fixed_size(self) -> bool:
        """The cache never grows while decoding (its rows have ``budget`` slots): the configuration class says."""
        return self.config_class().FIXED_SIZE

    def cache_class(self) -> type:
        return load_object(self.cache)

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


class MethodTable:
    """Methods by name, plus families (``prefix:Name``) that resolve their names on demand."""

    def __init__(self) -> None:
        self._methods: dict[str, MethodInfo] = {}
        self._families: dict[str, Callable[[str], MethodInfo]] = {}
        self._family_styles: dict[str, dict[str, MethodStyle]] = {}

    def register(self, info: MethodInfo) -> MethodInfo:
        if info.name in self._methods:
            raise ValueError(f"method {info.name!r} is already registered")
        self._methods[info.name] = info
        return info

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
        if name in self._methods:
            return self._methods[name].style
        prefix = name.split(":", 1)[0] if isinstance(name, str) and ":" in name else None
        return self._family_styles.get(prefix, {}).get(name)

    def is_reference(self, name: str) -> bool:
        """Whether ``name`` is the uncompressed reference every other cell of its group is paired with (a registered
        method only: a family's methods never are)."""
        return name in self._methods and self._methods[name].reference

    def names(self) -> tuple[str, ...]:
        """The registered method names, in table order (families' names are resolved on demand)."""
        return tuple(self._methods)

    def settings(self) -> tuple[Setting, ...]:
        """Every registered method's settings, in table order, each name once (its first declaration)."""
        first: dict[str, Setting] = {}
        for info in self._methods.values():
            for declared in info.settings():
                first.setdefault(declared.name, declared)
        return tuple(first.values())

    def setting_names(self) -> tuple[str, ...]:
        """The names of :meth:`settings`: the results table's and a cell view's setting columns, the keys
        ``regress`` matches cells on, the ``snapeval run`` flags."""
        return tuple(s.name for s in self.settings())

    def setting_help(self, name: str) -> str:
        """``--help`` of a setting: what it sets, then per method that has it its allowed values and default (methods
        that declare it alike are named together)."""
        alike: dict[tuple[str, str], list[str]] = {}
        helps = []
        for info in self._methods.values():
            for declared in info.settings():
                if declared.name == name:
                    helps.append(declared.help)
                    alike.setdefault((declared.allowed(), declared.default_text), []).append(info.name)
        parts = [f"{', '.join(methods)}: {allowed}" + (f", default {default}" if default else "")
                 for (allowed, default), methods in alike.items()]
        return f"{helps[0]} ({'; '.join(parts)})"

    def allowed(self) -> str:
        families = [f"{prefix}:<Name>" for prefix in self._families]
        return ", ".join([*self._methods, *families])

    def get(self, name: Any) -> MethodInfo:
        if isinstance(name, str) and name in self._methods:
            return self._methods[name]
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


METHOD_TABLE = MethodTable()
for _info in (
    MethodInfo("full", "snapeval.cache.config:FullConfig", "snapeval.cache.full:FullCache",
               branches=True, summary="every token (Hugging Face DynamicCache)",
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

#: How reports draw the kvpress presses of the baselines (any other press gets a spare colour per figure).
_PRESS_STYLES = {f"kvpress:{press}": MethodStyle(f"kvpress:{press}", color, marker, rank)
                 for rank, (press, color, marker) in enumerate((
                     ("SnapKVPress", "tab:olive", "D"), ("StreamingLLMPress", "tab:red", "<"),
                     ("TOVAPress", "tab:purple", ">"), ("ExpectedAttentionPress", "tab:brown", "P"),
                     ("KnormPress", "tab:pink", "X"), ("RandomPress", "tab:gray", "x"),
                     ("ObservedAttentionPress", "tab:cyan", "h")), start=4)}
METHOD_TABLE.register_family("kvpress", lambda name: load_object("snapeval.cache.kvpress:resolve_family")(name),
                             styles=_PRESS_STYLES)

#: The built-in method names (the kvpress family comes on top: ``kvpress:<Press>``).
METHODS = METHOD_TABLE.names()


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


def settings_from_text(method: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """Settings given as text (``snapeval run`` flags, lm-eval model_args) as their declared types: each one the
    method declares is parsed and checked (one-line :class:`SnapevalError` naming it); the others are passed on
    unchanged, for :func:`resolve_method` to name."""
    info = METHOD_TABLE.get(method)
    declared = {s.name: s for s in info.settings()} if ":" not in method else {}
    out = {}
    for name, value in given.items():
        try:
            out[name] = declared[name].parse(value) if name in declared else value
        except ValueError as exc:
            raise SnapevalError(str(exc)) from None
    return out


def make_cache(model, config: MethodConfig):
    """A fresh cache for one ``generate``/forward sequence: the cache class of ``config.method``."""
    if not isinstance(config, MethodConfig):
        raise SnapevalError(f"config={config!r} is not a method configuration; build one with resolve_method()")
    return method_info(config).cache_class()(model, config)
