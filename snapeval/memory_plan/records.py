"""What a plan says: each configuration's decode and bytes (:class:`ConfigurationPlan`), a candidate's decode
(:class:`Decoding`), the group's (:class:`GroupPlan`), and an item's lengths (:class:`Item`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from snapeval.memory_plan.units import gib

#: The routes a configuration's decode takes through a chunk, a closed set: the plan decides one per configuration
#: (:func:`~snapeval.memory_plan.chunk.configuration_plans`, the one place), :class:`~snapeval.branching.BranchSet`
#: runs it, and the chunk's bytes (:func:`~snapeval.memory_plan.chunk.phases`) and the projection's time schedule
#: read it. Held branches wait on the device or, where the plan says (``GroupPlan.branches_on_host``), in host memory.
OWN_PREFILL = "own_prefill"  #: prefills itself (a method that cannot branch), then decodes alone in the eager loop
BRANCH_LOOP = "branch_loop"  #: branched from the shared prefill, decodes the item alone in the eager loop
ONE_ROW_ENGINE = "one_row_engine"  #: branched into the row of a captured engine of one row, decoded there alone
ENGINE_ROWS = "engine_rows"  #: branched and held; the chunk's items decode in the rows of its own engine
SHARED_STEP_ROWS = "shared_step_rows"  #: branched and held; decoded in its segment of one engine, one shared step
ROUTES = (OWN_PREFILL, BRANCH_LOOP, ONE_ROW_ENGINE, ENGINE_ROWS, SHARED_STEP_ROWS)
IN_ROWS = (ENGINE_ROWS, SHARED_STEP_ROWS)


@dataclass(frozen=True)
class ConfigurationPlan:
    """How one configuration of the group decodes and what it holds.

    Attributes:
        label: the configuration (``snapstream@1024``).
        decode: ``"rows"`` (the chunk's items together in static engine rows) or ``"alone"`` (item by item, right
            after each item's prefill: from the capture, or from its own prefill for a method that cannot branch).
        rows: decode rows (the engine's slots; 1 alone).
        branch_bytes: one item's held branch (rows only; 0 alone).
        decode_bytes: the engine's rows, or the cache decoded alone at its largest.
        route: which of :data:`ROUTES` it takes (default: an engine of its own in rows, the eager loop alone).
    """

    label: str
    decode: str
    rows: int
    branch_bytes: int
    decode_bytes: int
    route: str = ""

    def __post_init__(self) -> None:
        if not self.route:
            object.__setattr__(self, "route", ENGINE_ROWS if self.decode == "rows" else BRANCH_LOOP)
        if self.route not in ROUTES or (self.route in IN_ROWS) != (self.decode == "rows"):
            raise ValueError(f"ConfigurationPlan.route={self.route!r} is invalid for decode={self.decode!r}; "
                             f"allowed: {', '.join(r for r in ROUTES if (r in IN_ROWS) == (self.decode == 'rows'))}")

    def to_dict(self) -> dict:
        """The provenance's record, without the route: a cell's provenance keeps the keys of the committed cells (the
        route follows there from ``decode`` and the plan's ``alone_captured`` and ``shared_step``)."""
        out = asdict(self)
        del out["route"]
        return out


@dataclass(frozen=True)
class Decoding:
    """A candidate plan's decode, before the bytes of its phases are counted: what
    :func:`~snapeval.memory_plan.cost.bytes_per_token` reads of a plan (the fields are :class:`GroupPlan`'s), so that
    the search (:mod:`snapeval.memory_plan.search`) prices a candidate without building it."""

    device: str
    chunk: int
    max_new_tokens: int
    configurations: tuple[ConfigurationPlan, ...]
    branches_on_host: bool = False
    shared_step: bool = False
    alone_captured: bool = False


@dataclass(frozen=True)
class GroupPlan:
    """A shared group's memory plan (bytes; ``peak_bytes`` is above what was in use when the group started).

    Attributes:
        device: where the group's tensors live.
        budget_bytes: the device's budget for everything (weights included); None: unbounded.
        in_use_bytes: what was in use when the group started (weights included).
        weights_bytes: the model's parameters and buffers.
        chunk: items in flight (held branches, engine rows).
        prefill_tokens: tokens per prefill forward (the longest prompt when the prompt is prefilled at once).
        capture_on_host: the capture lives in host memory and is streamed back layer by layer.
        prompt_tokens, max_new_tokens: the largest item the plan is sized for.
        capture_bytes, activation_bytes, window_bytes: one item's capture, its prefill's activations, one layer's
            window attention while computed.
        configurations: each configuration's decode mode and bytes.
        phases: the group's growth at the top of each phase (prefill, branch, alone, decode).
        peak_bytes: the largest phase.
        reasons: why the chunk or the prefill was cut (empty when the asked-for chunk fits).
        alone_captured: a configuration decoded alone does so in a captured engine of one row (its branch built into
            the row: :func:`captures_alone`); False: in the eager loop, growing its own cache.
        branches_on_host: the chunk's held branches wait in host memory (each layer moved there once built, copied
            back into an engine row on admission); the device holds none of them.
        host_budget_bytes, host_in_use_bytes: the host's budget for the group (in use included; None: not
            considered) and what the process held there when the group started.
        shared_step: the configurations decoded in rows share one engine (:func:`~snapeval.engine.segmented.
            segmented_engine`): one step decodes every one of their rows, each in its own segment, the weights read
            once for all of them; each has ``rows`` rows and the engines' rows are held together.
    """

    device: str
    budget_bytes: int | None
    in_use_bytes: int
    weights_bytes: int
    chunk: int
    prefill_tokens: int
    capture_on_host: bool
    prompt_tokens: int
    max_new_tokens: int
    capture_bytes: int
    activation_bytes: int
    window_bytes: int
    configurations: tuple[ConfigurationPlan, ...]
    phases: dict[str, int] = field(default_factory=dict)
    peak_bytes: int = 0
    reasons: tuple[str, ...] = ()
    alone_captured: bool = False
    branches_on_host: bool = False
    host_budget_bytes: int | None = None
    host_in_use_bytes: int = 0
    shared_step: bool = False

    @property
    def total_bytes(self) -> int:
        """What the device holds at the group's peak: in use at the start plus the group's own peak."""
        return self.in_use_bytes + self.peak_bytes

    @property
    def fits(self) -> bool:
        return (self.budget_bytes is None or self.total_bytes <= self.budget_bytes) and self.fits_host

    @property
    def host_bytes(self) -> int:
        """What the held branches take in host memory (0 when they stay on the device)."""
        return self.held_bytes if self.branches_on_host else 0

    @property
    def fits_host(self) -> bool:
        return (not self.branches_on_host or self.host_budget_bytes is None
                or self.host_in_use_bytes + self.host_bytes <= self.host_budget_bytes)

    def decode_mode(self, label: str) -> ConfigurationPlan:
        return next(c for c in self.configurations if c.label == label)

    def routes(self) -> dict[str, str]:
        """Each configuration's route through a chunk under this plan (:data:`ROUTES`)."""
        return {c.label: c.route for c in self.configurations}

    @property
    def held_bytes(self) -> int:
        """Every configuration's branches of a full chunk, held until its rows decode."""
        return self.chunk * sum(c.branch_bytes for c in self.configurations)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["configurations"] = [c.to_dict() for c in self.configurations]
        out["total_bytes"] = self.total_bytes
        out["fits"] = self.fits
        out["total_gib"] = gib(self.total_bytes)
        out["peak_gib"] = gib(self.peak_bytes)
        out["budget_gib"] = None if self.budget_bytes is None else gib(self.budget_bytes)
        out["host_bytes"] = self.host_bytes
        return out

    def chunk_summary(self, items: Sequence[int]) -> dict:
        """What one chunk of ``items`` (indices) ran with under this plan, for the provenance: its items, the largest
        prompt the plan is sized for, each configuration's rows (0: decoded alone), where the branches waited."""
        return {"items": list(items), "prompt_tokens": self.prompt_tokens, "chunk": self.chunk,
                "rows": {c.label: c.rows if c.decode == "rows" else 0 for c in self.configurations},
                "branches_on_host": self.branches_on_host, "peak_gib": gib(self.peak_bytes)}

    def render(self) -> str:
        """A few lines for people: the chunk, where the memory goes, and whether it fits."""
        budget = "unbounded" if self.budget_bytes is None else f"{gib(self.budget_bytes)} GiB"
        alone = [c.label for c in self.configurations if c.decode == "alone"]
        lines = [f"memory plan on {self.device}: chunk {self.chunk}, prefill {self.prefill_tokens} tokens per forward"
                 f"{', capture in host memory' if self.capture_on_host else ''}; peak {gib(self.total_bytes)} GiB "
                 f"of {budget} ({'fits' if self.fits else 'does NOT fit'})",
                 f"  weights {gib(self.weights_bytes)} GiB, capture {gib(self.capture_bytes)} GiB, activations "
                 f"{gib(self.activation_bytes)} GiB, held branches {gib(self.held_bytes)} GiB per chunk"
                 + (" in host memory" if self.branches_on_host else ""),
                 "  phases: " + ", ".join(f"{k} {gib(v)} GiB" for k, v in self.phases.items())]
        if alone:
            lines.append(f"  decoded alone from the capture: {', '.join(alone)}")
        if self.shared_step:
            lines.append("  one decode step for every configuration decoded in rows")
        lines += [f"  {r}" for r in self.reasons]
        return "\n".join(lines)


@dataclass(frozen=True)
class Item:
    """One item's lengths: ``prompt`` tokens (and a shared ``prefix`` held while its suffixes run), up to
    ``max_new`` generated tokens."""

    prompt: int
    max_new: int
    prefix: int = 0
