"""Every method describes what its cache holds and what its compression computes (read by the simulator, the
memory plan and the report instead of a list of method names)."""
from __future__ import annotations

import pytest

from snapeval.cache import METHOD_TABLE, resolve_method
from snapeval.cache.config import PrefillWork


def configs(budget=64):
    return [resolve_method(name, None if name == "full" else budget) for name in METHOD_TABLE.names()]


@pytest.mark.parametrize("config", configs(), ids=lambda c: c.label)
def test_kept_tokens_follow_the_layout(config):
    for prompt in (10, 64, 100):
        for generated in (0, 1, 50, 500):
            kept = config.kept_tokens(prompt, generated)
            if config.budget is None:
                assert kept == prompt + generated
            elif config.FIXED_SIZE:
                assert kept == min(config.budget, prompt + generated)
            else:
                assert kept == min(config.budget, prompt) + generated
            assert kept <= config.cache_slots(prompt, max(generated, 1))


@pytest.mark.parametrize("config", configs(), ids=lambda c: c.label)
@pytest.mark.parametrize("prompt,generated", [(10, 1), (10, 200), (64, 7), (100, 1), (100, 300), (5, 5000)])
def test_mean_kept_tokens_is_the_mean_over_decode_steps(config, prompt, generated):
    brute = sum(config.kept_tokens(prompt, g) for g in range(generated)) / generated
    assert config.mean_kept_tokens(prompt, generated) == pytest.approx(brute)


def test_fixed_size_caches_reserve_the_budget_and_growing_ones_the_request():
    snap, snapkv, full = resolve_method("snapstream", 64), resolve_method("snapkv", 64), resolve_method("full")
    assert snap.cache_slots(1000, 100) == 64
    assert snapkv.cache_slots(1000, 100) == 164 and snapkv.cache_slots(10, 100) == 110
    assert full.cache_slots(1000, 100) == 1100


def test_prefill_work_is_what_each_method_computes():
    snap = resolve_method("snapstream", 64)  # sink 4, recent 32, topk 28, observation 32
    assert snap.prefill_work(64) == PrefillWork()  # the prompt fits: nothing to do
    assert snap.prefill_work(1000) == PrefillWork(window_queries=32, scored_tokens=1000 - 4 - 32,
                                                  score_inputs=("queries",), gathered_tokens=64, gathered_segments=3)
    # [sink | ring]: two pieces; without sinks the ring alone
    assert resolve_method("streamingllm", 64).prefill_work(1000) == PrefillWork(gathered_tokens=64,
                                                                               gathered_segments=2)
    assert resolve_method("streamingllm", 64, sink=0).prefill_work(1000).gathered_segments == 1
    assert resolve_method("snapstream", 64, topk=0, recent=60).prefill_work(1000) == PrefillWork(
        gathered_tokens=64, gathered_segments=2)  # no top-k: positional, nothing scored
    snapkv = resolve_method("snapkv", 64)
    assert snapkv.prefill_work(1000).window_queries == 32 and snapkv.prefill_work(1000).scored_tokens == 968
    assert snapkv.prefill_work(1000).gathered_segments == 2  # the selected tokens and the window
    assert resolve_method("full").prefill_work(10_000).none


@pytest.mark.parametrize("fields, match", [
    (dict(window_queries=-1), "window_queries"), (dict(scored_tokens=1.5), "scored_tokens"),
    (dict(gathered_tokens=8), "gathered_segments"), (dict(gathered_segments=2), "gathered_segments"),
    (dict(score_inputs=("logits",)), "score_inputs"),
])
def test_prefill_work_rejects_what_cannot_be_priced(fields, match):
    with pytest.raises(ValueError, match=match) as err:
        PrefillWork(**fields)
    assert "\n" not in str(err.value) and "allowed" in str(err.value)


def test_fixed_size_comes_from_the_configuration():
    assert [METHOD_TABLE.get(n).fixed_size for n in METHOD_TABLE.names()] == [
        resolve_method(n, None if n == "full" else 64).FIXED_SIZE for n in METHOD_TABLE.names()]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_lengths_are_checked(bad):
    with pytest.raises(ValueError, match="allowed: an integer >= 0"):
        resolve_method("snapstream", 64).kept_tokens(bad, 0)


def test_presses_describe_their_scoring():
    pytest.importorskip("kvpress")
    snapkv = resolve_method("kvpress:SnapKVPress", 64, window_size=16)
    assert snapkv.prefill_work(1000) == PrefillWork(window_queries=16, scored_tokens=1000,
                                                    score_inputs=("hidden_states",), gathered_tokens=64,
                                                    gathered_segments=1)
    assert resolve_method("kvpress:TOVAPress", 64).prefill_work(1000).window_queries == 1
    assert resolve_method("kvpress:StreamingLLMPress", 64).prefill_work(1000) == PrefillWork(gathered_tokens=64,
                                                                                           gathered_segments=1)
    assert resolve_method("kvpress:KnormPress", 64).prefill_work(50).none
    assert resolve_method("kvpress:KnormPress", 64).kept_tokens(1000, 10) == 74
