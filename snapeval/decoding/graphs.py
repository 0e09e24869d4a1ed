"""A decode step captured once as a CUDA graph and replayed: the launch overhead of a step removed without a compiler.

A batch-1 decode step of an 8B model launches some 600 kernels; eagerly, Python and the launches take longer than
the GPU needs to stream the weights (the H100 run of ``benchmarks/gpu.py``: 27 ms a step at every prompt length
against a byte floor of 7-11 ms). :class:`CapturedDecodeStep` records :func:`~snapeval.decoding.step.decode_step`
over one cache's static rows into a ``torch.cuda.CUDAGraph`` and replays it: the same kernels, in the same order, on
the same addresses. It needs what a compiled step with CUDA graphs needs (``torch.compile(mode="reduce-overhead")``,
which inductor can only give when nothing but static-address buffers is mutated): rows allocated once and written by
index (:func:`snapeval.cache.base.mark_static`), positions and the write slot advanced in place on the device, and
no host synchronisation inside the step (a decode kernel that masks without reading the mask on the host).
"""
from __future__ import annotations

import torch

from snapeval.decoding.step import decode_step
from snapeval.errors import check_int


class CapturedDecodeStep:
    """``step(model, cache, tokens, positions, *extra)`` with :func:`decode_step`'s signature and result (or those of
    ``step``, a function of the same arguments and any ``extra`` ones that decodes one step, such as the engine's
    step that also chooses the next tokens in place), replayed from a CUDA graph captured at the first call.
    ``tokens`` and ``positions`` (``[B, 1]``) must be the same tensors at every call (the caller writes them in
    place before each step), as must ``model``, ``cache`` and ``extra``; the returned logits
    ``[B, V]`` are a static tensor the next replay overwrites. ``warmup`` eager steps run on a side stream before the
    capture (cuBLAS and the allocator settle there) and advance the cache as decode steps do."""

    def __init__(self, warmup: int = 2, step=decode_step):
        check_int("warmup", warmup, 1, error=ValueError)
        self.warmup, self.step = warmup, step
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None
        self._bound: tuple | None = None

    @staticmethod
    def supports(device) -> bool:
        """Whether a step on ``device`` can be recorded (CUDA graphs: a CUDA device)."""
        return torch.device(device).type == "cuda"

    def __call__(self, model, cache, tokens: torch.Tensor, positions: torch.Tensor, *extra) -> torch.Tensor:
        bound = (id(model), id(cache), tokens.data_ptr(), positions.data_ptr(), *map(id, extra))
        if self.graph is None:
            self._capture(model, cache, tokens, positions, *extra)
            self._bound = bound
        elif bound != self._bound:
            raise ValueError("a captured decode step replays the model, cache, tokens and positions it was captured "
                             "with; build another CapturedDecodeStep for others")
        self.graph.replay()
        return self.logits

    def _capture(self, model, cache, tokens, positions, *extra) -> None:
        if tokens.device.type != "cuda":
            raise ValueError(f"a captured decode step needs CUDA tensors; tokens are on {tokens.device}")
        side = _side_stream(tokens.device)
        side.wait_stream(torch.cuda.current_stream(tokens.device))
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                self.step(model, cache, tokens, positions, *extra)
        torch.cuda.current_stream(tokens.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.logits = self.step(model, cache, tokens, positions, *extra)
        self.graph = graph

    def release(self) -> None:
        """Drop the graph and its memory pool."""
        self.graph = self.logits = self._bound = None


_SIDE_STREAMS: dict = {}


def _side_stream(device) -> "torch.cuda.Stream":
    """One warm-up stream per device for every capture: the caching allocator keeps freed blocks per stream, so a
    new stream per capture (a group records one graph per engine, hundreds in a sweep) would strand each warm-up's
    blocks on a stream nothing uses again."""
    key = torch.device(device)
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(key)
    return _SIDE_STREAMS[key]
