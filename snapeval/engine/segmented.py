"""One engine for several configurations: their rows decode in one step (:class:`SegmentedEngine`).

A shared group (:mod:`snapeval.branching`) decodes each compressed configuration of a chunk in its own engine: every
step of every engine reads the model's weights for that configuration's rows only. Where the memory plan says so
(``GroupPlan.shared_step``, on a GPU), the configurations decoded in rows share one engine instead: each has its own
segment of rows (its own method, budget and slots, :class:`~snapeval.cache.segments.SegmentedCache`), one step
decodes every row of every segment, and its fixed cost and the weights are paid once for all of them. A row decodes
the tokens it decodes in its configuration's own engine (``tests/test_segments.py``, float32).
"""
from __future__ import annotations

from collections import deque
from typing import Sequence

from snapeval.cache import MethodConfig, method_info
from snapeval.cache.segments import SegmentedCache
from snapeval.decoding import Completion, Request, SamplingParams
from snapeval.engine.engine import Engine, PrefillFn
from snapeval.errors import SnapevalError, check_int


class SegmentedEngine(Engine):
    """Continuous batching over the row segments of several configurations:
    ``SegmentedEngine(model, tokenizer, [config_a, config_b], rows=[8, 8]).generate(prompts, sampling,
    segments=[0, 1, ...], prefill=...)``.

    Args:
        configs: the configurations (methods with a static-row layout), one segment each.
        rows: each segment's rows (its slots of continuous batching).
        capture, seed, decode_kernel: as :class:`~snapeval.engine.Engine` (one recorded step for every segment).

    A request is admitted only into a free row of its own segment; ``prefill`` gives each request's row, built by
    the caller (a shared prefill's branch). Each segment's rows are sized as its own engine's would be (a fixed-size
    method: its budget; an appending one: its largest request's kept prompt and new tokens).
    """

    def __init__(self, model, tokenizer, configs: Sequence[MethodConfig], rows: Sequence[int], *,
                 capture: bool = False, seed: int = 0, decode_kernel: str = "auto", capture_required: bool = False):
        if not configs or len(configs) != len(rows):
            raise ValueError(f"{len(configs)} configurations and {len(rows)} row counts; allowed: one count each")
        for config in configs:
            if not method_info(config).static_rows:
                raise SnapevalError(f"method={config.method!r} has no static-row layout; a segmented engine takes "
                                    "methods the engine runs")
        for count in rows:
            check_int("rows", count, 1)
        self.configs, self.rows = list(configs), [int(r) for r in rows]
        #: each segment's slots per row: its budget, or (appending) what its largest request needs, grown per call
        self._segment_slots = [c.budget if method_info(c).fixed_size else 1 for c in self.configs]
        self._segment: dict[int, int] = {}  # request index -> its segment, per call
        #: per segment, the active rows summed over the call's steps (its share of the step's occupancy)
        self.active_by_segment = [0] * len(self.configs)
        super().__init__(model, tokenizer, self.configs[0], num_slots=sum(self.rows), capture=capture, seed=seed,
                         decode_kernel=decode_kernel, capture_required=capture_required)

    def _allocate(self, slots: int | None) -> None:
        """Every segment's rows at its own slots (``slots`` is the single-configuration engine's and unused)."""
        self._release_graph()
        self.cache = None  # the old pool goes before the new one is allocated
        self.cache = SegmentedCache(self.model, self.configs, self.rows, self._segment_slots, *self._row_shape,
                                    self.dtype, self.layer_devices, decode_kernel=self.decode_kernel,
                                    always_mask=self._always_mask)
        self.slots = max(self._segment_slots)
        for slot in range(self.num_slots):
            self._park(slot)

    def _size_rows(self, requests: list[Request]) -> None:
        grow = False
        for index, config in enumerate(self.configs):
            mine = [r for r in requests if self._segment[r.index] == index]
            if not mine or method_info(config).fixed_size:
                continue
            needed = (max(config.kept_tokens(len(r.prompt)) for r in mine)
                      + max(r.params.max_new_tokens for r in mine))
            if needed > self._segment_slots[index]:
                self._segment_slots[index], grow = needed, True
        if grow:
            self._allocate(None)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams | Sequence[SamplingParams] | None
                 = None, *, segments: Sequence[int], prefill: PrefillFn) -> list[Completion]:
        """:meth:`Engine.generate` where request ``i`` decodes in segment ``segments[i]``; ``prefill`` is required
        (there is no one configuration to prefill for)."""
        if len(segments) != len(prompts) or any(not 0 <= s < len(self.configs) for s in segments):
            raise ValueError(f"segments must give each of the {len(prompts)} prompts one of "
                             f"{len(self.configs)} segments")
        self._segment = dict(enumerate(int(s) for s in segments))
        self.active_by_segment = [0] * len(self.configs)
        return super().generate(prompts, sampling, prefill=prefill)

    def prefill(self, index: int, prompt: list[int]):
        raise ValueError("a segmented engine decodes rows built by its caller: pass generate(..., prefill=...)")

    def reserve(self, prompt_tokens: int, sampling: SamplingParams) -> None:
        raise ValueError("a segmented engine does not build rows in place")

    def _next_admission(self, queue: deque, active: dict[int, Request]) -> tuple[Request, int] | None:
        """The first queued request whose segment has a free row, and that row."""
        for position, request in enumerate(queue):
            start, end = self.cache.bounds[self._segment[request.index]]
            slot = next((s for s in range(start, end) if s not in active), None)
            if slot is not None:
                del queue[position]
                return request, slot
        return None

    def _step(self, active: dict[int, Request], done: dict[int, Completion], start: float) -> None:
        for slot in active:
            self.active_by_segment[self.cache.segment_of(slot)[0]] += 1
        super()._step(active, done, start)
