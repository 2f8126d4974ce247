#!/usr/bin/env bash
# Fetches Apache Flink's jars from the apache-flink-libraries wheel on PyPI into .deps/flink-<version>
# (ignored by git) and prints that folder: lib/flink-dist-<version>.jar (DataStream API, runtime,
# MiniCluster, state backends) and log4j, which the Flink operator's build and tests compile and
# run against (flink/). Nothing is installed; a second run finds the folder and downloads nothing.
#
# The folder appears whole or not at all (unpacked beside it, then renamed), so that builds sharing
# one .deps never see a half-written one.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly version=2.3.0
readonly destination=.deps/flink-$version
if [[ -f $destination/VERSION && $(<"$destination/VERSION") == "$version" ]]; then
  echo "$PWD/$destination"
  exit 0
fi
mkdir -p .deps
staging=$(mktemp -d ".deps/.flink-$version.XXXXXX")
trap 'rm -rf "$staging"' EXIT
# The wheel is pure Java (py2.py3-none-any); pip's cache keeps it between runs.
python3 -m pip download --quiet --no-deps --disable-pip-version-check --dest "$staging/wheel" \
  "apache-flink-libraries==$version" >&2
python3 - "$staging"/wheel/apache_flink_libraries-*.whl "$staging/unpacked/lib" "$version" <<'PY'
import os, shutil, sys, zipfile
wheel, lib, version = sys.argv[1:]
wanted = {f"pyflink/lib/flink-dist-{version}.jar"} | {
    f"pyflink/lib/log4j-{part}-2.25.3.jar" for part in ("api", "core", "slf4j-impl", "1.2-api")}
os.makedirs(lib)
with zipfile.ZipFile(wheel) as archive:
    missing = wanted - set(archive.namelist())
    if missing:
        sys.exit(f"{wheel}: lacks {', '.join(sorted(missing))}")
    for name in sorted(wanted):
        with archive.open(name) as source, open(os.path.join(lib, os.path.basename(name)), "wb") as out:
            shutil.copyfileobj(source, out)
            out.flush()
            os.fsync(out.fileno())
PY
echo "$version" >"$staging/unpacked/VERSION"
# Another run may have won the race; its folder is as good as this one.
if ! mv -T "$staging/unpacked" "$destination" 2>/dev/null; then
  [[ -f $destination/VERSION ]] || { echo "cannot create $destination" >&2; exit 1; }
fi
echo "$PWD/$destination"
