import pytest

from snapeval.cache import (
    METHOD_TABLE,
    METHODS,
    FullConfig,
    SnapKVConfig,
    SnapStreamConfig,
    StreamingLLMConfig,
    resolve_method,
    streamingllm_config,
)
from snapeval.errors import SnapevalError


def test_budget_is_the_sum_of_the_split():
    cfg = SnapStreamConfig(sink=4, recent=100, topk=20)
    assert cfg.budget == 124
    assert cfg.to_dict()["budget"] == 124


def test_from_budget_documented_defaults():
    cfg = SnapStreamConfig.from_budget(1024)
    assert (cfg.sink, cfg.recent, cfg.topk, cfg.observation, cfg.pool_kernel, cfg.pooling) == (4, 512, 508, 32, 5, "avg")
    assert cfg.budget == 1024
    small = SnapStreamConfig.from_budget(16)
    assert small.budget == 16 and small.topk == 0  # the ring must hold the observation window before top-k exists


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(sink=-1), "sink"),
        (dict(recent=0), "recent"),
        (dict(topk=-3), "topk"),
        (dict(observation=0), "observation"),
        (dict(pool_kernel=4), "pool_kernel"),
        (dict(pool_kernel=0), "pool_kernel"),
        (dict(pool_kernel=-3), "pool_kernel"),
        (dict(kernel=4), "pool_kernel"),  # the old spelling: the error names the setting as it is typed now
        (dict(pooling="median"), "pooling"),
        (dict(recent=8, topk=4, observation=16), "observation"),
        (dict(sink=1.5), "sink"),
        (dict(sink=True), "sink"),
    ],
)
def test_bad_values_name_the_field_and_the_allowed_range(kwargs, field):
    with pytest.raises(ValueError) as err:
        SnapStreamConfig(**kwargs)
    message = str(err.value)
    assert f"SnapStreamConfig.{field}=" in message and "allowed" in message
    assert "\n" not in message


def test_observation_window_as_a_fraction_of_the_budget():
    """A float observation window is a fraction of the budget, stored as tokens (rounded, at least one query), for
    SnapStream and SnapKV alike; the configuration stores tokens only, so its identity is that of the tokens."""
    cfg = resolve_method("snapstream", 32768, observation=10 / 1024)
    assert cfg.observation == 320 and cfg == resolve_method("snapstream", 32768, observation=320)
    assert resolve_method("snapstream", 8192, observation=10 / 1024).observation == 80
    assert resolve_method("snapstream", 100, observation=0.001).observation == 1
    assert resolve_method("snapkv", 1000, observation=0.05).observation == 50
    for method in ("snapstream", "snapkv"):
        for bad in (0.0, 1.5, -0.2):
            with pytest.raises(SnapevalError, match=rf"observation={bad!r} is invalid; allowed: an integer >= 1 "
                                                    r"\(tokens\) or a fraction of the budget in \(0, 1\]"):
                resolve_method(method, 1024, observation=bad)
    with pytest.raises(ValueError, match="SnapStreamConfig.observation=0.5 is invalid; allowed: an integer >= 1$"):
        SnapStreamConfig(sink=4, recent=8, topk=4, observation=0.5)  # a stored configuration holds tokens
    with pytest.raises(ValueError, match="fraction of the budget; without a budget"):
        SnapStreamConfig.from_budget(None, recent=8, topk=4, observation=0.5)
    assert SnapStreamConfig.setting_named("observation").parse("0.25", "x") == 0.25  # a flag's text


def test_ring_smaller_than_window_is_fine_without_topk():
    assert SnapStreamConfig(sink=1, recent=4, topk=0, observation=32).budget == 5


def test_snapkv_config_validation():
    with pytest.raises(ValueError, match="SnapKVConfig.observation"):
        SnapKVConfig(budget=16, observation=32)
    with pytest.raises(ValueError, match="SnapKVConfig.budget"):
        SnapKVConfig(budget=0)


def test_resolve_method_maps_every_method():
    assert set(METHODS) == {"full", "snapstream", "streamingllm", "snapkv"}
    assert resolve_method("full") == FullConfig() and resolve_method("full").budget is None
    assert resolve_method("snapstream", 128).budget == 128
    assert resolve_method("streamingllm", 128) == streamingllm_config(128) == StreamingLLMConfig(sink=4, recent=124)
    assert resolve_method("streamingllm", 128).topk == 0
    assert resolve_method("snapkv", 128) == SnapKVConfig(budget=128)
    for name in METHODS:  # every configuration names its own method, and the table knows its cache class
        config = resolve_method(name, None if name == "full" else 64)
        assert config.method == name and config.identity()["method"] == name
        assert METHOD_TABLE.get(name).cache_class().__name__.endswith("Cache")
    with pytest.raises(SnapevalError, match="method='h2o'.*full, snapstream, streamingllm, snapkv"):
        resolve_method("h2o", 128)
    with pytest.raises(SnapevalError, match="needs a budget"):
        resolve_method("snapstream")
    with pytest.raises(SnapevalError, match="topk"):
        resolve_method("snapstream", 128, topk=7)
    with pytest.raises(SnapevalError, match="'full' takes no budget"):
        resolve_method("full", 128)
    with pytest.raises(SnapevalError, match="streamingllm' takes no 'observation'; allowed settings: sink, recent"):
        resolve_method("streamingllm", 128, observation=8)


@pytest.mark.parametrize("method", ["snapstream", "streamingllm"])
def test_explicit_sink_must_fit_the_budget(method):
    """An explicit sink at or above the budget is an error, never silently reduced; the default shrinks."""
    with pytest.raises(SnapevalError, match=r"sink=300 is invalid with budget=256; allowed: 0..255"):
        resolve_method(method, 256, sink=300)
    assert resolve_method(method, 3).sink == 2


def test_budget_below_two_is_one_error_for_every_method():
    for method in ("snapstream", "streamingllm", "snapkv"):
        with pytest.raises(SnapevalError, match="budget=1 is invalid; allowed: an integer >= 2"):
            resolve_method(method, 1)


def test_snapkv_config_and_resolve_method_agree_on_the_smallest_budget():
    """One budget rule (``check_budget``): the class refuses what ``resolve_method`` refuses, and builds what it
    builds."""
    with pytest.raises(ValueError, match="budget=1 is invalid; allowed: an integer >= 2"):
        SnapKVConfig(budget=1, observation=1)
    with pytest.raises(SnapevalError, match="budget=1 is invalid"):
        resolve_method("snapkv", 1)
    assert SnapKVConfig(budget=2, observation=1) == resolve_method("snapkv", 2)
