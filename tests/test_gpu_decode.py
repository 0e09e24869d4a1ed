"""Decode at the memory floor, checked on the CPU: the decode kernels agree, the full cache decodes in static rows with
the same greedy tokens, a decode step allocates nothing that grows with the context (no copy of the cache), and one
compiled decode step is one graph whose mutated inputs are all static addresses (so CUDA graphs engage)."""
from __future__ import annotations

import inspect

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import TinyTokenizer, random_prompt, tiny_model
from snapeval.cache import FullConfig, SnapStreamConfig, kernels
from snapeval.cache.full import StaticFullCache
from snapeval.decoding import SamplingParams, decode_step
from snapeval.generation import encode_prompts, generate_ids
from snapeval.run_args import DecodeChoices


def repeat_kv_reference(query, key, value, valid, scaling):
    group = query.shape[1] // key.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(group, 1), value.repeat_interleave(group, 1),
        attn_mask=None if valid is None else valid[:, None, None, :], scale=scaling)
    return out.transpose(1, 2)


@pytest.mark.parametrize("name", kernels.runnable_decode_kernels("cpu"))
@pytest.mark.parametrize("slots", [7, 300, 1030])
def test_every_decode_kernel_equals_sdpa_over_repeated_heads(name, slots):
    torch.manual_seed(slots)
    query = torch.randn(3, 8, 1, 16, dtype=torch.float64)
    key, value = torch.randn(2, 3, 2, slots, 16, dtype=torch.float64)
    valid = torch.rand(3, slots) > 0.3
    valid[:, 0] = True
    for mask in (valid, None):
        out = kernels.decode_attention(query, key, value, mask, 0.3, kernel=name)
        assert out.shape == (3, 1, 8, 16)
        torch.testing.assert_close(out, repeat_kv_reference(query, key, value, mask, 0.3), rtol=1e-12, atol=1e-12)


def test_split_kernel_slices_are_views_that_fill_a_gpu():
    assert kernels.split_chunks(131136, 8) == 32 and 131136 % 32 == 0  # 256 products of 4,098 slots
    assert kernels.split_chunks(32768, 96) == 3 or 32768 % kernels.split_chunks(32768, 96) == 0
    for slots, rows in ((131136, 1), (32832, 24), (1030, 6), (100, 1), (257, 1)):
        chunks = kernels.split_chunks(slots, rows)
        assert slots % chunks == 0 and (chunks == 1 or slots // chunks >= 256)


def test_a_bad_decode_kernel_is_one_line_error():
    from snapeval.errors import SnapevalError

    with pytest.raises(SnapevalError, match="decode_kernel='flash' is invalid; allowed: auto, sdpa, split, flex"):
        StaticFullCache(tiny_model(), decode_kernel="flash")
    with pytest.raises(SnapevalError, match="decode_kernel='flash' is invalid; allowed: auto, sdpa, split, flex"):
        kernels.resolve_decode_kernel("flash", "cpu")
    with pytest.raises(ValueError, match="reserve=-1 is invalid; allowed: an integer >= 0"):
        StaticFullCache(tiny_model(), reserve=-1)


# --- the static full cache -------------------------------------------------------------------------------------------
PROMPTS = [(30, 1), (17, 2), (41, 3)]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_generate_full_cache_is_static_with_the_dynamic_cache_greedy_tokens(family):
    """Left-padded rows of different lengths: the static rows (every decode kernel) give the ``DynamicCache`` path's
    and ``model.generate``'s greedy tokens, and report the same KV bytes."""
    model, tok = tiny_model(family), TinyTokenizer()
    ids, mask = encode_prompts(tok, [random_prompt(n, s) for n, s in PROMPTS])
    params = SamplingParams(max_new_tokens=12)
    dynamic = generate_ids(model, tok, ids, mask, FullConfig(), params, static_full=False)
    expected = model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)[:, ids.shape[1]:].tolist()
    assert [e[:len(t)] for e, t in zip(expected, dynamic.token_ids)] == dynamic.token_ids
    for name in kernels.runnable_decode_kernels("cpu"):
        static = generate_ids(model, tok, ids, mask, FullConfig(), params, decoding=DecodeChoices(decode_kernel=name))
        assert isinstance(static.cache, StaticFullCache), name
        assert {layer.kernel for layer in static.cache.layers} == {name}  # the cache carried it to every layer
        assert static.token_ids == dynamic.token_ids, name
        assert static.cache.kv_bytes_per_row() == dynamic.cache.kv_bytes_per_row()
        layer = static.cache.layers[0]
        assert layer.keys.shape[2] == ids.shape[1] + 12 and layer.static


def test_generate_full_cache_static_rows_equal_the_dynamic_cache_on_smollm2(smollm2):
    from snapeval import generate

    model, tokenizer = smollm2
    prompts = ["The capital of France is", "Write a haiku about the sea, then explain it in one sentence:",
               "List three prime numbers:"]
    static = generate(model, tokenizer, prompts, config=None, max_new_tokens=16)
    assert isinstance(static[0].cache, StaticFullCache)
    ids, mask = encode_prompts(tokenizer, prompts)
    dynamic = generate_ids(model, tokenizer, ids, mask, FullConfig(), SamplingParams(max_new_tokens=16),
                           static_full=False)
    assert [o.token_ids for o in static] == dynamic.token_ids


# --- what a decode step allocates ------------------------------------------------------------------------------------
class AllocatedBytes(TorchDispatchMode):
    """Bytes of the new storages every op returns (views and in-place results share an input's storage)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}
        for tensor in torch.utils._pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() not in inputs:
                self.bytes += tensor.untyped_storage().nbytes()
                inputs.add(tensor.untyped_storage().data_ptr())
        return out


def step_bytes(model, cache, rows: int) -> int:
    tokens = torch.full((rows, 1), 5, dtype=torch.long)
    positions = cache.next_positions()[:, None].clone()
    with torch.inference_mode():
        decode_step(model, cache, tokens, positions)  # warm-up (lazy buffers)
        positions += 1
        with AllocatedBytes() as counter:
            decode_step(model, cache, tokens, positions)
    return counter.bytes


def prefilled(model, config, lengths, reserve=8, kernel="auto"):
    """A cache of ``config`` after a left-padded prefill of rows of ``lengths`` (the full cache: static rows),
    decoding with ``kernel``."""
    from snapeval.cache import make_cache
    from snapeval.decoding import prefill

    ids, mask = encode_prompts(TinyTokenizer(), [random_prompt(n, n) for n in lengths])
    cache = (StaticFullCache(model, reserve=reserve, decode_kernel=kernel) if isinstance(config, FullConfig)
             else make_cache(model, config, decode_kernel=kernel))
    with torch.inference_mode():
        prefill(model, cache, ids, attention_mask=mask,
                position_ids=(mask.cumsum(-1) - 1).masked_fill(mask == 0, 0))
    return cache


@pytest.mark.parametrize("name", ["sdpa", "split"])  # flex: uncompiled on the CPU it runs its unfused reference
@pytest.mark.parametrize("config", [FullConfig(), SnapStreamConfig.from_budget(64)], ids=["full", "snapstream"])
def test_a_decode_step_allocates_nothing_that_grows_with_the_context(name, config):
    """Per context token a step may allocate float scores (a few per query head), never keys or values: the growth
    between two context lengths stays under a quarter of one token's KV bytes (a ``DynamicCache`` concatenation
    allocates all of them; ``repeat_kv`` twice that)."""
    model = tiny_model(heads=2, kv_heads=1)  # head_dim 32: a token's keys and values dwarf its scores
    kv_token = 2 * 2 * 1 * 32 * 8  # layers x (keys, values) x Hkv x D x float64
    short, long = 200, 1000
    grown = step_bytes(model, prefilled(model, config, [long, long - 9], kernel=name), 2) - step_bytes(
        model, prefilled(model, config, [short, short - 9], kernel=name), 2)
    assert grown / (long - short) / 2 < kv_token / 4, grown


def test_the_dynamic_cache_step_copies_the_cache():
    """The measurement above catches the old path: a ``DynamicCache`` decode step of padded rows allocates at least
    one copy of every row's keys and values."""
    from snapeval.cache import make_cache
    from snapeval.decoding import prefill

    model = tiny_model(heads=2, kv_heads=1)
    kv_token = 2 * 2 * 1 * 32 * 8
    sizes = {}
    for length in (200, 1000):
        ids, mask = encode_prompts(TinyTokenizer(), [random_prompt(length, 1), random_prompt(length - 9, 2)])
        cache = make_cache(model, FullConfig())
        with torch.inference_mode():
            prefill(model, cache, ids, attention_mask=mask,
                    position_ids=(mask.cumsum(-1) - 1).masked_fill(mask == 0, 0))
            grown_mask = torch.cat([mask, mask.new_ones(2, 1)], dim=1)
            with AllocatedBytes() as counter:
                decode_step(model, cache, torch.full((2, 1), 5), torch.tensor([[length], [length - 9]]),
                            attention_mask=grown_mask)
        sizes[length] = counter.bytes
    assert (sizes[1000] - sizes[200]) / 800 / 2 >= kv_token


# --- one compiled decode step: one graph, CUDA graphs not skipped ---------------------------------------------------
def compiled_graph_mutation_report(step, *args) -> list[str | None]:
    """Compile ``step(*args)`` with inductor (``fullgraph=True``: a graph break raises) and return, per compiled
    graph, inductor's own verdict on its mutated inputs (``check_for_mutation_ignore_cuda_graph_managed_tensor``,
    what decides "skipping cudagraphs due to mutated inputs" on a GPU): None when every mutated input is a static
    address."""
    from torch._inductor import config as inductor_config
    from torch._inductor import output_code
    from torch._inductor.cudagraph_utils import check_for_mutation_ignore_cuda_graph_managed_tensor

    reports = []
    original = output_code.CompiledFxGraph.__init__
    signature = inspect.signature(original)

    def recording_init(self, *a, **k):
        original(self, *a, **k)
        bound = signature.bind(self, *a, **k)
        reports.append(check_for_mutation_ignore_cuda_graph_managed_tensor(
            bound.arguments["gm"], self.mutated_inputs, self.mutated_input_idxs, bound.arguments["static_input_idxs"]))

    torch._dynamo.reset()
    with inductor_config.patch(force_disable_caches=True, **{"triton.cudagraph_trees": True}), \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(output_code.CompiledFxGraph, "__init__", recording_init)
        compiled = torch.compile(step, fullgraph=True, dynamic=False)
        with torch.inference_mode():
            compiled(*args)
    torch._dynamo.reset()
    return reports


@pytest.mark.parametrize("name", ["split", "sdpa"])
def test_one_compiled_engine_step_has_no_graph_break_and_keeps_cuda_graphs(name):
    from snapeval.engine import Engine

    model, tok = tiny_model(), TinyTokenizer()
    engine = Engine(model, tok, 24, num_slots=2, compile=False, decoding=DecodeChoices(decode_kernel=name))
    for layer in engine.cache.layers:
        layer.always_mask = True  # as a compiled engine has it: one graph whatever the slots hold
    engine.generate([random_prompt(40, 1), random_prompt(30, 2)], SamplingParams(max_new_tokens=2))
    engine.position_ids.copy_(engine.cache.next_positions()[:, None])
    reports = compiled_graph_mutation_report(decode_step, model, engine.cache, engine.input_ids, engine.position_ids)
    assert reports == [None]


def test_one_compiled_static_full_step_keeps_cuda_graphs():
    model = tiny_model()
    cache = prefilled(model, FullConfig(), [40, 31], kernel="split")
    tokens = torch.full((2, 1), 5)
    positions = cache.next_positions()[:, None].clone()
    for tensor in (tokens, positions):
        torch._dynamo.mark_static_address(tensor)
    assert compiled_graph_mutation_report(decode_step, model, cache, tokens, positions) == [None]


def test_a_compiled_step_calls_the_split_kernel_as_one_operator_with_equal_output():
    """Inside torch.compile the split kernel is the opaque ``snapeval::split_decode_attention`` operator (the H100 run:
    inductor's own fusion of its products was slower than eager); its output equals the eager kernel's."""
    torch.manual_seed(0)
    query, key = torch.randn(2, 8, 1, 16), torch.randn(2, 2, 512, 16)
    value, valid = torch.randn_like(key), torch.rand(2, 512) > 0.2
    eager = kernels.decode_attention(query, key, value, valid, 0.25, kernel="split")
    seen = []

    def backend(graph_module, example_inputs):
        seen.extend(str(node.target) for node in graph_module.graph.nodes if node.op == "call_function")
        return graph_module

    compiled = torch.compile(lambda q, k, v, m: kernels.decode_attention(q, k, v, m, 0.25, kernel="split"),
                             backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(query, key, value, valid), eager)
    assert any("split_decode_attention" in target for target in seen), seen
    assert not any("bmm" in target or "softmax" in target for target in seen), seen


def test_a_captured_decode_step_refuses_what_it_cannot_replay():
    from snapeval.decoding.graphs import CapturedDecodeStep

    with pytest.raises(ValueError, match="warmup"):
        CapturedDecodeStep(warmup=0)
    with pytest.raises(ValueError, match="CUDA"):
        CapturedDecodeStep()(None, None, torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1, dtype=torch.long))


@pytest.mark.parametrize("config", [FullConfig(), SnapStreamConfig.from_budget(64)], ids=["full", "snapstream"])
def test_a_compiled_step_writes_the_rows_in_place_without_copying_them(config):
    """Inductor's code for one compiled decode step allocates no buffer the size of a layer's rows: the new token is
    written into the static rows in place. The former ``scatter_`` write compiled into a copy of every layer's keys and
    values per step (the H100 run: a 14-row compiled step 2.8x slower than eager)."""
    from torch._inductor.utils import run_and_get_code

    model = tiny_model()
    cache = prefilled(model, config, [300, 291], reserve=64, kernel="split")
    tokens = torch.full((2, 1), 5)
    positions = cache.next_positions()[:, None].clone()
    for tensor in (tokens, positions):
        torch._dynamo.mark_static_address(tensor)
    rows_shape = tuple(cache.layers[0].keys.shape)
    torch._dynamo.reset()
    compiled = torch.compile(decode_step, fullgraph=True, dynamic=False)
    with torch.inference_mode():
        _, code = run_and_get_code(compiled, model, cache, tokens, positions)
    torch._dynamo.reset()
    allocation = f"empty_strided_cpu({rows_shape}".replace(" ", "")
    assert code and not any(allocation in text.replace(" ", "") for text in code), rows_shape
