"""Shared fixtures: the command-line tool to compare against, and key batches."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli() -> Path:
    """The bulkbloom command-line tool: $BULKBLOOM_CLI (CI sets it, and then it must exist), else
    build/release/bulkbloom, else `bulkbloom` on PATH."""
    given = os.environ.get("BULKBLOOM_CLI")
    if given:
        path = Path(given)
        assert path.is_file(), f"BULKBLOOM_CLI={given} does not exist"
        return path
    for candidate in (REPO / "build/release/bulkbloom", shutil.which("bulkbloom")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    pytest.skip("no bulkbloom command-line tool: build it (cmake --build --preset release)")


def run_cli(cli: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([str(cli), *args], capture_output=True, text=True)
    assert result.returncode == 0, f"bulkbloom {' '.join(args)} failed:\n{result.stderr}"
    return result


@pytest.fixture
def keys() -> np.ndarray:
    """100,000 uint64 keys with repeats, 0 and 2**64 - 1 among them."""
    rng = np.random.default_rng(19)
    keys = rng.integers(0, 2**64, size=80_000, dtype=np.uint64)
    keys = np.concatenate([keys, keys[:20_000], np.array([0, 2**64 - 1], dtype=np.uint64)])
    rng.shuffle(keys)
    return keys


def write_rfc4180_csv(path: Path, rows: int = 8_000) -> None:
    """A CSV file whose key column (the 2nd) repeats keys, holds quoted keys with line breaks
    (LF and CRLF), commas and doubled quotes, and the empty key, between quoted fields with line
    breaks; records end in LF or CRLF."""
    rng = np.random.default_rng(23)
    odd = ['q"q', "two\nlines", "a,b", "", "cr\r\nlf", '"']
    pool = [f"k{i}" for i in range(rows // 4)] + odd
    lines = []
    for i in range(rows):
        key = pool[rng.integers(len(pool))]
        before = [str(i), f'"id\n{i}"', f'"say ""hi"", {i}"'][rng.integers(3)]
        after = ["plain", '"multi\nline\nnote"', '"x,y"', ""][rng.integers(4)]
        quoted = key in odd or rng.random() < 0.5
        key_text = '"' + key.replace('"', '""') + '"' if quoted else key
        lines.append(f"{before},{key_text},{after}" + ["\n", "\r\n"][rng.integers(2)])
    path.write_bytes("".join(lines).encode())


# A local Spark small enough for this machine's tests: little memory, few partitions, no UI.
SMALL_SPARK = {
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
}


def local_spark(master: str, app: str):
    """A SparkSession on `master` with SMALL_SPARK, its Python workers running this Python."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.master(master).appName(app)
    for name, value in SMALL_SPARK.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
