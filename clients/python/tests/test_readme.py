"""The README's quick start is `examples/quick_start.py`, which `mypy --strict` checks."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


def test_quick_start_is_the_checked_example() -> None:
    readme = (PACKAGE / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks, "the README has a Python quick start"
    assert blocks[0] == (PACKAGE / "examples" / "quick_start.py").read_text()
    assert len(blocks[0].splitlines()) <= 12, "a quick start stays short"
