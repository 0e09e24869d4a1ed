"""``snapeval regress``: planted regressions and text changes are caught, noise is not, bad input exits 2."""
from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path

import numpy as np
import pytest

from fixtures.sweep_fakes import fake_evaluate, fake_simulate
from snapeval.cli import main as cli
from snapeval.results.schema import CellResult, MetricValue
from snapeval.stats.regress import Entry, compare, load_entries, tolerance, write_baseline
from snapeval.sweep import parse_config, run_sweep

REPO = Path(__file__).resolve().parents[1]
GREEDY = {
    "name": "reg",
    "models": ["llama-3.1-8b-instruct"],
    "tasks": [{"name": "snapeval_passkey", "limit": 12}, {"name": "snapeval_kv_needle", "limit": 12}],
    "methods": ["full", {"method": "snapstream", "budgets": [128, 512]}],
}
SAMPLED = {**GREEDY, "generation": {"do_sample": True, "temperature": 0.6}}


def sweep(raw, out, monkeypatch=None, **env):
    if monkeypatch is not None:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
    run_sweep(parse_config(raw), out, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
              report=False)
    if monkeypatch is not None:
        for key in env:
            monkeypatch.delenv(key)
    return out


def regress(capsys, baseline, current, *extra):
    code = cli(["regress", "--baseline", str(baseline), "--current", str(current), *map(str, extra)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def greedy_base(tmp_path_factory):
    out = sweep(GREEDY, tmp_path_factory.mktemp("greedy"))
    baseline = out.parent / "greedy_baseline.json"
    assert write_baseline(out, baseline) == 6
    return out, baseline


def test_identical_results_pass(greedy_base, capsys):
    out, baseline = greedy_base
    code, text, _ = regress(capsys, baseline, out)
    assert code == 0
    assert "PASS: 6 baseline cells; 0 accuracy regressions, 0 greedy cells with changed items" in text
    assert text.count("greedy: all 12 items have identical scores and texts") == 6
    assert regress(capsys, out, out)[0] == 0  # a results directory works as a baseline too


def test_changed_greedy_text_fails_even_when_accuracy_is_unchanged(greedy_base, tmp_path, capsys, monkeypatch):
    _, baseline = greedy_base
    current = sweep(GREEDY, tmp_path / "cur", monkeypatch, SNAPEVAL_FAKE_TEXT_EDIT="1")
    code, text, _ = regress(capsys, baseline, current)
    assert code == 1
    assert "REGRESSION" not in text and text.count("CHANGED") == 6
    assert "1 of 12 items changed (greedy decoding reproduces every item)" in text
    assert "  snapeval_passkey doc 0: text changed" in text
    assert "- The answer is 0.\n" in text and "+ The answer is 0. (edited)" in text  # a readable diff
    assert "FAIL:" in text


def test_planted_regression_is_caught(tmp_path, capsys, monkeypatch):
    base = sweep(SAMPLED, tmp_path / "base")
    current = sweep(SAMPLED, tmp_path / "cur", monkeypatch, SNAPEVAL_FAKE_DRIFT="-0.6")
    code, text, _ = regress(capsys, base, current)
    assert code == 1
    assert "REGRESSION" in text and "CHANGED" not in text  # sampled cells: text is not compared
    line = next(l for l in text.splitlines() if l.startswith("REGRESSION"))
    assert "exact_match,strict" in line or "exact_match,flexible" in line
    assert "paired over 12 items in 12 clusters" in line and "McNemar mid-p, one-sided p=" in line
    assert "against a 10-point drop" in line  # its power is printed


def test_paired_test_catches_a_drop_the_unpaired_rule_misses(tmp_path, capsys, monkeypatch):
    """A consistent drop on few items: invisible to unpaired error bars (stderr ~0.1 per side at n=12), clear once
    every item is compared with itself."""
    import json

    base = sweep(SAMPLED, tmp_path / "base")
    current = tmp_path / "cur"
    import shutil

    shutil.copytree(base, current)
    for path in (current / "cells").glob("*.json"):  # plant: 6 items solved in the baseline now fail
        cell = json.loads(path.read_text())
        broken = [s for s in cell["samples"] if all(v == 1.0 for v in s["scores"].values())][:6]
        for s in broken:
            s["scores"] = {k: 0.0 for k in s["scores"]}
        for m in cell["metrics"]:
            scores = [s["scores"][f"{m['metric']},{m['filter']}"] for s in cell["samples"]]
            m["value"] = sum(scores) / len(scores)
            if m["stderr"] is not None:  # lm-eval's mean_stderr of the edited items: a consistent plant
                m["stderr"] = float(np.std(scores, ddof=1) / len(scores) ** 0.5)
        path.write_text(json.dumps(cell))
    drops = [(b.result.metrics[0].value - c.result.metrics[0].value, b.result.metrics[0].stderr)
             for b, c in zip(load_entries(base)[1], load_entries(current)[1])]
    assert any(d > 0 and d < tolerance(se, se, 3.0, 0.02) for d, se in drops)  # the unpaired rule would pass these
    code, text, _ = regress(capsys, base, current)
    assert code == 1 and "paired over" in text and "6 worse, 0 better" in text


def test_noise_within_tolerance_passes(tmp_path, capsys, monkeypatch):
    base = sweep(SAMPLED, tmp_path / "base")
    current = sweep(SAMPLED, tmp_path / "cur", monkeypatch, SNAPEVAL_FAKE_DRIFT="-0.08")
    b = {(e.key, m.key): m.value for e in load_entries(base)[1] for m in e.result.metrics}
    c = {(e.key, m.key): m.value for e in load_entries(current)[1] for m in e.result.metrics}
    assert b != c  # the numbers did move
    code, text, _ = regress(capsys, base, current)
    assert code == 0, text


def test_tolerance_rule():
    assert tolerance(0.03, 0.04, 3.0, 0.02) == pytest.approx(0.15)
    assert tolerance(None, None, 3.0, 0.02) == 0.02
    assert tolerance(0.001, 0.001, 2.0, 0.02) == 0.02


def test_false_alarm_rate_on_pure_noise_is_small():
    """Two independent runs of a binomial metric at the same true accuracy: z=3 flags almost none of them."""
    rng = random.Random(0)
    alarms = 0
    for trial in range(400):
        n, p = rng.choice([20, 50, 200]), rng.uniform(0.2, 0.9)
        est = []
        for _ in range(2):
            acc = sum(rng.random() < p for _ in range(n)) / n
            est.append((acc, (acc * (1 - acc) / (n - 1)) ** 0.5))
        (vb, sb), (vc, sc) = est
        alarms += (vb - vc) > tolerance(sb, sc, 3.0, 0.02)
    assert alarms / 400 < 0.01


def _entry(value, stderr, higher=True, key_model="m"):
    metric = MetricValue("t", "err", "none", value, stderr, 100, higher)
    identity = {"task": {"limit": 10, "generation": {}, "metadata": {}, "data": {}}, "model": {}}
    result = CellResult(_hashed(identity), identity, [metric], [])
    return Entry({"model": key_model, "task": "t", "method": "full", "seed": 0}, result)


def test_a_null_headline_fails_in_one_line_and_other_metrics_without_a_value_are_not_compared():
    # issue #48: a baseline cell whose headline aggregate is null was skipped without a line (348c906 passed it)
    null = compare([_entry(None, None)], [_entry(None, None)])
    assert null.failed and [f.kind for f in null.findings if f.kind != "note"] == ["missing"]
    assert "the baseline cell has a null headline aggregate err,none: nothing to guard" in null.findings[-1].text
    empty = compare([Entry(_entry(0.5, 0.01).view, dataclasses.replace(_entry(0.5, 0.01).result, metrics=[]))],
                    [_entry(0.5, 0.01)])
    assert empty.failed and "the baseline cell reports no aggregate" in empty.findings[-1].text
    # a baseline without per-item samples cannot guard anything: it fails, naming why; exploring, the aggregate
    # missing from the current cell is named
    assert compare([_entry(0.5, 0.01)], [_entry(None, None)]).count("unpaired") == 1
    explored = compare([_entry(0.5, 0.01)], [_entry(None, None)], allow_unpaired=True)
    assert not explored.failed and any("nothing to compare (no shared item, no aggregate)" in f.text
                                       for f in explored.findings)


def test_lower_is_better_metric_rising_is_a_drop():
    """The tolerance rule (cells without per-item samples: exploration only) orients lower-is-better metrics."""
    assert compare([_entry(0.10, 0.01, higher=False)], [_entry(0.30, 0.01, higher=False)], allow_unpaired=True).failed
    assert not compare([_entry(0.30, 0.01, higher=False)], [_entry(0.10, 0.01, higher=False)],
                       allow_unpaired=True).failed
    improved = compare([_entry(0.30, 0.01, higher=False)], [_entry(0.10, 0.01, higher=False)], allow_unpaired=True)
    assert improved.count("improved") == 1


def test_missing_cells_fail(greedy_base, tmp_path, capsys):
    out, baseline = greedy_base
    smaller = sweep({**GREEDY, "tasks": GREEDY["tasks"][:1]}, tmp_path / "small")
    code, text, _ = regress(capsys, baseline, smaller)
    assert code == 1 and text.count("MISSING") == 3 and "cell missing from the current results" in text


def test_unusable_input_exits_2(greedy_base, tmp_path, capsys):
    out, baseline = greedy_base
    other_limit = sweep({**GREEDY, "tasks": [{"name": "snapeval_passkey", "limit": 5}]}, tmp_path / "lim")
    code, _, err = regress(capsys, baseline, other_limit)
    assert code == 2 and "cannot compare: sample limit differ" in err and err.count("\n") == 1
    code, _, err = regress(capsys, baseline, out, "--alpha", "0.7")
    assert code == 2 and "--alpha=0.7 is invalid; allowed: a number in (0, 0.5)" in err
    other_model = sweep({**GREEDY, "models": ["other"]}, tmp_path / "other")
    code, _, err = regress(capsys, baseline, other_model)
    assert code == 2 and "no cell of the baseline is in the current results" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert regress(capsys, bad, out)[0] == 2
    bad.write_text(json.dumps({"format": "something-else"}))
    code, _, err = regress(capsys, bad, out)
    assert code == 2 and "not a snapeval baseline" in err
    code, _, err = regress(capsys, baseline, tmp_path / "nowhere")
    assert code == 2 and "--current" in err and "is not a results directory" in err
    code, _, err = regress(capsys, tmp_path / "nowhere.json", out)
    assert code == 2 and "--baseline" in err


def test_baseline_round_trips(greedy_base):
    out, baseline = greedy_base
    from_dir = {e.key: e.result for e in load_entries(out)[1]}
    from_file = {e.key: e.result for e in load_entries(baseline)[1]}
    assert from_dir == from_file
    assert all(dataclasses.asdict(r) for r in from_file.values())


# --------------------------------------------------------------------------------------------------------------------
# issue #21: real power at the CI size, and greedy runs checked item by item


def _results_dir(tmp_path, name, entries):
    """A results directory holding ``entries`` (what `snapeval sweep` would have written)."""
    from snapeval.results.store import ResultsStore

    store = ResultsStore(tmp_path / name)
    store.write_manifest(name, [e.view for e in entries], {})
    for e in entries:
        store.write(e.result)
    return store.root


def _greedy_entries(n, solved, *, greedy=True, seed=0):
    """One cell of ``n`` items, the first ``solved`` of them correct."""
    from snapeval.results.schema import SampleRecord

    samples = [SampleRecord("t", d, str(d), (f" The answer is {d}." if d < solved else " no.",),
                            {"acc,none": 1.0 if d < solved else 0.0}, greedy) for d in range(n)]
    value = solved / n
    metric = MetricValue("t", "acc", "none", value, (value * (1 - value) / max(1, n - 1)) ** 0.5, n)
    identity = {"task": {"limit": None, "generation": {}, "metadata": {}, "data": {}}, "model": {}, "seed": seed}
    result = CellResult(_hashed(identity), identity, [metric], samples)
    return Entry({"cell_id": result.cell_id, "model": "m", "task": "t", "method": "full", "seed": seed}, result)


def _hashed(identity) -> str:
    """The cell id `snapeval sweep` gives ``identity`` (regress checks it)."""
    import hashlib

    from snapeval.results.schema import ID_LENGTH, canonical_json

    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:ID_LENGTH]


def _plant(entry, broken):
    """The same cell with the first ``broken`` solved items now wrong (their texts too, as a real run's), its
    aggregate and stderr what its items give (a consistent folder)."""
    result = dataclasses.replace(entry.result, samples=[
        dataclasses.replace(s, scores={**s.scores, "acc,none": 0.0}, generations=(" no.",)) if i < broken else s
        for i, s in enumerate(entry.result.samples)])
    return _resolve(Entry(entry.view, result))


def test_the_config_claims_what_ci_runs():
    """configs/regression.yaml's retrieval tasks are greedy and its LongBench-v2 slice samples, and CI's regress
    (``--exact-sampled``, .ci/run) applies the greedy any-change rule to every committed baseline cell (its comment
    says so); the power it quotes for the sampled test is recomputed here."""
    import yaml

    from snapeval.stats.power import REGRESSION_DROP, mcnemar_power

    text = (REPO / "configs" / "regression.yaml").read_text()
    config = yaml.safe_load(text)
    retrieval = [t for t in config["tasks"] if t["name"].startswith("snapeval_")]
    assert {t["metadata"]["num_samples"] for t in retrieval} == {32} and len(retrieval) == 2
    assert [t["name"] for t in config["tasks"] if t not in retrieval] == ["longbench_v2"]
    _, entries = load_entries(REPO / "results" / "regression" / "baseline.json")
    greedy = [e for e in entries if e.result.deterministic]
    sampled = [e for e in entries if not e.result.deterministic]
    assert len(greedy) == 8 and len(sampled) == 4  # the LongBench-v2 slice samples at temperature 0.1
    assert all(s.generations for e in sampled for s in e.result.samples)
    assert "--exact-sampled" in (REPO / ".ci" / "run").read_text()
    comment = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "regress applies its greedy rule: any change of a per-item score or generated text fails" in comment
    assert "The sampled paired test (Holm over sampled cells, with its stated power) is never run here" in comment
    assert f"only {mcnemar_power(32, REGRESSION_DROP, 0.0, 0.05, 'less'):.0%} power at alpha 0.05 on a single cell" \
        in comment
    assert f"and {mcnemar_power(32, REGRESSION_DROP, 0.0, 0.05 / 8, 'less'):.0%} at alpha 0.05 / 8" in comment


def test_exact_sampled_holds_a_sampled_cell_to_every_item(tmp_path, capsys):
    """``--exact-sampled``: a sampled cell whose one text changed fails, named, where the sampled paired test (no
    drop of the headline score) would pass it."""
    base = _greedy_entries(64, 64, greedy=False)
    baseline = _results_dir(tmp_path, "base", [base])
    first = base.result.samples[0]
    edited = Entry(base.view, dataclasses.replace(base.result, samples=[
        dataclasses.replace(first, generations=(first.generations[0] + " again",)), *base.result.samples[1:]]))
    current = _results_dir(tmp_path, "text", [edited])
    assert regress(capsys, baseline, current)[0] == 0  # the paired test: no drop
    code, text, _ = regress(capsys, baseline, current, "--exact-sampled")
    assert code == 1 and "1 of 64 items changed (sampled from seeded streams decoding reproduces every item)" in text
    assert regress(capsys, baseline, _results_dir(tmp_path, "same", [base]), "--exact-sampled")[0] == 0


def test_greedy_run_fails_on_any_per_item_change_and_passes_an_identical_copy(tmp_path, capsys):
    base = _greedy_entries(64, 60)
    baseline = _results_dir(tmp_path, "base", [base])
    assert regress(capsys, baseline, _results_dir(tmp_path, "same", [base]))[0] == 0
    code, text, _ = regress(capsys, baseline, _results_dir(tmp_path, "drop", [_plant(base, 7)]))  # ~10 points
    assert code == 1 and "CHANGED" in text and "7 of 64 items changed" in text
    assert "  t doc 0: score acc,none 1 -> 0" in text and "  t doc 6: score acc,none 1 -> 0" in text
    assert "metrics acc,none 0.9375 -> 0.828125" in text
    code, text, _ = regress(capsys, baseline, _results_dir(tmp_path, "one", [_plant(base, 1)]))
    assert code == 1 and "1 of 64 items changed" in text and "t doc 0: score acc,none 1 -> 0" in text


def test_sampled_run_catches_a_planted_ten_point_drop_at_the_ci_size(tmp_path, capsys):
    base = _greedy_entries(64, 64, greedy=False)
    baseline = _results_dir(tmp_path, "base", [base])
    code, text, _ = regress(capsys, baseline, _results_dir(tmp_path, "same", [base]))
    assert code == 0 and "power 89% against a 10-point drop at 0% churn, level 0.05" in text
    code, text, _ = regress(capsys, baseline, _results_dir(tmp_path, "drop", [_plant(base, 7)]))
    assert code == 1 and "REGRESSION" in text and "7 worse, 0 better" in text


def test_below_the_n_that_can_reject_the_tolerance_rule_applies_too(tmp_path, capsys):
    base = _greedy_entries(3, 3, greedy=False)
    code, text, _ = regress(capsys, _results_dir(tmp_path, "b", [base]), _results_dir(tmp_path, "c", [_plant(base, 3)]))
    assert code == 1
    assert "the paired test cannot reject at n=3 (smallest possible p 0.0625 >= level 0.05)" in text
    assert "tolerance rule applies too: drop +1.0000 vs tolerance 0.0200" in text


def test_the_committed_baseline_guards_at_the_ci_size(tmp_path, capsys):
    """results/regression/baseline.json itself: an identical copy passes; a planted 10-point drop on one cell (3 of
    its 32 solved items scored 0, texts unchanged) fails, named item by item; so does one changed text."""
    import copy

    baseline = REPO / "results" / "regression" / "baseline.json"
    _, entries = load_entries(baseline)
    assert {len(e.result.samples) for e in entries if e.result.deterministic} == {32}  # the greedy retrieval cells
    assert regress(capsys, baseline, _results_dir(tmp_path, "same", entries), "--exact-sampled")[0] == 0
    target = max((e for e in entries if e.result.deterministic),
                 key=lambda e: sum(s.scores["score,none"] for s in e.result.samples))
    solved = [s for s in target.result.samples if s.scores["score,none"] == 1.0]
    assert len(solved) >= 3
    planted = copy.deepcopy(target.result)
    broken = {s.doc_id for s in solved[:3]}
    for s in planted.samples:
        if s.doc_id in broken:
            s.scores.update({k: 0.0 for k in s.scores if k.startswith("score")})
    current = [Entry(e.view, planted) if e is target else e for e in entries]
    code, text, _ = regress(capsys, baseline, _results_dir(tmp_path, "drop", current))
    assert code == 1 and "3 of 32 items changed" in text
    assert all(f"doc {d}: score score,none 1 -> 0" in text for d in broken)
    edited = copy.deepcopy(target.result)
    first = edited.samples[0]
    edited.samples[0] = dataclasses.replace(first, generations=(first.generations[0] + " ",))
    code, text, _ = regress(capsys, baseline, _results_dir(tmp_path, "text", [Entry(e.view, edited) if e is target
                                                                               else e for e in entries]))
    assert code == 1 and "1 of 32 items changed" in text and "text changed" in text


# --------------------------------------------------------------------------------------------------------------------
# issue #39: a current run that does not pair with the baseline fails with one line; sampled cells under Holm


def _failing_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.split(" ", 1)[0] in ("REGRESSION", "CHANGED", "MISSING",
                                                                             "UNPAIRED", "MISMATCH", "INCONSISTENT",
                                                                             "UNGUARDED")]


def _with(entry, **changes):
    return Entry(entry.view, dataclasses.replace(entry.result, **changes))


def _aggregate(entry, value: float, n: int):
    """The cell with its headline aggregate set to ``value`` over ``n`` items (lm-eval's binomial stderr)."""
    stderr = (value * (1 - value) / max(1, n - 1)) ** 0.5
    return _with(entry, metrics=[dataclasses.replace(entry.result.metrics[0], value=value, stderr=stderr, n=n)])


def _resolve(entry):
    """The cell's aggregate recomputed from its items."""
    samples = entry.result.samples
    return _aggregate(entry, sum(s.scores["acc,none"] for s in samples) / len(samples), len(samples))


def _walk_arounds():
    """The five ways issue #39 found to pass a real drop (each exited 0), as (baseline, current, what the one line
    must name)."""
    greedy = _greedy_entries(64, 60)
    sampled = _greedy_entries(64, 60, greedy=False)
    # 1. a greedy baseline; the current run flags one sample non-greedy and 3 of its 64 items broke
    broken = _plant(greedy, 3)
    first = dataclasses.replace(broken.result.samples[0], greedy=False)
    one_sampled = _with(broken, samples=[first] + broken.result.samples[1:])
    # 2. a current cell without per-item samples, 15 points lower (the unpaired tolerance was 0.245)
    no_samples = _aggregate(_with(sampled, samples=[]), 0.78, 64)
    # 3. a sampled current run logging 29 of the 64 items, its failures missing
    solved = [s for s in sampled.result.samples if s.scores["acc,none"] == 1.0][:29]
    fewer = _resolve(_with(sampled, samples=solved))
    # 4. a sampled current run over 64 other items, 15 points lower
    other = _resolve(_with(sampled, samples=[dataclasses.replace(s, doc_id=s.doc_id + 64, scores={
        "acc,none": 1.0 if s.doc_id < 50 else 0.0}) for s in sampled.result.samples]))
    # 5. a greedy current cell without the headline aggregate
    no_headline = _with(greedy, metrics=[])
    return [("greedy status", greedy, one_sampled, "MISMATCH", "greedy status differs: the baseline is greedy, the "
             "current run is sampled (1 current item(s) not greedy: doc 0); rerun with the baseline's generation "
             "settings"),
            ("no samples", sampled, no_samples, "UNPAIRED", "no per-item samples scored on the headline metric "
             "acc,none in the current run (the baseline has 64): it cannot be paired"),
            ("fewer items", sampled, fewer, "UNPAIRED", "the current run scored 29 of the baseline's 64 items; 35 "
             "missing: doc 29, doc 30, doc 31, doc 32, doc 33 (+30 more)"),
            ("other items", sampled, other, "UNPAIRED", "the current run scored 0 of the baseline's 64 items; 64 "
             "missing: doc 0, doc 1, doc 2, doc 3, doc 4 (+59 more); 64 not in the baseline: doc 64, doc 65, doc 66, "
             "doc 67, doc 68 (+59 more)"),
            ("no headline aggregate", greedy, no_headline, "MISSING", "the headline aggregate missing from the "
             "current cell: acc,none")]


@pytest.mark.parametrize("case", range(5), ids=[w[0] for w in _walk_arounds()])
def test_a_run_that_does_not_pair_fails_with_one_line(case, tmp_path, capsys):
    name, base, current, tag, line = _walk_arounds()[case]
    baseline = _results_dir(tmp_path, "base", [base])
    assert regress(capsys, baseline, _results_dir(tmp_path, "same", [base]))[0] == 0  # an identical rerun passes
    code, text, _ = regress(capsys, baseline, _results_dir(tmp_path, "cur", [current]))
    failing = _failing_lines(text)
    assert code == 1 and failing == [f"{tag:<11} m | t | full | seed 0: {line}"], text
    assert "1 not paired" in text or tag == "MISSING"
    # exploring is allowed, and says it is not a guard
    code, text, _ = regress(capsys, baseline, _results_dir(tmp_path, "cur2", [current]), "--allow-unpaired")
    assert "--allow-unpaired: EXPLORATION ONLY, not a regression guard" in text
    assert text.splitlines()[-1].startswith(("PASS (exploration, --allow-unpaired)",
                                             "FAIL (exploration, --allow-unpaired)"))


def _sampled_pair(rng, cells: int = 8):
    """``cells`` sampled cells of 64 items and a rerun with no change: item i is solved with its own probability
    p_i ~ Beta(0.5, 0.5) in each run independently, so the two runs disagree on 2 p (1 - p) = 25% of the items on
    average, in both directions (the churn of sampled decoding)."""
    base, current = [], []
    for i in range(cells):
        p = rng.beta(0.5, 0.5, size=64)
        template = _greedy_entries(64, 0, greedy=False, seed=i)
        for out in (base, current):
            solved = rng.random(64) < p
            samples = [dataclasses.replace(s, scores={"acc,none": float(solved[s.doc_id])}, generations=(
                f" The answer is {s.doc_id}." if solved[s.doc_id] else " no.",)) for s in template.result.samples]
            out.append(_resolve(_with(template, samples=samples)))
    return base, current


def test_sampled_cells_hold_the_family_wise_false_alarm_rate():
    """Eight sampled cells of 64 items rerun with no change at 25% churn: Holm over the cells keeps the share of
    runs with any false alarm at most alpha + 3 Monte Carlo se (the old per-cell test at alpha failed about a
    quarter of such runs)."""
    rng = np.random.default_rng(39)
    runs, alarms = 300, 0
    for _ in range(runs):
        alarms += compare(*_sampled_pair(rng)).failed
    se = (0.05 * 0.95 / runs) ** 0.5
    assert alarms / runs <= 0.05 + 3 * se, f"false-alarm rate {alarms / runs:.3f} > {0.05 + 3 * se:.3f} (se {se:.3f})"


def test_sampled_power_is_stated_at_the_holm_level_and_the_churn_measured(tmp_path, capsys):
    from snapeval.stats.power import mcnemar_power

    base, current = _sampled_pair(np.random.default_rng(1))
    code, text, _ = regress(capsys, _results_dir(tmp_path, "b", base), _results_dir(tmp_path, "c", current),
                            "--drop", "0.15")
    assert "Holm-adjusted over the 8 sampled cells at family-wise alpha=0.05" in text
    lines = [line for line in text.splitlines() if "paired over 64 items" in line]
    assert len(lines) == 8
    for line in lines:
        better = int(line.split(" better;")[0].rsplit(", ", 1)[1])
        churn = better / 64
        power = mcnemar_power(64, churn + 0.15, churn, 0.05 / 8, "less")
        assert f"power {power:.0%} against a 15-point drop at {churn:.0%} churn, level 0.00625" in line
        assert "over 8 sampled cells" in line


# --------------------------------------------------------------------------------------------------------------------
# issue #48: the guard's last gaps (each passed a drop or another experiment on 348c906)


def _gaps():
    """(name, baseline, current, the failing line) of each way around the pairing rules that 348c906 let pass."""
    sampled = _greedy_entries(64, 57, greedy=False)  # 0.89
    # 1. the 20 items the current run broke carry no per-item headline score: paired over the rest, 0.89 -> 0.58
    broken = _plant(sampled, 20)
    unscored = _with(broken, samples=[dataclasses.replace(s, scores={}) if s.doc_id < 20 else s
                                      for s in broken.result.samples])
    # 2. other items under the same doc ids (every target differs), scoring the same
    moved = _with(sampled, samples=[dataclasses.replace(s, target=s.target + "x") for s in sampled.result.samples])
    # 3. another task source (its prompts or scoring changed), items and scores identical
    source_a, source_b = "a" * 64, "b" * 64
    from_a = _with(sampled, task_source_sha256=source_a)
    from_b = _with(sampled, task_source_sha256=source_b)
    return [("headline score missing on some items", sampled, unscored, "UNPAIRED", "20 of the current run's 64 "
             "items carry no per-item acc,none score: doc 0, doc 1, doc 2, doc 3, doc 4 (+15 more); every item must "
             "carry the headline score"),
            ("other targets", sampled, moved, "UNPAIRED", "64 item(s) have another target in the current run: doc 0, "
             "doc 1, doc 2, doc 3, doc 4 (+59 more) (the same doc ids hold other items)"),
            ("task source", from_a, from_b, "MISMATCH", f"task source differs: baseline {source_a[:12]} vs current "
             f"{source_b[:12]} (the task's prompts or scoring changed: not the same items); write the baseline again "
             "if the change is intended")]


@pytest.mark.parametrize("case", range(3), ids=[g[0] for g in _gaps()])
def test_the_guards_last_gaps_fail_with_one_line(case, tmp_path, capsys):
    _, base, current, tag, line = _gaps()[case]
    baseline = _results_dir(tmp_path, "base", [base])
    assert regress(capsys, baseline, _results_dir(tmp_path, "same", [base]))[0] == 0  # an identical rerun passes
    code, text, _ = regress(capsys, baseline, _results_dir(tmp_path, "cur", [current]))
    assert code == 1 and _failing_lines(text) == [f"{tag:<11} m | t | full | seed 0: {line}"], text


def test_two_cells_with_one_key_are_refused_at_load(tmp_path, capsys):
    """A second current cell with the key of another (a hand-edited manifest): 348c906 compared the last one and
    ignored the first; both files and results directories are refused in one line."""
    base = _greedy_entries(64, 57, greedy=False)
    worse = _plant(base, 20)
    twin = Entry({**worse.view, "cell_id": "c0b"}, dataclasses.replace(worse.result, cell_id="c0b"))
    baseline = _results_dir(tmp_path, "base", [base])
    code, out, err = regress(capsys, baseline, _results_dir(tmp_path, "cur", [twin, base]))
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1].endswith("two cells with one key (m | t | full | seed 0): cell ids c0b and "
                                                 f"{base.result.cell_id}; allowed: one cell per (model, task, method "
                                                 "settings, seed)")
    with pytest.raises(Exception, match="two cells with one key"):
        load_entries(_results_dir(tmp_path, "base2", [base, twin]))


# --------------------------------------------------------------------------------------------------------------------
# issue #61: a folder's own consistency, checked before comparing (each walk-around passed on 5ff38e2)


def _two_metrics(n: int, solved: int, *, greedy: bool = False):
    """A sampled cell with a second metric (``f1``, equal to ``acc`` on every item) beside the headline ``acc``."""
    entry = _greedy_entries(n, solved, greedy=greedy)
    samples = [dataclasses.replace(s, scores={**s.scores, "f1,none": s.scores["acc,none"]})
               for s in entry.result.samples]
    head = entry.result.metrics[0]
    return _resolve2(_with(entry, samples=samples, metrics=[head, dataclasses.replace(head, metric="f1")]))


def _resolve2(entry):
    """Every aggregate and stderr recomputed from the items (lm-eval's mean and mean_stderr)."""
    metrics = []
    for m in entry.result.metrics:
        values = [s.scores[m.key] for s in entry.result.samples if m.key in s.scores]
        metrics.append(dataclasses.replace(m, value=float(np.mean(values)), n=len(values),
                                           stderr=float(np.std(values, ddof=1) / len(values) ** 0.5)))
    return _with(entry, metrics=metrics)


def _consistency_walk_arounds():
    """The walk-arounds of issue #61, as (name, baseline entries, current entries, tag, the one failing line)."""
    import hashlib

    from snapeval.results.schema import ID_LENGTH, canonical_json

    sampled = _greedy_entries(64, 40, greedy=False)
    label = "m | t | full | seed 0"
    # 1. 20 solved items broken, one other item scored 21.0: the mean is unchanged
    out_of_range = _resolve(_with(sampled, samples=[
        dataclasses.replace(s, scores={"acc,none": 0.0}, generations=(" no.",)) if s.doc_id < 20 else
        dataclasses.replace(s, scores={"acc,none": 21.0}, generations=(" 21",)) if s.doc_id == 63 else s
        for s in sampled.result.samples]))
    # 2. the baseline's headline aggregate lowered 0.625 -> 0.3 with its items untouched
    lowered = _with(sampled, metrics=[dataclasses.replace(sampled.result.metrics[0], value=0.3)])
    # 3. 5 items broken and 5 identical failing texts rescored 0 -> 1: the mean is unchanged
    rescored = _resolve(_with(sampled, samples=[
        dataclasses.replace(s, scores={"acc,none": 0.0}, generations=(" no.",)) if s.doc_id < 5 else
        dataclasses.replace(s, scores={"acc,none": 1.0}) if 40 <= s.doc_id < 45 else s
        for s in sampled.result.samples]))
    # 4. a non-headline metric drops 47 points (30 items), the headline untouched
    two = _two_metrics(64, 60)
    f1_drop = _resolve2(_with(two, samples=[
        dataclasses.replace(s, scores={**s.scores, "f1,none": 0.0}, generations=(f" The answer is {s.doc_id}!",))
        if s.doc_id < 30 else s for s in two.result.samples]))
    # 5. the current run's stderr hand-set to 0.5
    loose = _with(sampled, metrics=[dataclasses.replace(sampled.result.metrics[0], stderr=0.5)])
    # 6. CI's greedy baseline copied in as seed 0, the regressed cell renamed seed 1 (its id recomputed)
    _, ci = load_entries(REPO / "results" / "regression" / "baseline.json")
    target = ci[1]
    broken = copy_cell = dataclasses.replace(target.result, identity={**target.result.identity, "seed": 1},
                                             samples=[dataclasses.replace(s, scores={k: 0.0 for k in s.scores},
                                                                          generations=(" no.",))
                                                      for s in target.result.samples])
    broken.cell_id = hashlib.sha256(canonical_json(copy_cell.identity).encode()).hexdigest()[:ID_LENGTH]
    renamed = Entry({**target.view, "seed": 1, "cell_id": broken.cell_id}, broken)
    # 7. provenance: a cell whose identity's seed was edited (its id no longer its hash); one written by other code
    edited = _with(sampled, identity={**sampled.result.identity, "seed": 0, "edited": True})
    other_code = _with(sampled, versions={"snapeval": "0.2.9"})
    others = [_greedy_entries(64, 40, greedy=False, seed=i) for i in (1, 2)]
    return [
        ("score out of range", [sampled], [out_of_range], "INCONSISTENT", label, "the current run: t/acc,none: "
         "per-item score 21.0 of doc 63 is outside [0, 1]; allowed: scores in the metric's range"),
        ("aggregate not its items'", [lowered], [sampled], "INCONSISTENT", label, "the baseline: t/acc,none: aggregate "
         "0.3 but the mean of its 64 per-item scores is 0.625; allowed: the aggregate its items give"),
        ("same text rescored", [sampled], [rescored], "INCONSISTENT", label, "doc 40 (t): the same generated text "
         "scored acc,none 0 in the baseline but 1 in the current run (and 4 more items); allowed: one score per text "
         "and metric (the scorer is deterministic)"),
        ("non-headline metric", [two], [f1_drop], "REGRESSION", label, None),
        ("stderr set by hand", [sampled], [loose], "INCONSISTENT", label, "the current run: t/acc,none: stderr 0.5 in "
         "the file but 0.0609938 from its 64 items (lm-eval's mean_stderr); allowed: the stderr its items give "
         "(regress recomputes it)"),
        ("extra seed unguarded", ci, ci + [renamed], "UNGUARDED", renamed.label, "a current cell with no baseline cell "
         "(an extra seed or configuration): nothing guards it; allowed: the baseline's cells only (write the "
         "baseline again with --write-baseline to guard it)"),
        ("identity edited", [sampled], [edited], "INCONSISTENT", label, f"the current run: cell_id="
         f"{sampled.result.cell_id} is not the hash of its identity ("
         f"{hashlib.sha256(canonical_json(edited.result.identity).encode()).hexdigest()[:ID_LENGTH]}): the identity "
         "(a seed, a setting) was edited after the run; allowed: a cell as `snapeval sweep` wrote it"),
        ("other code", [sampled, *others], [other_code, *others], "INCONSISTENT", label, "the current run: "
         "written by other code than the rest of the current run (versions {'snapeval': '0.2.9'} vs {}); allowed: "
         "one run's cells"),
    ]


@pytest.mark.parametrize("case", range(8), ids=[w[0] for w in _consistency_walk_arounds()])
def test_each_consistency_walk_around_fails_with_one_line(case, tmp_path, capsys):
    name, base, current, tag, label, line = _consistency_walk_arounds()[case]
    baseline = _results_dir(tmp_path, "base", [b for b in base if "aggregate" not in name] or current)
    if "aggregate" not in name:
        assert regress(capsys, baseline, _results_dir(tmp_path, "same", base))[0] == 0  # a consistent rerun passes
    baseline = _results_dir(tmp_path, "base2", base)
    code, text, _ = regress(capsys, baseline, _results_dir(tmp_path, "cur", current))
    failing = _failing_lines(text)
    assert code == 1 and len(failing) == 1 and failing[0].startswith(f"{tag:<11} {label}: "), text
    if line is not None:
        assert failing[0] == f"{tag:<11} {label}: {line}", text
    else:  # the non-headline metric: its own paired test names it
        assert failing[0].startswith(f"{tag:<11} {label}: f1,none: 0.9375 -> 0.4688"), text


def test_the_same_text_in_two_cells_of_one_folder_carries_one_score():
    """Two cells of one task in one folder: an item with the same text (full cache and a budget that kept its
    answer) must score the same in both."""
    from snapeval.stats.consistency import folder_problems

    a = _greedy_entries(8, 8, greedy=False)
    b = Entry({**a.view, "method": "snapkv", "budget": 64},
              dataclasses.replace(a.result, samples=[dataclasses.replace(s, scores={"acc,none": 0.0}) if s.doc_id == 3
                                                     else s for s in a.result.samples]))
    lines = [line for _, line in folder_problems([a, b], "the current run") if "same generated text" in line]
    assert lines == ["doc 3 (t): the same generated text scored acc,none 1 in m | t | full | seed 0 (the current run) "
                     "but 0 in m | t | snapkv@64 | seed 0 (the current run); allowed: one score per text and metric "
                     "(the scorer is deterministic)"]


def test_the_committed_baseline_is_consistent():
    """CI's baseline passes every consistency check (its aggregates, stderrs, ranges, ids and provenance)."""
    from snapeval.stats.consistency import folder_problems

    _, entries = load_entries(REPO / "results" / "regression" / "baseline.json")
    assert folder_problems(entries, "the baseline") == []
