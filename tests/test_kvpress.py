"""kvpress presses as methods: the same harness, the same budget semantics; SnapKV and StreamingLLM selections equal
to kvpress's own on the real SmolLM2."""
from __future__ import annotations

import json

import pytest
import torch

kvpress = pytest.importorskip("kvpress")

from snapeval.cache import SnapKVConfig, make_cache, method_info, resolve_method  # noqa: E402
from snapeval.engine import SamplingParams  # noqa: E402
from snapeval.errors import SnapevalError  # noqa: E402
from tests.conftest import TinyTokenizer, random_prompt, tiny_model  # noqa: E402
from tests.default_presses import DEFAULT_PRESSES  # noqa: E402
from tests.conftest import DATA_DIR as DATA  # noqa: E402  (the shared data folder, as conftest finds it)


def _prefill(model, config, prompt):
    cache = make_cache(model, config)
    logits = cache.prefill(model, torch.tensor([prompt]))
    return logits, cache


@pytest.mark.parametrize("method, press_args", DEFAULT_PRESSES)
def test_every_press_keeps_the_budget_and_generates(method, press_args):
    from snapeval.branching import BranchSet

    model = tiny_model("llama")
    config = resolve_method(method, 24, **press_args)
    assert config.method == method and config.identity()["budget"] == 24
    prompt = random_prompt(60, seed=3)
    _, cache = _prefill(model, config, prompt)
    kept = [layer.keys.shape[2] for layer in cache.layers]
    assert sum(kept) / len(kept) == pytest.approx(24, abs=1), kept  # per layer and KV head on average
    short = random_prompt(10, seed=4)  # a prompt that fits is not compressed
    assert _prefill(model, config, short)[1].layers[0].keys.shape[2] == 10
    done = BranchSet(model, TinyTokenizer(), [config]).generate([prompt], [SamplingParams(max_new_tokens=5)])[0][0]
    assert 1 <= len(done.token_ids) <= 5 and done.kv_bytes > 0


def test_press_errors_are_one_line():
    with pytest.raises(SnapevalError, match=r"method='kvpress:NoSuchPress' is not allowed; kvpress presses: .*SnapKVPress"):
        resolve_method("kvpress:NoSuchPress", 64)
    with pytest.raises(SnapevalError, match=r"kvpress:SnapKVPress takes no argument 'windows'; allowed: .*window_size"):
        resolve_method("kvpress:SnapKVPress", 64, windows=3)
    with pytest.raises(SnapevalError, match=r"kvpress:SnapKVPress.window_size='x' is invalid; allowed: an integer >= 1 \(default 64\)"):
        resolve_method("kvpress:SnapKVPress", 64, window_size="x")
    with pytest.raises(SnapevalError, match="needs a budget"):
        resolve_method("kvpress:TOVAPress")


def test_press_cells_in_a_sweep_config():
    from snapeval.sweep import expand_grid, parse_config

    config = parse_config({"models": ["smollm2-135m-instruct"], "tasks": ["snapeval_passkey"],
                           "methods": ["full", {"method": "kvpress:SnapKVPress", "budgets": [64, 128],
                                                "press": {"window_size": 16}}]})
    cells = expand_grid(config)
    assert [c.config.label for c in cells] == ["full", "kvpress:SnapKVPress@64", "kvpress:SnapKVPress@128"]
    assert cells[1].identity()["policy"] == {"method": "kvpress:SnapKVPress", "budget": 64, "window_size": 16}
    assert cells[1].shares_prefill  # a press branches from its group's shared prefill
    refused = expand_grid(parse_config({"models": ["smollm2-135m-instruct"], "tasks": ["snapeval_passkey"],
                                        "methods": ["full", {"method": "kvpress:KVComposePress", "budgets": [64]}]}))
    assert not refused[1].shares_prefill  # ... unless it cannot (it installs its own hooks): its own prefill


def _longbench_prompts(tokenizer, lengths):
    rows = [json.loads(line) for line in open(DATA / "longbench_v2" / "longbench_v2.jsonl")][:10]
    out = []
    for length in lengths:
        ids = next(tokenizer(r["context"]).input_ids for r in rows if len(r["context"]) > 4 * length)
        out.append(ids[:length])
    return out


class Recorder:
    """Wraps a press's compress to record, per layer, the kept positions of every KV head."""

    def __init__(self, press):
        self.press, self.kept = press, {}
        original = press.compress

        def compress(module, hidden_states, keys, values, attentions, kwargs):
            from kvpress.utils import compute_n_kept

            scores = press.score(module, hidden_states, keys, values, attentions, kwargs)
            n_kept = compute_n_kept(keys.shape[2], press.compression_ratio)
            index = scores.topk(n_kept, dim=-1).indices[0]  # [H, n_kept]
            self.kept[module.layer_idx] = [set(map(int, row)) for row in index]
            return original(module, hidden_states, keys, values, attentions, kwargs)

        press.compress = compress


def assert_same_kept(model, ours, press, prompt):
    """Run ``press`` over ``prompt`` and check it keeps exactly the positions of our cache, in every layer and head."""
    from transformers import DynamicCache

    recorder = Recorder(press)
    with press(model):
        model(input_ids=torch.tensor([prompt]), past_key_values=DynamicCache(config=model.config))
    for layer in range(model.config.num_hidden_layers):
        mine = ours.slot_positions(layer)[0]
        for head in range(mine.shape[0]):
            assert set(map(int, mine[head])) == recorder.kept[layer][head], (layer, head)


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "longbench_v2" / "longbench_v2.jsonl").is_file(), reason="no LongBench-v2 data")
@pytest.mark.parametrize("length, window", [(1024, 32), (2048, 64)])  # two windows, two lengths
def test_snapkv_selection_equals_kvpress_on_smollm2(smollm2, length, window):
    """Same window, kernel 5, average pooling and kept count per layer and KV head: the same tokens in every layer
    and head (pooling only over the candidates before the window, as the reference code does)."""
    model, tokenizer = smollm2
    (prompt,) = _longbench_prompts(tokenizer, [length])
    budget = length // 4
    ours = make_cache(model, SnapKVConfig(budget=budget, observation=window, pool_kernel=5, pooling="avg"))
    model(input_ids=torch.tensor([prompt]), past_key_values=ours)
    config = resolve_method("kvpress:SnapKVPress", budget, window_size=window, kernel_size=5)
    assert_same_kept(model, ours, config.make_press(len(prompt)), prompt)


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "longbench_v2" / "longbench_v2.jsonl").is_file(), reason="no LongBench-v2 data")
def test_streamingllm_selection_equals_kvpress_on_smollm2(smollm2):
    model, tokenizer = smollm2
    (prompt,) = _longbench_prompts(tokenizer, [1024])
    ours = make_cache(model, resolve_method("streamingllm", 256))
    model(input_ids=torch.tensor([prompt]), past_key_values=ours)
    assert_same_kept(model, ours, resolve_method("kvpress:StreamingLLMPress", 256, n_sink=4).make_press(len(prompt)),
                     prompt)


def test_unsupported_architecture_is_refused_before_loading(tmp_path):
    from snapeval.harness.lm_eval_model import SnapStreamLM

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(SnapevalError, match=r"is a 'gpt2' model; method='kvpress:TOVAPress' supports: llama, qwen2"):
        SnapStreamLM(pretrained=str(tmp_path), method="kvpress:TOVAPress", budget=64)


def test_plain_generate_refuses_a_press_it_cannot_apply():
    from snapeval import generate

    with pytest.raises(SnapevalError, match="prefills through its own hooks"):
        generate(tiny_model("llama"), TinyTokenizer(), [[5, 6, 7]], config=resolve_method("kvpress:TOVAPress", 16))


BRANCHING = [(m, a) for m, a in DEFAULT_PRESSES]
PROMPTS = [(60, 12), (23, 5), (41, 9), (14, 4)]  # (prompt tokens, new tokens): the 14-token one fits every budget


def _layers_of(cache):
    return [(layer.keys, layer.values) for layer in cache.layers]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("method, press_args", BRANCHING)
def test_every_branching_press_equals_its_own_prefill(family, method, press_args):
    """Each press of a shared prefill (two budgets of it, beside SnapStream) keeps exactly the keys and values, and
    decodes exactly the tokens, of the press prefilling alone through kvpress's own hooks; so do its scores."""
    from snapeval.branching import BranchSet
    from snapeval.cache import SnapStreamConfig, method_info
    from snapeval.cache.kvpress import keeps_budget_per_layer

    model = tiny_model(family, heads=6, kv_heads=2)
    presses = [resolve_method(method, budget, **press_args) for budget in (16, 24)]
    assert all(method_info(p).branches for p in presses)
    shared = BranchSet(model, TinyTokenizer(), [*presses, SnapStreamConfig.from_budget(16)], batch=3)
    prompts = [random_prompt(n, seed=n) for n, _ in PROMPTS]
    params = [SamplingParams(max_new_tokens=k) for _, k in PROMPTS]
    out = shared.generate(prompts, params)
    assert shared.stats.prefills == len(prompts)  # one prefill per item for every configuration
    for c, press in enumerate(presses):
        alone = BranchSet(model, TinyTokenizer(), [press])
        assert not alone.branches(press)  # alone, a press prefills through kvpress's own hooks
        reference = alone.generate(prompts, params)[0]
        for i, prompt in enumerate(prompts):
            assert out[c][i].token_ids == reference[i].token_ids, (press.label, i)
            assert out[c][i].kv_bytes == reference[i].kv_bytes, (press.label, i)
            logits, own = alone.own_prefill(press, prompt)
            prefilled = shared.prefill(prompt)
            assert torch.equal(prefilled.logits, logits)
            for (k1, v1), (k2, v2) in zip(_layers_of(prefilled.cache(model, press)), _layers_of(own)):
                assert torch.equal(k1, k2) and torch.equal(v1, v2), (press.label, i)
    if not keeps_budget_per_layer(presses[0].press_name):
        return  # scoring a cache whose layers hold different lengths (PyramidKV) fails on either path
    contexts = [prompts[0], prompts[0], prompts[2]]
    continuations = [[5, 6], [7], [8, 9, 10]]
    scored = shared.score(contexts, continuations)
    for c, press in enumerate(presses):
        assert scored[c] == BranchSet(model, TinyTokenizer(), [press]).score(contexts, continuations)[0]


def test_one_score_per_layer_serves_every_budget(monkeypatch):
    """SnapKVPress at three budgets scores each layer once; StreamingLLMPress's score reads the ratio: once per budget."""
    from snapeval.branching import BranchSet

    calls = {"SnapKVPress": 0, "StreamingLLMPress": 0}
    for name in calls:
        cls = getattr(kvpress, name)
        original = cls.score

        def counting(self, *args, _original=original, _name=name):
            calls[_name] += 1
            return _original(self, *args)

        monkeypatch.setattr(cls, "score", counting)
    model = tiny_model("llama")
    configs = [resolve_method("kvpress:SnapKVPress", b, window_size=8) for b in (12, 16, 24)]
    configs += [resolve_method("kvpress:StreamingLLMPress", b) for b in (12, 16)]
    BranchSet(model, TinyTokenizer(), configs).prefill(random_prompt(50, seed=2))
    layers = model.config.num_hidden_layers
    assert calls == {"SnapKVPress": layers, "StreamingLLMPress": 2 * layers}


def test_a_press_that_cannot_branch_is_refused_with_a_reason():
    from snapeval.branching import BranchSet
    from snapeval.cache import SnapStreamConfig, method_info
    from snapeval.cache.capture import PromptCapture
    from snapeval.cache.kvpress import branch_refusal
    from snapeval.cache.kvpress_cache import PressBranches

    model = tiny_model("llama")
    config = resolve_method("kvpress:KVComposePress", 16)
    assert not method_info(config).branches
    assert "installs its own hooks" in branch_refusal("KVComposePress")
    with pytest.raises(SnapevalError, match=r"kvpress:KVComposePress' cannot branch from a shared prefill: .*own "
                                            r"hooks.*needs its own prefill"):
        PressBranches(model, [config], 30, PromptCapture(model, 1))
    branches = BranchSet(model, TinyTokenizer(), [config, SnapStreamConfig.from_budget(16)])
    assert not branches.branches(config) and branches.branches(branches.configs[1])
    assert branches.presses == []  # so the shared prefill never hands it a layer


def test_press_rows_are_filled_from_a_branch_only():
    """A press's static rows come from a shared prefill's branch; the engine cannot prefill a press itself."""
    from snapeval.engine import Engine

    config = resolve_method("kvpress:SnapKVPress", 16, window_size=8)
    engine = Engine(tiny_model("llama"), TinyTokenizer(), config, num_slots=2)
    with pytest.raises(SnapevalError, match="static rows are loaded from a shared prefill's branch"):
        engine.generate([random_prompt(30, seed=1)], SamplingParams(max_new_tokens=3))
    from snapeval.run_args import RunArgs

    with pytest.raises(SnapevalError, match="engine=true needs a method with a static-row layout"):
        method_info(config).on_engine(RunArgs(engine="true"), "cpu")  # the lm-eval model says so before anything loads
    on_gpu = RunArgs(device="cuda")  # a captured step does not put a press on the engine: its rows come from a branch
    assert method_info(config).on_engine(on_gpu, "cuda:0") == method_info(config).on_engine(on_gpu, "cpu")


def test_a_set_of_presses_only_frees_each_captured_layer_once_compressed():
    from snapeval.branching import BranchSet

    model = tiny_model("qwen2")
    presses = [resolve_method("kvpress:SnapKVPress", 16, window_size=8), resolve_method("kvpress:TOVAPress", 20)]
    branches = BranchSet(model, TinyTokenizer(), presses)
    prompts = [random_prompt(n, seed=n) for n in (50, 33)]
    assert branches.prefill(prompts[0]).capture.nbytes() == 0  # nothing else reads the capture
    params = [SamplingParams(max_new_tokens=6)] * 2
    out = branches.generate(prompts, params)
    for c, press in enumerate(presses):
        alone = BranchSet(model, TinyTokenizer(), [press]).generate(prompts, params)[0]
        assert [d.token_ids for d in out[c]] == [d.token_ids for d in alone]


def test_a_press_branch_row_carries_the_runs_decode_kernel():
    """A press's static rows, built from its branch of a shared prefill, decode with the run's kernel like every other
    cache (they once got the device's default whatever the run asked)."""
    from snapeval.branching import BranchSet
    from snapeval.cache import method_info
    from snapeval.run_args import RunArgs

    model = tiny_model("llama")
    press = resolve_method("kvpress:SnapKVPress", 16, window_size=8)
    branches = BranchSet(model, TinyTokenizer(), [press, resolve_method("snapstream", 16)],
                         run_args=RunArgs(decode_kernel="split"))
    prefilled = branches.prefill(random_prompt(40, seed=3))
    rows = branches._new_cache(branches.configs[0], prefilled, True)
    assert isinstance(rows, method_info(press).static_cache_class())
    assert rows.decode_kernel == "split"
