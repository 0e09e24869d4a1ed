"""Run arguments declared once (snapeval.run_args): the ``snapeval run`` flags, a sweep's model keys and lm-eval's
model_args are all generated from one declaration, accept the same values and refuse the same ones with the same
line; the decode kernel and CUDA-graph capture travel with the run into the engine and the caches, with no
module-level switch."""
from __future__ import annotations

import argparse
import dataclasses

import pytest
import torch

from conftest import TinyTokenizer, random_prompt, tiny_model
from snapeval.errors import SnapevalError
from snapeval.run_args import SURFACES, DecodeChoices, RunArgs, add_run_flags

#: A valid value other than the default, per run argument, as a user would type it on a command line.
NON_DEFAULT = {"dtype": "bfloat16", "device": "cpu", "device_map": "balanced", "batch_size": "4",
               "max_gen_toks": "32", "max_length": "2048", "engine": "true", "engine_slots": "16",
               "decode_kernel": "split", "capture": "false", "specprefill_draft": "smollm2-135m-instruct",
               "specprefill_keep": "0.5", "specprefill_chunk": "8", "specprefill_lookahead": "4",
               "specprefill_pool_kernel": "3", "shared_step": "false"}
#: ... and one the declaration refuses (None: any text is a value; a blank one reads as "not given").
BAD = {"dtype": "fp8", "device": "tpu", "device_map": "everywhere", "batch_size": "0", "max_gen_toks": "-3",
       "max_length": "zero", "engine": "sometimes", "engine_slots": "0", "decode_kernel": "flash",
       "capture": "maybe", "specprefill_draft": None, "specprefill_keep": "1.5", "specprefill_chunk": "0",
       "specprefill_lookahead": "x", "specprefill_pool_kernel": "-1", "shared_step": "always"}


def run_parser() -> argparse.ArgumentParser:
    from snapeval.harness.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser


def test_every_run_argument_has_a_value_on_every_surface_it_declares():
    assert set(NON_DEFAULT) == set(BAD) == set(RunArgs.names())
    for declaration in RunArgs.declarations():
        assert declaration.surfaces and set(declaration.surfaces) <= set(SURFACES)
        assert declaration.help and declaration.allowed()


def test_the_run_flags_are_generated_from_the_declaration():
    parser = run_parser()
    run = parser._subparsers._group_actions[0].choices["run"]
    flags = {option for action in run._actions for option in action.option_strings}
    for declaration in RunArgs.declarations("run"):
        assert declaration.flag in flags, declaration.flag
    help_text = run.format_help()
    assert "--decode-kernel" in help_text and "--capture" in help_text and "(default: 0)" in help_text  # --seed


def test_three_surfaces_parse_the_same_values_to_the_same_run_arguments():
    """The same values through ``snapeval run``'s flags, a sweep entry (YAML-typed) and model_args (text) give equal
    RunArgs; the sweep reads its device from resources, so the value given for it is the default there."""
    import yaml

    from snapeval.sweep.parse import parse_config

    # every argument of all three surfaces (a device map needs a model to name layers; shared_step is a sweep's own)
    names = [n for n in RunArgs.names("sweep") if n != "device_map" and n in RunArgs.names("run")]
    flags = run_parser().parse_args(["run", "--tasks", "t", *[x for n in names for x in
                                                              (RunArgs.declarations()[RunArgs.names().index(n)].flag,
                                                               NON_DEFAULT[n])]])
    from_flags = RunArgs.from_flags(flags)
    from_model_args = RunArgs.from_mapping({n: NON_DEFAULT[n] for n in names}, surface="model_args")
    entry = {"pretrained": "smollm2-135m-instruct", **{n: yaml.safe_load(NON_DEFAULT[n]) for n in names}}
    config = parse_config({"models": [entry], "tasks": ["kv_needle"], "methods": ["snapstream"], "budgets": [64]})
    from_sweep = config.models[0].run_args
    assert from_flags == from_model_args == from_sweep
    assert from_sweep.decode_kernel == "split" and from_sweep.capture == "false" and from_sweep.batch_size == 4


@pytest.mark.parametrize("name", sorted(n for n in BAD if BAD[n] is not None))
def test_a_bad_value_is_the_same_one_line_on_every_surface(name):
    declaration = next(d for d in RunArgs.declarations() if d.name == name)
    messages = {}
    if "model_args" in declaration.surfaces:
        with pytest.raises(SnapevalError) as caught:
            RunArgs.from_mapping({name: BAD[name]}, surface="model_args")
        messages["model_args"] = str(caught.value)
    if "run" in declaration.surfaces:
        args = run_parser().parse_args(["run", "--tasks", "t", declaration.flag, BAD[name]])
        with pytest.raises(SnapevalError) as caught:
            RunArgs.from_flags(args)
        messages["run"] = str(caught.value)
    if "sweep" in declaration.surfaces:
        from snapeval.sweep.parse import parse_config

        entry = {"pretrained": "smollm2-135m-instruct", name: BAD[name]}
        with pytest.raises(SnapevalError) as caught:
            parse_config({"models": [entry], "tasks": ["kv_needle"], "methods": ["full"]})
        messages["sweep"] = str(caught.value)
        assert f"models[0].{name}" in messages["sweep"]
    for surface, message in messages.items():
        assert "\n" not in message and "allowed" in message, (surface, message)
    tails = {m.split("allowed")[-1] for m in messages.values()}  # one vocabulary: the same allowed values
    assert len(tails) == 1, messages


def test_the_sweep_accepts_what_run_accepts():
    """The sweep once refused ``engine: true`` and ``dtype: float64`` that ``run`` accepted; one declaration now."""
    from snapeval.sweep.parse import parse_config

    entry = {"pretrained": "smollm2-135m-instruct", "engine": True, "dtype": "float64"}
    config = parse_config({"models": [entry], "tasks": ["kv_needle"], "methods": ["snapstream", "full"],
                           "budgets": [64]})
    assert config.models[0].engine == "true" and config.models[0].dtype == "float64"
    with pytest.raises(SnapevalError, match=r"models\[0\]\.engine: engine='true' cannot run"):
        parse_config({"models": [entry], "tasks": ["kv_needle"], "methods": ["kvpress:SnapKVPress"],
                      "budgets": [64]})


def test_a_run_argument_left_at_its_default_keeps_old_cell_ids():
    """A cell's identity gains a run argument only when it is set: every committed cell keeps its id."""
    from snapeval.sweep.spec import ModelSpec

    plain = ModelSpec("m")
    assert plain.identity() == {"pretrained": "m", "dtype": "auto", "batch_size": 1, "max_gen_toks": None}
    split = ModelSpec("m", run_args=RunArgs(decode_kernel="split"))
    assert split.identity() == {**plain.identity(), "decode_kernel": "split"}
    assert ModelSpec("m", run_args=RunArgs(engine_slots=64)).identity() == plain.identity()  # slots: no result


def test_capture_and_kernel_combinations_that_cannot_run_are_refused():
    with pytest.raises(SnapevalError, match="capture='true' is invalid with device='cpu'"):
        RunArgs(capture="true")
    with pytest.raises(SnapevalError, match="decode_kernel='triton' is invalid with device='cpu'"):
        RunArgs(decode_kernel="triton")
    assert RunArgs(capture="true", device="cuda").capture_on("cuda:0")
    assert RunArgs().capture_on("cuda:0") and not RunArgs().capture_on("cpu")
    assert not RunArgs(capture="false", device="cuda").capture_on("cuda")


@pytest.mark.parametrize("method", ["full", "snapkv", "snapstream", "streamingllm"])
def test_where_the_step_is_captured_auto_puts_every_static_row_method_on_the_engine(method):
    """``engine=auto``: on a device where the decode step is captured (CUDA, capture auto or true) every method with
    a static-row layout decodes on the engine; on the CPU, or with capture false, only the fixed-size caches do
    (full and SnapKV keep the padded batches every committed result came from); false is never, true always."""
    from snapeval.cache import method_info, resolve_method
    from snapeval.engine import ENGINE_METHODS

    config = resolve_method(method, None if method == "full" else 64)
    fixed = method_info(config).fixed_size
    assert method in ENGINE_METHODS  # a static-row layout
    assert method_info(config).on_engine(RunArgs(device="cuda"), "cuda:0") is True
    assert method_info(config).on_engine(RunArgs(device="cuda", capture="true"), "cuda") is True
    assert method_info(config).on_engine(RunArgs(), "cpu") is fixed
    assert method_info(config).on_engine(RunArgs(device="cuda", capture="false"), "cuda:0") is fixed
    assert method_info(config).on_engine(RunArgs(device="cuda", engine="false"), "cuda:0") is False
    assert method_info(config).on_engine(RunArgs(engine="true"), "cpu") is True


# --- the decode kernel travels with the cache ------------------------------------------------------------------------
def test_there_is_no_module_level_kernel_switch():
    from snapeval.cache import attention, kernels

    for module in (attention, kernels):
        assert not hasattr(module, "set_decode_kernel") and not hasattr(module, "_decode_kernels")


@pytest.mark.parametrize("kernel", ["sdpa", "split", "flex"])
def test_the_engine_carries_its_kernel_to_every_layer_and_attention(kernel, monkeypatch):
    from snapeval.cache import attention
    from snapeval.decoding import SamplingParams
    from snapeval.engine import Engine

    model, tok = tiny_model(), TinyTokenizer()
    seen = []
    original = attention.decode_attention

    def spy(query, key, value, valid=None, scaling=None, *, kernel="split"):
        seen.append(kernel)
        return original(query, key, value, valid, scaling, kernel=kernel)

    monkeypatch.setattr(attention, "decode_attention", spy)
    prompts = [random_prompt(40, 1), random_prompt(30, 2)]
    engine = Engine(model, tok, 24, num_slots=2, decoding=DecodeChoices(decode_kernel=kernel))
    out = engine.generate(prompts, SamplingParams(max_new_tokens=4))
    assert {layer.kernel for layer in engine.cache.layers} == {kernel}
    assert set(seen) == ({kernel} if kernel != "sdpa" else set())  # sdpa keeps Hugging Face's own call
    reference = Engine(model, tok, 24, num_slots=2).generate(prompts, SamplingParams(max_new_tokens=4))
    assert [c.token_ids for c in out] == [c.token_ids for c in reference]  # float64: every kernel agrees


def test_on_a_cuda_device_the_shared_group_engines_are_captured(monkeypatch):
    """The sweep's path (a BranchSet of the group's configurations) builds its engines with the run's capture and
    kernel: on CUDA (here a monkeypatched device) captured with the resolved kernel; on the CPU, eager."""
    from snapeval import branching
    from snapeval.cache import SnapStreamConfig
    from snapeval.decoding import SamplingParams

    model, tok = tiny_model(), TinyTokenizer()
    configs = [SnapStreamConfig.from_budget(24), SnapStreamConfig.from_budget(32)]
    monkeypatch.setattr(branching, "input_device", lambda m: torch.device("cuda"))
    on_gpu = branching.BranchSet(model, tok, configs, run_args=RunArgs(device="cuda"))
    assert on_gpu.decoding == DecodeChoices(decode_kernel="auto", capture=True)
    off = branching.BranchSet(model, tok, configs, run_args=RunArgs(device="cuda", capture="false"))
    assert off.decoding.capture is False
    monkeypatch.undo()

    built = []
    real_engine = __import__("snapeval.engine", fromlist=["Engine"]).Engine

    def recording_engine(*args, decoding=None, **kwargs):
        built.append((decoding.capture, decoding.decode_kernel))
        return real_engine(*args, decoding=dataclasses.replace(decoding, capture=False), **kwargs)  # eager on the CPU

    monkeypatch.setattr("snapeval.engine.Engine", recording_engine)
    on_cpu = branching.BranchSet(model, tok, configs, run_args=RunArgs(decode_kernel="split"))
    on_cpu.decoding = dataclasses.replace(on_cpu.decoding, capture=True)  # as the CUDA device above
    on_cpu.generate([random_prompt(40, 1), random_prompt(50, 2)], [SamplingParams(max_new_tokens=3)] * 2)
    assert built and set(built) == {(True, "split")}


def test_the_docs_table_is_the_declaration():
    from pathlib import Path

    from snapeval.run_args import run_args_reference

    text = (Path(__file__).resolve().parents[1] / "docs" / "run-arguments.md").read_text()
    table = text.split("-->\n", 1)[1].split("\n<!-- run-args:end", 1)[0].strip()
    assert table == run_args_reference()


def test_capture_true_on_a_gpu_entry_is_resolved_with_its_device_and_refused_on_a_machine_without_one(tmp_path):
    """A sweep entry with ``resources: {num_gpus: 1}`` and ``capture: true`` parses (its run arguments are resolved
    with the device its resources give it); on a machine without CUDA, running it is one line before anything
    loads or is written; without GPU resources it is refused at parse as on the command line."""
    from snapeval.models.devices import gpu_count
    from snapeval.sweep import parse_config, run_sweep

    entry = {"pretrained": "smollm2-135m-instruct", "capture": True, "resources": {"num_gpus": 1}}
    config = parse_config({"name": "gpu", "models": [entry], "tasks": ["snapeval_passkey"], "methods": ["full"]})
    run_args = config.models[0].run_args
    assert (run_args.device, run_args.capture) == ("cuda", "true")
    with pytest.raises(SnapevalError, match="models\\[0\\]: capture='true' is invalid with device='cpu'"):
        parse_config({"name": "cpu", "models": [{**entry, "resources": {"num_gpus": 0}}], "tasks": ["snapeval_passkey"],
                      "methods": ["full"]})
    if gpu_count():
        pytest.skip("this machine has a GPU: the run would go ahead")
    with pytest.raises(SnapevalError, match=r"^capture='true' needs a CUDA device and this machine has none"):
        run_sweep(config, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    with pytest.raises(SnapevalError, match=r"^decode_kernel='triton' needs a CUDA device"):
        RunArgs(device="cuda", decode_kernel="triton").check_machine()
    assert RunArgs(device="cuda").check_machine() == "cpu"  # a bare cuda falls back, as lm-eval's model does
