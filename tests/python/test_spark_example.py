"""The README's Spark example is examples/spark_dedup.py, and it prints what the README says.
Skipped only where Java is absent."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java (Spark needs Java 17 or newer): apt-get install openjdk-17-jre-headless",
                allow_module_level=True)


def test_readme_spark_example_runs_and_prints_what_the_readme_shows(tmp_path):
    code = (REPO / "examples/spark_dedup.py").read_text()
    expected = (REPO / "examples/spark_dedup.py.expected").read_text()
    readme = (REPO / "README.md").read_text()
    assert f"```python\n{code}```" in readme, "README's Spark example differs from the example"
    assert f"```\n{expected}```" in readme, "README's Spark output differs from the example's"
    environment = {**os.environ, "PYSPARK_PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, str(REPO / "examples/spark_dedup.py")], cwd=tmp_path,
                         env=environment, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout == expected
    assert not any(tmp_path.glob("spark-dedup-example-*")), "the example left its files behind"
