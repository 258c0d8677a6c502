"""The READMEs' Python code runs as written (on small data, on the CPU)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = (ROOT / "README.md", ROOT / "examples" / "README.md")
BLOCKS = [block for readme in READMES for block in re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)]


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_readme_block_runs(block):
    exec(compile(BLOCKS[block], f"README.md python block {block}", "exec"), {})
