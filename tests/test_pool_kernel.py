"""The SnapKV-family pooling width is typed ``pool_kernel`` on every surface a user sets it and stored as ``kernel``
(its old name): cell ids, results columns and ``snapeval run`` output names stay as they were; the old key is still
accepted everywhere, with one deprecation line naming both keys."""
from __future__ import annotations

import copy
import importlib
import json
import warnings
from argparse import Namespace
from pathlib import Path

import pytest

from snapeval.cache import resolve_method
from snapeval.cache.config import SnapKVConfig, SnapStreamConfig
from snapeval.errors import SnapevalError

REPO = Path(__file__).resolve().parents[1]


def deprecations(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, DeprecationWarning)]


def one_warning_naming_both(record) -> None:
    (message,) = deprecations(record)
    assert "kernel is deprecated" in message and "pool_kernel" in message and "\n" not in message


def test_the_python_api_takes_both_keys_and_stores_kernel():
    new = SnapKVConfig(budget=64, pool_kernel=7)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        old = SnapKVConfig(budget=64, kernel=7)
    one_warning_naming_both(record)
    assert old == new and new.pool_kernel == 7
    assert new.identity() == {"method": "snapkv", "budget": 64, "observation": 32, "kernel": 7, "pooling": "avg"}
    for build in (lambda **k: SnapStreamConfig.from_budget(64, **k), lambda **k: resolve_method("snapkv", 64, **k),
                  lambda **k: resolve_method("snapstream", 64, **k)):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert build(kernel=3) == build(pool_kernel=3)
        one_warning_naming_both(record)
    with pytest.warns(DeprecationWarning, match=r"SnapKVConfig.kernel is deprecated; read .pool_kernel"):
        assert new.kernel == 7  # a reader of the old attribute still gets the value
    with pytest.raises(SnapevalError, match="kernel and pool_kernel are the same setting"):
        resolve_method("snapkv", 64, kernel=3, pool_kernel=5)


@pytest.mark.parametrize("key", ["pool_kernel", "kernel"])
def test_a_bad_value_names_the_typed_field_in_one_line(key):
    with pytest.raises(SnapevalError) as err:
        resolve_method("snapkv", 64, **{key: 4})
    assert str(err.value) == "SnapKVConfig.pool_kernel=4 is invalid; allowed: a positive odd integer"


def test_the_committed_cells_keep_their_ids_when_set_through_pool_kernel():
    """Every compressed cell of the committed quickstart, its configuration set again through ``pool_kernel``, hashes
    to its committed cell id (the policy is stored with ``kernel``)."""
    from snapeval.results.schema import identity_hash

    checked = 0
    for path in sorted((REPO / "results" / "quickstart" / "cells").glob("*.json")):
        cell = json.loads(path.read_text())
        policy = dict(cell["identity"]["policy"])
        if "kernel" not in policy:
            continue
        settings = {k: v for k, v in policy.items() if k not in ("method", "budget", "kernel")}
        if policy["method"] == "streamingllm":
            settings.pop("recent")
        config = resolve_method(policy["method"], policy["budget"], pool_kernel=policy["kernel"], **settings)
        assert config.identity() == policy
        assert identity_hash({**cell["identity"], "policy": config.identity()}) == cell["cell_id"] == path.stem
        checked += 1
    assert checked >= 10


def test_a_sweep_config_takes_both_keys_with_the_same_cell_ids():
    from snapeval.sweep import expand_grid, parse_config

    base = {"name": "t", "models": ["smollm2-135m-instruct"],
            "tasks": [{"name": "snapeval_passkey", "limit": 4, "metadata": {"max_seq_lengths": [512]}}],
            "methods": [{"method": "snapkv", "budgets": [64, 128]}, {"method": "snapstream", "budgets": [64]}]}

    def cells(key):
        raw = copy.deepcopy(base)
        for entry in raw["methods"]:
            entry[key] = 5
        return expand_grid(parse_config(raw))

    default = expand_grid(parse_config(base))
    assert [c.cell_id for c in cells("pool_kernel")] == [c.cell_id for c in default]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        old = cells("kernel")
    assert [c.cell_id for c in old] == [c.cell_id for c in default]
    messages = deprecations(record)
    assert messages == [f"methods[{i}].kernel is deprecated; use methods[{i}].pool_kernel (the same setting of "
                        f"{name}, still stored as 'kernel')" for i, name in enumerate(["SnapKVConfig",
                                                                                        "SnapStreamConfig"])]
    view = default[0].view().to_dict()  # the results table's column keeps its name
    assert view["kernel"] == 5 and "pool_kernel" not in view
    raw = copy.deepcopy(base)
    raw["methods"][0].update(kernel=5, pool_kernel=5)
    with pytest.raises(SnapevalError, match=r"methods\[0\]: methods\[0\].kernel and methods\[0\].pool_kernel"):
        parse_config(raw)


def test_snapeval_run_takes_both_keys_and_names_its_output_as_before(tmp_path, monkeypatch):
    from snapeval.cli import main as cli
    from snapeval.harness.cli import DEPRECATED_SETTING_FLAGS, default_output, method_args

    def parsed(*items, **flags):
        return method_args(Namespace(method="snapkv", method_arg=list(items), press_arg=[],
                                     **{**dict.fromkeys(DEPRECATED_SETTING_FLAGS), **flags}))

    assert parsed("pool_kernel=7") == ({"pool_kernel": 7}, {})
    for old in (lambda: parsed("kernel=7"), lambda: parsed(kernel="7")):  # --method-arg kernel=7, --kernel 7
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert old() == ({"pool_kernel": 7}, {})
        assert len(deprecations(record)) == 1 and "pool_kernel" in deprecations(record)[0]
    seen = []

    def fake_evaluate(model_args, tasks, **kwargs):
        seen.append(model_args["config"])
        return {"results": {}, "snapeval": {"kv_cache_bytes": 0, "decode_tokens_per_s": None,
                                            "prefill_tokens_per_s": None}}

    monkeypatch.setattr(importlib.import_module("snapeval.harness.evaluate"), "evaluate", fake_evaluate)
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--tasks", "snapeval_passkey", "--method", "snapkv", "--budget", "64"]
    assert cli([*argv, "--method-arg", "pool_kernel=7"]) == 0
    with pytest.warns(DeprecationWarning, match="kernel is deprecated; use pool_kernel"):
        assert cli([*argv, "--method-arg", "kernel=7"]) == 0
    assert seen == [resolve_method("snapkv", 64, pool_kernel=7)] * 2
    # the output's name and hash read the stored key, so both spellings write the file an earlier run wrote
    from snapeval.run_args import RunArgs

    before = default_output(["snapeval_passkey"], {"pretrained": "smollm2-135m-instruct", "method": "snapkv",
                                                   "budget": 64, "run_args": RunArgs(max_gen_toks=256), "kernel": 7},
                            limit=None, seed=0, metadata={})
    written = sorted(p.relative_to(tmp_path) for p in (tmp_path / "results" / "runs").iterdir())
    assert written == [before] and "kernel=7" in before.name and "pool_kernel" not in before.name


def test_lm_eval_model_args_take_both_keys(tiny_dir):
    from snapeval.harness.lm_eval_model import SnapStreamLM
    from snapeval.harness.model_args import check_model_args

    for key in ("pool_kernel", "kernel"):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            check_model_args({"pretrained": str(tiny_dir), "method": "snapkv", "budget": "64", key: "7"})
        assert deprecations(record) == []  # the model lm-eval builds next says it, once
    with pytest.raises(SnapevalError, match="^pool_kernel=4 is invalid; allowed: a positive odd integer$"):
        check_model_args({"pretrained": str(tiny_dir), "method": "snapkv", "budget": "64", "kernel": "4"})
    models = {}
    for key in ("pool_kernel", "kernel"):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            models[key] = SnapStreamLM(pretrained=str(tiny_dir), dtype="float64", method="snapkv", budget="64",
                                       **{key: "7"})
        assert len([m for m in deprecations(record) if "pool_kernel" in m]) == (key == "kernel")
    assert models["kernel"].method_config == models["pool_kernel"].method_config == resolve_method(
        "snapkv", 64, pool_kernel=7)
    assert models["kernel"].method_config.to_dict()["kernel"] == 7  # what describe() records, as before


def test_the_simulator_takes_both_keys(capsys):
    from snapeval.cli import main as cli

    argv = ["simulate", "--model", "llama-3.1-8b-instruct", "--hardware", "sn40l-8", "--prompt-len", "32k",
            "--method", "snapkv", "--sweep", "budget=2048,4096", "--json"]
    assert cli([*argv, "--method-arg", "pool_kernel=7"]) == 0
    new = capsys.readouterr().out
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert cli([*argv, "--method-arg", "kernel=7"]) == 0
    assert capsys.readouterr().out == new
    (message,) = deprecations(record)  # once, not once per budget of the sweep
    assert message.startswith("--method-arg kernel is deprecated; use --method-arg pool_kernel")


def test_every_surface_translates_the_old_key_through_one_entry_point(monkeypatch, tiny_dir):
    """The constructor, ``from_budget``, ``resolve_method``, ``--method-arg``, a sweep's method entry, lm-eval's
    model_args and ``snapeval simulate`` all hand the settings a user wrote to ``MethodConfig.typed`` (the one place
    the old key becomes ``pool_kernel`` and is warned about) before their own checks."""
    from snapeval.cache.config import MethodConfig
    from snapeval.harness.cli import DEPRECATED_SETTING_FLAGS, method_args
    from snapeval.harness.model_args import check_model_args
    from snapeval.simulator.cli import method_for
    from snapeval.sweep import parse_config

    typed, seen = MethodConfig.typed.__func__, []

    def recording(cls, given, **options):
        seen.append("kernel" in given)
        return typed(cls, given, **options)

    monkeypatch.setattr(MethodConfig, "typed", classmethod(recording))
    surfaces = {
        "constructor": lambda: SnapKVConfig(budget=64, kernel=7),
        "from_budget": lambda: SnapStreamConfig.from_budget(64, kernel=7),
        "resolve_method": lambda: resolve_method("snapkv", 64, kernel=7),
        "--method-arg": lambda: method_args(Namespace(method="snapkv", method_arg=["kernel=7"], press_arg=[],
                                                      **dict.fromkeys(DEPRECATED_SETTING_FLAGS))),
        "sweep": lambda: parse_config({"name": "t", "models": ["smollm2-135m-instruct"],
                                       "tasks": [{"name": "snapeval_passkey", "limit": 4,
                                                  "metadata": {"max_seq_lengths": [512]}}],
                                       "methods": [{"method": "snapkv", "budgets": [64], "kernel": 7}]}),
        "model_args": lambda: check_model_args({"pretrained": str(tiny_dir), "method": "snapkv", "budget": "64",
                                                "kernel": "7"}),
        "simulate": lambda: method_for("snapkv", {"kernel": 7})(64),
    }
    for surface, call in surfaces.items():
        seen.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            call()
        assert seen and seen[0], f"{surface} did not hand the old key to MethodConfig.typed first"
