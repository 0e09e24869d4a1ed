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
from snapeval.report.plots import PLOTS, pareto_front  # noqa: E402
from snapeval.results import load_table  # noqa: E402
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


def test_report_files_and_markdown(results, tmp_path):
    paths = build_report(results, tmp_path / "r")
    assert paths.markdown.read_text().startswith("# snapeval report: rep")
    md = paths.markdown.read_text()
    assert "## llama-3.1-8b-instruct — snapeval_passkey" in md and "Δ vs full" in md and "![" in md
    acc = pd.read_csv(tmp_path / "r" / "accuracy_vs_budget.csv")
    assert len(acc) == 12 and {"value", "stderr", "n_samples"} <= set(acc.columns)
    comp = pd.read_csv(tmp_path / "r" / "comparison.csv")
    assert {"delta", "kv_reduction_sim", "throughput_gain_sim"} <= set(comp.columns)
    assert sorted(p.name for p in paths.plots) == sorted([f"{name}.png" for name in PLOTS] +
                                                         ["paired_difference_vs_budget.png"])
    for png in paths.plots:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plots_have_titles_axes_legends_and_error_bars(results):
    pts = tables.comparison(load_table(results))
    for name, draw in PLOTS.items():
        fig = draw(pts, "llama-3.1-8b-instruct")
        assert fig._suptitle is not None and fig._suptitle.get_text()
        for ax in [a for a in fig.axes if a.get_visible()]:
            assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
            assert "(" in ax.get_xlabel()  # units
            assert ax.get_legend() is not None
            assert ax.containers, f"{name}: no error bars"
        matplotlib.pyplot.close(fig)


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


def test_paired_section_matches_the_cells(results, tmp_path):
    """Every compressed cell is paired with the full-cache cell of its (model, task, seed); the report says which
    differences are significant, with the numbers of the paired computation."""
    from snapeval.results import ResultsStore
    from snapeval.results.paired import compare_cells

    paths = build_report(results, tmp_path / "r")
    pair = pd.read_csv(tmp_path / "r" / "paired.csv")
    assert len(pair) == 2 * 5 * 2 and pair["paired_n"].eq(12).all()  # tasks x compressed cells x seeds, 12 items
    table = load_table(results)
    store = ResultsStore(results)
    row = table[table["primary"] & (table["method"] == "streamingllm") & (table["budget"] == 128)
                & (table["task"] == "snapeval_passkey") & (table["seed"] == 1)].iloc[0]
    ref = store.read(row["paired_ref_cell"])
    assert ref.identity["policy"]["method"] == "full" and ref.identity["seed"] == 1
    cmp = compare_cells(ref, store.read(row["cell_id"]), f"{row['metric']},{row['filter']}")
    assert row["paired_diff"] == pytest.approx(cmp.mean_diff) and row["paired_ci_low"] == pytest.approx(cmp.ci_low)
    assert row["flips_broke"] == cmp.broke and row["flips_fixed"] == cmp.fixed
    md = paths.markdown.read_text()
    assert "## Which differences are significant" in md and "Paired difference vs the full cache:" in md
    assert f"[{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}]" in md
