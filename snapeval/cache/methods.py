"""The one table of methods: every name the CLI, the sweep, the lm-eval model and the engine accept.

Each entry names its configuration class and its cache class as lazy ``"module:Class"`` strings (as lm-eval's
registry does), so the table can be read without importing torch. A method is resolved exactly once, by
:func:`resolve_method`, into a configuration object (:mod:`snapeval.cache.config`); everything downstream receives
that object and asks it (``config.method``, ``config.budget``) or this table (:func:`method_info`), never a string
literal.

Other families of methods register here too (``kvpress:<Press>``, see :mod:`snapeval.cache.kvpress` when kvpress is
installed): a family is a prefix whose names are resolved by a function of the family.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from snapeval.cache.config import MethodConfig
from snapeval.errors import SnapevalError


def load_object(path: str):
    """Import ``"module:Attribute"``."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


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
    """

    name: str
    config: str
    cache: str
    branches: bool
    summary: str
    static_cache: str = ""
    prefill_hooks: bool = False

    def config_class(self) -> type[MethodConfig]:
        return load_object(self.config)

    @property
    def fixed_size(self) -> bool:
        """The cache never grows while decoding (its rows have ``budget`` slots): the configuration class says."""
        return self.config_class().FIXED_SIZE

    def cache_class(self) -> type:
        return load_object(self.cache)

    def static_cache_class(self) -> type:
        """The cache class the engine allocates static rows of (a :class:`~snapeval.cache.base.CompressedKVCache`)."""
        return load_object(self.static_cache or self.cache)


class MethodTable:
    """Methods by name, plus families (``prefix:Name``) that resolve their names on demand."""

    def __init__(self) -> None:
        self._methods: dict[str, MethodInfo] = {}
        self._families: dict[str, Callable[[str], MethodInfo]] = {}

    def register(self, info: MethodInfo) -> MethodInfo:
        if info.name in self._methods:
            raise ValueError(f"method {info.name!r} is already registered")
        self._methods[info.name] = info
        return info

    def register_family(self, prefix: str, resolve: Callable[[str], MethodInfo]) -> None:
        """``resolve(name)`` returns the :class:`MethodInfo` of ``prefix:...`` or raises a one-line SnapevalError."""
        self._families[prefix] = resolve

    def names(self) -> tuple[str, ...]:
        """The built-in method names, in table order."""
        return tuple(self._methods)

    def allowed(self) -> str:
        families = [f"{prefix}:<Name>" for prefix in self._families]
        return ", ".join([*self._methods, *families])

    def get(self, name: Any) -> MethodInfo:
        if isinstance(name, str) and name in self._methods:
            return self._methods[name]
        if isinstance(name, str) and ":" in name:
            prefix = name.split(":", 1)[0]
            if prefix in self._families:
                return self._families[prefix](name)
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
               static_cache="snapeval.cache.full:StaticFullCache"),
    MethodInfo("snapstream", "snapeval.cache.config:SnapStreamConfig", "snapeval.cache.snapstream:SnapStreamCache",
               branches=True, summary="[sink | ring | top-k], fixed size, written by index"),
    MethodInfo("streamingllm", "snapeval.cache.config:StreamingLLMConfig",
               "snapeval.cache.streamingllm:StreamingLLMCache", branches=True,
               summary="[sink | ring] in the same fixed layout (no pos-shift)"),
    MethodInfo("snapkv", "snapeval.cache.config:SnapKVConfig", "snapeval.cache.snapkv:SnapKVCache",
               branches=True, summary="SnapKV selection + observation window, grows during decoding"),
):
    METHOD_TABLE.register(_info)

METHOD_TABLE.register_family("kvpress", lambda name: load_object("snapeval.cache.kvpress:resolve_family")(name))

#: The built-in method names (the kvpress family comes on top: ``kvpress:<Press>``).
METHODS = METHOD_TABLE.names()


def method_info(method: str | MethodConfig) -> MethodInfo:
    """The table row of a method name or of a configuration object."""
    name = method.method if isinstance(method, MethodConfig) else method
    return METHOD_TABLE.get(name)


def resolve_method(method: str, budget: int | None = None, **split) -> MethodConfig:
    """The configuration of ``method`` at a total ``budget`` with optional split fields: the one place where a name,
    a budget and a split become a validated configuration object (one-line :class:`SnapevalError` otherwise).

    ``split``: the fields :attr:`MethodConfig.SPLIT_FIELDS` of that method allows (for example ``sink``,
    ``recent``, ``observation`` for ``snapstream``); anything else is an error naming the allowed fields.
    """
    info = METHOD_TABLE.get(method)
    config_class = info.config_class()
    try:
        if ":" in method:  # a family's method (kvpress:<Press>): its config class reads the name and its arguments
            return config_class.from_method_name(method, budget, **split)
        allowed = config_class.SPLIT_FIELDS
        unknown = sorted(set(split) - set(allowed))
        if unknown:
            names = ", ".join(allowed) if allowed else "none"
            raise ValueError(f"method {method!r} takes no {unknown[0]!r}; allowed split fields: {names}")
        return config_class.from_budget(budget, **split)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, SnapevalError):
            raise
        raise SnapevalError(str(exc).splitlines()[0]) from None


def make_cache(model, config: MethodConfig):
    """A fresh cache for one ``generate``/forward sequence: the cache class of ``config.method``."""
    if not isinstance(config, MethodConfig):
        raise SnapevalError(f"config={config!r} is not a method configuration; build one with resolve_method()")
    return method_info(config).cache_class()(model, config)
