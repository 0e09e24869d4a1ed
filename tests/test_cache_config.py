import pytest

from snapeval.cache import METHODS, SnapKVConfig, SnapStreamConfig, method_config, streamingllm_config
from snapeval.errors import SnapevalError


def test_budget_is_the_sum_of_the_split():
    cfg = SnapStreamConfig(sink=4, recent=100, topk=20)
    assert cfg.budget == 124
    assert cfg.to_dict()["budget"] == 124


def test_from_budget_documented_defaults():
    cfg = SnapStreamConfig.from_budget(1024)
    assert (cfg.sink, cfg.recent, cfg.topk, cfg.observation, cfg.kernel, cfg.pooling) == (4, 512, 508, 32, 5, "avg")
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
        (dict(kernel=4), "kernel"),
        (dict(kernel=0), "kernel"),
        (dict(kernel=-3), "kernel"),
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


def test_ring_smaller_than_window_is_fine_without_topk():
    assert SnapStreamConfig(sink=1, recent=4, topk=0, observation=32).budget == 5


def test_snapkv_config_validation():
    with pytest.raises(ValueError, match="SnapKVConfig.observation"):
        SnapKVConfig(budget=16, observation=32)
    with pytest.raises(ValueError, match="SnapKVConfig.budget"):
        SnapKVConfig(budget=0)


def test_method_config_maps_every_method():
    assert set(METHODS) == {"full", "snapstream", "streamingllm", "snapkv"}
    assert method_config("full", 128) is None
    assert method_config("snapstream", 128).budget == 128
    assert method_config("streamingllm", 128) == streamingllm_config(128)
    assert method_config("streamingllm", 128).topk == 0
    assert method_config("snapkv", 128) == SnapKVConfig(budget=128)
    with pytest.raises(SnapevalError, match="method='h2o'.*full, snapstream, streamingllm, snapkv"):
        method_config("h2o", 128)
    with pytest.raises(SnapevalError, match="needs a budget"):
        method_config("snapstream")
    with pytest.raises(SnapevalError, match="topk"):
        method_config("snapstream", 128, topk=7)
