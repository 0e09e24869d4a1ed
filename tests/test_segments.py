"""One decode step for several configurations' rows (:func:`~snapeval.engine.segmented.segmented_engine`): each
row decodes the tokens its configuration's own engine decodes (float32), with continuous batching per segment."""
import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from snapeval.cache import (METHOD_TABLE, FullConfig, SnapKVConfig, SnapStreamConfig, StreamingLLMConfig, attention,
                            kernels, method_info, resolve_method)
from snapeval.branching import BranchSet
from snapeval.cache.segments import SegmentedCache
from snapeval.engine import Engine, SamplingParams
from snapeval.engine.segmented import SegmentAdmission, segmented_engine
from snapeval.errors import SnapevalError
from snapeval.run_args import DecodeChoices
from snapeval.memory_plan import IN_ROWS, SHARED_STEP_ROWS, Item
from tests.conftest import random_prompt, tiny_model

CONFIGS = [SnapStreamConfig(sink=2, recent=10, topk=8, observation=6), StreamingLLMConfig(sink=2, recent=16),
           SnapKVConfig(budget=20, observation=6), FullConfig()]
LENGTHS = (70, 23, 45, 8, 33, 5)
MAX_NEW = (15, 3, 30, 7, 22, 40)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("kernel", ["sdpa", "split"])
def test_every_segment_decodes_the_tokens_of_its_own_engine(family, kernel, tiny_tokenizer):
    model = tiny_model(family)
    prompts = [random_prompt(n, seed=n) for n in LENGTHS]
    params = [SamplingParams(max_new_tokens=k) for k in MAX_NEW]
    rows = [2, 3, 1, 2]
    own = [Engine(model, tiny_tokenizer, config, num_slots=r, decoding=DecodeChoices(decode_kernel=kernel)) for config, r in zip(CONFIGS, rows)]
    expected = [engine.generate(prompts, params) for engine in own]
    # every configuration's requests, item by item; each row built by its own configuration's batch-1 prefill
    requests = [(c, i) for i in range(len(prompts)) for c in range(len(CONFIGS))]
    engine = segmented_engine(model, tiny_tokenizer, CONFIGS, rows, decoding=DecodeChoices(decode_kernel=kernel))
    done = engine.generate([prompts[i] for _, i in requests], [params[i] for _, i in requests],
                           segments=[c for c, _ in requests],
                           prefill=lambda j, prompt: own[requests[j][0]].prefill(j, prompt))
    for j, (c, i) in enumerate(requests):
        assert done[j].token_ids == expected[c][i].token_ids, (CONFIGS[c].label, i)
        assert done[j].kv_bytes == expected[c][i].kv_bytes
    assert isinstance(engine.cache, SegmentedCache) and engine.num_slots == sum(rows)
    slots = {c: {done[j].slot for j, (cc, _) in enumerate(requests) if cc == c and done[j].slot >= 0}
             for c in range(len(CONFIGS))}
    for c, (start, end) in enumerate(engine.cache.bounds):  # a request decodes only in its own segment's rows
        assert slots[c] and all(start <= s < end for s in slots[c])
    # each segment's rows keep their own layout: budgets for the fixed-size caches, the longest request for the others
    layouts = [cache.layers[0].keys.shape for cache in engine.cache.caches]  # views of the pool
    assert [shape[0] for shape in layouts] == rows
    assert layouts[0][2] == CONFIGS[0].budget and layouts[1][2] == CONFIGS[1].budget
    assert engine.stats.decode_steps > 0 and sum(engine.admission.active_by_segment) == engine.stats.active_slot_steps


def test_a_segmented_engine_refuses_what_it_cannot_do(tiny_tokenizer):
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="one count each"):
        segmented_engine(model, tiny_tokenizer, CONFIGS, [1, 2])
    engine = segmented_engine(model, tiny_tokenizer, CONFIGS[:2], [1, 1])
    assert type(engine) is Engine  # admission is a policy the engine is given (SegmentAdmission), not a subclass
    with pytest.raises(ValueError, match="segments"):
        engine.generate([[5, 6]], segments=[2], prefill=lambda j, p: None)
    with pytest.raises(SnapevalError, match="^prefill: this engine decodes rows built by its caller"):
        engine.prefill(0, [5, 6])
    with pytest.raises(SnapevalError, match="^prefill: this engine decodes rows built by its caller"):
        engine.generate([[5, 6]], segments=[0])
    with pytest.raises(ValueError, match="segments must give each of the 1 prompts"):
        engine.reserve(4, SamplingParams(max_new_tokens=2))  # a row in place needs its segment
    with pytest.raises(SnapevalError, match="^segments: an engine of one configuration has one group of rows"):
        Engine(model, tiny_tokenizer, CONFIGS[0], num_slots=1).generate([[5, 6]], segments=[0])
    for given, named in (({"config": CONFIGS[0]}, "config="), ({"num_slots": 4}, "num_slots=4"),
                         ({"keep_rows": False}, "keep_rows=False"), ({"num_slots": 2, "keep_rows": True},
                                                                     "num_slots=2, keep_rows=True")):
        with pytest.raises(SnapevalError) as err:  # the admission decides them: given beside it, never ignored
            Engine(model, tiny_tokenizer, admission=SegmentAdmission(CONFIGS[:2], [1, 1]), **given)
        assert str(err.value).startswith(named) and "given with an admission" in str(err.value)
        assert "allowed: the admission alone" in str(err.value) and "\n" not in str(err.value)


def test_the_segmented_cache_routes_each_row_to_its_segment():
    model = tiny_model("llama")
    segmented = SegmentedCache(model, CONFIGS[:2], [2, 3], [c.budget for c in CONFIGS[:2]], 2, 16, torch.float32,
                               "cpu")
    caches = segmented.caches
    assert segmented.bounds == [(0, 2), (2, 5)] and segmented.num_rows == 5
    assert [segmented.segment_of(r) for r in range(5)] == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    segmented.park_row(3)
    assert bool((caches[1].layers[0].positions[1] == 0).all()) and bool((caches[1].layers[0].positions[0] == -1).all())
    assert segmented.next_positions().shape == (5,)
    with pytest.raises(IndexError):
        segmented.segment_of(5)
    # each segment's rows are views of one pool per layer: the pool holds what the segment's row methods wrote
    pool = segmented.layers[0]
    budget = CONFIGS[0].budget
    assert pool.positions.shape == (2 * 2 * budget + 3 * 2 * CONFIGS[1].budget,)
    assert bool((pool.positions[2 * 2 * budget + 2 * CONFIGS[1].budget:][:2 * CONFIGS[1].budget] == 0).all())
    assert caches[1].layers[0].keys.data_ptr() == pool.keys[2 * 2 * budget:].data_ptr()


def _static_methods():
    return [name for name in METHOD_TABLE.names() if METHOD_TABLE.get(name).static_rows]


@pytest.mark.parametrize("method", _static_methods())
def test_one_write_puts_every_token_where_its_method_writes_it(method):
    """The pooled write (each row's :meth:`slot_rule` as data) against each method's own ``write``, over enough steps
    to wrap a ring and fill an appending row to its last slot: every method the engine can decode in rows."""
    model = tiny_model("llama")
    config = resolve_method(method, None if METHOD_TABLE.get(method).reference else 24)
    rows, heads, dim = 3, 2, 16
    slots = config.budget if method_info(config).fixed_size else 30
    own = method_info(config).static_cache_class()(model, config)
    own.allocate_rows(rows, heads, dim, torch.float32, "cpu", slots=slots)
    segmented = SegmentedCache(model, [config], [rows], [slots], heads, dim, torch.float32, "cpu")
    generator = torch.Generator().manual_seed(0)
    for cache in (own, segmented.caches[0]):  # the same prompt rows in both: 25, 17 and 3 tokens kept
        for row, kept in enumerate((25, 17, 3)):
            layer = cache.layers[0]
            layer.positions[row, :, :min(kept, slots)] = torch.arange(min(kept, slots))
            layer.next_position[row] = kept
            layer.fill[row] = min(kept, slots)
    own_layer, pooled = own.layers[0], segmented.layers[0]
    for _ in range(12):
        key = torch.randn(rows, heads, 1, dim, generator=generator)
        value = torch.randn(rows, heads, 1, dim, generator=generator)
        own_layer.update(key, value)
        take = attention._local.pending
        attention.clear_hand_off()
        pooled.update(key, value)
        ragged = attention._local.pending.ragged
        attention.clear_hand_off()
        assert take is not None and ragged is pooled.ragged
        mine = segmented.caches[0].layers[0]
        for name in ("keys", "values", "positions", "next_position", "fill"):
            assert torch.equal(getattr(mine, name), getattr(own_layer, name)), (method, name)


def test_the_padded_ragged_rows_attend_as_each_row_alone():
    """:meth:`RaggedRows.padded` (the reference of the ``triton`` kernel's ragged launch) against each row's own
    decode attention: rows of 70, 1, 300 and 130 slots with holes, grouped-query heads."""
    generator = torch.Generator().manual_seed(0)
    slots, heads, kv, dim = [70, 1, 300, 130], 8, 2, 16
    base = torch.tensor([0, 70, 71, 371]) * kv
    vectors = sum(slots) * kv
    positions = torch.arange(vectors)
    positions[torch.rand(vectors, generator=generator) < 0.3] = -1
    positions[base[1]] = 5  # the one-slot row attends to its one slot
    keys, values = torch.randn(vectors, dim, generator=generator), torch.randn(vectors, dim, generator=generator)
    rows = kernels.RaggedRows(keys, values, positions, base, torch.tensor(slots), kv, max(slots), sum(slots))
    query = torch.randn(len(slots), heads, 1, dim, generator=generator)
    out = kernels.ragged_decode_attention(query, rows, 0.25, kernel="sdpa")
    assert out.shape == (len(slots), 1, heads, dim)
    for r, count in enumerate(slots):
        start = int(base[r])
        row_keys = keys[start:start + kv * count].view(1, kv, count, dim)
        row_values = values[start:start + kv * count].view(1, kv, count, dim)
        valid = (positions[start:start + count] >= 0)[None]
        alone = kernels.decode_attention(query[r:r + 1], row_keys, row_values, valid, 0.25, kernel="sdpa")
        assert torch.allclose(out[r:r + 1], alone, atol=1e-6), r
    split = kernels.ragged_decode_attention(query, rows, 0.25, kernel="split")
    assert torch.allclose(split, out, atol=1e-6)


@pytest.mark.parametrize("batch", [2, 8])
def test_a_group_decoding_in_one_step_decodes_the_tokens_of_one_engine_each(monkeypatch, batch, tiny_tokenizer):
    """A shared group whose plan has ``shared_step`` (a GPU's with the ``triton`` kernel; forced here on the CPU)
    decodes every configuration in rows in one segmented engine: the same tokens as an engine each (float32), the
    decode counted per configuration with the configurations it shared its steps with."""
    model = tiny_model("llama")
    configs = [FullConfig(), SnapStreamConfig.from_budget(16), StreamingLLMConfig.from_budget(24),
               SnapKVConfig.from_budget(16)]
    prompts = [random_prompt(n, seed=n) for n in (40, 12, 33, 70, 25)]
    params = [SamplingParams(max_new_tokens=n) for n in (4, 9, 6, 3, 7)]
    reference = BranchSet(model, tiny_tokenizer, configs, batch=batch)
    expected = reference.generate(prompts, params)
    assert not reference.plan([Item(len(p), 9) for p in prompts]).shared_step  # the CPU: an engine each
    plan = BranchSet.plan

    def one_step(self, *a, **k):  # the plan a GPU's search would hand over: the rows' route is the shared step
        real = plan(self, *a, **k)
        return dataclasses.replace(real, shared_step=True, configurations=tuple(
            dataclasses.replace(c, route=SHARED_STEP_ROWS) if c.route in IN_ROWS else c for c in real.configurations))

    monkeypatch.setattr(BranchSet, "plan", one_step)
    group = BranchSet(model, tiny_tokenizer, configs, batch=batch)
    out = group.generate(prompts, params)
    in_rows = [c.label for c in configs if group.plan([Item(70, 9)]).decode_mode(c.label).decode == "rows"]
    assert len(in_rows) > 1
    assert all(ran[label] == SHARED_STEP_ROWS for ran in group.routes_ran for label in in_rows)
    for c, config in enumerate(configs):
        for i in range(len(prompts)):
            assert out[c][i].token_ids == expected[c][i].token_ids, (config.label, i)
    for label in in_rows:
        assert group.stats.decode[label]["shared_with"] == sorted(in_rows)


class _CountOperations(TorchDispatchMode):
    """Counts the operations a step dispatches (views and reshapes, which launch nothing, left out)."""

    VIEWS = ("unsqueeze", "reshape", "view", "slice", "select", "transpose", "expand", "as_strided", ".t.", "alias",
             "detach", "permute", "squeeze", "split.", "unbind")

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not any(v in str(func) for v in self.VIEWS)
        return func(*args, **(kwargs or {}))


def test_a_segmented_step_dispatches_what_one_configuration_s_step_does(monkeypatch, tiny_tokenizer):
    """What makes one step for every configuration pay on a GPU: with the attention call one operation (the ``triton``
    kernel's two launches, dense or ragged), a segmented step dispatches the same operations for 2, 3 or 6
    configurations, and one per layer more than one configuration's engine (its rows' ``fill`` count)."""
    model = tiny_model("llama", layers=4)
    configs = [SnapStreamConfig.from_budget(16), StreamingLLMConfig.from_budget(24), SnapKVConfig.from_budget(16),
               SnapStreamConfig.from_budget(32), StreamingLLMConfig.from_budget(48), SnapKVConfig.from_budget(40)]
    one_call = lambda query, *args, **kwargs: query.new_empty(query.shape[0], 1, query.shape[1], query.shape[3])
    monkeypatch.setattr(attention, "decode_attention", one_call)
    monkeypatch.setattr(attention, "ragged_decode_attention", one_call)

    def step_operations(engine) -> int:
        counter = _CountOperations()
        with torch.inference_mode(), counter:
            engine.step_rows()
        return counter.count

    one = Engine(model, tiny_tokenizer, configs[0], num_slots=2, decoding=DecodeChoices(decode_kernel="split"))
    counts = [step_operations(segmented_engine(model, tiny_tokenizer, configs[:k], [2] * k, decoding=DecodeChoices(decode_kernel="split")))
              for k in (2, 3, 6)]
    assert len(set(counts)) == 1 and counts[0] == step_operations(one) + 4


def test_the_run_argument_and_the_kernel_decide_whether_a_group_may_share_a_step(monkeypatch, tiny_tokenizer):
    """``BranchSet.one_step``: the run's ``shared_step`` allows it and its decode kernel runs a ragged pool in one
    launch (``triton``, resolved here by a stand-in: the CPU resolves ``sdpa``); a sweep entry's key reaches it."""
    from snapeval.run_args import RunArgs
    from snapeval.sweep.parse import parse_config

    model = tiny_model("llama")
    configs = [SnapStreamConfig.from_budget(16), StreamingLLMConfig.from_budget(24)]
    assert not BranchSet(model, tiny_tokenizer, configs).one_step()  # sdpa on the CPU
    monkeypatch.setattr("snapeval.branching.resolve_decode_kernel", lambda choice, device: "triton")
    assert BranchSet(model, tiny_tokenizer, configs).one_step()
    entry = {"pretrained": "smollm2-135m-instruct", "shared_step": False}
    run_args = parse_config({"models": [entry], "tasks": ["kv_needle"], "methods": ["snapstream"],
                             "budgets": [64]}).models[0].run_args
    assert run_args == RunArgs(shared_step="false")
    assert not BranchSet(model, tiny_tokenizer, configs, run_args=run_args).one_step()


def test_a_dropped_segmented_engine_frees_its_rows_at_once(tiny_tokenizer):
    """No reference cycle: a segmented engine and its pool go as soon as the last reference does, without waiting for
    the cyclic collector (a group drops each engine before the next allocates, and collects nothing between)."""
    import gc
    import weakref

    model = tiny_model("llama")
    prompts = [random_prompt(n, seed=n) for n in LENGTHS[:2]]
    engine = segmented_engine(model, tiny_tokenizer, CONFIGS[:2], [1, 1])
    engine.generate(prompts, [SamplingParams(max_new_tokens=3)] * 2, segments=[0, 1],
                    prefill=lambda j, prompt: Engine(model, tiny_tokenizer, CONFIGS[j], num_slots=1).prefill(j, prompt))
    engine_ref, rows_ref = weakref.ref(engine), weakref.ref(engine.slot_tensors()[0])
    gc.collect()
    gc.disable()
    try:
        engine.release()
        del engine
        assert engine_ref() is None and rows_ref() is None
    finally:
        gc.enable()
