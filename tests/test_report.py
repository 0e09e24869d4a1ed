"""``snapeval report``: comparison tables (numbers checked against the table), plots, and the CLI."""
from __future__ import annotations

import io
import math

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

from fixtures.sweep_fakes import fake_evaluate, fake_simulate  # noqa: E402
from snapeval.cli import main as cli  # noqa: E402
from snapeval.report import build_report, tables  # noqa: E402
from snapeval.report.plots import PLOTS, paired_difference_vs_budget, pareto_front, place_labels  # noqa: E402
from snapeval.report.results_table import load_table  # noqa: E402
from snapeval.sweep import parse_config, run_sweep  # noqa: E402

RAW = {
    "name": "rep",
    "models": ["llama-3.1-8b-instruct"],
    "tasks": [{"name": "snapeval_passkey", "limit": 12}, {"name": "aime24_snapeval", "data_files": [], "limit": 12}],
    "methods": ["full", {"method": "snapstream", "budgets": [128, 512]}, {"method": "streamingllm", "budgets": [128, 512]},
                {"method": "snapkv", "budgets": [128]}],
    "seeds": [0, 1],
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep")
    run_sweep(parse_config(RAW), out, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
              report=False)
    return out


@pytest.fixture(scope="module")
def report(results, tmp_path_factory):
    """``build_report`` over the sweep, once: its files are read, never written, by the tests that use it."""
    folder = tmp_path_factory.mktemp("report") / "r"
    return build_report(results, folder), folder


def test_points_average_seeds(results):
    table = load_table(results)
    pts = tables.points(table)
    assert len(pts) == 2 * 6 and set(pts["seeds"]) == {2}
    prim = table[table["primary"] & (table["task"] == "snapeval_passkey") & (table["method"] == "snapstream")
                 & (table["budget"] == 128)]
    row = pts[(pts["task"] == "snapeval_passkey") & (pts["method"] == "snapstream") & (pts["budget"] == 128)].iloc[0]
    assert row["value"] == pytest.approx(prim["value"].mean())
    assert row["stderr"] == pytest.approx(math.sqrt((prim["stderr"] ** 2).sum()) / 2)
    assert row["n_samples"] == prim["n_samples"].sum() == 24
    assert list(pts["task"].unique()) == ["snapeval_passkey", "aime24_snapeval"]  # the config's order
    assert list(pts[pts["task"] == "aime24_snapeval"]["method"]) == ["full", "snapstream", "snapstream", "snapkv",
                                                                     "streamingllm", "streamingllm"]


def test_comparison_deltas_and_ratios(results):
    comp = tables.comparison(load_table(results))
    full = comp[(comp["task"] == "aime24_snapeval") & (comp["method"] == "full")].iloc[0]
    snap = comp[(comp["task"] == "aime24_snapeval") & (comp["method"] == "snapstream") & (comp["budget"] == 128)].iloc[0]
    assert snap["delta"] == pytest.approx(snap["value"] - full["value"])
    assert snap["delta_stderr"] == pytest.approx(math.hypot(snap["stderr"], full["stderr"]))
    assert snap["kv_reduction_measured"] == pytest.approx(2048 / 128)  # the fake's full cache holds 2048 tokens
    sim = fake_simulate("llama-3.1-8b-instruct", prompt_len=140, gen_len=15424, budget=128)
    sim_full = fake_simulate("llama-3.1-8b-instruct", prompt_len=140, gen_len=15424)
    assert snap["kv_reduction_sim"] == pytest.approx(sim_full.kv_bytes_total / sim.kv_bytes_total)
    assert snap["batch_gain_sim"] == pytest.approx(sim.max_batch / sim_full.max_batch)
    assert full["delta"] == 0 and full["throughput_gain_sim"] == pytest.approx(1.0)


def test_report_files_and_markdown(report):
    paths, folder = report
    assert paths.markdown.read_text().startswith("# snapeval report: rep")
    md = paths.markdown.read_text()
    assert "## llama-3.1-8b-instruct — snapeval_passkey" in md and "Δ vs full" in md and "![" in md
    acc = pd.read_csv(folder / "accuracy_vs_budget.csv")
    assert len(acc) == 12 and {"value", "stderr", "n_samples"} <= set(acc.columns)
    comp = pd.read_csv(folder / "comparison.csv")
    assert {"delta", "kv_reduction_sim", "throughput_gain_sim"} <= set(comp.columns)
    assert sorted(p.name for p in paths.plots) == sorted([f"{name}.png" for name in PLOTS] +
                                                         ["paired_difference_vs_budget.png"])
    assert md.index("## Which budget can I deploy?") < md.index("## What the numbers are")  # the report opens with it
    assert "| llama-3.1-8b-instruct | snapeval_passkey | snapstream |" in md and "n that would settle it" in md
    for png in paths.plots:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plots_have_titles_axes_legends_and_error_bars(results):
    table = load_table(results)
    pts, pair = tables.comparison(table), tables.paired(table)
    figures = {name: draw(pts, "llama-3.1-8b-instruct", pair) for name, draw in PLOTS.items()}
    figures["paired"] = paired_difference_vs_budget(pair, "llama-3.1-8b-instruct")
    for name, fig in figures.items():
        assert fig._suptitle is not None and fig._suptitle.get_text()
        assert len(fig.legends) == 1, f"{name}: one legend per figure, outside the panels"
        legend = fig.legends[0]
        assert "error bars:" in legend.get_title().get_text()  # the bars say what they are
        for ax in [a for a in fig.axes if a.get_visible()]:
            assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
            assert "(" in ax.get_xlabel()  # units
            assert ax.containers, f"{name}: no error bars"
        matplotlib.pyplot.close(fig)


def test_budget_plots_offset_methods_mark_decisions_and_name_the_smallest_budget(results):
    table = load_table(results)
    pair = tables.paired(table)
    fig = paired_difference_vs_budget(pair, "llama-3.1-8b-instruct")
    ax = fig.axes[0]
    xs = {}
    for container in ax.containers:
        xs[container.get_label()] = list(container.lines[0].get_xdata())
    assert xs["snapstream"][0] != xs["streamingllm"][0]  # the same budget, offset per method
    assert xs["snapstream"][0] == pytest.approx(128, rel=0.1)
    assert "decision (δ = 0.02): snapstream " in " ".join(ax.get_xlabel().split())  # wrapped
    labels = fig.legends[0].get_texts()
    assert {"ringed: non-inferior at δ", "filled: differs significantly (Holm)"} <= {t.get_text() for t in labels}
    assert any("margin" in t.get_text() for t in labels)
    matplotlib.pyplot.close(fig)


def test_every_method_keeps_its_own_style():
    from snapeval.cache.methods import METHOD_TABLE, MethodInfo, MethodStyle
    from snapeval.report.style import method_label, method_rank, styles_for

    presses = ["full", "snapstream", "kvpress:SnapKVPress", "kvpress:StreamingLLMPress", "kvpress:TOVAPress",
               "kvpress:ExpectedAttentionPress", "kvpress:SomeNewPress", "another"]
    styles = styles_for(presses)
    assert len({s.color for s in styles.values()}) == len(presses)
    assert len({s.marker for s in styles.values()}) == len(presses)
    assert styles["kvpress:ExpectedAttentionPress"] != styles["snapstream"]  # issue #21
    assert styles_for(presses) == styles  # deterministic
    assert styles_for(["snapstream"])["snapstream"] == styles["snapstream"]  # the same in every figure
    assert method_label("full") == "full cache" and method_rank("full") < method_rank("snapstream")
    entry = MethodInfo("mine", "snapeval.cache.config:SnapKVConfig", "snapeval.cache.snapkv:SnapKVCache", branches=True,
                       summary="a method declared elsewhere", style=MethodStyle("my method", "#123456", "*", rank=50))
    with METHOD_TABLE.registered(entry):  # the report reads the style from the method's entry
        assert styles_for(["mine"])["mine"].color == "#123456" and method_label("mine") == "my method"
    assert styles_for(["mine"])["mine"].color != "#123456"  # gone with its entry: a spare colour again


def test_pareto_labels_do_not_collide():
    plt = matplotlib.pyplot
    fig, ax = plt.subplots(figsize=(4, 3))
    points = [(1.0, 0.5, "128"), (1.0, 0.5, "256"), (1.01, 0.5, "512"), (1.02, 0.51, "1024")]
    ax.plot([p[0] for p in points], [p[1] for p in points], "o")
    fig.canvas.draw()
    placed = place_labels(ax, points)
    renderer = fig.canvas.get_renderer()
    boxes = [a.get_window_extent(renderer) for a in placed]
    assert not any(boxes[i].overlaps(boxes[j]) for i in range(4) for j in range(i + 1, 4))
    plt.close(fig)


def test_pareto_front():
    xs = [1, 2, 3, 4, 5]
    ys = [0.9, 0.95, 0.5, 0.6, 0.4]
    assert pareto_front(xs, ys) == [1, 3, 4]
    assert pareto_front([1, 1], [0.5, 0.5]) == [0]


def test_report_cli(results, tmp_path, capsys):
    assert cli(["report", str(results), "--out", str(tmp_path / "o")]) == 0
    assert "report.md" in capsys.readouterr().out
    assert cli(["report", str(tmp_path / "missing")]) == 2
    assert "not a results directory" in capsys.readouterr().err


def test_paired_section_matches_the_cells(results, report):
    """Every compressed cell is paired with the full-cache cell of its (model, task, seed); the report says which
    differences are significant, with the numbers of the paired computation."""
    from snapeval.results import ResultsStore
    from snapeval.stats import DecisionRule, compare_cells, holm

    paths, folder = report
    pair = pd.read_csv(folder / "paired.csv")
    assert len(pair) == 2 * 5 * 2 and pair["paired_n"].eq(12).all()  # tasks x compressed cells x seeds, 12 items
    table = load_table(results)
    store = ResultsStore(results)
    row = table[table["primary"] & (table["method"] == "streamingllm") & (table["budget"] == 128)
                & (table["task"] == "snapeval_passkey") & (table["seed"] == 1)].iloc[0]
    ref = store.read(row["paired_ref_cell"])
    assert ref.identity["policy"]["method"] == "full" and ref.identity["seed"] == 1
    cmp = compare_cells(ref, store.read(row["cell_id"]), f"{row['metric']},{row['filter']}", rule=DecisionRule())
    assert row["paired_diff"] == pytest.approx(cmp.mean_diff) and row["paired_ci_low"] == pytest.approx(cmp.ci_low)
    assert row["items_worse"] == cmp.worse and row["items_better"] == cmp.better
    assert row["paired_p"] == pytest.approx(cmp.p_value) and row["ni_drop_bound"] == pytest.approx(cmp.drop_bound)
    md = paths.markdown.read_text()
    assert "## Which differences are significant" in md and "Paired difference vs the full cache:" in md
    assert f"[{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}]" in md
    assert "**Family**: the compressed cells of one (model, task)" in md
    # Holm within each (model, task): the table's adjusted p-values are Holm's over that family's raw p-values
    family = table[table["primary"] & (table["method"] != "full") & (table["task"] == "snapeval_passkey")]
    assert family["paired_p_holm"].tolist() == pytest.approx(holm(family["paired_p"].tolist()))
    assert (family["paired_significant"] == (family["paired_p_holm"] < 0.05)).all()
    assert "Items: 12 paired items per cell in 12 clusters; 0 unpaired items in all." in md


def test_margin_and_alpha_from_the_sweep_and_the_cli(tmp_path, capsys):
    raw = {**RAW, "seeds": [0], "decision": {"margin": 0.5, "alpha": 0.1}}
    out = tmp_path / "dec"
    run_sweep(parse_config(raw), out, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
              report=False)
    table = load_table(out)
    assert set(table["ni_margin"].dropna()) == {0.5} and set(table["ni_alpha"].dropna()) == {0.1}
    pair = tables.paired(table)
    decided = tables.decisions(pair)
    # the smallest non-inferior budget is the fixed-sequence walk of the cells' own verdicts
    for r in decided.itertuples():
        cells = pair[(pair["task"] == r.task) & (pair["method"] == r.method)].sort_values("budget", ascending=False)
        walk = None
        for c in cells.itertuples():
            if not c.non_inferior:
                break
            walk = int(c.budget)
        assert (None if pd.isna(r.smallest_ni_budget) else int(r.smallest_ni_budget)) == walk
    saved = {name: (out / name).read_bytes() for name in ("results.parquet", "results.csv")}
    assert cli(["report", str(out), "--margin", "0.02"]) == 0
    assert "δ = 0.02" in (out / "report" / "report.md").read_text() and "α = 0.1" in (out / "report" / "report.md").read_text()
    # a what-if margin is this report's only: the results directory's table keeps the sweep's own rule
    assert {name: (out / name).read_bytes() for name in saved} == saved
    assert set(load_table(out)["ni_margin"].dropna()) == {0.5}
    capsys.readouterr()
    assert cli(["report", str(out), "--margin", "2"]) == 2
    assert "--margin=2.0 is invalid; allowed: a number in [0, 1)" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------------------------
# issue #39: a report that says what it knows


def _cell(cell_id, method, budget, scores, *, task="t", docs=None):
    """A finished cell of model "m" on ``task``: item d scored ``scores[i]`` (0/1) for doc ``docs[i]``."""
    from snapeval.results.schema import CellResult, MetricValue, SampleRecord

    docs = list(range(len(scores))) if docs is None else docs
    samples = [SampleRecord(task, d, "1", ("1",), {"acc,none": float(v)}, True) for d, v in zip(docs, scores)]
    value = sum(scores) / len(scores)
    metric = MetricValue(task, "acc", "none", value, (value * (1 - value) / (len(scores) - 1)) ** 0.5, len(scores))
    view = {"cell_id": cell_id, "model": "m", "task": task, "method": method, "budget": budget, "seed": 0,
            "group_id": f"g-{task}"}
    return view, CellResult(cell_id, {"task": {}, "model": {}}, [metric], samples)


def _decided(cells, rule=None):
    from snapeval.report.results_table import build_table
    from snapeval.stats import DecisionRule

    views = [v for v, _ in cells]
    table = build_table(views, {r.cell_id: r for _, r in cells}, {}, simulate=None, decision=rule or DecisionRule())
    pair = tables.paired(table)
    return table, pair, {(r.task, r.method): r for r in tables.decisions(pair).itertuples()}


def test_each_method_is_non_inferior_not_non_inferior_or_inconclusive_with_the_n_that_settles_it():
    from snapeval.stats.power import noninferiority_items

    full = [1] * 40
    cells = [_cell("f", "full", None, full),
             _cell("a512", "snapkv", 512, full), _cell("a256", "snapkv", 256, full),  # nothing changed
             _cell("b512", "streamingllm", 512, [0] * 40), _cell("b256", "streamingllm", 256, [0] * 40),  # all lost
             _cell("F", "full", None, [1] * 400, task="big"),
             _cell("c512", "snapkv", 512, [1] * 400, task="big"), _cell("c256", "snapkv", 256, [0] + [1] * 399,
                                                                        task="big")]
    _, pair, decided = _decided(cells)
    # 40 items with no discordant item cannot show a 2-point margin (bound 0.063): inconclusive, 133 items settle it
    a = decided[("t", "snapkv")]
    assert a.decision == "inconclusive" and a.items_to_settle == noninferiority_items(0.02, 0.05, 0.0, 0.0) == 133
    assert tables.verdict(a) == "inconclusive at this n (n that would settle it: 133)"
    # a cell that lost every item: its whole interval is beyond the margin (the old report printed "needs 15,453 items")
    b = decided[("t", "streamingllm")]
    assert b.decision == "not non-inferior" and b.drop_low > 0.02 and pd.isna(b.items_to_settle)
    assert tables.verdict(b) == (f"not non-inferior (drop 1.000, at least {b.drop_low:.3f}: the whole interval is "
                                 "beyond the margin)")
    # 400 items: non-inferior down to 256
    c = decided[("big", "snapkv")]
    assert c.decision == "non-inferior" and tables.verdict(c) == "**non-inferior at budget 256**"
    md = "\n".join(tables.decision_markdown(pair))
    assert "| m | t | snapkv | inconclusive at this n (n that would settle it: 133) | snapkv@512 |" in md
    assert "none in the grid" not in md and "15,453" not in md


def test_not_non_inferior_only_when_the_whole_interval_is_beyond_the_margin():
    """Issue #48: one worse item of 40 (observed drop 0.025 > δ = 0.02, 90% interval [-0.105, +0.040]) is not shown
    not non-inferior: the interval holds no drop at all. 348c906 labelled it "not non-inferior" on the point
    estimate, with "n that would settle it: none"."""
    from snapeval.stats.power import noninferiority_items

    cells = [_cell("f", "full", None, [1] * 40), _cell("a1024", "snapkv", 1024, [0] + [1] * 39),
             _cell("b1024", "streamingllm", 1024, [0] * 10 + [1] * 30)]
    _, pair, decided = _decided(cells)
    a = decided[("t", "snapkv")]
    assert a.drop == 0.025 and a.drop_low < 0 < 0.02 < a.drop_bound
    assert a.decision == "inconclusive"
    # settling it at the observed difference means showing the drop beyond the margin: Nam's n with the gap reversed
    assert a.items_to_settle == noninferiority_items(0.02, 0.05, 1 / 40, -1 / 40) > 1000
    assert tables.verdict(a) == f"inconclusive at this n (n that would settle it: {int(a.items_to_settle):,})"
    b = decided[("t", "streamingllm")]  # 10 of 40 lost: the whole interval lies beyond the margin
    assert b.decision == "not non-inferior" and b.drop_low > 0.02
    md = "\n".join(tables.decision_markdown(pair))
    assert f"| [{a.drop_low:+.3f}, {a.drop_bound:.3f}] |" in md and "whole interval is beyond the margin" in md
    paired_md = "\n".join(tables.paired_markdown(pair).values())
    assert "no (whole interval beyond δ)" in paired_md and "inconclusive (n to settle:" in paired_md


def test_items_to_settle_use_the_tasks_own_layout_design_effect():
    """Issue #48: LongBench-v2's 395 questions share documents (367 clusters): the items that would settle a
    decision are planned with its layout's worst-case design effect, 1.32, computed from the data (the paired items'
    own, 1 for 40 single questions, before)."""
    from snapeval.report.results_table import task_design_effect
    from snapeval.stats.binary import worst_case_design_effect
    from snapeval.stats.power import noninferiority_items
    from snapeval.tasks.families import layout_cluster_sizes

    sizes = layout_cluster_sizes("longbench_v2")
    if sizes is None:
        pytest.skip("LongBench-v2's local data is not here")
    assert (len(sizes), sum(sizes)) == (367, 395) and task_design_effect("longbench_v2") == pytest.approx(523 / 395)
    assert task_design_effect("snapeval_passkey") is None  # generated items: each its own cluster
    cells = [_cell("f", "full", None, [1] * 40, task="longbench_v2"),
             _cell("a", "snapkv", 512, [1] * 40, task="longbench_v2")]
    _, pair, decided = _decided(cells)
    a = decided[("longbench_v2", "snapkv")]
    assert a.design_effect == pytest.approx(worst_case_design_effect(sizes))
    assert a.items_to_settle == math.ceil(noninferiority_items(0.02, 0.05, 0.0, 0.0) * 523 / 395) == 177
    assert "(n that would settle it: 177, design effect 1.32)" in tables.verdict(a)


def test_unpaired_items_and_undecidable_tasks_are_said_never_dropped():
    from snapeval.report import _nothing_to_decide

    cells = [_cell("F", "full", None, [1] * 400),
             _cell("c512", "snapkv", 512, [1] * 300, docs=list(range(300))),  # logged 300 of the 400 items
             _cell("O", "full", None, [1] * 40, task="other"),
             _cell("o512", "snapkv", 512, [1] * 40, task="other", docs=list(range(100, 140)))]  # other items
    table, pair, decided = _decided(cells)
    c = decided[("t", "snapkv")]
    assert c.decision == "non-inferior" and c.unpaired == 100
    assert tables.verdict(c) == "**non-inferior at budget 512**; 100 items unpaired, not compared"
    o = decided[("other", "snapkv")]
    assert o.decision == "no paired comparison" and "share no scored item" in tables.verdict(o)
    summary = "\n".join(tables.significance_summary(pair))
    assert "- m / other: none of its 1 compressed cells could be paired with the full cache (" in summary
    views = [v for v, _ in cells] + [{"cell_id": "x", "model": "m", "task": "lost", "method": "full", "budget": None},
                                     {"cell_id": "y", "model": "m", "task": "t", "method": "snapkv", "budget": 64}]
    missing = _nothing_to_decide(views, table)
    assert missing == ["m / t: 1 of 3 cells unfinished, not decided on: snapkv@64",
                       "m / lost: no finished cell (1 in the sweep): no decision"]
    md = "\n".join(tables.decision_markdown(pair, missing))
    assert "| m | other | snapkv | no paired comparison (" in md and "- m / lost: no finished cell" in md


def test_detectable_is_after_holm_and_intervals_are_at_the_decisions_level():
    from snapeval.stats.power import minimum_detectable_drop

    full = [1] * 40
    cells = [_cell("f", "full", None, full)] + [_cell(f"c{b}", method, b, [0, 0] + [1] * 38)
                                                 for method in ("snapkv", "streamingllm", "snapstream")
                                                 for b in (128, 256, 512, 1024, 2048)]
    table, pair, _ = _decided(cells)
    row = pair.iloc[0]
    # 15 cells in the family: the detectable drop is at alpha / 15 (the old report used alpha: 0.162)
    assert row["paired_mdd"] == pytest.approx(minimum_detectable_drop(40, 0.0, 0.05 / 15))
    assert row["paired_mdd"] > minimum_detectable_drop(40, 0.0, 0.05) + 0.05
    # the interval is 90%, its lower end the one-sided 95% bound of the decision
    assert row["paired_ci_low"] == pytest.approx(-row["ni_drop_bound"])
    text = tables.paired_markdown(pair)[("m", "t")]
    assert "| 90% CI |" in text and f"detectable after Holm: {row['paired_mdd']:.3f}" in text
    bars = tables.paired_bars(pair)
    diff, low, high = bars[("m", "t", "snapkv", 128.0)]
    assert (diff, low, high) == pytest.approx((-0.05, -row["ni_drop_bound"], row["paired_ci_high"]))
    # the plotted bars are these intervals, around the points
    fig = paired_difference_vs_budget(pair, "m")
    container = next(c for c in fig.axes[0].containers if c.get_label() == "snapkv")
    segments = container.lines[2][0].get_segments()
    assert segments[0][:, 1] == pytest.approx([low, high])
    assert "paired 90% interval" in fig.legends[0].get_title().get_text()
    matplotlib.pyplot.close(fig)
    acc = PLOTS["accuracy_vs_budget"](tables.comparison(table), "m", pair)
    container = next(c for c in acc.axes[0].containers if c.get_label() == "snapkv")
    # around the accuracy 0.95: the interval of the difference moved onto it, cut at 1 (no accuracy passes it)
    assert 0.95 + high + 0.05 > 1
    assert container.lines[2][0].get_segments()[0][:, 1] == pytest.approx([0.95 + low + 0.05, 1.0])
    assert not acc.axes[0].patches  # no unpaired ±1 s.e. band around the full cache
    matplotlib.pyplot.close(acc)
    pivot = tables.accuracy_vs_budget(table)[("m", "t")]
    assert pivot.loc["full", "full"] == "1.000"  # no "1.000 ± 0.000"
