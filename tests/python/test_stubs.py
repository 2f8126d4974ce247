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
