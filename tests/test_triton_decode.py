"""The ``triton`` decode kernel (snapeval/cache/triton_decode.py) against the ``sdpa`` kernel, in Triton's CPU
interpreter (``TRITON_INTERPRET=1``, in a subprocess: it must be set before triton is imported), and its CPU parts
(the split chooser, the error without triton), which always run."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from snapeval.cache import kernels
from snapeval.errors import SnapevalError

HAS_TRITON = importlib.util.find_spec("triton") is not None

# Two workarounds for Triton 3.6's interpreter (not the kernel), run before every interpreter script: with numpy >= 2.3 a loop bound read from a scalar
# argument fails (int() of a 1-element array), and its tl.dot multiplies bfloat16's raw 16-bit patterns; bfloat16 is
# widened to float32 exactly (as the GPU's tensor cores do before accumulating in float32).
INTERPRETER_WORKAROUNDS = r'''
import numpy as np
import triton.language as tl
import triton.runtime.interpreter as ti

_patch_tensor = ti._patch_lang_tensor
def _patched_tensor(tensor, scope):
    _patch_tensor(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
ti._patch_lang_tensor = _patched_tensor
_dot = ti.InterpreterBuilder.create_dot
def _widen(h):
    if getattr(h.dtype, "scalar", h.dtype) == tl.bfloat16:
        return ti.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
    return h
ti.InterpreterBuilder.create_dot = lambda self, a, b, d, p, m: _dot(self, _widen(a), _widen(b), d, p, m)
'''
INTERPRETER_SCRIPT = INTERPRETER_WORKAROUNDS + r'''
import dataclasses, json, sys
import torch

from snapeval.cache import kernels

torch.manual_seed(0)
results = []
from snapeval.cache import triton_decode

for name, (batch, heads, kv_heads, slots, dim, dtype, mask, *machine) in json.loads(sys.argv[1]).items():
    multiprocessors = machine[0] if machine else 132  # the interpreter's default: an H100's
    triton_decode._multiprocessors = lambda device, count=multiprocessors: count
    dtype = getattr(torch, dtype)
    query = torch.randn(batch, heads, 1, dim, dtype=dtype)
    key = torch.randn(batch, kv_heads, slots, dim, dtype=dtype) * 2
    value = torch.randn(batch, kv_heads, slots, dim, dtype=dtype)
    valid = None
    if mask != "none":
        valid = torch.rand(batch, slots) > 0.3  # holes
        valid[:, slots - slots // 5:] = False  # an empty tail
        if mask == "masked_slices":  # row 0: slots 64-191 (two whole slices of 64) masked
            valid[0, 64:192] = False
    scaling = dim**-0.5
    out = kernels.decode_attention(query, key, value, valid, scaling, kernel="triton")
    ref = kernels.decode_attention(query, key, value, valid, scaling, kernel="sdpa")
    ref64 = kernels.decode_attention(query.double(), key.double(), value.double(), valid, scaling, kernel="sdpa")
    results.append({"name": name, "shape": list(out.shape), "dtype": str(out.dtype),
                    "finite": bool(torch.isfinite(out).all()),
                    "splits": kernels.decode_splits(slots, batch * kv_heads, multiprocessors, 64),
                    "diff_vs_sdpa": float((out.float() - ref.float()).abs().max()),
                    "diff_vs_float64": float((out.double() - ref64).abs().max())})
triton_decode._multiprocessors = lambda device: 132
# ragged pools (several configurations' rows of different slot counts): one launch against the padded reference
for name, (slots, heads, kv_heads, dim, dtype) in json.loads(sys.argv[2]).items():
    dtype = getattr(torch, dtype)
    base = torch.cumsum(torch.tensor([0] + slots[:-1]), 0) * kv_heads
    vectors = sum(slots) * kv_heads
    positions = torch.arange(vectors)
    positions[torch.rand(vectors) < 0.3] = -1  # holes
    rows = kernels.RaggedRows(torch.randn(vectors, dim, dtype=dtype) * 2, torch.randn(vectors, dim, dtype=dtype),
                              positions, base, torch.tensor(slots), kv_heads, max(slots), sum(slots))
    query = torch.randn(len(slots), heads, 1, dim, dtype=dtype)
    out = kernels.ragged_decode_attention(query, rows, 0.125, kernel="triton")
    ref = kernels.ragged_decode_attention(query.double(), dataclasses.replace(
        rows, keys=rows.keys.double(), values=rows.values.double()), 0.125, kernel="sdpa")
    results.append({"name": name, "shape": list(out.shape), "dtype": str(out.dtype),
                    "finite": bool(torch.isfinite(out).all()),
                    "diff_vs_float64": float((out.double() - ref).abs().max())})
# a compiled step calls the kernel as the opaque operator snapeval::triton_decode_attention (fullgraph: no break)
step = torch.compile(lambda q, k, v, m: kernels.decode_attention(q, k, v, m, 0.25, kernel="triton"),
                     backend="aot_eager", fullgraph=True)
query, key, value = torch.randn(2, 8, 1, 64), torch.randn(2, 2, 200, 64), torch.randn(2, 2, 200, 64)
valid = torch.rand(2, 200) > 0.5
compiled = step(query, key, value, valid)
eager = kernels.decode_attention(query, key, value, valid, 0.25, kernel="sdpa")
results.append({"name": "compiled", "diff_vs_sdpa": float((compiled - eager).abs().max())})
print(json.dumps(results))
'''

CASES = {  # name: (B, Hq, Hkv, S, D, dtype, mask[, multiprocessors: 132, an H100's, unless given])
    "gqa4_d64_holes": (2, 8, 2, 300, 64, "float32", "holes"),
    "gqa4_d128_unmasked": (3, 32, 8, 130, 128, "float32", "none"),
    "mha_d128_bf16": (1, 4, 4, 200, 128, "bfloat16", "holes"),
    "gqa8_d128_bf16": (2, 16, 2, 520, 128, "bfloat16", "holes"),
    "gqa6_d64_masked_slices": (2, 6, 1, 700, 64, "float32", "masked_slices"),
    "gqa2_d64_fp16_masked_slices": (2, 4, 2, 400, 64, "float16", "masked_slices"),
    "gqa4_d128_33_slices": (1, 8, 2, 2100, 128, "float32", "holes"),  # the combine's chunks of 16: 16 + 16 + 1
    # few slices of several tiles each: the online softmax across tiles, a masked tile before a valid one. An
    # H100 splits so only where many rows fill its 132 SMs (25 x 8 rows: 2 slices of 5 tiles; 25 x 4: 5 of 2); the
    # interpreter's time grows with the programs, so a few rows on a machine of 8 or 10 split alike
    "gqa2_d128_bf16_5_tiles": (2, 16, 8, 640, 128, "bfloat16", "masked_slices", 8),
    "gqa2_d64_2_tiles": (2, 8, 4, 640, 64, "float32", "masked_slices", 10),
}
RAGGED_CASES = {  # name: (each row's slots, Hq, Hkv, D, dtype)
    # rows shorter than one slice, one of a single slot, one many slices long (2,100: 33 slices of 64)
    "ragged_gqa4_d64": ([70, 300, 130], 8, 2, 64, "float32"),
    "ragged_gqa2_d128_bf16": ([640, 64, 1, 2100], 16, 8, 128, "bfloat16"),
}
TOLERANCE = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 2e-2}


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not importable (the test extra installs it: "
                                           "pip install -e '.[test]')")
def test_triton_kernel_matches_sdpa_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", INTERPRETER_SCRIPT, json.dumps(CASES), json.dumps(RAGGED_CASES)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(results, indent=1))
    assert [r["name"] for r in results] == list(CASES) + list(RAGGED_CASES) + ["compiled"]
    assert results.pop()["diff_vs_sdpa"] < TOLERANCE["float32"]
    for result in results[len(CASES):]:
        slots, heads, _, dim, dtype = RAGGED_CASES[result["name"]]
        assert result["shape"] == [len(slots), 1, heads, dim] and result["finite"], result
        assert result["diff_vs_float64"] < TOLERANCE[dtype], result
    results = results[:len(CASES)]
    for result in results:
        batch, heads, _, _, dim, dtype, *_ = CASES[result["name"]]
        assert result["shape"] == [batch, 1, heads, dim]
        assert result["dtype"] == f"torch.{dtype}"
        assert result["finite"], result
        assert result["diff_vs_sdpa"] < TOLERANCE[dtype], result
        assert result["diff_vs_float64"] < TOLERANCE[dtype], result
    assert results[4]["splits"][0] > 3  # the masked slices are whole slices of a split launch
    assert results[6]["splits"][0] == 33
    assert results[7]["splits"] == [2, 320] and results[8]["splits"] == [5, 128]


def test_decode_splits_fill_the_multiprocessors_with_whole_tiles():
    for slots, rows in [(131072, 8), (4096, 8), (1000, 256), (64, 1), (65, 3), (300, 4), (100_000, 112)]:
        splits, width = kernels.decode_splits(slots, rows, 132, 64)
        assert width % 64 == 0 and width >= 64
        assert (splits - 1) * width < slots <= splits * width  # every slot covered, no empty slice
        tiles = -(-slots // 64)
        want = min(tiles, -(-3 * 132 // rows))
        assert want <= splits < 2 * want or splits == tiles == want  # 3 waves of 132 SMs, fewer than 6
    assert kernels.decode_splits(131072, 8, 132, 64) == (52, 2560)  # 416 programs: 3.2 waves of 132
    assert kernels.decode_splits(4096, 256, 132, 64) == (2, 2048)
    assert kernels.decode_splits(100, 1, 132, 64) == (2, 64)
    with pytest.raises(SnapevalError, match="decode_splits"):
        kernels.decode_splits(0, 8, 132, 64)


def test_triton_kernel_without_triton_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    monkeypatch.delitem(sys.modules, "snapeval.cache.triton_decode", raising=False)
    query, key = torch.randn(1, 4, 1, 64), torch.randn(1, 2, 128, 64)
    with pytest.raises(SnapevalError, match="decode kernel 'triton' needs the triton package") as caught:
        kernels.decode_attention(query, key, key, None, None, kernel="triton")
    assert "\n" not in str(caught.value)
    assert "triton" in kernels.DECODE_KERNELS
    with pytest.raises(SnapevalError, match="decode_kernel='triton' cannot run on cpu") as caught:
        kernels.resolve_decode_kernel("triton", "cpu")
    assert "\n" not in str(caught.value)


def test_triton_runs_only_on_cuda_with_the_package(monkeypatch):
    assert "triton" not in kernels.runnable_decode_kernels("cpu")
    assert kernels.runnable_decode_kernels("cpu") == ("sdpa", "split", "flex")
    assert ("triton" in kernels.runnable_decode_kernels("cuda")) == HAS_TRITON
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else object())
    assert "triton" not in kernels.runnable_decode_kernels("cuda")
    assert kernels.resolve_decode_kernel("auto", "cuda") == "split"  # auto without the package
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert "triton" in kernels.runnable_decode_kernels("cuda")
    assert kernels.resolve_decode_kernel("auto", "cuda") == "triton"  # auto: the fastest under CUDA graphs
    assert kernels.resolve_decode_kernel("auto", "cpu") == "sdpa"  # every committed CPU result's numerics


@pytest.mark.skipif(not (HAS_TRITON and torch.cuda.is_available()), reason="needs a CUDA device and triton")
def test_triton_kernel_on_cuda_matches_sdpa_and_is_captured_by_a_cuda_graph():
    """On the GPU (compiled by Triton, not interpreted): the interpreter's cases plus Llama-3.1-8B's shape at 128k
    slots, against SDPA in float32; then one call captured in a CUDA graph and replayed on new inputs."""
    torch.manual_seed(0)
    cases = {**CASES, "llama8b_128k": (1, 32, 8, 131072, 128, "bfloat16", "holes"),
             "llama8b_batch": (6, 32, 8, 8200, 128, "bfloat16", "masked_slices")}
    for name, (batch, heads, kv_heads, slots, dim, dtype, mask) in cases.items():
        dtype = getattr(torch, dtype)
        query = torch.randn(batch, heads, 1, dim, dtype=dtype, device="cuda")
        key = torch.randn(batch, kv_heads, slots, dim, dtype=dtype, device="cuda") * 2
        value = torch.randn(batch, kv_heads, slots, dim, dtype=dtype, device="cuda")
        valid = None
        if mask != "none":
            valid = torch.rand(batch, slots, device="cuda") > 0.3
            valid[:, slots - slots // 5:] = False
            if mask == "masked_slices":
                valid[0, 64:192] = False
        out = kernels.decode_attention(query, key, value, valid, dim**-0.5, kernel="triton")
        ref = kernels.decode_attention(query.float(), key.float(), value.float(), valid, dim**-0.5, kernel="sdpa")
        assert out.shape == (batch, 1, heads, dim) and out.dtype == dtype, name
        assert torch.isfinite(out).all(), name
        diff = float((out.float() - ref).abs().max())
        assert diff < TOLERANCE[str(dtype).removeprefix("torch.")], (name, diff)
    query = torch.randn(4, 32, 1, 128, dtype=torch.bfloat16, device="cuda")
    key, value = torch.randn(2, 4, 8, 4096, 128, dtype=torch.bfloat16, device="cuda")
    valid = torch.rand(4, 4096, device="cuda") > 0.2
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kernels.decode_attention(query, key, value, valid, None, kernel="triton")  # compiles outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = kernels.decode_attention(query, key, value, valid, None, kernel="triton")
    for tensor in (query, key, value):
        tensor.copy_(torch.randn_like(tensor))
    graph.replay()
    torch.cuda.synchronize()
    ref = kernels.decode_attention(query.float(), key.float(), value.float(), valid, None, kernel="sdpa")
    assert float((out.float() - ref).abs().max()) < TOLERANCE["bfloat16"]


def test_ragged_splits_share_the_pool_s_work_evenly():
    """A pool's slices are of equal work (slot-heads over 3 waves of the SMs), so a long row among short ones is split
    and short rows are not split finer than a tile: a 128k full-cache row beside 255 rows of 4k slots, 8 KV heads."""
    most, total = 131072, 131072 + 255 * 4096
    splits, width = kernels.ragged_splits(most, total, 8, 132, 64)
    assert width % 64 == 0 and (splits - 1) * width < most <= splits * width
    per_program = -(-total * 8 // (3 * 132))  # the pool's slot-heads over 396 programs
    assert width == 64 * -(-per_program // 64) == 23808
    assert splits == 6  # the long row in 6 slices; a 4k row in one
    # a pool whose rows are all short: no slice below a tile, none beyond the longest row
    assert kernels.ragged_splits(100, 100 * 300, 8, 132, 64) == (1, 128)
    assert kernels.ragged_splits(64, 64, 1, 132, 64) == (1, 64)
    with pytest.raises(SnapevalError, match="ragged_splits"):
        kernels.ragged_splits(100, 50, 8, 132, 64)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not importable (the test extra installs it: "
                                           "pip install -e '.[test]')")
@pytest.mark.parametrize("ragged", [False, True])
def test_the_kernel_compiles_for_an_h100_without_one(ragged):
    """Triton's real compiler (not its interpreter) takes both forms of the split launch to an sm_90 cubin, bfloat16:
    no GPU needed, so a type the interpreter lets through cannot first fail on a lent machine."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from snapeval.cache import triton_decode

    pointers = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "valid_ptr": "*i64" if ragged else "*u8",
                "base_ptr": "*i64" if ragged else "*bf16", "row_slots_ptr": "*i64" if ragged else "*bf16",
                "m_ptr": "*fp32", "l_ptr": "*fp32", "acc_ptr": "*fp32"}
    scalars = ["stride_qb", "stride_qh", "stride_qd", "stride_kb", "stride_kh", "stride_ks", "stride_kd",
               "stride_vb", "stride_vh", "stride_vs", "stride_vd", "stride_valid_b", "stride_valid_s",
               "num_kv", "slots", "slice_len", "num_splits"]
    constants = {"GROUP": 4, "HEAD_DIM": 128, "BLOCK_D": 128, "BLOCK_G": 16, "BLOCK": 64, "HAS_VALID": True,
                 "IEEE": False, "RAGGED": ragged}
    signature = {**pointers, **{name: "i32" for name in scalars}, "scaling": "fp32",
                 **{name: "constexpr" for name in constants}}
    names = list(signature)
    source = ASTSource(fn=triton_decode._split_kernel, signature=signature,
                       constexprs={(names.index(k),): v for k, v in constants.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32))
    assert compiled.asm["cubin"] and ".entry" in compiled.asm["ptx"]


SEGMENTED_SCRIPT = INTERPRETER_WORKAROUNDS + r'''
import json
import snapeval.cache.segments as segments
from snapeval.cache import FullConfig, SnapKVConfig, SnapStreamConfig, StreamingLLMConfig, triton_decode
from snapeval.engine import Engine, SamplingParams
from snapeval.engine.segmented import segmented_engine
from tests.conftest import TinyTokenizer, random_prompt, tiny_model

calls = []
launch = triton_decode.ragged_decode_attention
triton_decode.ragged_decode_attention = lambda *args: calls.append(1) or launch(*args)
model, tokenizer = tiny_model("llama"), TinyTokenizer()
configs = [SnapStreamConfig(sink=2, recent=10, topk=8, observation=6), StreamingLLMConfig(sink=2, recent=16),
           SnapKVConfig(budget=20, observation=6), FullConfig()]
prompts = [random_prompt(n, seed=n) for n in (70, 23, 45, 8)]
# new tokens: each request ends at its own step (rows refilled mid-run); the 70-token prompt's 11 steps wrap
# SnapStream's ring of 10, the 45-token prompt's 6 wrap StreamingLLM's ring of 16 (slots 12..15, then 0, 1)
params = [SamplingParams(max_new_tokens=k) for k in (12, 3, 7, 2)]
rows = [2, 1, 2, 1]
own = [Engine(model, tokenizer, c, num_slots=r) for c, r in zip(configs, rows)]
expected = [engine.generate(prompts, params) for engine in own]
requests = [(c, i) for i in range(len(prompts)) for c in range(len(configs))]
# every pool the engine allocates (it grows its appending segments per call) attends with "triton" on CPU tensors,
# which no CPU run resolves to
segments.resolve_decode_kernel = lambda choice, device: "triton"
engine = segmented_engine(model, tokenizer, configs, rows)
done = engine.generate([prompts[i] for _, i in requests], [params[i] for _, i in requests],
                       segments=[c for c, _ in requests], prefill=lambda j, p: own[requests[j][0]].prefill(j, p))
print(json.dumps({"same": [d.token_ids == expected[c][i].token_ids for d, (c, i) in zip(done, requests)],
                  "ragged_calls": len(calls), "steps": engine.stats.decode_steps,
                  "layers": len(engine.cache.layers)}))
'''


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not importable (the test extra installs it: "
                                           "pip install -e '.[test]')")
def test_a_segmented_engine_decodes_through_the_ragged_launch_in_the_interpreter():
    """The whole path on the ragged launch (Hugging Face's strided queries, the pool's write, every configuration's
    rows in one call), in Triton's interpreter: every request decodes the tokens of its configuration's own engine
    (float32)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", SEGMENTED_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(out["same"]) == 16 and all(out["same"]), out
    assert out["ragged_calls"] == out["steps"] * out["layers"] > 0  # one ragged launch per layer and step
