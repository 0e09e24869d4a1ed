"""The method contract, looped over the method table (``METHOD_TABLE``), the press matrix (``tests/default_presses.py``)
and the example method of ``CONTRIBUTING.md`` (``tests/fixtures/strided_method.py``, registered here only):

- its cache built from a shared prefill equals the one its own prefill builds (same kept positions, keys, values and
  greedy tokens);
- it keeps :meth:`~snapeval.cache.config.MethodConfig.kept_tokens` tokens per layer and KV head, after prefill and
  while decoding;
- each row of a left-padded batch of prompts of different lengths keeps what its own unpadded run keeps and decodes
  the same greedy tokens, and every row holds its sinks and its window (a scored-selection layer's
  ``sinks()``/``window()``) after prefill and while decoding;
- it reports exact KV bytes: what its configuration says it holds (:meth:`~snapeval.cache.config.MethodConfig.
  cache_slots` for a fixed-size cache, its kept tokens otherwise) times the bytes of one slot;
- it rejects a bad value of each of its declared settings, and an unknown setting, with one line naming the field,
  the value and the allowed values.

A new method passes these by being registered: nothing here names a method.
"""
from __future__ import annotations

import pytest
import torch

from snapeval.branching import BranchSet
from snapeval.cache.base import CompressedKVCache
from snapeval.cache import METHOD_TABLE, make_cache, resolve_method
from snapeval.decoding import decode_step, prefill
from snapeval.errors import SnapevalError
from tests.conftest import TinyTokenizer, random_prompt, tiny_model
from tests.default_presses import DEFAULT_PRESSES
from tests.fixtures.random_method import ENTRY as RANDOM
from tests.fixtures.strided_method import ENTRY as EXAMPLE

BUDGET = 16
PROMPTS = (60, 9)  # longer and shorter than the budget
PADDED = (60, 23, 41, 9, 17)  # one left-padded batch: rows longer and shorter than the budget
DECODED = 5

METHODS = [*METHOD_TABLE.names(), EXAMPLE.name, RANDOM.name]


@pytest.fixture(autouse=True, scope="module")
def example_registered():
    with METHOD_TABLE.registered(EXAMPLE), METHOD_TABLE.registered(RANDOM):
        yield


def config_of(name: str, **settings):
    """The method at the test budget (the reference method takes none)."""
    return resolve_method(name, None if METHOD_TABLE.is_reference(name) else BUDGET, **settings)


def configs():
    """Every method at the test budget, and every press of the matrix (when kvpress is installed)."""
    out = [pytest.param(name, {}, id=name) for name in METHODS]
    out += [pytest.param(name, args, id=name, marks=pytest.mark.skipif(not _kvpress(), reason="kvpress missing"))
            for name, args in DEFAULT_PRESSES]
    return out


def _kvpress() -> bool:
    try:
        import kvpress  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", heads=6, kv_heads=2)


def own_prefill(model, config, prompt):
    """The per-cell path: a fresh cache of the method, the prompt prefilled through it."""
    cache = make_cache(model, config)
    return prefill(model, cache, torch.tensor([prompt]))[0], cache


def greedy(model, cache, logits, position, steps=DECODED):
    """``steps`` greedy tokens decoded through ``cache`` (one :func:`~snapeval.decoding.decode_step` each)."""
    tokens = []
    for step in range(steps):
        tokens.append(int(logits.argmax()))
        logits = decode_step(model, cache, torch.tensor([[tokens[-1]]]), torch.tensor([[position + step]]))[0]
    return tokens


def filled_slots(cache, layers: int) -> torch.Tensor:
    """``[layers, Hkv]`` slots holding a token, per layer and KV head (row 0)."""
    return torch.stack([(cache.slot_positions(layer)[0] >= 0).sum(dim=-1) for layer in range(layers)])


def slot_bytes(model) -> int:
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 2 * model.dtype.itemsize


@pytest.mark.parametrize("name, args", configs())
@pytest.mark.parametrize("length", PROMPTS)
def test_a_shared_prefill_builds_the_cache_its_own_prefill_builds(model, name, args, length):
    config = config_of(name, **args)
    if not METHOD_TABLE.get(name).branches:
        pytest.skip(f"{name} prefills through its own hooks (its entry says it does not branch)")
    prompt = random_prompt(length, seed=length)
    branches = BranchSet(model, TinyTokenizer(), [config])
    logits, branch = branches.branch(config, branches.prefill(prompt), prompt)
    own_logits, own = own_prefill(model, config, prompt)
    assert torch.equal(logits, own_logits)
    for layer in range(model.config.num_hidden_layers):
        assert torch.equal(branch.slot_positions(layer), own.slot_positions(layer)), layer
        assert torch.equal(branch.layers[layer].keys, own.layers[layer].keys), layer
        assert torch.equal(branch.layers[layer].values, own.layers[layer].values), layer
    assert greedy(model, branch, logits, length) == greedy(model, own, own_logits, length)


@pytest.mark.parametrize("name, args", configs())
@pytest.mark.parametrize("length", PROMPTS)
def test_it_keeps_its_kept_tokens_and_reports_exact_kv_bytes(model, name, args, length):
    config = config_of(name, **args)
    logits, cache = own_prefill(model, config, random_prompt(length, seed=length))
    layers = model.config.num_hidden_layers
    exact = not name.startswith("kvpress:")  # a press may keep its budget on average over layers and heads
    for generated in (0, DECODED):
        if generated:
            greedy(model, cache, logits, length, steps=generated)
        kept = filled_slots(cache, layers)
        if exact:
            assert (kept == config.kept_tokens(length, generated)).all(), (generated, kept.tolist())
        else:
            assert float(kept.float().mean()) == pytest.approx(config.kept_tokens(length, generated), abs=0.5)
        slots = config.budget if config.FIXED_SIZE else config.kept_tokens(length, generated)
        if exact:
            assert cache.kv_bytes_per_row() == slots * slot_bytes(model), generated
        else:
            assert cache.kv_bytes_per_row() == pytest.approx(slots * slot_bytes(model), rel=0.05)
        assert config.kept_tokens(length, generated) <= config.cache_slots(length, max(generated, 1))


def kept_positions(cache, layer: int, row: int) -> list[list[int]]:
    """Per KV head, the sorted positions the row holds."""
    return [sorted(p for p in head.tolist() if p >= 0) for head in cache.slot_positions(layer)[row]]


def edges(cache, layer: int, length: int) -> set[int]:
    """The positions a row of ``length`` tokens must hold: its sinks and its window (a scored-selection layer's)."""
    from snapeval.cache.selection import ScoredSelectionLayer

    held = cache.layers[layer]
    if not isinstance(held, ScoredSelectionLayer):
        return set()
    return set(range(min(held.sinks(), length))) | set(range(max(0, length - held.window()), length))


def left_padded(prompts):
    """``(input_ids, attention_mask, position_ids)`` of a left-padded batch, as ``model.generate`` feeds them."""
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask, (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)


@pytest.mark.parametrize("name", METHODS)
def test_left_padded_rows_keep_and_decode_what_each_row_alone_does(model, name):
    from snapeval import generate

    config = config_of(name)
    prompts = [random_prompt(n, seed=n) for n in PADDED]
    ids, mask, positions = left_padded(prompts)
    cache = make_cache(model, config)
    prefill(model, cache, ids, attention_mask=mask, position_ids=positions, cache_position=torch.arange(ids.shape[1]))
    compressed = isinstance(cache, CompressedKVCache)  # the full cache holds the padding too (masked)
    for row, prompt in enumerate(prompts if compressed else ()):
        _, own = own_prefill(model, config, prompt)
        for layer in range(model.config.num_hidden_layers):
            kept = kept_positions(cache, layer, row)
            assert kept == kept_positions(own, layer, 0), (row, layer)
            assert all(edges(own, layer, len(prompt)) <= set(head) for head in kept), (row, layer)
        own_logits, own = own_prefill(model, config, prompt)
        greedy(model, own, own_logits, len(prompt))
        for layer in range(model.config.num_hidden_layers):  # the window follows the decoded tokens
            window = edges(own, layer, len(prompt) + DECODED)
            assert all(window <= set(head) for head in kept_positions(own, layer, 0)), (row, layer)
    batched = generate(model, TinyTokenizer(), prompts, config=config, max_new_tokens=DECODED)
    for row, prompt in enumerate(prompts):
        alone = generate(model, TinyTokenizer(), [prompt], config=config, max_new_tokens=DECODED)
        assert batched[row].token_ids == alone[0].token_ids, row


def bad_values(setting) -> list:
    """Values its declaration rules out: the wrong type, below its minimum, an even kernel, a string not among its
    choices."""
    if setting.type is str:
        return [7, "not-" + "-".join(setting.choices or ("a-choice",))]
    out = ["x", 1.5, True]
    if setting.minimum is not None:
        out.append(setting.minimum - 1)
    if setting.odd:
        out += [0, 4]
    return out


def _one_line_naming(err, field: str) -> None:
    message = str(err.value)
    assert "\n" not in message and f"{field}=" in message and "allowed" in message, message


@pytest.mark.parametrize("name", METHODS)
def test_it_rejects_bad_settings_in_one_line(name):
    info = METHOD_TABLE.get(name)
    for setting in info.settings():
        for value in bad_values(setting):
            with pytest.raises(SnapevalError) as err:
                config_of(name, **{setting.name: value})
            _one_line_naming(err, setting.name)
    with pytest.raises(SnapevalError) as err:
        config_of(name, no_such_setting=1)
    assert "\n" not in str(err.value) and "no_such_setting" in str(err.value)
    allowed = ", ".join(s.name for s in info.settings()) or "none"
    assert str(err.value).endswith(f"allowed settings: {allowed}")


@pytest.mark.parametrize("name, args", [pytest.param(n, a, id=n) for n, a in DEFAULT_PRESSES])
def test_a_press_rejects_an_unknown_argument_in_one_line(name, args):
    pytest.importorskip("kvpress")
    with pytest.raises(SnapevalError) as err:
        resolve_method(name, BUDGET, no_such_argument=1)
    assert "\n" not in str(err.value) and "no_such_argument" in str(err.value) and "allowed" in str(err.value)


@pytest.mark.parametrize("name", METHODS)
def test_every_setting_is_declared_with_help_and_parses_from_text(name):
    """What the CLI flags, YAML keys and model_args read: each setting's help, its allowed values, its text form."""
    from snapeval.cache.methods import settings_from_text

    config = config_of(name)
    for setting in METHOD_TABLE.get(name).settings():
        assert setting.help and setting.allowed()
        stored = getattr(config, setting.name)
        assert settings_from_text(name, {setting.name: str(stored)}) == {setting.name: stored}
        assert setting.name in METHOD_TABLE.setting_names()  # a results-table column and a regress key


# ------------------------------------------------- the example method through the CLI, the sweep and the lm-eval model
# Nothing outside tests/fixtures/strided_method.py names it: registering its entry is all it takes.

def test_the_example_method_runs_through_the_lm_eval_model(tiny_dir, task_dir):
    from snapeval.harness import evaluate

    out = evaluate({"pretrained": str(tiny_dir), "dtype": "float64", "batch_size": 2, "method": "strided",
                    "budget": 32, "stride": "3"}, ["tiny_gen"], include_path=task_dir, log_samples=True)
    assert out["snapeval"]["config"]["settings"]["stride"] == 3
    assert out["snapeval"]["kv_cache_bytes"] > 0 and out["samples"]["tiny_gen"]
    with pytest.raises(SnapevalError) as err:
        evaluate({"pretrained": str(tiny_dir), "method": "strided", "budget": 32, "stride": "0"}, ["tiny_gen"],
                 include_path=task_dir)
    _one_line_naming(err, "stride")


def test_the_example_method_runs_through_the_cli(tiny_dir, task_dir, tmp_path, monkeypatch, capsys):
    import json

    from snapeval.cli import main as cli

    monkeypatch.setenv("SNAPEVAL_TASKS_DIR", str(task_dir))
    argv = ["run", "--task", "tiny_gen", "--model", str(tiny_dir), "--dtype", "float64", "--method", "strided",
            "--budget", "32"]
    assert cli([*argv, "--method-arg", "stride=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "stride=0" in err and "allowed" in err
    out = tmp_path / "run.json"
    assert cli([*argv, "--method-arg", "stride=3", "--limit", "2", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["snapeval"]["config"]["settings"]["stride"] == 3


def test_the_example_method_is_a_sweep_method_entry():
    from snapeval.sweep import expand_grid, parse_config

    raw = {"name": "t", "models": ["smollm2-135m-instruct"],
           "tasks": [{"name": "snapeval_passkey", "limit": 2, "metadata": {"max_seq_lengths": [512]}}],
           "methods": ["full", {"method": "strided", "budgets": [64, 128], "stride": 3}]}
    cells = expand_grid(parse_config(raw))
    strided = [c.config for c in cells if c.config.method == "strided"]
    assert sorted(c.budget for c in strided) == [64, 128] and all(c.stride == 3 for c in strided)
    raw["methods"][1]["stride"] = 0
    with pytest.raises(SnapevalError, match=r"methods\[1\]\.stride: stride=0 is invalid; allowed: an integer >= 1"):
        parse_config(raw)


def test_the_architecture_rule_asks_the_method_table_which_method_is_the_reference(tmp_path):
    """A model of an architecture the compressed caches do not support is refused before loading unless its method is
    the table's uncompressed reference (Hugging Face's own cache runs any architecture): the rule reads
    ``METHOD_TABLE.is_reference``, not the name ``"full"``."""
    import json

    from snapeval.harness.lm_eval_model import check_declared_architecture

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    for name in METHOD_TABLE.names():
        config = resolve_method(name, None if METHOD_TABLE.is_reference(name) else 64)
        if METHOD_TABLE.is_reference(name):
            check_declared_architecture(str(tmp_path), config)
        else:
            with pytest.raises(SnapevalError, match=f"is a 'gpt2' model; method='{name}' supports: llama"):
                check_declared_architecture(str(tmp_path), config)
