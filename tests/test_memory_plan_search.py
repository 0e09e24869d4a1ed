"""The group search by bounds (``snapeval/memory_plan/search.py``) against building every candidate
(``plan_group(..., exhaustive=True)``, the search as it was): the same plan, reasons and phases included, or the same
one-line error, on randomized groups (shapes, methods, presses, lengths, budgets, host memory, capture, a shared
step), with far fewer candidates built."""
from __future__ import annotations

import random

import pytest

import snapeval.memory_plan.search as search
from snapeval.cache import resolve_method
from snapeval.errors import SnapevalError
from snapeval.memory_plan import CostModel, Item, ModelShape, plan_group, predict_paper_scale

#: Methods a random group draws from (a press prefills through its own hooks; the full cache keeps the whole prompt).
METHODS = ("full", "snapstream", "streamingllm", "snapkv", "kvpress:SnapKVPress")


def random_shape(rng: random.Random) -> ModelShape:
    kv_heads, head_dim = rng.choice((1, 2, 8)), rng.choice((16, 64, 128))
    q_heads = kv_heads * rng.choice((1, 4))
    return ModelShape(layers=rng.choice((2, 16, 32)), kv_heads=kv_heads, q_heads=q_heads, head_dim=head_dim,
                      hidden=q_heads * head_dim, intermediate=rng.choice((2, 4)) * q_heads * head_dim,
                      vocab=rng.choice((1000, 128256)), dtype_bytes=rng.choice((2, 4)),
                      weight_bytes=rng.randint(10**6, 2 * 10**10))


def random_configs(rng: random.Random) -> list:
    configs = {}
    for _ in range(rng.randint(1, 6)):
        method = rng.choice(METHODS)
        config = resolve_method(method) if method == "full" else resolve_method(method, rng.choice((16, 256, 4096)))
        configs[config.label] = config
    return list(configs.values())


def scaled(rng: random.Random, unit: int, low: float, high: float) -> int:
    """``unit`` times a factor drawn log-uniformly from 10**low to 10**high."""
    return int(unit * 10 ** rng.uniform(low, high))


def random_group(rng: random.Random) -> tuple[tuple, dict]:
    """One call of :func:`plan_group`: its positional arguments and keywords."""
    shape, configs = random_shape(rng), random_configs(rng)
    items = [Item(rng.randint(16, 40_000), rng.randint(1, 4096), rng.choice((0, 0, 12)))
             for _ in range(rng.randint(1, 40))]
    capture = shape.capture_bytes(max(i.prompt for i in items), 64)
    in_use = shape.weight_bytes + rng.randint(0, 10**8)
    device = rng.choice(("cuda:0", "cuda:0", "cuda:0", "cpu"))
    kwargs = dict(chunk=rng.choice((1, 3, 8, 64, 256)), window=rng.choice((8, 64)), device=device, in_use=in_use,
                  budget=None if rng.random() < 0.1 else in_use + scaled(rng, capture, -1, 2),
                  alone={c.label for c in configs if rng.random() < 0.15}, captured=rng.random() < 0.7,
                  one_step=rng.random() < 0.6, prefill_tokens=rng.choice((None, None, None, 1024)))
    if rng.random() < 0.5:
        kwargs.update(host_budget=scaled(rng, capture, -1, 2), host_in_use=rng.choice((0, capture // 4)))
    if rng.random() < 0.3:  # another GPU's rates: the fixed step time against the bytes weighs otherwise
        kwargs["cost"] = CostModel("test", 10 ** rng.uniform(11, 13), scaled(rng, shape.weight_bytes, -2, 1))
    return (shape, configs, items), kwargs


def outcome(args: tuple, kwargs: dict) -> str:
    """The plan, every field of it, or the one-line error."""
    try:
        return repr(plan_group(*args, **kwargs))
    except SnapevalError as exc:
        return f"error: {exc}"


class Built:
    """Counts the candidates :func:`snapeval.memory_plan.search.build` builds (their phases and peak)."""

    def __init__(self, monkeypatch) -> None:
        self.count, self._build = 0, search.build
        monkeypatch.setattr(search, "build", self)

    def __call__(self, *args, **kwargs):
        self.count += 1
        return self._build(*args, **kwargs)

    def taking(self, function, *args) -> tuple[object, int]:
        """What ``function(*args)`` returns and the candidates it built."""
        before = self.count
        return function(*args), self.count - before


@pytest.mark.parametrize("seed", range(6))
def test_the_search_by_bounds_takes_the_plan_that_building_every_candidate_takes(seed, monkeypatch):
    rng, built = random.Random(seed), Built(monkeypatch)
    bounded = exhaustive = 0
    for case in range(40):
        args, kwargs = random_group(rng)
        want, many = built.taking(outcome, args, {**kwargs, "exhaustive": True})
        got, few = built.taking(outcome, args, kwargs)
        assert got == want, (seed, case, kwargs)
        assert few <= many, (seed, case)
        bounded, exhaustive = bounded + few, exhaustive + many
    assert bounded * 2 < exhaustive


def test_the_paper_grid_builds_a_few_candidates_where_every_one_was_built(monkeypatch):
    """The paper's Llama grid (16 configurations, 8 items of 128k tokens, captured, on 80 GB): the same plan from one
    or a few candidates built, where building every one built 8 per way of decoding alone."""
    built = Built(monkeypatch)
    plan, few = built.taking(predict_paper_scale)
    monkeypatch.setattr(search, "_fewest_bytes", search._every_candidate)
    reference, many = built.taking(predict_paper_scale)
    assert plan == reference
    assert many == 16 and few <= 4
