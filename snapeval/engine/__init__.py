"""Continuous-batching generation over static rows (see :mod:`snapeval.engine.engine`); what goes in and comes out
(:class:`SamplingParams`, :class:`Completion`) is :mod:`snapeval.decoding`'s, shared by every generation path."""
from snapeval.decoding import FINISH_REASONS, Completion, SamplingParams
from snapeval.engine.engine import ENGINE_METHODS, Engine, EngineStats

__all__ = ["ENGINE_METHODS", "FINISH_REASONS", "Completion", "Engine", "EngineStats", "SamplingParams"]
