"""notebooks/analysis.ipynb runs top to bottom against a small real results directory, from the repository root and
from an unrelated directory, importing this checkout's snapeval (not an installed copy), and is committed with its
outputs (tables and plots visible where the repository is browsed)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "analysis.ipynb"
FIXTURE = REPO / "tests" / "fixtures" / "results_small"


def _outputs(nb) -> list:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


@pytest.mark.parametrize("where", ["repo", "elsewhere"])
def test_analysis_notebook_executes_from_any_directory(monkeypatch, tmp_path, where):
    monkeypatch.setenv("SNAPEVAL_RESULTS_DIR", str(FIXTURE))
    monkeypatch.delenv("PYTHONPATH", raising=False)  # an installed snapeval would win without the notebook's search
    monkeypatch.delenv("SNAPEVAL_REPO", raising=False)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    cwd = REPO if where == "repo" else tmp_path
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "from snapeval (this checkout)" in text  # this repository's package, whatever is installed
    assert "tests/fixtures/results_small: sweep" in text and "finished cells" in text
    pngs = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(pngs) >= 3  # accuracy vs budget, vs simulated memory, Pareto front
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "snapstream" in html and "kv_reduction_sim" in html and "paired_p_holm" in html
    markdown = "".join(o.get("data", {}).get("text/markdown", "") for o in outputs)
    assert "Non-inferiority margin" in markdown and "inconclusive at this n" in markdown  # 4 items: nothing shown


def test_the_committed_notebook_carries_its_outputs():
    """Executed on the committed quickstart results: every code cell ran in order, the plots are embedded, no error,
    and no path of the machine that ran it."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    manifest = json.loads((REPO / "results" / "quickstart" / "manifest.json").read_text())
    assert (f"results/quickstart: sweep 'quickstart', {len(manifest['cells'])} finished cells of "
            f"{len(manifest['cells'])}") in text
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 4
    raw = NOTEBOOK.read_text(encoding="utf-8")
    assert str(REPO) not in raw and str(Path.home()) + "/" not in raw


def test_run_with_no_checkout_in_sight_it_says_it_imported_an_installed_copy(monkeypatch, tmp_path):
    """From another directory, with results outside any checkout and no SNAPEVAL_REPO: the notebook finds no checkout
    and must not claim one ("(this checkout)")."""
    results = tmp_path / "results"
    shutil.copytree(FIXTURE, results)
    monkeypatch.setenv("SNAPEVAL_RESULTS_DIR", str(results))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("SNAPEVAL_REPO", raising=False)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells = nb.cells[:2]  # the first code cell decides and prints where snapeval came from
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for o in _outputs(nb) if o.output_type == "stream")
    assert "(this checkout)" not in text and "(an installed copy: no checkout found from here" in text, text
