"""docs/sysid.md's example prints what its text says it prints (the comment claimed the
paper's R² > 0.79 next to a printed 0.66)."""

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "sysid.md"


def test_the_sysid_guide_quotes_the_r2_its_example_prints():
    text = DOC.read_text(encoding="utf-8")
    block = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(DOC), "exec"), {"__name__": "guide"})
    r2 = float(out.getvalue().splitlines()[1])   # the second print: the held-out R²
    comment = next(x for x in block.splitlines() if "validate(fit, val).r2" in x)
    assert f"held-out R²: {r2:.2f}" in comment, (r2, comment)
    assert f"The held-out R² of this record is {r2:.2f}" in text
    assert "0.79" not in comment  # the paper's figure is discussed below, not claimed
