"""The anytime-valid paired test (snapeval/stats/sequential.py) and the sequential budget search
(snapeval/sweep/search.py): the betting capital against its definition, Ville's bound on clustered data at every
look, the walk's semantics, the shared batches, and the quickstart's grid replayed (issue #48)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from snapeval.errors import SnapevalError
from snapeval.stats import DecisionRule
from snapeval.stats.sequential import (
    INCONCLUSIVE,
    NON_INFERIOR,
    NOT_NON_INFERIOR,
    OPEN,
    confidence_sequence,
    decide,
    log_capital,
    sides,
)
from snapeval.report.search import IMPLIED, NOT_REACHED, SearchSettings, batches, replay, search

REPO = Path(__file__).resolve().parents[1]


def test_log_capital_is_the_product_of_agrapa_bets():
    """``K_t = prod (1 + lambda_k z_k)``, ``lambda_k = clip(sum z / (a^2 + sum z^2) over the past, 0, 0.9 / a)``."""
    rng = np.random.default_rng(3)
    z = rng.uniform(-0.98, 1.02, size=50)
    capital, s1, s2, out = 1.0, 0.0, 1.0, []
    for value in z:
        bet = min(max(s1 / s2, 0.0), 0.9)
        capital *= 1 + bet * value
        out.append(math.log(capital))
        s1, s2 = s1 + value, s2 + value * value
    assert log_capital(z, 1.0) == pytest.approx(np.array(out))
    assert log_capital(np.stack([z, z]), 1.0)[1] == pytest.approx(np.array(out))  # rows are separate sequences
    with pytest.raises(ValueError, match="below -bound"):
        log_capital([-2.0], 1.0)


def test_false_non_inferior_rate_at_the_margin_holds_at_every_look_on_clustered_data():
    """Documents of 2-6 questions, intra-cluster correlation 0.5, the cache only breaks items, true drop exactly
    the margin (0.05); the non-inferior side is looked at after every cluster (Ville's inequality: at most alpha).
    A fixed-n test looked at after every cluster would not hold it; this one does. Seeded; 2,000 data sets."""
    rng = np.random.default_rng(48)
    sizes = rng.integers(2, 7, size=120).astype(float)
    margin, data_sets, icc = 0.05, 2000, 0.5
    c = (1 - icc) / icc
    p_worse = rng.beta(margin * c, (1 - margin) * c, size=(data_sets, sizes.size))
    d = -rng.binomial(sizes.astype(int), p_worse).astype(float)
    ni, bad = sides(d, np.broadcast_to(sizes, d.shape), margin, sizes.max())
    false_ni = (ni >= math.log(20)).any(axis=1).mean()
    se = math.sqrt(0.05 * 0.95 / data_sets)
    assert false_ni <= 0.05 + 2 * se, false_ni
    covered = (~(ni >= math.log(20)).any(axis=1) & ~(bad >= math.log(20)).any(axis=1)).mean()
    assert covered >= 0.90 - 2 * se, covered


def test_decide_settles_each_side_and_reports_what_it_used():
    ones = np.ones(300)
    clean = decide(np.zeros(300), ones, 0.02, 0.05, range(8, 301, 8))
    assert clean.label == NON_INFERIOR and clean.items == clean.clusters < 300 and clean.log_e_ni >= math.log(20)
    broken = decide(-np.ones(40), np.ones(40), 0.02, 0.05, [8, 16, 24, 32, 40])
    assert (broken.label, broken.items, broken.look) == (NOT_NON_INFERIOR, 8, 0)
    assert decide(np.zeros(40), np.ones(40), 0.02, 0.05, [8, 16], exhausted=False).label == OPEN
    assert decide(np.zeros(40), np.ones(40), 0.02, 0.05, [8, 40]).label == INCONCLUSIVE
    low, high = confidence_sequence(-np.ones(40), np.ones(40), 0.05, [8, 40])
    assert -1 <= low < high < -0.5
    with pytest.raises(SnapevalError, match="exceeds its size"):
        decide([3.0], [2.0], 0.02, 0.05, [1])


def _fake(truth: dict, calls: list):
    """A batch evaluator: item i of cell c scores ``truth[c](i)``, the reference 1; records each call."""
    def evaluate(items, cells):
        calls.append((tuple(items), tuple(cells)))
        return {c: {i: (1.0 if c is None else truth[c](i)) for i in items} for c in cells}
    return evaluate


@pytest.mark.parametrize("design", ["group-sequential", "e-process"])
def test_the_walk_goes_down_from_the_largest_budget_and_stops_at_the_first_that_is_not_non_inferior(design):
    """Both designs walk the same way; under --monotone the budgets below a settled failure are run on the first
    batch: where they score no better than the failed budget they are not non-inferior by monotonicity (a's 128,
    broken worse than its 256), where they score better (b's 512 after a dip at 1024) they keep no claim and the
    result warns (issue #61)."""
    clusters = {i: [i] for i in range(400)}
    fine, broken, worst = (lambda i: 1.0), (lambda i: 0.0 if i % 2 else 1.0), (lambda i: 0.0)
    truth = {("a", 1024): fine, ("a", 512): fine, ("a", 256): broken, ("a", 128): worst, ("b", 1024): broken,
             ("b", 512): fine}
    for monotone in (False, True):
        calls = []
        result = search(clusters, list(truth), _fake(truth, calls), rule=DecisionRule(margin=0.05),
                        settings=SearchSettings(batch=20, seed=1, monotone=monotone, design=design))
        cells = result.cells
        assert cells[("a", 1024)].label == cells[("a", 512)].label == NON_INFERIOR
        assert cells[("a", 256)].label == NOT_NON_INFERIOR and cells[("a", 256)].items < 400
        assert cells[("b", 1024)].label == NOT_NON_INFERIOR
        lower = (cells[("a", 128)].label, cells[("a", 128)].how, cells[("b", 512)].label, cells[("b", 512)].how)
        first = len(calls[0][0])
        if monotone:
            assert lower == (NOT_NON_INFERIOR, IMPLIED, NOT_REACHED, "monotonicity contradicted")
            assert cells[("a", 128)].items == cells[("b", 512)].items == first
            assert len(result.warnings) == 1 and result.warnings[0].startswith(
                f"b: not monotone at the first look: budget 512 scored +{sum(i % 2 for i in calls[0][0])} (summed "
                f"over {first} items) "
                "against the failed budget 1024 on the same items (one-sided paired p = ")
        else:
            assert lower == (NOT_REACHED, "", NOT_REACHED, "") and result.warnings == []
            assert cells[("a", 128)].items == cells[("b", 512)].items == 0
        assert result.method_decisions() == {"a": (NON_INFERIOR, 512), "b": (NOT_NON_INFERIOR, None)}
        # the reference is asked for once per batch, with every cell that needs that batch (one shared prefill)
        asked = [items for items, cells_ in calls if None in cells_]
        assert len(asked) == len(set(asked)) and sum(map(len, asked)) == result.reference_items
        assert set(calls[0][1]) == {None, ("a", 1024), ("b", 1024)}
        assert result.evaluations < result.full_grid_evaluations / 2


def test_batches_are_whole_clusters_in_a_fixed_random_order():
    clusters = {"x": [1, 2, 3], "y": [4], "z": [5, 6], "w": [7]}
    plan = batches(clusters, 3, 0)
    assert plan == batches(clusters, 3, 0)  # fixed by its seed
    assert len({tuple(c for b in batches(clusters, 3, seed) for c, _ in b) for seed in range(8)}) > 1  # random
    seen = [item for batch in plan for _, item in batch]
    assert sorted(seen) == list(range(1, 8)) and all(len(b) >= 3 for b in plan[:-1])
    for batch in plan:  # a cluster never spans two batches
        assert all(sum(1 for c, _ in b if c == cluster) in (0, len(clusters[cluster])) for b in plan
                   for cluster in {c for c, _ in batch})


@pytest.mark.parametrize("raw, message", [({"batch": 0}, "search.batch=0 is invalid; allowed: an integer >= 1"),
                                          ({"seed": -1}, "search.seed=-1 is invalid"),
                                          ({"monotone": "yes"}, "search.monotone='yes' is invalid; allowed: true or"),
                                          ({"design": "bisection"}, "search.design='bisection' is invalid; allowed: "
                                                                    "group-sequential, e-process"),
                                          ({"looks": 0}, "search.looks=0 is invalid; allowed: an integer in 1..10"),
                                          ({"futility": 0.7}, "search.futility=0.7 is invalid; allowed: a number in")])
def test_search_settings_refuse_bad_input_in_one_line(raw, message):
    with pytest.raises(SnapevalError, match=message):
        SearchSettings(**raw)


def test_the_quickstart_replayed_reaches_the_full_grids_answers_and_says_how_many_cells_stopped_early():
    """results/quickstart's committed per-item results through the search (no model): at the sweep's 2-point
    margin every method's answer is the full grid's (inconclusive at 40 items everywhere, as the report says);
    non-inferiority is out of reach at 40 items (133 needed even if every item ties), so every cell the walks run
    stops early as out of reach (before its last look; with a discordant item seen, reach is a probability and may
    take a second look to fall below 5%), and the account says how many stopped early (docs/running-sweeps.md quotes
    it)."""
    from snapeval.report import tables
    from snapeval.report.results_table import load_table
    from snapeval.report.search import render

    settings = SearchSettings(seed=0)
    groups = replay(REPO / "results" / "quickstart", settings=settings)
    grid = {(r.task, r.method): r.decision for r in tables.decisions(tables.paired(load_table(
        REPO / "results" / "quickstart"))).itertuples()}
    answers = {(g.task, m): a for g in groups for m, (a, _) in g.result.method_decisions().items()}
    assert answers == grid
    run = sum(g.result.cells_run for g in groups)
    early = sum(g.result.stopped_early for g in groups)
    assert all(not g.reach[0] for g in groups) and early == run == 9
    assert all(c.why == "out of reach" and c.batches < g.result.batches for g in groups
               for c in g.result.cells.values() if c.items)
    used = sum(g.result.evaluations for g in groups)
    full = sum(g.result.full_grid_evaluations for g in groups)
    assert full == 1344 and used <= full / 4
    assert render(groups, DecisionRule(), settings)[-1].startswith(
        f"All groups: {early} of the {run} cells run stopped early; {used} of {full} item-evaluations")


#: The live search tests' sweep (the test harness's 200 items): two methods walking 3 and 2 budgets at margin 0.2.
SEARCH_SWEEP = {"name": "s", "models": ["llama-3.1-8b-instruct"],
                "tasks": [{"name": "snapeval_passkey", "limit": 200}],
                "methods": ["full", {"method": "snapstream", "budgets": [64, 512, 1024]},
                            {"method": "streamingllm", "budgets": [64, 1024]}], "decision": {"margin": 0.2}}


def test_until_decided_runs_the_search_through_the_sweep_and_says_what_it_decided(tmp_path, monkeypatch, capsys):
    """`snapeval sweep --until-decided` on the test harness (200 items, 4 equal looks of 50): each look of open
    cells is one shared unit with the full cache, cells stopped early leave their batches as shards and no result
    file, and search.md gives the decisions, the look that settled each cell and the items each used; --monotone
    runs the budget below a settled failure on the first look's items."""
    import io

    from fixtures import sweep_fakes
    from fixtures.sweep_fakes import fake_evaluate, fake_simulate
    from snapeval.results.store import ResultsStore
    from snapeval.sweep import parse_config, run_sweep

    monkeypatch.setattr(sweep_fakes, "DOCS", 200)
    calls = []

    def counted(model_args, tasks, *, shard=None, **kwargs):
        calls.append((model_args["config"].method, model_args["config"].budget, shard))
        return fake_evaluate(model_args, tasks, shard=shard, **kwargs)

    out = tmp_path / "s"
    summary = run_sweep(parse_config(SEARCH_SWEEP), out, evaluate=counted, simulate=fake_simulate,
                        stream=io.StringIO(), report=False, search=SearchSettings(monotone=True, looks=4))
    account = (out / "search.md").read_text()
    assert "| streamingllm | 1024 | not non-inferior | look 2 of 4 | 100 of 200 |" in account
    assert "| streamingllm | 64 | not non-inferior | by monotonicity | 50 of 200 |" in account
    assert "Cells stopped early: 4 of the 4 the walk ran." in account
    assert "Answers: snapstream non-inferior at" in account
    rows = {label: (status, text) for label, status, text in summary.rows}
    assert rows["llama-3.1-8b-instruct | snapeval_passkey | streamingllm@64 | seed 0"][0] == "search"
    # the full cache ran each batch once, always beside the cells that needed it; no cell ran a batch twice
    assert len([c for c in calls if c[0] == "full"]) == len({c[2] for c in calls})
    assert len(calls) == len(set(calls)) and all(shard is not None for *_, shard in calls)
    evaluated = sum(1 for method, *_ in calls if method != "full")
    store = ResultsStore(out)
    finished = {r.identity["policy"].get("budget") for r in store.finished()
                if r.identity["policy"]["method"] != "full"}
    assert len(finished) < 5 and evaluated < 5 * 4  # not every cell ran every look


def test_running_ahead_prefills_each_batch_once_and_decides_the_same(tmp_path, monkeypatch):
    """The live search with ``run_ahead`` (default) against without, on the test harness (200 items, 4 looks,
    snapstream 1024 / 512 / 64, streamingllm 1024 / 64, margin 0.2): the same cells settled the same way (search.md's
    tables), every batch run as exactly one shared unit (one prefill per item, as the full grid), while without it a
    budget the walk opens later runs the earlier batches again; the account counts what ran ahead unread."""
    import io
    import re

    from fixtures import sweep_fakes
    from fixtures.sweep_fakes import fake_evaluate, fake_simulate
    from snapeval.sweep import parse_config, run_sweep
    from snapeval.sweep.executors import InProcessExecutor

    monkeypatch.setattr(sweep_fakes, "DOCS", 200)

    class Counting(InProcessExecutor):
        def __init__(self):
            self.units = []

        def run(self, units, unit_fn, on_start):
            self.units += [(u.shard.index, tuple((c.config.method, c.config.budget) for c in u.cells)) for u in units]
            yield from super().run(units, unit_fn, on_start)

    tables, units, accounts = {}, {}, {}
    for ahead in (True, False):
        executor = Counting()
        out = tmp_path / str(ahead)
        run_sweep(parse_config(SEARCH_SWEEP), out, evaluate=fake_evaluate, simulate=fake_simulate,
                  stream=io.StringIO(), report=False, executor=executor,
                  search=SearchSettings(looks=4, run_ahead=ahead))
        accounts[ahead] = (out / "search.md").read_text()
        tables[ahead] = [line for line in accounts[ahead].splitlines() if line.startswith(("| ", "Answers:"))]
        units[ahead] = executor.units
    assert tables[True] == tables[False] and any("| non-inferior |" in line for line in tables[True])
    batches = [index for index, _ in units[True]]
    assert len(batches) == len(set(batches))  # each batch one unit: every item prefilled once
    assert all(len(cells) == 6 for _, cells in units[True])  # the full cache and every budget, from the first look
    again = [index for index, _ in units[False]]
    assert len(again) > len(set(again))  # without: a budget opened later ran earlier batches again
    unread = re.search(r"never read: (\d+) item-evaluations", accounts[True])
    assert unread and int(unread.group(1)) > 0 and "never read" not in accounts[False]


def test_dry_run_says_where_non_inferiority_is_out_of_reach(tmp_path, capsys):
    """`snapeval sweep CONFIG --dry-run [--until-decided]` prints, per group, whether non-inferiority at the sweep's
    margin is reachable at the task's items even if every item ties (issue #61): 40 items at 2 points are not (133
    for the fixed grid, and for the search, whose non-inferior side tests only where a tied run can reach), 400 are."""
    import yaml

    from snapeval.cli import main as cli

    raw = {"name": "reach", "models": ["smollm2-135m-instruct"], "methods": ["full", {"method": "snapkv", "budgets":
                                                                                      [64]}],
           "tasks": [{"name": "snapeval_passkey", "limit": 40}, {"name": "snapeval_kv_needle", "limit": 400}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert cli(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run", "--until-decided"]) == 0
    plan = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  plan  ")]
    assert plan == [
        "  plan  smollm2-135m-instruct | snapeval_passkey | seed 0: non-inferiority at margin 0.02 with 40 items: fixed "
        "grid: OUT OF REACH (needs 133 items even if every item ties); search: OUT OF REACH (needs 133 items even if "
        "every item ties)",
        "  plan  smollm2-135m-instruct | snapeval_kv_needle | seed 0: non-inferiority at margin 0.02 with 400 items: "
        "fixed grid: reachable (from 133 items); search: reachable (from 133 items)"]


def test_the_search_report_words_the_design_from_groupseqs_constants(monkeypatch):
    """search.md's design sentence is derived from snapeval.stats.groupseq's constants, read when it is written (the
    spending of each side, the default looks, the tied-run re-plan and its share), so one place states the design:
    with the constants patched the text follows, and with the shipped ones it is the sentence the committed benchmark
    JSON quotes (results/bench/sequential_search.json, the quickstart replay)."""
    from snapeval.report.search import render
    from snapeval.stats import groupseq

    def sentence(**settings):
        return render([], DecisionRule(), SearchSettings(**settings))[0]

    shipped = sentence()
    assert ("5 planned looks at 20/40/60/80/100% of the items, Lan-DeMets boundaries on Tango's statistic (the fixed "
            "rule's; Hwang-Shih-DeCani spending, γ = −3 for non-inferiority, −1 for not non-inferior), the non-inferior "
            "side only at looks where a tied run could reach it (re-planned to stop a tied run by 60% of the items "
            "where that keeps the power), a cell stopped once non-inferiority is out of reach (non-binding "
            "futility)") in shipped
    committed = json.loads((REPO / "results" / "bench" / "sequential_search.json").read_text())
    assert groupseq.design_text() in committed["quickstart_replay"]["margin 0.02, group-sequential, monotone False"][
        "markdown"][0]
    monkeypatch.setattr(groupseq, "DESIGN_SPENDING", "hsd-2.5")
    monkeypatch.setattr(groupseq, "OTHER_SPENDING", "hsd0")
    assert "Hwang-Shih-DeCani spending, γ = −2.5 for non-inferiority, 0 for not non-inferior)" in sentence()
    monkeypatch.setattr(groupseq, "DESIGN_SPENDING", "obrien-fleming")
    monkeypatch.setattr(groupseq, "OTHER_SPENDING", None)
    assert "(the fixed rule's; O'Brien-Fleming-like spending on both sides)" in sentence()
    monkeypatch.setattr(groupseq, "OTHER_SPENDING", "hsd-1")
    assert "O'Brien-Fleming-like spending for non-inferiority, Hwang-Shih-DeCani γ = −1 for not" in sentence()
    monkeypatch.setattr(groupseq, "TIED_STOP_SHARE", 0.5)
    assert "re-planned to stop a tied run by 50% of the items" in sentence()
    monkeypatch.setattr(groupseq, "TIED_STOP_RATIO", 0.0)  # the re-plan off: the report does not claim it
    assert "could reach it, a cell stopped" in sentence() and "re-planned" not in sentence()
    monkeypatch.setattr(groupseq, "LOOKS", 4)
    assert groupseq.design_text().startswith("group-sequential: 4 planned looks at 25/50/75/100% of the items")
    assert "3 planned looks at 30/60/100%" in sentence(looks=(0.3, 0.6, 1.0))
    assert "or at conditional power below 0.1 (non-binding" in sentence(futility=0.1)
