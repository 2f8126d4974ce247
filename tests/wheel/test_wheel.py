"""The wheel that scripts/build-wheel.sh makes installs where the build's libraries are absent.

Run with the wheel to check (scripts/test.sh does, in CI):

    BULKBLOOM_WHEEL=build/wheel/bulkbloom-...whl .venv/bin/python -m pytest tests/wheel -q

The wheel goes into a fresh virtual environment (with numpy, its one dependency). Debian's
libhwy1 cannot be removed from this machine (the build needs it), so the test asks the loader
where each library of the installed extension comes from: only from the wheel's own
bulkbloom.libs/ or from the few system libraries every manylinux platform has. Where this machine
allows a private mount namespace (unshare), it also runs the module with the system's libhwy
files replaced by empty ones in that namespace. A wheel that links the build machine's
/usr/lib/.../libhwy.so.1 fails both, as `pip wheel .` alone does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

# What PEP 600's manylinux policies let a wheel take from the system (those a C++ extension can
# need; the X11/GL/glib ones are left out, so that needing one fails here), and the loader itself.
MANYLINUX_SYSTEM_LIBRARIES = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libutil.so.1",
    "libresolv.so.2",
    "libnsl.so.1",
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
    "linux-vdso.so.1",
}

# A child environment that names no extra library or module path of this machine.
SCRUBBED_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture(scope="module")
def wheel() -> Path:
    named = os.environ.get("BULKBLOOM_WHEEL")
    if not named:
        pytest.fail("set BULKBLOOM_WHEEL to the wheel to check (bash scripts/build-wheel.sh prints it)")
    path = Path(named).resolve()
    assert path.is_file(), f"BULKBLOOM_WHEEL={named}: no such file"
    return path


@pytest.fixture(scope="module")
def fresh_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("fresh") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        check=True,
    )
    return python


def run_in(python: Path, code: str, cwd: Path) -> str:
    done = subprocess.run(
        [python, "-c", code], cwd=cwd, env=SCRUBBED_ENV, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{python} -c ... failed:\n{done.stderr}"
    return done.stdout


def test_wheel_is_tagged_manylinux(wheel: Path) -> None:
    # name-version-pythontag-abitag-platformtag.whl
    platform_tag = wheel.stem.split("-")[-1]
    assert re.fullmatch(r"manylinux_2_\d+_x86_64", platform_tag), (
        f"{wheel.name}: platform tag {platform_tag}, not manylinux_2_N_x86_64 "
        "(was it built by scripts/build-wheel.sh?)"
    )


def test_extension_loads_only_the_wheels_libraries(fresh_python: Path, tmp_path: Path) -> None:
    # find_spec locates the module without loading it, so that ldd is what asks the loader.
    extension = Path(
        run_in(
            fresh_python,
            "import importlib.util; print(importlib.util.find_spec('bulkbloom._core').origin)",
            tmp_path,
        ).strip()
    )
    bundled_dir = (extension.parent.parent / "bulkbloom.libs").resolve()
    ldd = subprocess.run(
        ["ldd", str(extension)], env=SCRUBBED_ENV, capture_output=True, text=True, check=True
    ).stdout

    foreign = []
    for line in ldd.splitlines():
        # "libx.so.1 => /path/libx.so.1 (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)" or
        # "libx.so.1 => not found".
        name, _, target = line.strip().partition(" => ")
        name = Path(name.split(" (")[0]).name
        resolved = target.split(" (")[0].strip()
        if name in MANYLINUX_SYSTEM_LIBRARIES:
            continue
        if resolved and resolved != "not found" and Path(resolved).resolve().parent == bundled_dir:
            continue
        foreign.append(line.strip())
    assert not foreign, (
        f"{extension.name} takes libraries from outside the wheel's {bundled_dir.name}/ "
        f"that manylinux does not promise:\n" + "\n".join(foreign)
    )


# A filter's round trip through the extension; prints where bulkbloom was imported from.
ROUND_TRIP = """
import numpy as np, bulkbloom
f = bulkbloom.Filter(10_000, 0.001)
ids = np.array([7, 42, 7, 99, 42], dtype=np.uint64)
assert ids[f.insert_if_absent(ids)].tolist() == [7, 42, 99]
g = bulkbloom.Filter.from_bytes(f.to_bytes())
assert g.contains(np.array([7, 42, 99], dtype=np.uint64)).all()
assert ["a", "b"] == [k for k in ["a", "b"] if f.insert_if_absent([k])[0]]
print(bulkbloom.__file__)
"""


def test_filter_round_trip_in_fresh_environment(fresh_python: Path, tmp_path: Path) -> None:
    imported_from = Path(run_in(fresh_python, ROUND_TRIP, tmp_path).strip())
    # The fresh environment's copy, not this checkout's python/ or the test runner's.
    assert imported_from.is_relative_to(fresh_python.parent.parent), imported_from


def system_libhwy_files() -> list[str]:
    """The files the loader's cache names for libhwy*, symbolic links followed."""
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    entries = [line.split(" => ")[-1].strip() for line in cache.splitlines() if "libhwy" in line]
    return sorted({os.path.realpath(entry) for entry in entries})


def test_filter_round_trip_with_system_libhwy_hidden(fresh_python: Path, tmp_path: Path) -> None:
    hidden = system_libhwy_files()
    assert hidden, "ldconfig -p names no libhwy: the build machine's Highway should be there"
    # In a mount namespace of its own (as root, or mapped to root in a user namespace), each file
    # is covered by /dev/null, so that the loader finds it empty; the rest of the machine sees
    # nothing. `test ! -s` proves the cover took before Python starts.
    script = (
        'for f in "$@"; do mount --bind /dev/null "$f" && test ! -s "$f" || exit 1; done; '
        'exec "$PYTHON" -c "$ROUND_TRIP"'
    )
    probe = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"this machine allows no private mount namespace: {probe.stderr.strip()}")
    done = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", script, "sh", *hidden],
        cwd=tmp_path,
        env={**SCRUBBED_ENV, "PYTHON": str(fresh_python), "ROUND_TRIP": ROUND_TRIP},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"with {', '.join(hidden)} hidden:\n{done.stderr}"
