"""Every notebook runs top to bottom: for real with a GPU, in its no-GPU mode without one.

The executed copy goes to a temporary folder; with a GPU the results it writes go there too
(FUSED_RESULTS_DIR), so the committed notebooks and results/ are never touched by a test.
"""
from pathlib import Path

import nbformat
import pytest
import torch
from nbclient import NotebookClient

import helpers

pytestmark = pytest.mark.notebook
NOTEBOOKS = sorted((Path(helpers.ROOT) / "notebooks").glob("[0-9]*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, tmp_path, monkeypatch):
    if torch.cuda.is_available():
        monkeypatch.setenv("FUSED_RESULTS_DIR", str(tmp_path / "results"))
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=1800, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, tmp_path / path.name)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
