"""Typed cell results from lm-eval output, the results directory, and the tidy table joined to the simulator."""
from __future__ import annotations

import io
import json
import os

import pandas as pd
import pytest

from fixtures.sweep_fakes import fake_evaluate, fake_simulate
from snapeval.cache import FullConfig
from snapeval.errors import SnapevalError
from snapeval.report.results_table import build_table, columns, load_table
from snapeval.results import CellResult, ResultsStore, atomic_write_text, from_lm_eval
from snapeval.tasks.families import typical_lengths
from snapeval.sweep import expand_grid, parse_config, run_sweep


def test_from_real_lm_eval_output(tmp_path, monkeypatch):
    """A real lm-eval run (its dummy model, a local task with two filters) converts losslessly."""
    import datasets
    import huggingface_hub.constants
    import lm_eval
    from lm_eval.tasks import TaskManager

    # offline: huggingface_hub and datasets read these once at import, so set the live values (without them the
    # hub lookups of lm-eval's dataset loading retry for most of a minute)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"q": f"q{i}", "a": str(i)}) + "\n" for i in range(3)))
    (tmp_path / "probe.yaml").write_text(f"""
task: probe_gen
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}}}
test_split: test
output_type: generate_until
doc_to_text: "{{{{q}}}}"
doc_to_target: "{{{{a}}}}"
generation_kwargs: {{until: ["\\n"], do_sample: false, max_gen_toks: 4}}
metric_list: [{{metric: exact_match, aggregation: mean, higher_is_better: true}}]
filter_list:
  - {{name: strict, filter: [{{function: take_first}}]}}
  - {{name: lower, filter: [{{function: lowercase}}, {{function: take_first}}]}}
""")
    out = lm_eval.simple_evaluate(model="dummy", tasks=["probe_gen"], log_samples=True,
                                  task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False))
    result = from_lm_eval("abc", {"k": 1}, out, wall_s=1.5)
    assert {(m.metric, m.filter, m.n) for m in result.metrics} == {("exact_match", "strict", 3),
                                                                    ("exact_match", "lower", 3)}
    assert [s.doc_id for s in result.samples] == [0, 1, 2]  # one record per doc, not per filter
    assert all(s.generations == ("lol",) and s.greedy for s in result.samples)
    assert set(result.samples[0].scores) == {"exact_match,strict", "exact_match,lower"}
    assert result.deterministic and result.generations_sha256
    again = CellResult.from_json(result.to_json())
    assert again == result and again.generations_sha256 == result.generations_sha256


def lm_eval_like(**over):
    out = fake_evaluate({"pretrained": "m", "config": FullConfig()}, ["t"], limit=4)
    out.update(over)
    return out


def test_stderr_na_sampling_and_loglikelihood_rows():
    out = lm_eval_like()
    out["results"]["t"]["exact_match_stderr,strict"] = "N/A"
    for row in out["samples"]["t"]:
        row["arguments"][0][1].update(do_sample=True, temperature=0.7)
    result = from_lm_eval("c", {}, out)
    strict = next(m for m in result.metrics if m.filter == "strict")
    assert strict.stderr is None and strict.value is not None
    assert not result.deterministic  # sampled: text is not expected to reproduce
    ll = lm_eval_like()
    for row in ll["samples"]["t"]:
        row["resps"] = [[[-1.5, False]], [[-0.5, True]]]
    res = from_lm_eval("c", {}, ll)
    assert not res.has_generations and res.generations_sha256 is None


def test_text_changes_change_the_generations_hash():
    a = from_lm_eval("c", {}, lm_eval_like())
    os.environ["SNAPEVAL_FAKE_TEXT_EDIT"] = "1"
    try:
        b = from_lm_eval("c", {}, lm_eval_like())
    finally:
        del os.environ["SNAPEVAL_FAKE_TEXT_EDIT"]
    assert a.metrics == b.metrics and a.generations_sha256 != b.generations_sha256


@pytest.mark.parametrize("bad, message", [
    ({"results": {}}, "no metrics"),
    ({}, "no lm-eval results"),
])
def test_unusable_evaluation_output(bad, message):
    with pytest.raises(SnapevalError, match=message):
        from_lm_eval("c", {}, bad)


def test_malformed_result_files(tmp_path):
    with pytest.raises(SnapevalError, match="not valid JSON"):
        CellResult.from_json("{")
    with pytest.raises(SnapevalError, match=r"schema=7 is not supported; allowed: 1"):
        CellResult.from_json(json.dumps({"schema": 7}))
    with pytest.raises(SnapevalError, match=r"^cell x \(\? \| \? \| \? \| seed \?\): field 'identity' is missing$"):
        CellResult.from_json(json.dumps({"schema": 1, "cell_id": "x"}))


def test_atomic_write_never_leaves_a_torn_file(tmp_path, monkeypatch):
    path = tmp_path / "cells" / "x.json"
    atomic_write_text(path, "old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(path, "new" * 1000)
    assert path.read_text() == "old"
    assert list(path.parent.iterdir()) == [path]


RAW = {
    "name": "tbl",
    "models": [{"pretrained": "llama-3.1-8b-instruct"}, {"pretrained": "/local/dir", "simulate_as": "llama-3.1-8b-instruct"},
               {"pretrained": "/other/dir"}],
    "tasks": [{"name": "snapeval_passkey", "limit": 4},
              {"name": "aime24_snapeval", "data_files": [], "limit": 4},
              {"name": "snapeval_kv_needle", "limit": 4, "sim": {"prompt_len": 4096, "gen_len": 64}}],
    "methods": ["full", {"method": "snapstream", "budgets": [256]}],
}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    out = tmp_path_factory.mktemp("tbl")
    run_sweep(parse_config(RAW), out, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
              report=False)
    return load_table(out), out


def test_table_shape_and_measured_columns(table):
    frame, out = table
    assert list(frame.columns) == columns()
    assert len(frame) == 3 * 3 * 2 * 2  # models x tasks x policies x filters
    assert frame.groupby("cell_id")["primary"].sum().eq(1).all()
    row = frame[(frame["method"] == "snapstream") & frame["primary"]].iloc[0]
    assert (row["budget"], row["sink"], row["recent"], row["topk"]) == (256, 4, 128, 124)
    assert row["kv_cache_bytes"] == 256 * 46080 and row["n_samples"] == 4
    csv = pd.read_csv(out / "results.csv")
    assert list(csv.columns) == columns() and len(csv) == len(frame)


def test_sim_columns_use_the_right_lengths_and_budget(table):
    frame, _ = table
    prim = frame[frame["primary"]]

    def row(model, task, method):
        return prim[(prim["model"] == model) & (prim["task"] == task) & (prim["method"] == method)].iloc[0]

    aime = row("llama-3.1-8b-instruct", "aime24_snapeval", "snapstream")
    assert (aime["sim_prompt_len"], aime["sim_gen_len"]) == typical_lengths("aime24_snapeval")
    assert aime["sim_length_source"] == "paper-table-3"
    expected = fake_simulate("llama-3.1-8b-instruct", prompt_len=140, gen_len=15424, budget=256)
    assert aime["sim_kv_bytes_per_seq"] == expected.kv_bytes_total and aime["sim_max_batch"] == expected.max_batch
    assert aime["sim_batch"] == 1024  # capped
    full = fake_simulate("llama-3.1-8b-instruct", prompt_len=140, gen_len=15424, budget=None)
    assert aime["sim_full_kv_bytes_per_seq"] == full.kv_bytes_total
    capped = fake_simulate("llama-3.1-8b-instruct", prompt_len=140, gen_len=15424, budget=256, batch=1024)
    assert aime["sim_decode_tokens_per_s"] == pytest.approx(capped.decode_tokens_per_s)

    passkey = row("llama-3.1-8b-instruct", "snapeval_passkey", "full")
    assert passkey["sim_length_source"] == "measured-mean"
    assert (passkey["sim_prompt_len"], passkey["sim_gen_len"]) == (2000, 8)  # the fake's per-doc means
    needle = row("llama-3.1-8b-instruct", "snapeval_kv_needle", "snapstream")
    assert (needle["sim_prompt_len"], needle["sim_gen_len"], needle["sim_length_source"]) == (4096, 64, "config")

    local = row("/local/dir", "aime24_snapeval", "snapstream")
    assert local["sim_model"] == "llama-3.1-8b-instruct" and local["sim_kv_bytes_per_seq"] == aime["sim_kv_bytes_per_seq"]


def test_sim_failures_and_absence_become_notes():
    from snapeval.results.schema import from_lm_eval as conv

    cells = expand_grid(parse_config({**RAW, "models": ["/other/dir"]}))
    results = {c.cell_id: conv(c.cell_id, c.identity(), fake_evaluate(**c.evaluate_kwargs())) for c in cells}
    views = [c.view() for c in cells]

    def picky(model, **kw):
        raise SnapevalError(f"model {model!r} is not a preset")

    noted = build_table(views, results, {}, simulate=picky)
    assert noted["sim_kv_bytes_per_seq"].isna().all()
    assert noted["sim_note"].str.contains("'/other/dir' is not a preset").all()
    absent = build_table(views, results, {}, simulate=None)
    assert (absent["sim_note"] == "snapeval.simulator is not installed").all()
    off = build_table(views, results, {"enabled": False}, simulate=fake_simulate)
    assert off["sim_kv_bytes_per_seq"].isna().all()


def test_load_table_rebuilds_from_cells_without_parquet(table, tmp_path):
    frame, out = table
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "results.parquet").unlink()
    rebuilt = load_table(copy)  # the real simulator (or its absence), not the fake
    assert len(rebuilt) == len(frame)
    pd.testing.assert_frame_equal(rebuilt[["cell_id", "metric", "value"]], frame[["cell_id", "metric", "value"]])
    with pytest.raises(SnapevalError, match="not a results directory"):
        load_table(tmp_path / "empty")


def test_fit_context():
    from snapeval.simulator.pricing import fit_context

    assert fit_context(84_762, 1_296, 8192) == (6_896, 1_296, True)
    assert fit_context(140, 15_424, 8192) == (140, 8_052, True)
    assert fit_context(84_762, 1_296, 131_072) == (84_762, 1_296, False)
    assert fit_context(100, 10, None) == (100, 10, False)


def test_real_simulator_join():
    """The table prices each cell with snapeval's simulator: Llama-3.1-8B BF16 KV is 131,072 bytes per token."""
    pytest.importorskip("snapeval.simulator")
    raw = {**RAW, "models": ["llama-3.1-8b-instruct", "smollm2-135m-instruct"],
           "methods": ["full", {"method": "snapstream", "budgets": [256]}, {"method": "snapkv", "budgets": [256]}],
           "tasks": [{"name": "aime24_snapeval", "data_files": [], "limit": 2},
                     {"name": "longbench_v2", "data_files": [], "limit": 2}]}
    cells = expand_grid(parse_config(raw))
    results = {c.cell_id: from_lm_eval(c.cell_id, c.identity(), fake_evaluate(**c.evaluate_kwargs())) for c in cells}
    frame = build_table([c.view() for c in cells], results, {"hardware": "sn40l-16"})
    prim = frame[frame["primary"]].set_index(["model", "task", "method"])
    llama_full = prim.loc[("llama-3.1-8b-instruct", "aime24_snapeval", "full")]
    llama_snap = prim.loc[("llama-3.1-8b-instruct", "aime24_snapeval", "snapstream")]
    assert llama_full["sim_kv_bytes_per_seq"] == 131_072 * (140 + 15_424)
    assert llama_snap["sim_kv_bytes_per_seq"] == 131_072 * 256
    # SnapKV keeps every generated token: its cache ends at min(prompt, budget) + output
    snapkv_aime = prim.loc[("llama-3.1-8b-instruct", "aime24_snapeval", "snapkv")]
    assert snapkv_aime["sim_kv_bytes_per_seq"] == llama_full["sim_kv_bytes_per_seq"]  # 140-token prompt < budget
    snapkv_lb = prim.loc[("llama-3.1-8b-instruct", "longbench_v2", "snapkv")]
    assert snapkv_lb["sim_kv_bytes_per_seq"] == 131_072 * (256 + 1_296)
    assert llama_snap["sim_max_batch"] > llama_full["sim_max_batch"] > 0
    assert llama_snap["sim_decode_tokens_per_s"] > llama_full["sim_decode_tokens_per_s"] > 0
    small = prim.loc[("smollm2-135m-instruct", "longbench_v2", "full")]
    assert (small["sim_prompt_len"], small["sim_gen_len"]) == (6_896, 1_296)  # fit to SmolLM2's 8k context
    assert small["sim_length_source"] == "paper-table-3, fit to 8192-token context" and small["sim_fits"]


def test_every_method_of_a_task_is_priced_at_the_full_cache_lengths():
    """A compressed cache may change how long the model talks; the simulated deployment must not follow it."""
    import dataclasses

    cells = expand_grid(parse_config({**RAW, "models": ["llama-3.1-8b-instruct"], "tasks": RAW["tasks"][:1]}))
    results = {}
    for cell in cells:
        res = from_lm_eval(cell.cell_id, cell.identity(), fake_evaluate(**cell.evaluate_kwargs()))
        if cell.config.method != "full":
            res = dataclasses.replace(res, generated_tokens=res.generated_tokens * 5)
        results[cell.cell_id] = res
    frame = build_table([c.view() for c in cells], results, {}, simulate=fake_simulate)
    assert set(frame["sim_gen_len"]) == {8} and set(frame["sim_prompt_len"]) == {2000}
    no_full = [c for c in cells if c.config.method != "full"]
    frame = build_table([c.view() for c in no_full], results, {}, simulate=fake_simulate)
    assert set(frame["sim_gen_len"]) == {40}  # without a full-cache cell: the mean over the task's cells


def test_pricing_reads_each_cells_own_method():
    """Every method of the table is priced by what its configuration holds and computes: at LongBench-v2's
    84,762-token prompt SnapStream and StreamingLLM hold their 256-slot budget, SnapKV its budget plus the output;
    StreamingLLM scores nothing, so its prefill is the cheapest compression; a budget that holds AIME's 140-token
    prompt compresses nothing, and the row says so."""
    pytest.importorskip("snapeval.simulator")
    from snapeval.cache import METHOD_TABLE

    methods = ["full", *({"method": name, "budgets": [256]} for name in METHOD_TABLE.names() if name != "full")]
    raw = {**RAW, "models": ["llama-3.1-8b-instruct"], "methods": methods,
           "tasks": [{"name": "longbench_v2", "data_files": [], "limit": 2},
                     {"name": "aime24_snapeval", "data_files": [], "limit": 2}]}
    cells = expand_grid(parse_config(raw))
    results = {c.cell_id: from_lm_eval(c.cell_id, c.identity(), fake_evaluate(**c.evaluate_kwargs())) for c in cells}
    frame = build_table([c.view() for c in cells], results, {"hardware": "sn40l-16"})
    prim = frame[frame["primary"]].set_index(["task", "method"])
    lb = {m: prim.loc[("longbench_v2", m)] for m in METHOD_TABLE.names()}
    assert lb["snapstream"]["sim_kv_bytes_per_seq"] == lb["streamingllm"]["sim_kv_bytes_per_seq"] == 131_072 * 256
    assert lb["snapkv"]["sim_kv_bytes_per_seq"] == 131_072 * (256 + 1_296)
    assert lb["full"]["sim_kv_bytes_per_seq"] == 131_072 * (84_762 + 1_296)
    assert lb["streamingllm"]["sim_prefill_seconds"] < lb["snapkv"]["sim_prefill_seconds"]
    assert lb["streamingllm"]["sim_prefill_seconds"] < lb["snapstream"]["sim_prefill_seconds"]
    assert lb["full"]["sim_prefill_seconds"] < lb["streamingllm"]["sim_prefill_seconds"]
    assert all(lb[m]["sim_note"] == "" for m in lb)
    aime = prim.loc[("aime24_snapeval", "snapkv")]
    assert "holds the whole 140-token prompt: nothing is compressed" in aime["sim_note"]
    assert aime["sim_decode_tokens_per_s"] == prim.loc[("aime24_snapeval", "full")]["sim_decode_tokens_per_s"]


def test_a_cells_method_is_rebuilt_from_its_identity():
    from snapeval.cache import METHOD_TABLE, resolve_method
    from snapeval.simulator.pricing import method_from_identity

    configs = [resolve_method(name, None if name == "full" else 300) for name in METHOD_TABLE.names()]
    configs += [resolve_method("snapstream", 300, sink=0, recent=100), resolve_method("streamingllm", 64, sink=2),
                resolve_method("snapkv", 300, observation=16, pool_kernel=7, pooling="max")]
    try:
        import kvpress  # noqa: F401
        configs.append(resolve_method("kvpress:SnapKVPress", 300, window_size=16))
    except ImportError:
        pass
    for config in configs:
        assert method_from_identity(config.identity()) == config
    with pytest.raises(SnapevalError, match="recent=7 does not add up"):  # StreamingLLM's ring is what its budget leaves
        method_from_identity({"method": "streamingllm", "budget": 64, "sink": 4, "recent": 7})
    with pytest.raises(SnapevalError, match="does not add up"):
        method_from_identity({**configs[1].identity(), "recent": 7})
    with pytest.raises(SnapevalError, match="names no method"):
        method_from_identity({"budget": 3})


def test_a_cell_without_a_policy_identity_is_priced_from_its_view():
    """Results written before identities carried the policy: the view's method, budget and split fields give the
    same configuration, hence the same columns."""
    from snapeval.simulator.pricing import CellPricing

    cells = expand_grid(parse_config({**RAW, "models": ["llama-3.1-8b-instruct"], "tasks": RAW["tasks"][2:]}))
    pricing = CellPricing({}, simulate=fake_simulate)
    for cell in cells:
        view = cell.view().to_dict()
        assert pricing.columns(view, None) == pricing.columns(view, None, cell.identity()["policy"])
