"""One prefill, many branches: caches built from a shared prefill equal the ones each method builds alone, and a
shared sweep gives exactly the per-cell sweep's answers."""
from __future__ import annotations

import io
import json

import pytest
import torch

from snapeval.branching import BranchSet
from snapeval.cache import FullConfig, SnapKVConfig, SnapStreamConfig, StreamingLLMConfig, make_cache
from snapeval.run_args import DecodeChoices
from tests.conftest import TinyTokenizer, random_prompt, tiny_model

CONFIGS = [
    FullConfig(),
    SnapStreamConfig.from_budget(16), SnapStreamConfig.from_budget(24, observation=6, pool_kernel=3),
    SnapStreamConfig(sink=2, recent=8, topk=10, observation=8, pooling="max"),
    StreamingLLMConfig.from_budget(16), StreamingLLMConfig.from_budget(40),
    SnapKVConfig.from_budget(16), SnapKVConfig(budget=24, observation=6, pool_kernel=3),
]


def _standalone(model, config, prompt):
    cache = make_cache(model, config)
    ids = torch.tensor([prompt])
    logits = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[0, -1]
    return logits, cache


def _layers(cache):
    return [(layer.keys, layer.values) for layer in cache.layers]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_branch_caches_equal_standalone_caches(family):
    model = tiny_model(family, heads=6, kv_heads=2)
    branches = BranchSet(model, TinyTokenizer(), CONFIGS)
    for length in (60, 31, 9):
        prompt = random_prompt(length, seed=length)
        shared = branches.prefill(prompt)
        for config in CONFIGS:
            logits, alone = _standalone(model, config, prompt)
            branch = shared.cache(model, config)
            assert torch.equal(shared.logits, logits), config
            for layer in range(len(alone.layers)):
                assert torch.equal(branch.slot_positions(layer), alone.slot_positions(layer)), (config, layer)
            for (k1, v1), (k2, v2) in zip(_layers(branch), _layers(alone)):
                assert torch.equal(k1, k2) and torch.equal(v1, v2), config
            assert branch.kv_bytes() == alone.kv_bytes()
    assert branches.stats.prefills == 3  # one per prompt, whatever the number of configurations


@pytest.mark.slow
def test_branch_caches_equal_standalone_on_smollm2(smollm2):
    model, tokenizer = smollm2
    prompt = tokenizer("The river " * 400).input_ids[:700]
    configs = [SnapStreamConfig.from_budget(128), StreamingLLMConfig.from_budget(128), SnapKVConfig.from_budget(256)]
    shared = BranchSet(model, tokenizer, configs).prefill(prompt)
    for config in configs:
        _, alone = _standalone(model, config, prompt)
        branch = shared.cache(model, config)
        for layer in range(len(alone.layers)):
            assert torch.equal(branch.slot_positions(layer), alone.slot_positions(layer)), (config, layer)
            assert torch.equal(branch.layers[layer].keys, alone.layers[layer].keys)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_branch_generations_equal_each_method_alone(family):
    from snapeval import generate
    from snapeval.engine import SamplingParams

    model = tiny_model(family)
    tokenizer = TinyTokenizer()
    prompts = [random_prompt(n, seed=n) for n in (50, 23, 37)]
    params = [SamplingParams(max_new_tokens=k) for k in (12, 5, 9)]
    branches = BranchSet(model, tokenizer, CONFIGS, batch=2)
    out = branches.generate(prompts, params)
    for config, completions in zip(CONFIGS, out):
        for prompt, p, done in zip(prompts, params, completions):
            alone = generate(model, tokenizer, [prompt], config=config, max_new_tokens=p.max_new_tokens)[0]
            assert done.token_ids == alone.token_ids, config
    assert branches.stats.prefills == 3


def test_one_prefill_per_loglikelihood_context():
    model = tiny_model("llama")
    contexts = [random_prompt(40, seed=1)] * 4 + [random_prompt(25, seed=2)] * 2
    continuations = [[5, 6], [7], [8, 9, 10], [11], [12, 13], [14]]
    branches = BranchSet(model, TinyTokenizer(), CONFIGS)
    scored = branches.score(contexts, continuations)
    assert branches.stats.prefills == 2 and branches.stats.prefill_tokens == 39 + 24
    for config, answers in zip(CONFIGS, scored):  # each continuation alone, through a fresh cache of the method
        for context, cont, (logprob, greedy) in zip(contexts, continuations, answers):
            cache = make_cache(model, config)
            model(input_ids=torch.tensor([context[:-1]]), past_key_values=cache)
            tail = torch.tensor([[context[-1], *cont[:-1]]])
            pos = (len(context) - 1 + torch.arange(len(cont)))[None]
            lp = torch.log_softmax(model(input_ids=tail, position_ids=pos, past_key_values=cache).logits.detach().float(), -1)[0]
            expected = float(lp.gather(-1, torch.tensor(cont)[:, None]).sum())
            assert logprob == pytest.approx(expected, abs=1e-9), config
            assert greedy == bool((lp.argmax(-1) == torch.tensor(cont)).all())


def _sweep(tiny_dir, task_dir, out, per_cell: bool):
    from snapeval.sweep import parse_config, run_sweep

    config = parse_config({
        "name": "branches", "models": [{"pretrained": str(tiny_dir)}],
        "include_path": str(task_dir), "tasks": ["tiny_gen", "tiny_mc"],
        "methods": ["full", "snapstream", "streamingllm", "snapkv"], "budgets": [24],
        "simulate": {"enabled": False},
    })
    if per_cell:
        config = config.per_cell()
    summary = run_sweep(config, out, stream=io.StringIO(), report=False, simulate=None)
    assert summary.ok and len(summary.ran) == 8
    return {p.name: json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}


def test_shared_sweep_equals_per_cell_sweep(tiny_dir, task_dir, tmp_path):
    shared = _sweep(tiny_dir, task_dir, tmp_path / "shared", per_cell=False)
    alone = _sweep(tiny_dir, task_dir, tmp_path / "alone", per_cell=True)
    assert shared.keys() == alone.keys()  # same cell identities: sharing the prefill is not part of the question
    for name in shared:
        a, b = shared[name], alone[name]
        assert a["generations_sha256"] == b["generations_sha256"], a["identity"]["policy"]
        scores_a = {(s["subtask"], s["doc_id"]): s["scores"] for s in a["samples"]}
        scores_b = {(s["subtask"], s["doc_id"]): s["scores"] for s in b["samples"]}
        assert scores_a == scores_b
        for m_a, m_b in zip(a["metrics"], b["metrics"]):
            assert m_a["value"] == pytest.approx(m_b["value"], abs=1e-9)


def test_a_sampled_request_samples_the_same_in_any_chunk_or_shard():
    """A sampled request's seed comes from its identity (task, document, request, repeat: the lm-eval model's
    request_seeds), not from its place in the call: an item shard of the documents (or another chunk size) samples
    exactly what the whole call samples."""
    from types import SimpleNamespace

    from snapeval.engine import SamplingParams
    from snapeval.harness.lm_eval_model import request_seeds

    model = tiny_model("llama")
    docs = [0, 0, 1, 2]  # document 0 sampled twice (lm-eval's repeats: the same request identity)
    requests = [SimpleNamespace(metadata=("tiny", doc, 2), idx=0) for doc in docs]
    prompts = [random_prompt(20 + 7 * doc, seed=doc) for doc in docs]
    configs = [SnapStreamConfig.from_budget(16), FullConfig()]

    def sample(rows, batch):
        seeds = request_seeds([requests[i] for i in rows], base_seed=3)
        params = [SamplingParams(max_new_tokens=8, do_sample=True, temperature=1.5, seed=s) for s in seeds]
        return BranchSet(model, TinyTokenizer(), configs, batch=batch, seed=0).generate([prompts[i] for i in rows],
                                                                                        params)

    whole = sample(range(4), batch=4)
    for part in ([2], [0, 1, 3]):  # two shards of the documents (i % 2), one holding both repeats, chunk 1
        shard = sample(part, batch=1)
        for c in range(len(configs)):
            assert [d.token_ids for d in shard[c]] == [whole[c][i].token_ids for i in part]
    for c in range(len(configs)):
        assert whole[c][0].token_ids != whole[c][1].token_ids  # two repeats of one document draw differently


@pytest.mark.parametrize("config", [SnapStreamConfig.from_budget(64), SnapStreamConfig(sink=2, recent=8, topk=40, observation=6),
                                    StreamingLLMConfig.from_budget(64)])
def test_a_short_prompts_held_branch_keeps_its_tokens_not_the_budget(config):
    """Issue 44: a prompt shorter than a fixed-size budget fills a prefix of the layout; the branch held for an
    engine row keeps that prefix only (what memory_plan.branch_bytes counts), and the row loaded from it equals the
    row loaded from the whole layout."""
    from snapeval.branching import load_caches
    from snapeval.cache.methods import method_info
    from snapeval.memory_plan import ModelShape, branch_bytes

    model = tiny_model("llama")
    branches = BranchSet(model, TinyTokenizer(), [config, FullConfig()])
    for length in (5, 15, 30):
        prefilled = branches.prefill(random_prompt(length, seed=length))
        whole, cut = (branches._new_cache(branches.configs[0], prefilled, True) for _ in range(2))
        load_caches(prefilled.capture, [whole, cut],
                    after_layer=lambda cache, index: cache.compact_layer(index) if cache is cut else None)
        kept = cut.layers[0].keys.shape[-2]
        assert config.kept_tokens(length) <= kept <= config.kept_tokens(length) + 1 < whole.layers[0].keys.shape[-2]
        held = sum(t.nbytes for layer in cut.layers for t in (layer.keys, layer.values, layer.positions,
                                                                layer.next_position, layer.fill))
        planned = branch_bytes(ModelShape.of(model), config, length)
        assert held <= planned <= held + ModelShape.of(model).rows_cache_bytes(1)
        rows = [method_info(config).static_cache_class()(model, config) for _ in range(2)]
        for row, source in zip(rows, (whole, cut)):
            row.allocate_rows(2, 2, 16, torch.float32, "cpu")
            row.load_row(1, source)
        for a, b in zip(rows[0].layers, rows[1].layers):
            for name in ("keys", "values", "positions", "next_position", "fill"):
                assert torch.equal(getattr(a, name), getattr(b, name)), (length, name)


def test_a_configuration_decoded_alone_is_captured_in_one_row_with_the_same_tokens(monkeypatch):
    """Issue 44 item 1: in a run that captures (a GPU's), a configuration the plan decodes alone decodes in an engine
    of one row whose step is recorded once per item (here the CPU stand-in recorder of tests/test_engine.py) from its
    branch in the engine's layout; its tokens are the eager loop's, sampled ones included."""
    import dataclasses

    from snapeval.engine import SamplingParams
    from snapeval.engine import engine as engine_module
    from snapeval.memory_plan import BRANCH_LOOP, ONE_ROW_ENGINE, ConfigurationPlan
    from tests.test_engine import ReplayOnCpu

    model = tiny_model("llama")
    configs = [FullConfig(), SnapStreamConfig.from_budget(16), StreamingLLMConfig.from_budget(40)]
    prompts = [random_prompt(n, seed=n) for n in (30, 52, 19)]
    params = [SamplingParams(max_new_tokens=9), SamplingParams(max_new_tokens=6, do_sample=True, temperature=1.3),
              SamplingParams(max_new_tokens=7)]
    real_plan = BranchSet.plan

    def full_alone(self, items, chunk=None, own=(), host=None):
        plan = real_plan(self, items, chunk, own, host)
        route = ONE_ROW_ENGINE if self.decoding.capture else BRANCH_LOOP  # the route the plan hands over, as it would
        return dataclasses.replace(plan, alone_captured=self.decoding.capture, configurations=tuple(
            ConfigurationPlan(c.label, "alone", 1, 0, c.decode_bytes, route) if c.label in ("full", "streamingllm@40")
            else c for c in plan.configurations))

    monkeypatch.setattr(BranchSet, "plan", full_alone)
    eager = BranchSet(model, TinyTokenizer(), configs, batch=2).generate(prompts, params)
    monkeypatch.setattr(engine_module, "CapturedDecodeStep", ReplayOnCpu)
    ReplayOnCpu.recorded = []
    branches = BranchSet(model, TinyTokenizer(), configs, batch=2)
    branches.decoding = DecodeChoices(capture=True)  # what a CUDA device resolves to
    captured = branches.generate(prompts, params)
    for c in range(len(configs)):
        assert [d.token_ids for d in captured[c]] == [d.token_ids for d in eager[c]], configs[c].label
    alone = branches.stats.decode_alone
    assert set(alone) == {"full", "streamingllm@40"}
    assert alone["full"]["steps"] == sum(p.max_new_tokens - 1 for p in params)
    assert len(ReplayOnCpu.recorded) >= 2 * len(prompts)  # one recording per item decoded alone, and the rows'
