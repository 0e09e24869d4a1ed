"""notebooks/analysis.ipynb runs top to bottom against a small real results directory and shows tables and plots."""
from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "results_small"


def test_analysis_notebook_executes(monkeypatch):
    monkeypatch.setenv("SNAPEVAL_RESULTS_DIR", str(FIXTURE))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "results_small: sweep" in text and "finished cells" in text
    pngs = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(pngs) >= 3  # accuracy vs budget, vs simulated memory, Pareto front
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "snapstream" in html and "kv_reduction_sim" in html and "paired_p_holm" in html
    markdown = "".join(o.get("data", {}).get("text/markdown", "") for o in outputs)
    assert "Non-inferiority margin" in markdown and "inconclusive at this n" in markdown  # 4 items: nothing shown
