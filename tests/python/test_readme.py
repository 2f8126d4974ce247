"""The README's Python quick start is examples/quick_start.py, and it prints what the README says."""

import subprocess
import sys

from conftest import REPO


def test_readme_quick_start_runs_and_prints_what_the_readme_shows(tmp_path):
    code = (REPO / "examples/quick_start.py").read_text()
    expected = (REPO / "examples/quick_start.py.expected").read_text()
    readme = (REPO / "README.md").read_text()
    assert f"```python\n{code}```" in readme, "README's Python quick start differs from the example"
    assert f"```\n{expected}```" in readme, "README's printed output differs from the example's"
    out = subprocess.run([sys.executable, str(REPO / "examples/quick_start.py")], cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    assert out.stdout == expected
    assert (tmp_path / "ids.bbf").is_file()
