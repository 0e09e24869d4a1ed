"""Where a model's parts live: one device, or decoder layers spread over several (an accelerate ``device_map``).

A model too large for one GPU (the 32B and 70B R1 distills) is loaded with ``device_map`` (``auto``, ``balanced``,
``balanced_low_0``, ``sequential`` or an explicit ``{module name: device}`` mapping): each decoder layer then runs on
its own device, and accelerate's hooks move the hidden states from layer to layer. The KV caches follow: every layer
keeps its cache on its layer's device (:func:`layer_devices`), and the token ids go to the device of the input
embeddings (:func:`input_device`). Outputs come back on the input device (accelerate's ``io_same_device``).
"""
from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any

from snapeval.errors import SnapevalError

if TYPE_CHECKING:  # torch is imported where a model is placed, not where a device string is checked
    import torch

DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
#: The devices a model can be loaded on: the CPU, a CUDA GPU (``cuda`` is the first; ``cuda:N`` by index) or
#: Apple's ``mps``.
DEVICE_RE = re.compile(r"^(cpu|mps|cuda(:(0|[1-9][0-9]*))?)$")
DEVICES_ALLOWED = "cpu, cuda, cuda:N (a GPU index), mps"


def gpu_count() -> int:
    """The CUDA GPUs this process can use. Without a GPU driver's device files there are none, and torch is not
    imported to say so (milliseconds); otherwise torch counts them."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return 0
    if not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")):
        return 0
    import torch

    return torch.cuda.device_count()


def check_device(device: Any, field_name: str = "device") -> str:
    """``device`` as a string when a model can be loaded there, else a one-line error: garbage or empty, ``meta``
    (no weights at all), or a GPU index this machine does not have. A bare ``cuda`` on a machine without a GPU is
    allowed: :func:`usable_device` falls back to the CPU as lm-eval's Hugging Face model does."""
    text = str(device).strip() if device is not None else ""
    if text == "meta":
        raise SnapevalError(f"{field_name}='meta' is invalid: a meta device holds no weights, so nothing could run; "
                            f"allowed: {DEVICES_ALLOWED}")
    if not DEVICE_RE.match(text):
        raise SnapevalError(f"{field_name}={device!r} is invalid; allowed: {DEVICES_ALLOWED}")
    if text.startswith("cuda:"):
        index, count = int(text.split(":")[1]), gpu_count()
        if index >= count:
            have = f"{count} GPU{'s' if count != 1 else ''} (cuda:0..cuda:{count - 1})" if count else "no GPU"
            raise SnapevalError(f"{field_name}={text!r} is invalid: this machine has {have}; allowed: "
                                f"{'cpu' if not count else DEVICES_ALLOWED}")
    return text


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
        if isinstance(device, str) and device != "disk" and not DEVICE_RE.match(device):
            raise SnapevalError(f"device_map[{module!r}]={device!r} is invalid; allowed: a GPU index, 'cpu', "
                                "'cuda:N', 'mps' or 'disk'")
        out[str(module)] = device
    return out


def usable_device(device: str) -> str:
    """``device`` checked (:func:`check_device`), or ``cpu`` when it is a bare ``cuda`` on a machine without a GPU
    (lm-eval's CLI defaults to cuda, and a sweep may declare GPUs it does not get: both fall back like lm-eval's
    Hugging Face model does)."""
    device = check_device(device)
    return "cpu" if device == "cuda" and not gpu_count() else device


def gpu_device_map(num_gpus: float) -> str | None:
    """The ``device_map`` a sweep model with ``resources.num_gpus`` gets when it names none: ``balanced`` over
    the GPUs it was given (Ray exposes exactly those) when it has more than one, else ``None`` (one device)."""
    return "balanced" if num_gpus > 1 else None


def _execution_device(module: torch.nn.Module) -> torch.device:
    import torch

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
    import torch

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
