"""A model split over devices (accelerate ``device_map``): loading, per-layer caches, engine, branches, lm-eval.

Only CPUs are here, so the split is made of CPU placements dispatched with accelerate's hooks (the code path of a
real multi-GPU split: hooks move the hidden states between layers and bring the outputs back to the input device),
and per-layer placement of the cache rows is checked with a second device kind (``meta``). benchmarks/gpu.py runs
the real split when a GPU machine is available.
"""
import copy

import pytest
import torch

from snapeval import SnapStreamConfig, generate
from snapeval.branching import BranchSet, score_contexts
from snapeval.cache import FullConfig, SnapKVConfig, StreamingLLMConfig, make_cache
from snapeval.engine import Engine, SamplingParams
from snapeval.errors import SnapevalError
from snapeval.models.devices import (decoder_layers, gpu_device_map, input_device, is_split, layer_devices,
                                     parse_device_map)
from tests.conftest import random_prompt, tiny_model

CPU_SPLIT = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu", "model.layers.1": "cpu",
             "model.norm": "cpu", "lm_head": "cpu"}
CONFIGS = [SnapStreamConfig.from_budget(24, sink=2, recent=8, observation=4), StreamingLLMConfig.from_budget(24, sink=2),
           SnapKVConfig.from_budget(24, observation=4), FullConfig()]


def dispatched(model):
    """``model`` with accelerate's hooks on every placement of CPU_SPLIT (what a multi-device load produces)."""
    from accelerate import dispatch_model

    return dispatch_model(copy.deepcopy(model), device_map=CPU_SPLIT, main_device="cpu", force_hooks=True)


@pytest.mark.parametrize("value, expected", [
    (None, None), ("", None), ("auto", "auto"), ("balanced", "balanced"), ("sequential", "sequential"),
    ({"model.layers.0": 0, "lm_head": "cpu"}, {"model.layers.0": 0, "lm_head": "cpu"}),
    ('{"model.layers.0": 1, "lm_head": "cuda:0"}', {"model.layers.0": 1, "lm_head": "cuda:0"}),
])
def test_device_map_values(value, expected):
    assert parse_device_map(value) == expected


@pytest.mark.parametrize("value", ["everywhere", "{not json", {}, {"lm_head": "gpu7"}, {"lm_head": True}, 3])
def test_bad_device_map_is_a_one_line_error_naming_the_choices(value):
    with pytest.raises(SnapevalError) as err:
        parse_device_map(value)
    assert "device_map" in str(err.value) and "\n" not in str(err.value)


def test_gpu_resources_map_onto_a_device_map():
    from snapeval.run_args import RunArgs
    from snapeval.sweep.spec import ModelSpec, Resources

    assert gpu_device_map(0) is None and gpu_device_map(1) is None and gpu_device_map(4) == "balanced"
    assert ModelSpec("m").placement() == {"device": "cpu"}
    assert ModelSpec("m", resources=Resources(num_gpus=1)).placement() == {"device": "cuda"}
    assert ModelSpec("m", resources=Resources(num_gpus=2)).placement() == {"device_map": "balanced"}
    explicit = ModelSpec("m", resources=Resources(num_gpus=2), run_args=RunArgs(device_map={"model.layers.0": 0}))
    assert explicit.placement() == {"device_map": {"model.layers.0": 0}}


def test_sweep_yaml_device_map(tmp_path):
    from snapeval.sweep.parse import parse_config

    base = {"models": [{"pretrained": "smollm2-135m-instruct", "device_map": {"model.layers.0": 0}}],
            "tasks": ["kv_needle"], "methods": ["full"]}
    config = parse_config(base)
    assert config.models[0].placement() == {"device_map": {"model.layers.0": 0}}
    base["models"][0]["device_map"] = "everywhere"
    with pytest.raises(SnapevalError, match=r"models\[0\]\.device_map"):
        parse_config(base)


def test_layer_devices_follow_the_hooks():
    model = tiny_model("llama")
    assert layer_devices(model) == [torch.device("cpu")] * 2 and not is_split(model)
    split = dispatched(model)
    assert all(hasattr(layer, "_hf_hook") for layer in decoder_layers(split))
    assert layer_devices(split) == [torch.device("cpu")] * 2 and input_device(split) == torch.device("cpu")
    decoder_layers(split)[1]._hf_hook.execution_device = "meta"  # what a layer on a second device reports
    assert layer_devices(split) == [torch.device("cpu"), torch.device("meta")] and is_split(split)


def test_cache_rows_live_on_each_layers_device():
    model = tiny_model("llama")
    cache = make_cache(model, CONFIGS[0])
    cache.allocate_rows(3, 2, 16, torch.float64, [torch.device("cpu"), torch.device("meta")])
    assert [layer.keys.device.type for layer in cache.layers] == ["cpu", "meta"]
    assert [layer.positions.device.type for layer in cache.layers] == ["cpu", "meta"]
    with pytest.raises(ValueError, match="3 devices for a cache of 2 layers"):
        cache.allocate_rows(3, 2, 16, torch.float64, [torch.device("cpu")] * 3)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label)
def test_split_model_gives_the_same_tokens_and_scores(config, tiny_tokenizer):
    model = tiny_model("llama")
    split = dispatched(model)
    prompts = [random_prompt(40 + 7 * i, seed=i) for i in range(3)]
    params = SamplingParams(max_new_tokens=24)  # three prompts through two slots: a slot is refilled mid-decode
    engine_tokens = [c.token_ids for c in Engine(model, tiny_tokenizer, config, num_slots=2).generate(prompts, params)]
    split_tokens = [c.token_ids for c in Engine(split, tiny_tokenizer, config, num_slots=2).generate(prompts, params)]
    assert all(len(tokens) == 24 for tokens in engine_tokens)
    assert split_tokens == engine_tokens
    alone = generate(split, tiny_tokenizer, [prompts[0]], config=config, max_new_tokens=8)
    reference = generate(model, tiny_tokenizer, [prompts[0]], config=config, max_new_tokens=8)
    assert alone.outputs[0].token_ids == reference.outputs[0].token_ids
    contexts, continuations = [prompts[0], prompts[0], prompts[1]], [[5, 6, 7], [8, 9], [10, 11, 12]]
    ref = score_contexts(BranchSet(model, tiny_tokenizer, [config]), contexts, continuations)
    got = score_contexts(BranchSet(split, tiny_tokenizer, [config]), contexts, continuations)
    for (a, ga), (b, gb) in zip(ref[0], got[0]):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-12) and ga == gb


def test_load_model_with_a_device_map_and_lm_eval(tiny_dir, task_dir):
    """model_args device_map loads through accelerate; the lm-eval model over a hook-dispatched split gives the same
    generations and log-likelihoods (per-cell path: lm-eval's own batching, the cache's prefill and decode)."""
    from snapeval import load_model
    from snapeval.harness import evaluate
    from snapeval.harness.lm_eval_model import SnapStreamLM

    model, tokenizer = load_model(str(tiny_dir), dtype="float64", device_map=CPU_SPLIT)
    assert layer_devices(model) == [torch.device("cpu")] * 2
    args = {"pretrained": str(tiny_dir), "dtype": "float64", "batch_size": 2, "method": "snapstream", "budget": 48}
    plain = evaluate(args, ["tiny_gen", "tiny_mc"], include_path=task_dir, log_samples=True)
    mapped = evaluate({**args, "device_map": CPU_SPLIT}, ["tiny_gen", "tiny_mc"], include_path=task_dir,
                      log_samples=True)
    split = SnapStreamLM(**args, device_map=CPU_SPLIT, loaded=(dispatched(model), tokenizer))
    hooked = evaluate(args, ["tiny_gen", "tiny_mc"], include_path=task_dir, log_samples=True, lm=split)
    for task in ("tiny_gen", "tiny_mc"):
        a = [s["resps"] for s in sorted(plain["samples"][task], key=lambda s: s["doc_id"])]
        for other in (mapped, hooked):
            assert a == [s["resps"] for s in sorted(other["samples"][task], key=lambda s: s["doc_id"])]
