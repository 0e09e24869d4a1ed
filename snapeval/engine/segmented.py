"""One engine for several configurations: their rows decode in one step (:class:`SegmentAdmission`).

A shared group (:mod:`snapeval.branching`) decodes each compressed configuration of a chunk in its own engine: every
step of every engine reads the model's weights for that configuration's rows only. Where the memory plan says so
(``GroupPlan.shared_step``, on a GPU), the configurations decoded in rows share one engine instead: each has its own
segment of rows (its own method, budget and slots, :class:`~snapeval.cache.segments.SegmentedCache`), one step
decodes every row of every segment, and its fixed cost and the weights are paid once for all of them. A row decodes
the tokens it decodes in its configuration's own engine (``tests/test_segments.py``, float32).

What differs from an engine of one configuration is admission only, so it is a policy the engine is given
(``Engine(model, tokenizer, admission=SegmentAdmission(configs, rows), decoding=...)``, :func:`segmented_engine`),
not a subclass: the engine's prefill, step, capture and stop checks are the same code.
"""
from __future__ import annotations

from collections import deque
from typing import Sequence

from snapeval.cache import MethodConfig, method_info
from snapeval.cache.segments import SegmentedCache
from snapeval.decoding import Request
from snapeval.engine.engine import Engine
from snapeval.errors import SnapevalError, check_int
from snapeval.run_args import DecodeChoices


class SegmentAdmission:
    """Admission over the row segments of several configurations (the policy an :class:`~snapeval.engine.Engine`
    is given; :class:`~snapeval.engine.engine.Admission` is the one-configuration policy).

    Args:
        configs: the configurations (methods with a static-row layout), one segment each.
        rows: each segment's rows (its slots of continuous batching).

    A request is admitted only into a free row of its own segment (``Engine.generate(..., segments=...)`` names
    each request's); the caller builds every row (``generate(..., prefill=...)``: a shared prefill's branch). Each
    segment's rows are sized as its own engine's would be (a fixed-size method: its budget; an appending one: its
    largest request's kept prompt and new tokens).
    """

    keep_rows = False

    def __init__(self, configs: Sequence[MethodConfig], rows: Sequence[int]):
        if not configs or len(configs) != len(rows):
            raise ValueError(f"{len(configs)} configurations and {len(rows)} row counts; allowed: one count each")
        for config in configs:
            if not method_info(config).static_rows:
                raise SnapevalError(f"method={config.method!r} has no static-row layout; a segmented engine takes "
                                    "methods the engine runs")
        for count in rows:
            check_int("rows", count, 1)
        self.configs, self.rows = list(configs), [int(r) for r in rows]
        self.num_slots = sum(self.rows)
        #: each segment's slots per row: its budget, or (appending) what its largest request needs, grown per call
        self.slots = [c.budget if method_info(c).fixed_size else 1 for c in self.configs]
        self._segment: dict[int, int] = {}  # request index -> its segment, per call
        self._of_row = [s for s, count in enumerate(self.rows) for _ in range(count)]  # row -> its segment
        #: per segment, the active rows summed over the call's steps (its share of the step's occupancy)
        self.active_by_segment = [0] * len(self.configs)

    def prefill_cache(self, engine):
        return None  # every row is built by the caller

    def allocate(self, engine) -> None:
        """Every segment's rows at its own slots, in one :class:`~snapeval.cache.segments.SegmentedCache`."""
        engine.cache = None  # the old pool goes before the new one is allocated
        engine.cache = SegmentedCache(engine.model, self.configs, self.rows, self.slots, *engine.row_shape,
                                      engine.dtype, engine.layer_devices, decoding=engine.decoding,
                                      always_mask=engine.always_mask)

    def assign(self, requests: list[Request], segments: Sequence[int] | None) -> None:
        """Request ``i`` decodes in segment ``segments[i]``."""
        if (segments is None or len(segments) != len(requests)
                or any(not 0 <= s < len(self.configs) for s in segments)):
            raise ValueError(f"segments must give each of the {len(requests)} prompts one of "
                             f"{len(self.configs)} segments")
        self._segment = dict(enumerate(int(s) for s in segments))
        self.active_by_segment = [0] * len(self.configs)

    def grow(self, requests: list[Request]) -> bool:
        grow = False
        for index, config in enumerate(self.configs):
            mine = [r for r in requests if self._segment[r.index] == index]
            if not mine or method_info(config).fixed_size:
                continue
            needed = (max(config.kept_tokens(len(r.prompt)) for r in mine)
                      + max(r.params.max_new_tokens for r in mine))
            if needed > self.slots[index]:
                self.slots[index], grow = needed, True
        return grow

    def next(self, queue: deque, active: dict[int, Request]) -> tuple[Request, int] | None:
        """The first queued request whose segment has a free row, and that row."""
        for position, request in enumerate(queue):
            segment = self._segment[request.index]
            slot = next((s for s, of in enumerate(self._of_row) if of == segment and s not in active), None)
            if slot is not None:
                del queue[position]
                return request, slot
        return None

    def stepped(self, active: dict[int, Request]) -> None:
        for slot in active:
            self.active_by_segment[self._of_row[slot]] += 1


def segmented_engine(model, tokenizer, configs: Sequence[MethodConfig], rows: Sequence[int], *,
                     decoding: DecodeChoices | None = None, seed: int = 0) -> Engine:
    """An :class:`~snapeval.engine.Engine` whose rows are ``configs``' segments (:class:`SegmentAdmission`), one
    recorded step for every segment: ``segmented_engine(model, tokenizer, [a, b], [8, 8]).generate(prompts,
    sampling, segments=[0, 1, ...], prefill=...)``."""
    return Engine(model, tokenizer, admission=SegmentAdmission(configs, rows), decoding=decoding, seed=seed)
