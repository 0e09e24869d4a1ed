"""The `snapstream` lm-eval model: generate_until and multiple-choice tasks under full and compressed caches."""
import json
import math
import re

import pytest
import torch

from snapeval.cli import main as cli_main
from snapeval.errors import SnapevalError



def _run(tiny_dir, task_dir, tasks, **model_args):
    from snapeval.harness import evaluate

    return evaluate({"pretrained": str(tiny_dir), "dtype": "float64", "batch_size": 2, **model_args}, tasks,
                    include_path=task_dir, log_samples=True)


@pytest.fixture(scope="module")
def full(tiny_dir, task_dir):
    return _run(tiny_dir, task_dir, ["tiny_gen", "tiny_mc"], method="full")


def _samples(results, task):
    return sorted(results["samples"][task], key=lambda s: s["doc_id"])


def test_roomy_budget_equals_full_for_generation_and_loglikelihood(tiny_dir, task_dir, full):
    roomy = _run(tiny_dir, task_dir, ["tiny_gen", "tiny_mc"], method="snapstream", sink=4, recent=2048, topk=64)
    assert full["results"]["tiny_mc"]["acc,none"] == roomy["results"]["tiny_mc"]["acc,none"]
    for a, b in zip(_samples(full, "tiny_gen"), _samples(roomy, "tiny_gen")):
        assert a["resps"] == b["resps"]
    for a, b in zip(_samples(full, "tiny_mc"), _samples(roomy, "tiny_mc")):
        for (ll_a, greedy_a), (ll_b, greedy_b) in zip([r[0] for r in a["resps"]], [r[0] for r in b["resps"]]):
            assert math.isclose(ll_a, ll_b, rel_tol=1e-9, abs_tol=1e-9) and greedy_a == greedy_b
    info = roomy["snapeval"]
    assert info["config"]["method"] == "snapstream" and info["config"]["settings"]["recent"] == 2048
    assert info["kv_cache_bytes"] == (4 + 2048 + 64) * 2 * 2 * 16 * 2 * 8
    assert info["prompt_tokens"] > 0 and info["decode_tokens_per_s"] > 0


def test_small_budget_changes_loglikelihoods(tiny_dir, task_dir, full):
    small = _run(tiny_dir, task_dir, ["tiny_mc"], method="snapstream", budget=48)
    lls_full = [r[0][0] for r in _samples(full, "tiny_mc")[0]["resps"]]
    lls_small = [r[0][0] for r in _samples(small, "tiny_mc")[0]["resps"]]
    assert max(abs(a - b) for a, b in zip(lls_full, lls_small)) > 1e-6
    assert small["snapeval"]["kv_cache_bytes"] == 48 * 2 * 2 * 16 * 2 * 8


def test_response_cache_is_namespaced_by_configuration(tiny_dir, task_dir, tmp_path):
    from snapeval.harness.lm_eval_model import SnapStreamLM

    a = SnapStreamLM(pretrained=str(tiny_dir), method="snapstream", budget=64, dtype="float64")
    b = SnapStreamLM(pretrained=str(tiny_dir), method="snapstream", budget=128, dtype="float64")
    c = SnapStreamLM(pretrained=str(tiny_dir), method="snapkv", budget=64, dtype="float64")
    assert len({a.cache_namespace(), b.cache_namespace(), c.cache_namespace()}) == 3
    from lm_eval.api.model import CachingLM

    db = str(tmp_path / "cache.db")
    cached_a, cached_b = CachingLM(a, db), CachingLM(b, db)
    assert cached_a.dbdict.tablename == a.cache_namespace()
    assert cached_b.dbdict.tablename == b.cache_namespace()
    cached_a.dbdict["k"] = "from-a"
    assert "k" not in cached_b.dbdict


def test_a_resolved_config_travels_unchanged_and_the_old_argument_name_still_works(tiny_dir):
    from snapeval.cache import resolve_method
    from snapeval.errors import SnapevalError
    from snapeval.harness.lm_eval_model import SnapStreamLM

    config = resolve_method("snapstream", budget=64)
    lm = SnapStreamLM(pretrained=str(tiny_dir), config=config, dtype="float64")
    assert lm.method_config is config and lm.config is lm.model.config  # lm-eval's config: the model's
    with pytest.warns(DeprecationWarning, match="cache_config"):
        old = SnapStreamLM(pretrained=str(tiny_dir), cache_config=config, dtype="float64")
    assert old.method_config is config
    with pytest.raises(SnapevalError, match="not both"), pytest.warns(DeprecationWarning):
        SnapStreamLM(pretrained=str(tiny_dir), config=config, cache_config=config, dtype="float64")
    with pytest.raises(SnapevalError, match="given alone"):
        SnapStreamLM(pretrained=str(tiny_dir), config=config, budget=128, dtype="float64")


@pytest.mark.parametrize("argv, needle", [
    (["run", "--task", "tiny_gen", "--method", "lru", "--budget", "64"], "method='lru'"),
    (["run", "--task", "tiny_gen", "--budget", "1"], "budget=1"),
    (["run", "--task", "tiny_gen", "--method", "snapstream"], "needs a budget"),
    (["run", "--task", "tiny_gen", "--model", "no/such-model-xyz", "--budget", "64"], "no/such-model-xyz"),
    (["run", "--task", "tiny_gen", "--model", "deepseek-r1", "--budget", "64"], "simulator-only"),
    (["run", "--task", "tiny_gen", "--budget", "64", "--device-map", "everywhere"], "device_map='everywhere'"),
])
def test_cli_bad_input_is_one_line_and_exit_2(argv, needle, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("snapeval: error:") and needle in err and "\n" not in err


def test_specprefill_model_args(tiny_dir, task_dir, full):
    """keep=1.0 sends the whole prompt (same outputs as without it); keep=0.3 really shortens prompts."""
    whole = _run(tiny_dir, task_dir, ["tiny_gen"], method="full", specprefill_draft="smollm2-135m-instruct",
                 specprefill_keep=1.0)
    for a, b in zip(_samples(full, "tiny_gen"), _samples(whole, "tiny_gen")):
        assert a["resps"] == b["resps"]
    assert whole["snapeval"]["specprefill_kept_fraction"] == 1.0
    cut = _run(tiny_dir, task_dir, ["tiny_gen"], method="snapstream", budget=64,
               specprefill_draft="smollm2-135m-instruct", specprefill_keep="0.3", specprefill_chunk="8")
    info = cut["snapeval"]
    assert info["config"]["specprefill"]["keep"] == 0.3
    assert 0 < info["specprefill_kept_fraction"] < 0.8 and info["specprefill_draft_seconds"] > 0


def test_engine_is_the_default_for_fixed_size_caches_and_gives_the_same_generations(tiny_dir, task_dir, full):
    plain = _run(tiny_dir, task_dir, ["tiny_gen"], method="snapstream", budget=64, engine="false")
    engine = _run(tiny_dir, task_dir, ["tiny_gen"], method="snapstream", budget=64, engine_slots=2)
    assert [s["resps"] for s in _samples(plain, "tiny_gen")] == [s["resps"] for s in _samples(engine, "tiny_gen")]
    assert plain["snapeval"]["config"]["engine"] is None
    assert engine["snapeval"]["config"]["engine"] == {"slots": 2}
    assert engine["snapeval"]["kv_cache_bytes"] == 64 * 2 * 2 * 16 * 2 * 8
    assert full["snapeval"]["config"]["engine"] is None  # full caches grow: padded batches


@pytest.mark.parametrize("method, engine, expected", [
    ("snapstream", "auto", True), ("streamingllm", "auto", True), ("full", "auto", False), ("snapkv", "auto", False),
    ("snapstream", "false", False), ("snapstream", True, True), ("streamingllm", "true", True),
    ("full", "true", True), ("snapkv", "true", True),  # appending caches run in rows sized for their requests
])
def test_engine_choice(method, engine, expected):
    """On the CPU (no decode step captured) ``auto`` is the engine exactly for the fixed-size caches."""
    from snapeval.cache import method_info, resolve_method
    from snapeval.run_args import RunArgs

    info = method_info(resolve_method(method, None if method == "full" else 64))
    assert info.on_engine(RunArgs(engine=engine), "cpu") is expected


@pytest.mark.parametrize("method, engine, message", [
    ("snapstream", "sometimes", "engine='sometimes' is invalid; allowed: auto, true, false"),
])
def test_engine_choice_errors(method, engine, message):
    from snapeval.cache import method_info, resolve_method
    from snapeval.run_args import RunArgs

    with pytest.raises(SnapevalError, match=re.escape(message)):
        method_info(resolve_method(method, None if method == "full" else 64)).on_engine(RunArgs(engine=engine), "cpu")


@pytest.mark.parametrize("method, budget", [("full", None), ("snapkv", 64)])
def test_on_a_captured_device_auto_decodes_full_and_snapkv_on_the_captured_engine(tiny_dir, task_dir, method, budget,
                                                                                  monkeypatch):
    """Where the decode step is captured (a CUDA device: here ``capture_on`` monkeypatched true), ``engine=auto``
    puts the growing caches on the engine too, built to capture, with the padded batches' greedy texts (float32);
    on the CPU ``auto`` keeps them in padded batches, as every committed result was produced."""
    import snapeval.engine
    from snapeval.run_args import RunArgs

    args = dict(method=method, dtype="float32", **({"budget": budget} if budget else {}))
    padded = _run(tiny_dir, task_dir, ["tiny_gen"], engine="false", **args)
    on_cpu = _run(tiny_dir, task_dir, ["tiny_gen"], **args)
    assert padded["snapeval"]["config"]["engine"] is None and on_cpu["snapeval"]["config"]["engine"] is None
    assert [s["resps"] for s in _samples(on_cpu, "tiny_gen")] == [s["resps"] for s in _samples(padded, "tiny_gen")]

    built = []
    real_engine = snapeval.engine.Engine

    def recording_engine(*engine_args, decoding=None, **kwargs):
        built.append(decoding.capture)
        return real_engine(*engine_args, decoding=decoding, **kwargs)  # on the CPU it logs and decodes eagerly

    monkeypatch.setattr(snapeval.engine, "Engine", recording_engine)
    monkeypatch.setattr(RunArgs, "capture_on", lambda self, device: True)
    captured = _run(tiny_dir, task_dir, ["tiny_gen"], **args)
    assert captured["snapeval"]["config"]["engine"] == {"slots": 8}
    assert built and set(built) == {True}
    assert [s["resps"] for s in _samples(captured, "tiny_gen")] == [s["resps"] for s in _samples(padded, "tiny_gen")]
    built.clear()
    off = _run(tiny_dir, task_dir, ["tiny_gen"], engine="false", **args)  # the run's false still wins
    assert off["snapeval"]["config"]["engine"] is None and not built


def test_environment_info_is_collected_once_per_process_and_kept_in_every_run(tiny_dir, task_dir, full, monkeypatch):
    """lm-eval's ``add_env_info`` (subprocesses, about 1 s) runs once per process, not once per run; every run still
    carries its fields."""
    import torch.utils.collect_env as collect_env

    calls = []
    real = collect_env.get_pretty_env_info
    monkeypatch.setattr(collect_env, "get_pretty_env_info", lambda: calls.append(1) or real())
    first = _run(tiny_dir, task_dir, ["tiny_mc"], method="full")
    second = _run(tiny_dir, task_dir, ["tiny_mc"], method="snapstream", budget=48)
    assert calls == []  # the module's first run (the ``full`` fixture) already collected it
    for run in (full, first, second):
        assert run["pretty_env_info"] == full["pretty_env_info"] and run["lm_eval_version"]


def test_on_cuda_the_engine_slots_come_from_the_memory_plan(tiny_dir, monkeypatch):
    """Issue 44 item 3: without ``engine_slots``, the lm-eval model's engine on CUDA takes as many slots as the
    device holds at the method's per-row bytes for the call's requests (here a budget of exactly 37 rows above what
    is in use), at most one per request; on the CPU it keeps max(batch size, 8) (committed results unchanged)."""
    from snapeval import memory_plan
    from snapeval.decoding import SamplingParams
    from snapeval.harness.lm_eval_model import SnapStreamLM

    lm = SnapStreamLM(pretrained=str(tiny_dir), method="snapstream", budget=64, dtype="float64")
    assert lm.engine_slots == 8 and lm.describe()["engine"] == {"slots": 8}
    lm.engine_slots = None  # what a CUDA device resolves to (planned per call)
    shape = memory_plan.ModelShape.of(lm.model)
    per_row = memory_plan.row_bytes(shape, lm.method_config, 300, 40)
    monkeypatch.setattr(memory_plan, "bytes_in_use", lambda device: 5_000_000)
    monkeypatch.setattr(memory_plan, "device_budget", lambda device, max_memory=None: 5_000_000 + 37 * per_row + 1)
    prompts, params = [[3] * 300] * 100, [SamplingParams(max_new_tokens=40)] * 100
    assert lm._planned_slots(prompts, params) == 37
    assert lm._planned_slots(prompts[:5], params[:5]) == 5  # never more slots than requests
    assert lm.describe()["engine"] == {"slots": "plan"}
