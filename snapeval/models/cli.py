"""``snapeval models``: the model presets and their facts."""
from __future__ import annotations

import json

COLUMNS = ("name", "hub_id", "family", "params_b", "layers", "hidden", "heads", "kv_heads", "head_dim",
           "max_context", "kv_bytes_per_token_bf16", "chat_format", "reasoning", "temperature", "top_p",
           "default_dtype", "evaluable")


def register(subparsers) -> None:
    p = subparsers.add_parser("models", help="list the model presets and their facts",
                              description="Model presets: architecture facts from the published configs, chat "
                                          "format, recommended sampling, default dtype.")
    p.add_argument("--json", action="store_true", help="print every field as JSON")
    p.add_argument("name", nargs="?", help="show one preset")
    p.set_defaults(func=run)


def _row(preset) -> dict:
    return {
        "name": preset.name, "hub_id": preset.hub_id, "family": preset.family,
        "params_b": round(preset.param_count() / 1e9, 2), "layers": preset.num_layers,
        "hidden": preset.hidden_size, "heads": preset.num_attention_heads,
        "kv_heads": "MLA" if preset.is_mla else preset.num_kv_heads, "head_dim": preset.head_dim,
        "max_context": preset.max_context, "kv_bytes_per_token_bf16": preset.kv_bytes_per_token(2),
        "chat_format": preset.chat_format, "reasoning": preset.reasoning, "temperature": preset.temperature,
        "top_p": preset.top_p, "default_dtype": preset.default_dtype,
        "evaluable": "yes" if preset.evaluable else "simulator only",
    }


def run(args) -> int:
    from snapeval.models.presets import get_preset, list_presets

    presets = [get_preset(args.name)] if args.name else [get_preset(n) for n in list_presets()]
    if args.json:
        print(json.dumps([p.facts() for p in presets], indent=2))
        return 0
    rows = [_row(p) for p in presets]
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in COLUMNS}
    print("  ".join(c.ljust(widths[c]) for c in COLUMNS))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in COLUMNS))
    for p in presets:
        if not p.evaluable:
            print(f"\n{p.name}: {p.not_evaluable_reason}")
    return 0
