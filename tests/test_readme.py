"""The README's Python code runs as written (on small data, on the CPU)."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_readme_block_runs(block):
    exec(compile(BLOCKS[block], f"README.md python block {block}", "exec"), {})
