#!/usr/bin/env bash
# Fetches Apache Arrow's C++ headers and its arrow and parquet libraries from the pyarrow wheel on
# PyPI into .deps/pyarrow (ignored by git), for bench/compare_arrow.cpp: Arrow's Parquet
# split-block Bloom filter has sb256's exact bit layout, so the build then checks byte-for-byte
# agreement with it (ctest -R arrow) and can time the two side by side. Nothing is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly version=26.0.1
readonly destination=.deps/pyarrow
if [[ -f $destination/VERSION && $(<"$destination/VERSION") == "$version" ]]; then
  echo "pyarrow $version already in $destination"
  exit 0
fi
download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
# A fixed wheel, whatever the local Python: only its C++ libraries and headers are used.
python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
  --python-version 3.11 --implementation cp --dest "$download" "pyarrow==$version"
rm -rf "$destination"
mkdir -p "$destination"
python3 - "$download"/pyarrow-*.whl "$destination" <<'PY'
import sys, zipfile
wheel, destination = sys.argv[1], sys.argv[2]
wanted = ("pyarrow/include/", "pyarrow/libarrow.so.", "pyarrow/libparquet.so.")
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        if name.startswith(wanted):
            archive.extract(name, destination)
PY
mv "$destination"/pyarrow/* "$destination"/
rmdir "$destination"/pyarrow
echo "$version" >"$destination/VERSION"
echo "pyarrow $version's Arrow and Parquet C++ libraries are in $destination"
