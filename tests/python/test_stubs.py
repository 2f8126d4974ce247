"""The installed type stubs, read by mypy as a user's type checker reads them."""

import subprocess
import sys

import pytest


def test_mypy_knows_the_exception_types(tmp_path):
    pytest.importorskip("mypy")
    user = tmp_path / "user.py"
    user.write_text(
        "from bulkbloom import BackendUnavailable, Error, FormatError, IoError\n"
        "reveal_type(FormatError)\n"
        "def kinds(f: FormatError, i: IoError, b: BackendUnavailable) -> list[Error]:\n"
        "    value: ValueError = f\n"
        "    system: OSError = i\n"
        "    return [f, i, b]\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), str(user)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    # Without the stubs' classes mypy takes every name as Any and finds nothing wrong.
    assert '-> bulkbloom._core.FormatError"' in result.stdout, result.stdout
    assert "error" not in result.stdout, result.stdout


def test_mypy_checks_the_key_batches(tmp_path):
    pytest.importorskip("mypy")
    user = tmp_path / "user.py"
    user.write_text(
        "import array\n"
        "import numpy as np\n"
        "import bulkbloom\n"
        "f = bulkbloom.Filter(100)\n"
        "f.insert(np.arange(3))\n"
        "f.insert([1, 2])\n"
        "f.insert(('a', 'b'))\n"
        "f.insert([b'a'])\n"
        "f.insert(array.array('q', [1]))\n"
        "class Column:\n"
        "    def __arrow_c_stream__(self, requested_schema: object = None) -> object: ...\n"
        "f.insert(Column())\n"
        "new: np.ndarray = f.insert_if_absent([1])\n"
        "f.insert(3.5)  # line 14\n"
        "f.contains([1.5])  # line 15\n"
        "f.insert_if_absent(None)  # line 16\n"
        "f == f\n"
        "len(f)  # line 18\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         str(user)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    lines = sorted({int(line.split(":")[1]) for line in result.stdout.splitlines()
                    if ": error:" in line})
    assert lines == [14, 15, 16, 18], result.stdout
