"""The paper-grid projection (issue 44 item 4): the group's schedule as the sweep runs it, the rates' fit
(:mod:`snapeval.projection`, ``snapeval project``), and the smoke runs of the GPU benchmarks that measure them (the
projection's calibration, the engine at AIME's shape, the one prepared GPU call), each run as its documented command
(``python -m benchmarks...``): the tests import nothing of ``benchmarks/``."""
import json
import math
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

import snapeval.projection as projection
from snapeval.cache import resolve_method
from snapeval.cli import main as cli
from snapeval.memory_plan import BRANCH_LOOP, ONE_ROW_ENGINE, SHARED_STEP_ROWS, ModelShape

ROOT = Path(__file__).resolve().parents[1]
SHAPE = ModelShape.of_preset("llama-3.1-8b-instruct")


def benchmark(module: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m benchmarks.<module> ARGS`` from the checkout, as its docs run it (output captured)."""
    return subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=1800)


def unit_rates(**overrides) -> projection.Rates:
    """Rates of one second per decode step and nothing else (so that seconds count steps)."""
    fields = dict(prefill=(0.0, 0.0, 0.0), step_fixed_s=1.0, bandwidth=math.inf, engine_s=0.0,
                  branch_per_token_s=0.0, device="test", shape=asdict(SHAPE))
    return projection.Rates(**{**fields, **overrides})


def test_decode_steps_follow_the_chunks_and_rows_of_the_plan():
    """k requests of m new tokens in r rows take ceil(k / r) (m - 1) steps (the first token comes from the prefill),
    chunk by chunk in input order: 10 items in chunks of 8 and 2, rows as the plan gives them."""
    configs = [resolve_method("snapstream", 1024), resolve_method("streamingllm", 2048)]
    items = [(4000, 5)] * 10
    out = projection.project_group(SHAPE, configs, items, unit_rates(), budget=80 * 2**30, chunk=8, one_step=False)
    assert out["chunk"] == 8 and set(out["rows"]) == {c.label for c in configs}
    assert all(1 <= rows <= 8 for rows in out["rows"].values())
    for label, rows in out["rows"].items():
        assert out["steps"][label] == (math.ceil(8 / rows) + math.ceil(2 / rows)) * 4
    assert out["seconds"] == pytest.approx(sum(out["steps"].values()))
    assert out["engines"] == 2 * len(configs)
    # a tighter budget gives fewer rows, so more waves of steps
    tight = projection.project_group(SHAPE, configs, items, unit_rates(), budget=SHAPE.weight_bytes + 2**30 * 3,
                                     chunk=8, one_step=False)
    assert sum(tight["steps"].values()) > sum(out["steps"].values())


def test_each_part_of_a_group_is_priced_by_its_own_rate():
    configs = [resolve_method("full"), resolve_method("snapstream", 1024)]
    items = [(1000, 3), (3000, 3)]
    rates = unit_rates(prefill=(0.5, 1e-3, 1e-7), step_fixed_s=0.0, engine_s=2.0, branch_per_token_s=1e-4)
    out = projection.project_group(SHAPE, configs, items, rates, budget=80 * 2**30)
    assert out["prefill_s"] == pytest.approx(2 * 0.5 + 1e-3 * 4000 + 1e-7 * (1000**2 + 3000**2))
    assert out["branch_s"] == pytest.approx(2 * 1e-4 * 4000 + 2.0 * out["engines"])
    assert out["decode_s"] == 0  # no fixed time and infinite bandwidth
    each = projection.project_group(SHAPE, configs, items, rates, budget=80 * 2**30, prefills=len(configs))
    assert each["prefill_s"] == pytest.approx(2 * out["prefill_s"])


def test_the_fit_recovers_known_rates_from_groups_timed_with_them():
    """A differential test of the fit: groups "measured" with known rates (their parts computed exactly as the model
    says) give those rates back."""
    floor = projection.prefill_floor_s(4.4e-3, 1 / 3.0e12, SHAPE.weight_bytes)  # the fit's prefill constant
    true = unit_rates(prefill=(floor, 4e-5, 3e-10), step_fixed_s=4.4e-3, bandwidth=3.0e12, engine_s=0.05,
                      branch_per_token_s=2e-7)
    configs = [resolve_method("full"), resolve_method("snapstream", 1024), resolve_method("snapkv", 4096)]
    runs = []
    for length, count in ((8192, 2), (32768, 2), (131008, 1), (65536, 3)):
        items = [(length, 32)] * count
        plan = projection.group_plan(SHAPE, configs, items, budget=80 * 2**30, chunk=8)
        schedule = projection.decode_schedule(SHAPE, configs, items, plan)
        decode = {}
        for label, entries in schedule.items():
            steps = sum(s for s, *_ in entries)
            moved = sum(s * b for s, b, *_ in entries) / steps
            decode[label] = {"steps": steps, "step_s": true.step_s(moved), "bytes_per_step": moved}
        engines = projection.engine_count(schedule)
        runs.append({"prefills": [(n, true.prefill_s(n)) for n, _ in items], "decode": decode, "engines": engines,
                     "configurations": len(configs),
                     "rest_s": engines * true.engine_s + len(configs) * true.branch_per_token_s * length * count})
    fitted = projection.fit_rates(runs, "test", SHAPE)
    assert fitted.prefill == pytest.approx(true.prefill, rel=1e-4, abs=1e-9)
    assert fitted.step_fixed_s == pytest.approx(true.step_fixed_s, rel=1e-6)
    assert fitted.bandwidth == pytest.approx(true.bandwidth, rel=1e-6)
    assert fitted.engine_s == pytest.approx(true.engine_s, rel=1e-6)
    assert fitted.branch_per_token_s == pytest.approx(true.branch_per_token_s, rel=1e-6)


def test_rates_scale_to_another_shape_and_hardware():
    rates = unit_rates(prefill=(0.1, 1e-4, 1e-9), step_fixed_s=4e-3, bandwidth=3e12)
    same = rates.for_shape(SHAPE)
    assert same.prefill == pytest.approx(rates.prefill) and same.step_fixed_s == rates.step_fixed_s
    big = rates.for_shape(ModelShape.of_preset("deepseek-r1-distill-llama-70b"))
    assert big.prefill[1] == pytest.approx(1e-4 * big.shape["weight_bytes"] / SHAPE.weight_bytes)
    assert big.step_fixed_s == pytest.approx(4e-3 * 80 / 32) and big.bandwidth == rates.bandwidth
    h200, h100 = projection.hardware_sheet("h200"), projection.hardware_sheet("h100")
    restated = rates.on_hardware(h200, h100)
    assert restated.bandwidth == pytest.approx(3e12 * h100["hbm_bandwidth"] / h200["hbm_bandwidth"])
    assert projection.device_sheet("NVIDIA H200") == "h200" and projection.device_sheet("NVIDIA A100") is None


def test_every_task_of_the_paper_configs_has_its_items(data_dir):
    """Every group of both paper configs gets items of the real lengths (no task left unpriced), LongBench-v2 cut at
    the run's limit (120,000 for Llama-3.1-8B as pred.py, the model's context less the rest for an R1 distill)."""
    from snapeval.sweep.grid import expand_grid
    from snapeval.sweep.parse import load_config

    lengths = json.loads(projection.LENGTHS_FILE.read_text())
    llama = lengths["tokenizers"]["llama-3.1-8b-instruct"]
    assert len(llama["longbench_v2"]) == 395 and len(llama["aime24"]) == 30
    for path in projection.PAPER_CONFIGS:
        for cell in expand_grid(load_config(ROOT / path)):
            stages = projection.task_items(cell.task, cell.model.pretrained, lengths, {})
            assert stages and all(stage["items"] for stage in stages)
            if cell.task.name == "longbench_v2" and cell.model.pretrained == "llama-3.1-8b-instruct":
                assert max(p for p, _ in stages[0]["items"]) == 120_000 + llama["template_tokens"]


def test_the_smoke_projection_predicts_the_steps_the_group_counts(tmp_path, data_dir, monkeypatch):
    """The whole projection on the CPU at tiny shapes: calibration, the slice (its predicted decode steps equal the
    engines' counted steps, configuration by configuration), and both grids projected."""
    # the grids with an engine per configuration (the shared step's planning of both grids is the next test's)
    out = tmp_path / "p.json"
    done = benchmark("paper_projection", "--smoke", "--shared-step", "false", "--out", str(out),
                     env={"SNAPEVAL_DATA_DIR": str(data_dir)})
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads(out.read_text())
    assert payload["smoke"] and len(payload["configurations"]) == 16 and len(payload["calibration"]) == 3
    measured, predicted = payload["slice"]["measured"], payload["slice"]["predicted"]
    assert measured["items"] == 8 and payload["slice"]["steps_equal"]
    assert measured["decode"] and all(d["steps"] == d["predicted_steps"] == predicted["steps"][label]
                                      for label, d in measured["decode"].items())
    assert all(n == 6 for n in measured["generated"])  # every request decoded its max_new tokens
    assert payload["rates"]["bandwidth"] > 0 and min(payload["rates"]["prefill"]) >= 0
    for path in projection.PAPER_CONFIGS:
        grid = payload["grids"][path]
        assert grid["gpu_hours"] > 0 and all(g["gpu_hours"] > 0 for g in grid["groups"])
    assert payload["paper_llama_longbench_pair_gpu_hours"] > 0


def test_the_smoke_aime_engine_takes_the_plans_slots(tmp_path):
    out = tmp_path / "a.json"
    done = benchmark("gpu_aime_engine", "--smoke", "--samples", "6", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads(out.read_text())
    assert set(payload["budgets"]) == {"32", "64"}
    for entry in payload["budgets"].values():
        assert 1 <= entry["slots"] <= 6 and entry["captured"] is False
        for mode in ("greedy", "sampled"):
            assert entry[mode]["generated_all"] and entry[mode]["step_s"] > 0 and entry[mode]["x_floor"] is None


def test_a_slowed_calibration_point_does_not_set_a_rate():
    """One step point ten times too slow (the machine busy with something else) is set aside by the fit."""
    rows = [[1.0, b] for b in (1e9, 2e9, 4e9, 8e9, 16e9, 32e9)]
    values = [4e-3 + b / 3e12 for _, b in rows]
    values[3] *= 10
    fixed, per_byte = projection.robust_least_squares(rows, values)
    assert fixed == pytest.approx(4e-3, rel=1e-6) and per_byte == pytest.approx(1 / 3e12, rel=1e-6)
    assert projection.least_squares(rows, values)[0] > 5e-3  # the plain fit is pulled off


def test_the_gpu_session_runs_each_section_in_its_own_process_and_records_it(tmp_path):
    """The one prepared GPU call, smoke-tested on the CPU (one section here; every section has its own smoke test):
    each section's JSON and the session's record of its status and time."""
    done = benchmark("gpu_session", "--smoke", "--only", "gpu_aime_engine", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    session = json.loads((tmp_path / "session.json").read_text())
    assert list(session["sections"]) == ["gpu_aime_engine"] and session["sections"]["gpu_aime_engine"]["status"] == 0
    assert json.loads((tmp_path / "gpu_aime_engine.json").read_text())["smoke"] is True
    refused = benchmark("gpu_session", "--smoke")  # no --out: a one-line usage error
    assert refused.returncode == 2 and "--out" in refused.stderr


def test_rates_from_the_committed_gpu_run_reproduce_its_points(tmp_path, data_dir):
    """--rates-from: the rates fitted to results/bench/gpu.json's H100 figures give back its CUDA-graph step times
    (within 15%) and its full-cache prefill times (within 12%), and the grids projected from them (each chunk of
    each group planned with the shared step, as the sweep's triton kernel runs it) are the committed ones."""
    from snapeval.cache import resolve_method

    gpu = json.loads((ROOT / "results" / "bench" / "gpu.json").read_text())["results"][0]
    rates = projection.rates_from_gpu_json(ROOT / "results" / "bench" / "gpu.json")
    for point in gpu["lengths"].values():
        n, new = point["prompt_tokens"], point["new_tokens"]
        # two terms over three lengths (the constant is one forward's floor): 32k sits 10% above the fit, 64k and
        # 128k within 4% (three terms through three points, as before, matched exactly and could not fail)
        assert rates.prefill_s(n) == pytest.approx(point["full"]["prefill_s"], rel=0.04 if n > 32768 else 0.12)
        for name, config in (("full", resolve_method("full")),
                             ("snapstream", resolve_method("snapstream", point["decode_budget"]))):
            for key in ("batch_1_graphs", "max_batch_graphs"):
                rate = point[name][key]
                predicted = rates.step_s(projection.step_bytes(SHAPE, config, rate["rows"], n, new))
                assert predicted == pytest.approx(rate["step_s"], rel=0.15), (name, key, n)
    # a short prompt (the chain of thought's second pass, about 1,255 tokens) costs about one forward's floor plus
    # its FLOPs: at least two FLOPs per weight and token at the H100's dense bfloat16 peak, and far from the 0.65 s an
    # intercept fitted to three long prompts gave it
    floor = rates.step_s(SHAPE.weight_bytes)
    assert rates.prefill[0] == pytest.approx(floor)
    assert floor + 2 * SHAPE.weight_bytes / 2 * 1255 / 989e12 <= rates.prefill_s(1255) < 0.1
    out = tmp_path / "p.json"
    assert cli(["project", "--rates-from", str(ROOT / "results" / "bench" / "gpu.json"), "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    committed = json.loads((ROOT / "results" / "bench" / "paper_projection_from_gpu_json.json").read_text())
    assert payload["slice"] is None
    # pure arithmetic from committed figures: regenerated exactly, every field but the machine's (its description
    # and load)
    for key in ("grids", "paper_llama_longbench_pair_gpu_hours", "rates", "projected_rates", "projected_as",
                "caveats", "device_bytes", "host_bytes_per_gpu", "new_tokens", "benchmark", "smoke"):
        assert payload[key] == committed[key], key
    assert set(committed) - set(payload) == {"machine"}


def test_a_configuration_decoded_alone_is_priced_by_how_it_decodes(monkeypatch, data_dir):
    """At 120k tokens on 80 GB the full cache decodes alone, in a captured engine of one row (its branch built into
    the row): its steps are priced at alone_factor times the fitted step; a plan that decodes it in the eager loop
    (a run without capture) at eager_factor. The fit takes each from the calibration's alone decodes of that kind;
    --rates-from from the committed run's CUDA-graph and eager batch-1 steps of the full cache."""
    import dataclasses

    from snapeval.cache import FullConfig

    from snapeval.projection import schedule

    configs = projection.paper_llama_configs()
    items = [(120_000, 32)] * 4
    real_plan = schedule.group_plan  # where project_group's chunks look it up
    def handed(plan, captured):  # the plan of a run that captures, or of one that does not: full's route says which
        return dataclasses.replace(plan, alone_captured=captured, configurations=tuple(
            dataclasses.replace(c, route=ONE_ROW_ENGINE if captured else BRANCH_LOOP) if c.decode == "alone" else c
            for c in plan.configurations))

    for captured in (True, False):
        monkeypatch.setattr(schedule, "group_plan", lambda *a, captured=captured, **k: handed(real_plan(*a, **k),
                                                                                              captured))
        plain = projection.project_group(SHAPE, configs, items, unit_rates(), budget=int(80e9 * 0.92),
                                         one_step=False)
        assert plain["alone"] == [FullConfig().label] and plain["alone_captured"] is captured
        slower = projection.project_group(SHAPE, configs, items, unit_rates(alone_factor=2.0, eager_factor=3.0),
                                          budget=int(80e9 * 0.92), one_step=False)
        alone_steps = plain["steps"][FullConfig().label]
        base = unit_rates()  # alone_factor 1, eager_factor memory_plan.EAGER_STEP_FACTOR
        expected = ((2.0 - base.alone_factor) if captured else (3.0 - base.eager_factor)) * alone_steps
        assert slower["seconds"] - plain["seconds"] == pytest.approx(expected)
    monkeypatch.undo()
    assert real_plan(SHAPE, configs, items, budget=int(80e9 * 0.92), one_step=False).alone_captured  # the sweep's

    def run(captured, step_s):
        return {"prefills": [(1000, 1.0)], "decode": {"a": {"steps": 10, "step_s": 0.01, "bytes_per_step": 1e9}},
                "engines": 1, "configurations": 1, "rest_s": 0.1, "plan": {"alone_captured": captured},
                "alone": {"full": {"steps": 10, "seconds": 10 * step_s, "step_s": step_s, "bytes_per_step": 1e9}}}
    second = {"prefills": [(2000, 2.0)], "rest_s": 0.2,
              "decode": {"a": {"steps": 10, "step_s": 0.02, "bytes_per_step": 2e9}}}
    fitted = projection.fit_rates([run(True, 0.012), {**run(False, 0.05), **second}], "test", SHAPE)
    assert fitted.alone_measured and fitted.alone_factor == pytest.approx(1.2, rel=1e-6)
    assert fitted.eager_measured and fitted.eager_factor == pytest.approx(5.0, rel=1e-6)
    committed = projection.rates_from_gpu_json(ROOT / "results" / "bench" / "gpu.json")
    assert committed.alone_measured and 0.85 < committed.alone_factor < 1.15  # the fit holds at batch 1 too
    assert committed.eager_measured and 2.5 < committed.eager_factor < 6

def test_a_negative_host_memory_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli(["project", "--rates-from", str(ROOT / "results" / "bench" / "gpu.json"), "--host-gib", "-5"])
    assert exit_info.value.code == 2
    assert "--host-gib -5 is invalid; allowed: GiB of host memory per GPU, 0 or more" in capsys.readouterr().err


def test_the_projection_takes_a_gpus_chunks_longest_first_each_planned_for_its_own_items():
    """As ``BranchSet.generate`` on CUDA: items longest first, each chunk planned for the items left, so a chunk of
    shorter prompts decodes in more rows; the projected decode is then no slower than one plan for every item."""
    from snapeval.cache import FullConfig, SnapStreamConfig

    configs = [FullConfig(), SnapStreamConfig.from_budget(4096)]
    items = [(16384, 64)] * 6 + [(131008, 64)] * 2 + [(16384, 64)] * 6
    budget = int(80e9 * 0.92)
    parts = projection.group_chunks(SHAPE, configs, items, budget=budget, chunk=4, one_step=False)
    prompts = [p for part, _ in parts for p, _ in part]
    assert prompts == sorted(prompts, reverse=True) and len(prompts) == len(items)
    assert all(plan.prompt_tokens == max(p for p, _ in part) for part, plan in parts)
    assert parts[-1][1].decode_mode("full").rows > parts[0][1].decode_mode("full").rows
    one = projection.group_chunks(SHAPE, configs, items, budget=budget, chunk=4, by_length=False, one_step=False)
    assert len({id(plan) for _, plan in one}) == 1 and one[0][1].decode_mode("full").decode == "alone"
    fast = projection.project_group(SHAPE, configs, items, unit_rates(), budget=budget, chunk=4, one_step=False)
    slow = projection.project_group(SHAPE, configs, items, unit_rates(), budget=budget, chunk=4, by_length=False,
                                    one_step=False)
    assert fast["chunks"] == len(parts) and fast["decode_s"] < slow["decode_s"]
    assert fast["steps"] == {label: sum(s for s, *_ in entries) for label, entries in
                             projection.chunks_schedule(SHAPE, configs, parts).items()}


def test_an_engine_refills_a_slot_as_its_request_ends():
    """Continuous batching in request order: equal lengths go in waves; a short request's slot takes the next one."""
    assert projection.engine_steps([4] * 10, 8) == 8 and projection.engine_steps([4] * 16, 8) == 8
    # 4 slots end at 127, 1023, 127, 1023; the next four take the slot that frees first: 127 -> 254, 127 -> 1150,
    # 254 -> 381, 381 -> 1404
    assert projection.engine_steps([127, 1023] * 4, 4) == 1404
    assert projection.engine_steps([127, 1023] * 4, 8) == 1023
    assert projection.engine_steps([5, 1, 1, 1], 2) == 5 and projection.engine_steps([], 3) == 0


def test_questions_on_one_document_are_projected_as_a_gpu_runs_them():
    """LongBench-v2's questions on one document, as ``BranchSet.generate`` takes them on a GPU: the document's prefix
    once (its kept first half where a prompt is cut), each question's suffix as the rest of its prompt's FLOPs plus
    one forward's floor; every family in one chunk."""
    from snapeval.cache import FullConfig, SnapStreamConfig

    prompts = [40_000, 150_000, 40_020, 3_000, 149_000, 2_000, 1_500]
    documents = [0, 1, 0, 3, 1, 5, 5]
    common = [39_950, 148_000, 39_950, 0, 148_000, 1_000, 1_000]
    found = projection.longbench_documents(prompts, documents, common, limit=120_000)
    # document 1 is cut: its first 60,000 tokens are shared; document 5 shares under 1,024 tokens: alone
    assert found.families == [0, 1, 0, None, 1, None, None]
    assert found.heads == [39_950, 60_000, 39_950, 0, 60_000, 0, 0]
    items = [(min(p, 120_000), 128) for p in prompts]
    rates = unit_rates(prefill=(0.5, 1e-4, 1e-9))
    whole = sum(rates.prefill_s(p) for p, _ in items)
    shared = found.prefill_s(items, rates)
    expected = sum(rates.prefill_s(h) for h in (39_950, 60_000)) + sum(
        rates.prefill_s(p) - (rates.prefill_s(h) - 0.5 if h else 0) for (p, _), h in zip(items, found.heads))
    assert shared == pytest.approx(expected) and shared < whole
    configs = [FullConfig(), SnapStreamConfig.from_budget(4096)]
    budget = int(80e9 * 0.92)
    out = projection.project_group(SHAPE, configs, items, rates, budget=budget, chunk=2, documents=found)
    assert out["prefill_s"] == pytest.approx(shared)
    parts = projection.group_chunks(SHAPE, configs, items, budget=budget, chunk=2, documents=found)
    assert [[p for p, _ in part] for part, _ in parts] == [[120_000, 120_000], [40_000, 40_020], [3_000, 2_000],
                                                           [1_500]]


def test_the_lengths_name_each_questions_document():
    lengths = json.loads(projection.LENGTHS_FILE.read_text())
    for tokenizer in lengths["tokenizers"].values():
        documents = tokenizer["longbench_v2_documents"]
        assert len(documents) == 395 and len(set(documents)) == 367  # 28 questions on a document asked before
        for name in ("longbench_v2", "longbench_v2_cot"):
            common = tokenizer[f"{name}_document_common"]
            shared = [i for i, d in enumerate(documents) if documents.count(d) > 1]
            assert all(common[i] == 0 for i in range(395) if i not in shared)
            assert all(0.5 * tokenizer[name][i] < common[i] < tokenizer[name][i] for i in shared)


def test_one_step_for_the_configurations_in_rows_is_priced_once():
    """A shared step (the plan's ``shared_step``) moves every configuration's rows and the weights once, and its time
    is counted once, each configuration holding an equal share: at one second per step, three configurations in 8
    rows over 8 items of 5 new tokens take the 4 steps of one engine, where an engine each takes 12."""
    configs = [resolve_method("snapstream", 1024), resolve_method("streamingllm", 2048), resolve_method("snapkv", 1024)]
    items = [(4000, 5)] * 8
    shared = projection.project_group(SHAPE, configs, items, unit_rates(), budget=80 * 2**30, chunk=8)
    apart = projection.project_group(SHAPE, configs, items, unit_rates(), budget=80 * 2**30, chunk=8, one_step=False)
    assert shared["shared_step_chunks"] == shared["chunks"] == 1 and apart["shared_step_chunks"] == 0
    assert set(shared["rows"].values()) == set(apart["rows"].values()) == {8}
    assert shared["steps"] == apart["steps"] == {c.label: 4 for c in configs}  # each configuration's own steps
    assert apart["seconds"] == pytest.approx(12) and shared["seconds"] == pytest.approx(4)
    assert shared["engines"] == 1 and apart["engines"] == 3
    # bytes: the shared step's entry moves the weights once and every configuration's rows
    from snapeval.memory_plan import engine_bytes

    parts = projection.group_chunks(SHAPE, configs, items, budget=80 * 2**30, chunk=8)
    (_, plan), = parts
    entries = projection.decode_schedule(SHAPE, configs, items, plan)
    moved = SHAPE.weight_bytes + sum(engine_bytes(SHAPE, c, 8, 4000, 5) for c in configs)
    assert all(entries[c.label] == [(4, moved, SHARED_STEP_ROWS, 1 / 3)] for c in configs)


def test_the_bytes_and_the_time_schedule_read_the_routes_the_group_ran():
    """One description of a chunk, read three ways (issue 59): the plan decides each configuration's route
    (``memory_plan.ROUTES``), ``BranchSet`` runs it (``routes_ran``: the full cache of an 800-token prompt decodes
    alone in the eager loop, its rows would outweigh the tiny model's weights; the others in rows of their own
    engines), the plan's byte phases are those of the routes run (an ``alone`` phase only where one decodes alone, a
    ``decode`` phase only where one decodes in rows) and the projection's time schedule prices each configuration by
    the route it ran."""
    from snapeval.branching import BranchSet
    from snapeval.cache import FullConfig, SnapStreamConfig, StreamingLLMConfig
    from snapeval.engine import SamplingParams
    from snapeval.memory_plan import ENGINE_ROWS, IN_ROWS
    from tests.conftest import TinyTokenizer, random_prompt, tiny_model

    model = tiny_model("llama")
    configs = [FullConfig(), SnapStreamConfig.from_budget(16), StreamingLLMConfig.from_budget(24)]
    prompts = [random_prompt(n, seed=n) for n in (800, 52, 19, 41)]
    params = [SamplingParams(max_new_tokens=k) for k in (5, 3, 6, 4)]
    branches = BranchSet(model, TinyTokenizer(), configs, batch=2)
    branches.generate(prompts, params)
    chunks = branches.chunk_plans[-1]
    assert len(branches.routes_ran) == len(chunks) == 2
    shape = ModelShape.of(model)
    for (part, plan), ran in zip(chunks, branches.routes_ran):
        assert ran == plan.routes()
        items = [(len(prompts[i]), params[i].max_new_tokens) for i in part]
        schedule = projection.decode_schedule(shape, configs, items, plan)
        assert {label: {entry[2] for entry in entries} for label, entries in schedule.items()} == {
            label: {route} for label, route in ran.items()}
        assert ("alone" in plan.phases) == any(route not in IN_ROWS for route in ran.values())
        assert ("decode" in plan.phases) == any(route in IN_ROWS for route in ran.values())
        assert ran == {"full": BRANCH_LOOP, "snapstream@16": ENGINE_ROWS, "streamingllm@24": ENGINE_ROWS}
    assert set(branches.stats.decode_alone) == {"full"}
    assert set(branches.stats.decode) == {"snapstream@16", "streamingllm@24"}
