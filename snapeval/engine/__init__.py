"""Continuous-batching generation over static SnapStream slots (see :mod:`snapeval.engine.engine`)."""
from snapeval.engine.engine import ENGINE_METHODS, Engine
from snapeval.engine.requests import FINISH_REASONS, Completion, EngineStats, SamplingParams

__all__ = ["ENGINE_METHODS", "FINISH_REASONS", "Completion", "Engine", "EngineStats", "SamplingParams"]
