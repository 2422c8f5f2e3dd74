"""The controller-design notebook executes from top to bottom without an error."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "notebooks" / "controller_design.ipynb"


# every panel that draws something says what its y axis is (the colour bar aside)
UNLABELLED_AXES = """
import matplotlib.pyplot as plt
print("UNLABELLED", [(n, a.get_title()) for n in plt.get_fignums() for a in plt.figure(n).axes
                     if a.get_label() != "<colorbar>" and not a.get_ylabel()
                     and (a.lines or a.collections or a.patches or a.containers)])
"""


@pytest.mark.slow
def test_controller_design_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The native kernelspec (ipykernel's own) starts "python", which jupyter_client maps to
    # sys.executable: the kernel runs in this interpreter's environment (the venv).
    from jupyter_client.kernelspec import NATIVE_KERNEL_NAME

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print('KERNEL', sys.prefix)"))
    nb.cells.append(nbformat.v4.new_code_cell(UNLABELLED_AXES))
    client = nbclient.NotebookClient(
        nb, kernel_name=NATIVE_KERNEL_NAME, timeout=300, allow_errors=False,
        resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    # no warnings (python-control's, numpy's) among the outputs a reader sees
    assert not [o for o in outputs if o.get("name") == "stderr"], \
        [o.get("text") for o in outputs if o.get("name") == "stderr"]
    assert "held-out: R²" in text and "STABLE" in text
    # margins: python-control's phase margin, the exact gain margin (python-control's own
    # gain margin, inf for P and 3.84e-11 for PI, means nothing for these discrete loops)
    assert "P: phase margin 60.0 deg at 0.262 rad/s (python-control); gain margin 2.00 " \
           "(6.0 dB): stable for gain ratios (0.00, 2.00) (exact, stable_gain_range)" in text
    assert "python-control margin" not in text and "e-11" not in text
    # the P design on the identified ARX model: the complex poles, and detuning removes them
    assert "-0.25+0.43j" in text and "minimises the largest |pole|" in text
    assert "peak" in text and "MPS levels visited: [100.0, 95.0" in text
    assert f"KERNEL {sys.prefix}" in text  # the kernel ran in this environment
    assert "UNLABELLED []" in text, text[text.index("UNLABELLED"):]
    # the ARX loop's gain limit to the digits printed (a 0.01 grid's first unstable point
    # read 2.02), the step response the text quotes, the sensitivity peaks, the load step
    assert "stable on the ARX model up to g = 2.01" in text and "(peak 1.25)" in text
    assert "P, static model          : Ms 2.00 at ω = 0.785 rad/s" in text
    assert "modulus margin 0.50" in text and "the step adds 4.0 ms noise-free" in text
