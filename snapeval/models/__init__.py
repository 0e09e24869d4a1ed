"""Model presets (architecture facts, chat format, generation settings) and local-model config reading."""
from __future__ import annotations

from snapeval.models.presets import ModelPreset, get_preset, list_presets, preset_from_config

__all__ = ["ModelPreset", "get_preset", "list_presets", "preset_from_config"]
