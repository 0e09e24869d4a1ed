"""The deployment decision: is a compressed cell non-inferior to the full cache within a margin?

"Not significantly different" is absence of evidence; a deployer needs the opposite question answered: is the drop
*smaller than a margin* they accept? That is a non-inferiority test (ICH E9 / E10; CONSORT extension for
non-inferiority trials, Piaggio et al., JAMA 308:2594-2604, 2012): H0 "drop >= margin" against H1 "drop < margin",
one-sided at ``alpha``, equivalently "the one-sided ``1 - alpha`` upper confidence bound of the drop is below the
margin". :class:`DecisionRule` holds the margin and alpha (sweep YAML ``decision: {margin: 0.02, alpha: 0.05}``,
``--margin`` / ``--alpha`` on ``snapeval report`` and ``snapeval regress``); the tests themselves are in
:mod:`snapeval.stats.paired`, and the smallest non-inferior budget of a method is found by
:func:`snapeval.stats.multiplicity.fixed_sequence`.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from snapeval.errors import SnapevalError

#: Default margin: a drop of 2 accuracy points (0.02 in the metric's units) is what a deployer accepts.
DEFAULT_MARGIN = 0.02
#: Default level of every test (two-sided differences, one-sided non-inferiority and regression checks).
DEFAULT_ALPHA = 0.05
KEYS = ("margin", "alpha")


@dataclass(frozen=True)
class DecisionRule:
    """``margin``: the largest drop (in the headline metric's units; 0.02 = 2 accuracy points) still counted as
    non-inferior, in [0, 1). ``alpha``: the level of every test, in (0, 0.5)."""

    margin: float = DEFAULT_MARGIN
    alpha: float = DEFAULT_ALPHA

    def __post_init__(self):
        for name, value, low, high, allowed in (("margin", self.margin, 0.0, 1.0, "a number in [0, 1), e.g. 0.02"),
                                                ("alpha", self.alpha, 0.0, 0.5, "a number in (0, 0.5), e.g. 0.05")):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not ok or not (low <= value < high if name == "margin" else low < value < high):
                raise SnapevalError(f"decision.{name}={value!r} is invalid; allowed: {allowed}")
        object.__setattr__(self, "margin", float(self.margin))
        object.__setattr__(self, "alpha", float(self.alpha))

    @property
    def confidence(self) -> float:
        """Level of the two-sided intervals shown with the decision: ``1 - 2 alpha`` (0.90 at alpha = 0.05), so that
        an interval's lower end is the one-sided ``1 - alpha`` bound the non-inferiority test uses."""
        return 1 - 2 * self.alpha

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_mapping(cls, raw: Any, where: str = "decision") -> "DecisionRule":
        """From a mapping such as the sweep YAML's or the manifest's ``decision`` (missing keys: the defaults)."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise SnapevalError(f"{where}: expected a mapping with keys {', '.join(KEYS)}; got {type(raw).__name__}")
        unknown = sorted(set(raw) - set(KEYS), key=str)
        if unknown:
            raise SnapevalError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(KEYS)}")
        try:
            return cls(**raw)
        except SnapevalError as exc:
            raise SnapevalError(f"{where}.{str(exc).removeprefix('decision.')}") from None

    def with_overrides(self, margin: float | None = None, alpha: float | None = None) -> "DecisionRule":
        """This rule with the given fields replaced (the CLI flags over the sweep's own rule)."""
        return DecisionRule(self.margin if margin is None else margin, self.alpha if alpha is None else alpha)
