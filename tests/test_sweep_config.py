"""Sweep configs: validation with one-line errors, grid expansion, and cell identity."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from snapeval.cli import main as cli
from snapeval.errors import SnapevalError
from snapeval.run_args import RunArgs
from snapeval.sweep import expand_grid, load_config, parse_config
from snapeval.results.schema import canonical_json

REPO = Path(__file__).resolve().parents[1]
from tests.conftest import DATA_DIR as DATA  # noqa: E402  (the shared data folder, as conftest finds it)

BASE = {
    "name": "t",
    "models": ["smollm2-135m-instruct"],
    "tasks": [{"name": "snapeval_passkey", "limit": 4, "metadata": {"max_seq_lengths": [512]}}],
    "methods": ["full", {"method": "snapstream", "budgets": [64, 128]}, {"method": "streamingllm", "budgets": [64]}],
}


def cfg(**changes):
    raw = copy.deepcopy(BASE)
    raw.update(changes)
    return parse_config(raw)


def ids(config):
    return [c.cell_id for c in expand_grid(config)]


def test_grid_expansion_and_splits():
    cells = expand_grid(cfg(seeds=[0, 1]))
    assert [c.config.label for c in cells] == ["full", "full", "snapstream@64", "snapstream@64", "snapstream@128",
                                               "snapstream@128", "streamingllm@64", "streamingllm@64"]
    snap = cells[2].config
    assert (snap.sink, snap.recent, snap.topk) == (4, 32, 28)  # the cache's default: a ring of half the budget
    assert snap.sink + snap.recent + snap.topk == snap.budget
    stream = cells[6].config
    assert (stream.sink, stream.recent, stream.topk) == (4, 60, 0)
    args = cells[2].evaluate_kwargs()
    assert args["model_args"] == {"pretrained": "smollm2-135m-instruct", "config": snap,
                                  "run_args": RunArgs(dtype="auto", batch_size=1, engine="auto", device="cpu")}
    assert args["model_args"]["config"] is snap  # the resolved object travels unchanged, never re-derived
    assert args["model_args"]["run_args"] is cells[2].model.run_args  # ... and so do the run arguments
    assert cells[2].identity()["policy"] == {"method": "snapstream", "budget": 64, "sink": 4, "recent": 32, "topk": 28,
                                             "observation": 32, "kernel": 5, "pooling": "avg"}
    assert args["tasks"] == ["snapeval_passkey"] and args["limit"] == 4 and args["seed"] == 0
    assert args["metadata"]["max_seq_lengths"] == [512] and args["metadata"]["pretrained"] == "smollm2-135m-instruct"


def test_identity_is_stable_and_ignores_key_order_and_paths(tmp_path):
    a = ids(cfg())
    raw = copy.deepcopy(BASE)
    raw["tasks"][0] = dict(reversed(list(raw["tasks"][0].items())))
    assert ids(parse_config(raw)) == a
    assert ids(cfg(out=str(tmp_path / "elsewhere"), resources={"num_gpus": 1})) == a
    cell = expand_grid(cfg())[1]
    assert canonical_json(cell.identity()) == canonical_json(expand_grid(cfg())[1].identity())


@pytest.mark.parametrize("change", [
    {"tasks": [{"name": "snapeval_passkey", "limit": 5, "metadata": {"max_seq_lengths": [512]}}]},
    {"tasks": [{"name": "snapeval_passkey", "limit": 4, "metadata": {"max_seq_lengths": [1024]}}]},
    {"tasks": [{"name": "snapeval_passkey", "limit": 4, "metadata": {"max_seq_lengths": [512]},
                "generation": {"max_gen_toks": 8}}]},
    {"generation": {"temperature": 0.5, "do_sample": True}},
    {"models": [{"pretrained": "smollm2-135m-instruct", "dtype": "bfloat16"}]},
    {"models": [{"pretrained": "smollm2-135m-instruct", "batch_size": 2}]},
    {"models": [{"pretrained": "smollm2-135m-instruct", "engine": False}]},
    {"methods": ["full", {"method": "snapstream", "budgets": [64, 128], "sink": 8}],
     "_check": "budgeted"},
    {"methods": ["full", {"method": "snapstream", "budgets": [64, 128], "recent": 0.75}], "_check": "budgeted"},
    {"methods": ["full", {"method": "snapstream", "budgets": [64, 128], "observation": 16}], "_check": "budgeted"},
    {"methods": ["full", {"method": "snapstream", "budgets": [64, 128], "pooling": "max"}], "_check": "budgeted"},
])
def test_meaning_changes_give_new_identities(change):
    change = dict(change)
    only_budgeted = change.pop("_check", None) == "budgeted"
    before = {c.config.label: c.cell_id for c in expand_grid(cfg())}
    after = {c.config.label: c.cell_id for c in expand_grid(cfg(**change))}
    labels = [k for k in before if k in after and (k != "full" or not only_budgeted)]
    assert labels and all(before[k] != after[k] for k in labels)
    if only_budgeted:
        assert before["full"] == after["full"]  # a split change does not touch the full-cache cell


def test_limit_override_and_seed_change_identity():
    base = cfg()
    assert set(ids(base.with_limit(2))).isdisjoint(ids(base))
    assert set(ids(cfg(seeds=[1]))).isdisjoint(ids(base))


@pytest.mark.skipif(not (DATA / "aime24" / "aime_2024.jsonl").is_file(), reason=f"no shared data at {DATA}")
def test_data_file_hash_enters_identity(tmp_path):
    (tmp_path / "aime24").mkdir()
    data = tmp_path / "aime24" / "aime_2024.jsonl"
    data.write_bytes((DATA / "aime24" / "aime_2024.jsonl").read_bytes())
    one = ids(cfg(tasks=["aime24_snapeval"], data_dir=str(tmp_path)))
    assert ids(cfg(tasks=["aime24_snapeval"], data_dir=str(DATA))) == one  # same bytes elsewhere: same cells
    with open(data, "a") as fh:
        fh.write("\n")
    assert set(ids(cfg(tasks=["aime24_snapeval"], data_dir=str(tmp_path)))).isdisjoint(one)
    with pytest.raises(SnapevalError, match="aime24/aime_2024.jsonl"):
        expand_grid(cfg(tasks=["aime24_snapeval"], data_dir=str(tmp_path / "nowhere")))


@pytest.mark.parametrize("change, field, allowed", [
    ({"methods": ["ful"]}, "methods[0].method", "full, snapstream, streamingllm, snapkv"),
    ({"methods": [{"method": "snapstream", "budget": [64]}]}, "methods[0]", "allowed keys: method, budgets"),
    ({"methods": [{"method": "snapstream", "budgets": [64], "pooling": "median"}]}, "methods[0].pooling", "avg, max"),
    ({"methods": [{"method": "snapstream", "budgets": [1]}]}, "methods[0].budgets[0]", ">= 2"),
    ({"methods": [{"method": "snapstream", "budgets": [64], "recent": 1.5}]}, "methods[0].recent", "(0, 1]"),
    ({"methods": [{"method": "snapstream", "budgets": [8], "sink": 6, "recent": 4}]}, "methods[0]",
     "recent=4 is invalid with budget=8 and sink=6; allowed: 1..2"),
    ({"methods": [{"method": "snapstream", "budgets": [64], "recent": 8}]}, "methods[0]",
     "the observation window must fit in the ring"),
    ({"methods": [{"method": "snapstream", "budgets": [64], "pool_kernel": 4}]}, "methods[0].pool_kernel", "odd"),
    ({"methods": [{"method": "snapstream", "budgets": [64], "kernel": 4}]}, "methods[0].pool_kernel", "odd"),
    ({"methods": ["snapkv"]}, "methods[0].budgets", "needs budgets"),
    ({"methods": [{"method": "full", "budgets": [64]}]}, "methods[0]", "takes no budgets"),
    ({"tasks": [{"name": "snapeval_passkey", "limt": 3}]}, "tasks[0]", "did you mean 'limit'"),
    ({"tasks": [{"name": "snapeval_passkey", "limit": "all"}]}, "tasks[0].limit", "integer"),
    ({"tasks": [{"name": "a b"}]}, "tasks[0].name", "not a task name"),
    ({"tasks": [{"name": "x", "metadata": {"k": {"nested": 1}}}]}, "tasks[0].metadata.k", "number, string"),
    ({"models": [{"pretrained": "m", "dtype": "fp8"}]}, "models[0].dtype", "auto, float32, bfloat16, float16"),
    ({"models": [{"pretrained": "m", "resources": {"num_gpus": -1}}]}, "models[0].resources.num_gpus", ">= 0"),
    ({"models": []}, "models", "must not be empty"),
    ({"models": [{"pretrained": "m", "engine": "sometimes"}]}, "models[0].engine", "auto, true, false"),
    ({"models": [{"pretrained": "m", "decode_kernel": "flash"}]}, "models[0].decode_kernel",
     "auto, sdpa, split, flex, triton"),
    ({"models": [{"pretrained": "m", "capture": "maybe"}]}, "models[0].capture", "auto, true, false"),
    ({"seeds": [0, 0]}, "seeds", "duplicate"),
    ({"budget": [64]}, "config", "did you mean 'budgets'"),
    ({"simulate": {"batch": "all"}}, "simulate.batch", "integer"),
    ({"shards": 0}, "shards", ">= 1"),
    ({"shard_size": "big"}, "shard_size", "integer"),
    ({"shards": 2, "shard_size": 10}, "shards", "are exclusive; allowed: one of them"),
    ({"models": [{"pretrained": "m", "max_memory": "lots"}]}, "models[0].max_memory",
     "allowed: bytes as an integer or a string such as '70GiB'"),
    ({"models": [{"pretrained": "m", "max_memory": {"tpu:0": "8GiB"}}]}, "models[0].max_memory",
     "allowed: cpu, cuda, cuda:N"),
    ({"models": [{"pretrained": "m", "max_memory": {"cpu": -5}}]}, "models[0].max_memory.cpu", "is invalid"),
])
def test_bad_configs_fail_with_one_line_naming_the_field(change, field, allowed):
    with pytest.raises(SnapevalError) as err:
        expand_grid(cfg(**change))
    message = str(err.value)
    assert "\n" not in message
    assert f"{field}:" in message and allowed in message


def test_missing_required_and_yaml_errors(tmp_path):
    with pytest.raises(SnapevalError, match="missing required key 'methods'"):
        parse_config({"models": ["m"], "tasks": ["t"]})
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [m\ntasks: t\n")
    with pytest.raises(SnapevalError, match=r"bad.yaml: line \d+ is not valid YAML") as err:
        load_config(bad)
    assert "\n" not in str(err.value)
    with pytest.raises(SnapevalError, match="not found"):
        load_config("no_such_config")


def test_cli_bad_config_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    raw = copy.deepcopy(BASE)
    raw["methods"] = [{"method": "snapstream", "budgets": [64], "sink": -1}]
    path.write_text(yaml.safe_dump(raw))
    assert cli(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0
    assert err.startswith("snapeval: error: c.yaml: methods[0].sink: sink=-1 is invalid; allowed: an integer >= 0")


@pytest.mark.parametrize("name", ["quickstart", "regression", "paper_r1_distill", "paper_llama"])
def test_shipped_configs_are_valid(name):
    config = load_config(REPO / "configs" / f"{name}.yaml")
    if any(t.name.startswith(("longbench", "aime", "livecodebench")) for t in config.tasks) \
            and not (DATA / "aime24").is_dir():
        pytest.skip(f"no shared data at {DATA} (the config's data file hashes need it)")
    cells = expand_grid(config)
    assert cells and len({c.cell_id for c in cells}) == len(cells)
    try:
        from snapeval.models.presets import get_preset
    except ImportError:
        return
    for model in config.models:
        get_preset(model.simulate_as or model.pretrained)  # every model is a real preset


def test_shards_and_max_memory_parse_and_leave_the_identity_alone():
    base = ids(cfg())
    config = cfg(shards=4, models=[{"pretrained": "smollm2-135m-instruct", "max_memory": {"cpu": "12GiB", 1: "70GB"}}])
    assert config.shards == 4 and config.shard_size is None
    model = config.models[0]
    assert model.memory_for("cpu") == 12 * 2**30 and model.memory_for("cuda:1") == 70 * 10**9
    assert model.memory_for("cuda:0") is None
    assert cfg(models=[{"pretrained": "smollm2-135m-instruct", "max_memory": "9GiB"}]).models[0].memory_for("cuda:3") \
        == 9 * 2**30
    assert ids(config) == base  # how the work is split and budgeted never changes what a cell measures
