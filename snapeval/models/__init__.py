"""Models: presets (architecture facts, chat format, generation settings) and loading (preset, dir, GGUF, hub)."""
from __future__ import annotations

from snapeval.models.loading import load_model, load_tokenizer
from snapeval.models.presets import ModelPreset, get_preset, list_presets, preset_from_config

__all__ = ["ModelPreset", "get_preset", "list_presets", "load_model", "load_tokenizer", "preset_from_config"]
