"""Hardware specs as data: ``hardware/*.yaml`` ships SN40L (1, 8, 16 sockets), H100, H200 and DGX H100; users add
their own with a YAML or JSON file of the same shape (``snapeval simulate --hardware-file my.yaml``), or install a
package that names one through the ``snapeval.hardware`` entry point group (then ``--hardware <name>`` and a sweep's
``simulate: {hardware: <name>}`` find it)."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

from snapeval.errors import SnapevalError, is_int

HARDWARE_DIR = Path(__file__).resolve().parent / "hardware"
KINDS = ("rdu", "gpu")


def _positive(owner: str, field: str, value: Any, *, allow_zero: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SnapevalError(f"{owner}: {field}={value!r} must be a number") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise SnapevalError(f"{owner}: {field}={value!r} must be {'>= 0' if allow_zero else '> 0'}")
    return number


def _number(value: Any) -> Any:
    """YAML 1.1 reads ``64.0e9`` (no exponent sign) as a string: accept it as a number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


@dataclass(frozen=True)
class SocketSpec:
    """One accelerator socket (an RDU or a GPU). Bytes and bytes/s, FLOP/s (BF16 dense).

    ``compute_units``: the independent compute units that share the socket's work (SN40L: 1040 PCUs; H100: 132
    SMs); 0 = not given. With ``sram_bandwidth`` (aggregate on-chip bandwidth) it sets how decode attention spreads
    one sequence over the units and what merging their partial results costs, and with ``sram_bytes`` (on-chip
    memory; a unit's share must hold its query rows and their partial results) which tilings fit
    (docs/simulator.md). ``sram_bytes`` is never KV-cache capacity.
    """

    peak_flops: float
    hbm_bytes: float
    hbm_bandwidth: float
    sram_bytes: float = 0.0
    sram_bandwidth: float | None = None
    ddr_bytes: float = 0.0
    ddr_bandwidth: float = 0.0
    compute_units: int = 0

    def validate(self, owner: str) -> None:
        for f in ("peak_flops", "hbm_bytes", "hbm_bandwidth"):
            _positive(owner, f"socket.{f}", getattr(self, f))
        for f in ("sram_bytes", "ddr_bytes", "ddr_bandwidth"):
            _positive(owner, f"socket.{f}", getattr(self, f), allow_zero=True)
        if self.sram_bandwidth is not None:
            _positive(owner, "socket.sram_bandwidth", self.sram_bandwidth)
        if not is_int(self.compute_units) or self.compute_units < 0:
            raise SnapevalError(f"{owner}: socket.compute_units={self.compute_units!r} must be an integer >= 0")
        if self.ddr_bytes > 0 and self.ddr_bandwidth <= 0:
            raise SnapevalError(f"{owner}: socket.ddr_bandwidth must be > 0 when ddr_bytes > 0")


@dataclass(frozen=True)
class Assumptions:
    """Named model parameters (see docs/simulator.md for the source of each default).

    - ``bandwidth_efficiency``: achieved fraction of peak HBM bandwidth while a kernel streams.
    - ``gemm_efficiency`` / ``prefill_attention_efficiency`` / ``decode_attention_efficiency``: achieved fraction of
      peak FLOP/s for GEMMs, prefill attention and decode attention.
    - ``kernel_call_sync_s``: fixed cost of one kernel call boundary (launch, barrier), decode and prefill alike
      (a cache method's small compression kernels included).
    - ``call_fill_drain_fraction``: without kernel looping, a layer call cannot prefetch its weights before it
      starts and drains its pipeline before it returns; this adds this fraction of the call's streaming time.
    - ``decode_step_fixed_s``: a fixed cost per decode step, whatever its bytes: on a GPU whose step is captured in
      CUDA graphs (what snapeval's sweep runs), the graph's launch, the logits' last kernels, sampling and the host
      reading the new tokens.
    - ``cross_socket_sync_s``: extra barrier cost per call boundary when more than one socket runs the call.
    - ``collective_latency_s``: fixed latency of one cross-socket collective in decode (two per layer);
      ``link_hop_latency_s``: latency added per link traversal; a collective over S sockets makes 2 (S - 1)
      traversals (ring all-reduce), so the collective term grows with the socket count.
    - ``assumed_link_bandwidth``: bytes/s one socket moves through its links (per direction) in prefill's
      collectives, used when the hardware's ``link_bandwidth`` is not published (SN40L); 0 = collectives free.
    - ``kernels_per_layer_dense`` / ``kernels_per_layer_mla_moe``: kernel calls per decoder layer.
    - ``compiled_context``: context the static graphs are compiled for, which sizes the memory planned at compile
      time (prefill workspace, prefill KV slot); 0 = memory planned for the actual prompt (dynamic allocation).
    - ``prefill_holds_prompt_kv``: the prefill holds the whole prompt's KV beside the decode rows until it is
      compressed (a static graph's prefill slot); false = one layer's at a time (snapeval's engine on a GPU: each
      layer compresses right after its attention, and the full cache prefills into its own row).
    - ``batch_granularity``: the batches a deployment of this hardware runs when the deployment says ``auto``:
      ``pow2`` (static graphs compiled per power-of-two batch) or ``any`` (snapeval's engine on a GPU).
    """

    bandwidth_efficiency: float = 0.9
    gemm_efficiency: float = 0.6
    prefill_attention_efficiency: float = 0.5
    decode_attention_efficiency: float = 0.5
    kernel_call_sync_s: float = 10e-6
    call_fill_drain_fraction: float = 0.0
    decode_step_fixed_s: float = 0.0
    cross_socket_sync_s: float = 0.0
    collective_latency_s: float = 0.0
    link_hop_latency_s: float = 0.0
    assumed_link_bandwidth: float = 0.0
    kernels_per_layer_dense: int = 10
    kernels_per_layer_mla_moe: int = 14
    supports_kernel_looping: bool = False
    compiled_context: int = 0
    prefill_holds_prompt_kv: bool = True
    batch_granularity: str = "pow2"

    def validate(self, owner: str) -> None:
        for f in ("bandwidth_efficiency", "gemm_efficiency", "prefill_attention_efficiency",
                  "decode_attention_efficiency"):
            value = _positive(owner, f"assumptions.{f}", getattr(self, f))
            if value > 1:
                raise SnapevalError(f"{owner}: assumptions.{f}={value} must be in (0, 1]")
        for f in ("kernel_call_sync_s", "call_fill_drain_fraction", "decode_step_fixed_s", "cross_socket_sync_s",
                  "collective_latency_s",
                  "link_hop_latency_s", "assumed_link_bandwidth"):
            _positive(owner, f"assumptions.{f}", getattr(self, f), allow_zero=True)
        if self.batch_granularity not in ("pow2", "any"):
            raise SnapevalError(f"{owner}: assumptions.batch_granularity={self.batch_granularity!r} is invalid; "
                                "allowed: pow2, any")
        if not isinstance(self.prefill_holds_prompt_kv, bool):
            raise SnapevalError(f"{owner}: assumptions.prefill_holds_prompt_kv={self.prefill_holds_prompt_kv!r} "
                                "must be true or false")
        if not is_int(self.compiled_context) \
                or self.compiled_context < 0:
            raise SnapevalError(f"{owner}: assumptions.compiled_context={self.compiled_context!r} must be an "
                                "integer >= 0")
        for f in ("kernels_per_layer_dense", "kernels_per_layer_mla_moe"):
            value = getattr(self, f)
            if not isinstance(value, int) or value < 1:
                raise SnapevalError(f"{owner}: assumptions.{f}={value!r} must be an integer >= 1")


@dataclass(frozen=True)
class HardwareSpec:
    """A system of ``sockets`` identical sockets."""

    name: str
    kind: str
    sockets: int
    socket: SocketSpec
    assumptions: Assumptions
    description: str = ""
    link_bandwidth: float | None = None

    def __post_init__(self) -> None:
        owner = f"hardware {self.name!r}"
        if self.kind not in KINDS:
            raise SnapevalError(f"{owner}: kind={self.kind!r} is not allowed; choose one of: {', '.join(KINDS)}")
        if not is_int(self.sockets) or self.sockets < 1:
            raise SnapevalError(f"{owner}: sockets={self.sockets!r} must be an integer >= 1")
        self.socket.validate(owner)
        self.assumptions.validate(owner)

    def changed(self, socket: Mapping[str, Any] | None = None, **assumptions: Any) -> "HardwareSpec":
        """A copy with some ``assumptions`` (and ``socket`` fields) changed, validated again: what a sensitivity
        study or a what-if varies (``get_hardware("sn40l-16").changed(kernel_call_sync_s=0.0)``)."""
        spec = self
        if assumptions:
            spec = replace(spec, assumptions=replace(spec.assumptions, **assumptions))
        if socket:
            spec = replace(spec, socket=replace(spec.socket, **socket))
        return spec

    @property
    def total_hbm_bytes(self) -> float:
        return self.socket.hbm_bytes * self.sockets

    @property
    def total_hbm_bandwidth(self) -> float:
        return self.socket.hbm_bandwidth * self.sockets

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _reject_unknown_keys(origin: str, where: str, raw: Mapping[str, Any], cls) -> None:
    allowed = {f.name for f in fields(cls)}
    bad = sorted(set(raw) - allowed)
    if bad:
        raise SnapevalError(f"{origin}: unknown {where}key(s) {', '.join(bad)}; allowed: {', '.join(sorted(allowed))}")


def hardware_from_dict(data: Mapping[str, Any], origin: str = "hardware spec") -> HardwareSpec:
    """Build a :class:`HardwareSpec` from the YAML/JSON structure (unknown keys are errors, not ignored)."""
    if not isinstance(data, Mapping):
        raise SnapevalError(f"{origin}: expected a mapping with name, kind, sockets, socket, assumptions")
    _reject_unknown_keys(origin, "", data, HardwareSpec)
    for key in ("name", "kind", "socket"):
        if key not in data:
            raise SnapevalError(f"{origin}: missing key {key!r}")

    def section(cls, key: str):
        raw = data.get(key) or {}
        if not isinstance(raw, Mapping):
            raise SnapevalError(f"{origin}: {key} must be a mapping")
        _reject_unknown_keys(origin, f"{key} ", raw, cls)
        types = {f.name: str(f.type) for f in fields(cls)}
        raw = {k: _number(v) if types[k].startswith("float") else v for k, v in raw.items()}
        try:
            return cls(**raw)
        except TypeError as exc:
            raise SnapevalError(f"{origin}: {key}: {exc}") from None

    socket = section(SocketSpec, "socket")
    assumptions = section(Assumptions, "assumptions")
    return HardwareSpec(name=str(data["name"]), kind=str(data["kind"]), sockets=data.get("sockets", 1),
                        socket=socket, assumptions=assumptions, description=str(data.get("description", "")),
                        link_bandwidth=_number(data.get("link_bandwidth")))


def load_hardware_file(path: str | Path) -> HardwareSpec:
    """Read a user hardware spec (YAML or JSON, same shape as ``snapeval/simulator/hardware/sn40l.yaml``)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise SnapevalError(f"hardware file {str(path)!r} not found")
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise SnapevalError(f"hardware file {str(path)!r} is not valid YAML/JSON: {str(exc).splitlines()[0]}") from None
    return hardware_from_dict(data, origin=f"hardware file {str(path)!r}")


_CACHE: dict[str, HardwareSpec] = {}


#: The entry-point group of hardware targets added by installed packages: each names the path of a spec file
#: (YAML or JSON, the shape of ``hardware/*.yaml``), a mapping of that shape or a :class:`HardwareSpec`.
HARDWARE_GROUP = "snapeval.hardware"


def hardware_plugins() -> dict[str, Any]:
    """The hardware entry points of installed packages, by name (lower case), not loaded. One named as a shipped
    target (``h200``) is left out with a one-line warning naming both packages: the shipped spec is used."""
    from importlib.metadata import entry_points

    from snapeval.errors import warn_shadowed_plugin

    shipped = {p.stem for p in HARDWARE_DIR.glob("*.yaml")}
    found = {}
    for ep in sorted(entry_points(group=HARDWARE_GROUP), key=lambda ep: ep.name):
        if ep.name.lower() in shipped:
            warn_shadowed_plugin("hardware target", ep.name.lower(), ep)
        else:
            found[ep.name.lower()] = ep
    return found


def list_hardware() -> list[str]:
    """Names of the hardware specs: the shipped ones (``hardware/*.yaml``) and those installed packages add
    (:data:`HARDWARE_GROUP`)."""
    return sorted({p.stem for p in HARDWARE_DIR.glob("*.yaml")} | set(hardware_plugins()))


def _plugin_hardware(name: str, entry) -> HardwareSpec:
    """The spec an installed package's entry point names (a file path, a mapping or a :class:`HardwareSpec`)."""
    try:
        loaded = entry.load()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # raised or exited (SystemExit): named in one line
        why = str(exc).splitlines()[0] if str(exc) else ""
        raise SnapevalError(f"hardware {name!r} (entry point {entry.value!r} of {HARDWARE_GROUP}) cannot be loaded: "
                            f"{type(exc).__name__}: {why}") from None
    if isinstance(loaded, HardwareSpec):
        return loaded
    if isinstance(loaded, Mapping):
        return hardware_from_dict(loaded, origin=f"hardware {name!r} ({entry.value})")
    if isinstance(loaded, (str, Path)):
        return load_hardware_file(loaded)
    raise SnapevalError(f"entry point {name!r} of {HARDWARE_GROUP} ({entry.value}) must name a spec file path, a "
                        f"mapping or a HardwareSpec; got {type(loaded).__name__}")


def get_hardware(name: str | HardwareSpec) -> HardwareSpec:
    """A spec by name (:func:`list_hardware`: the shipped files, then installed packages' entry points)."""
    if isinstance(name, HardwareSpec):
        return name
    key = str(name).strip().lower()
    if key not in _CACHE:
        path = HARDWARE_DIR / f"{key}.yaml"
        plugins = {} if path.is_file() else hardware_plugins()
        if not path.is_file() and key not in plugins:
            raise SnapevalError(f"hardware={name!r} is not known; choose one of: {', '.join(list_hardware())} "
                                "(or give --hardware-file)")
        _CACHE[key] = load_hardware_file(path) if path.is_file() else _plugin_hardware(key, plugins[key])
    return _CACHE[key]
