"""Where a model's parts live: one device, or decoder layers spread over several (an accelerate ``device_map``).

A model too large for one GPU (the 32B and 70B R1 distills) is loaded with ``device_map`` (``auto``, ``balanced``,
``balanced_low_0``, ``sequential`` or an explicit ``{module name: device}`` mapping): each decoder layer then runs on
its own device, and accelerate's hooks move the hidden states from layer to layer. The KV caches follow: every layer
keeps its cache on its layer's device (:func:`layer_devices`), and the token ids go to the device of the input
embeddings (:func:`input_device`). Outputs come back on the input device (accelerate's ``io_same_device``).
"""
from __future__ import annotations

import json
from typing import Any

import torch

from snapeval.errors import SnapevalError

DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def parse_device_map(value: Any) -> str | dict[str, Any] | None:
    """A ``device_map`` from a model_arg or a YAML value: ``None``, a strategy name, a ``{module: device}`` mapping,
    or that mapping as a JSON object string (``device_map='{"model.layers.0": 0, ...}'``)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = value.strip()
        if text in DEVICE_MAP_STRATEGIES:
            return text
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except ValueError:
                raise SnapevalError(f"device_map={value!r} is not a valid JSON object; allowed: "
                                    f"{', '.join(DEVICE_MAP_STRATEGIES)} or a {{module: device}} mapping") from None
        else:
            raise SnapevalError(f"device_map={value!r} is invalid; allowed: {', '.join(DEVICE_MAP_STRATEGIES)} "
                                "or a {module: device} mapping")
    if not isinstance(value, dict) or not value:
        raise SnapevalError(f"device_map={value!r} is invalid; allowed: {', '.join(DEVICE_MAP_STRATEGIES)} "
                            "or a non-empty {module: device} mapping")
    out = {}
    for module, device in value.items():
        if isinstance(device, bool) or not isinstance(device, (int, str)):
            raise SnapevalError(f"device_map[{module!r}]={device!r} is invalid; allowed: a GPU index, 'cpu', "
                                "'cuda:N', 'mps' or 'disk'")
        if isinstance(device, str) and device != "disk":
            try:
                torch.device(device)
            except (RuntimeError, ValueError):
                raise SnapevalError(f"device_map[{module!r}]={device!r} is invalid; allowed: a GPU index, 'cpu', "
                                    "'cuda:N', 'mps' or 'disk'") from None
        out[str(module)] = device
    return out


def usable_device(device: str) -> str:
    """``device``, or ``cpu`` when it names CUDA on a machine without a GPU (lm-eval's CLI defaults to cuda, and a
    sweep may declare GPUs it does not get: both fall back like lm-eval's Hugging Face model does)."""
    return "cpu" if str(device).startswith("cuda") and not torch.cuda.is_available() else device


def gpu_device_map(num_gpus: float) -> str | None:
    """The ``device_map`` a sweep model with ``resources.num_gpus`` gets when it names none: ``balanced`` over
    the GPUs it was given (Ray exposes exactly those) when it has more than one, else ``None`` (one device)."""
    return "balanced" if num_gpus > 1 else None


def _execution_device(module: torch.nn.Module) -> torch.device:
    hook = getattr(module, "_hf_hook", None)
    device = getattr(hook, "execution_device", None)
    if device is not None:  # an offloaded module runs on its hook's execution device, its weights are elsewhere
        return torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    for parameter in module.parameters():
        return parameter.device
    for buffer in module.buffers():
        return buffer.device
    return torch.device("cpu")


def decoder_layers(model) -> list[torch.nn.Module]:
    """The decoder layers, in order (the ``ModuleList`` with ``config.num_hidden_layers`` entries)."""
    wanted = model.config.num_hidden_layers
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == wanted and name.endswith("layers"):
            return list(module)
    raise SnapevalError(f"cannot find the {wanted} decoder layers of {type(model).__name__}")


def layer_devices(model) -> list[torch.device]:
    """``[num_hidden_layers]`` the device each decoder layer computes on: where its KV cache must live."""
    return [_execution_device(layer) for layer in decoder_layers(model)]


def input_device(model) -> torch.device:
    """Where token ids (and position ids) go: the device of the input embeddings."""
    return _execution_device(model.get_input_embeddings())


def is_split(model) -> bool:
    """Whether the model's layers live on more than one device."""
    return len(set(layer_devices(model))) > 1
