"""The sharded filter directory (module documentation of bulkbloom.spark, "The sharded filter
directory"): its objects on a Hadoop filesystem, and the commit of a generation by a manifest
object created last."""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import shutil
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Callable, List, NamedTuple, Optional, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import bulkbloom

from ._windows import _prepare_window_shard, _window_config, _window_to_json, _WindowSizing

_log = logging.getLogger("bulkbloom.spark")

FORMAT = "bulkbloom sharded filter"
FORMAT_VERSION = 2

PathLike = Union[str, "os.PathLike[str]"]


def _fault_point(what: str) -> None:
    """Called before each step that changes a filter directory ("create", "write", "close",
    "link", "manifest", ...); tests replace it to fail that step, as src/persist/file_io.cpp's
    fault_point fails the C++ library's."""


# -- the stores: a filter directory's objects -----------------------------------------------------


def _full_at(manifest: dict) -> float:
    """The rate at which a filter's manifest says it is full: its ``target``, or, written before
    bulkbloom recorded one, its ``fpr``, which it was then sized at."""
    return float(manifest.get("target", manifest["fpr"]))


#: How many times a local store removes a directory that something still writes into.
_DELETE_ATTEMPTS = 50


class _LocalStore:
    """A filter directory on the local filesystem (a file: URI, or a plain path where Spark's
    default filesystem is file:), written with POSIX's guarantees: each object written under a
    temporary name and fsynced, then renamed (or, where it must not exist, linked: link(2) fails
    on an existing name) into place, and the directory fsynced. Executors read and write its shard
    files in place, so it must be at the same place on every host (local mode, a shared mount)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.local: Optional[Path] = root
        self.uri = root.as_uri() if root.is_absolute() else str(root)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def exists(self, name: str) -> bool:
        return (self.root / name).exists()

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def list(self, directory: str = "") -> List[str]:
        try:
            return sorted(entry.name for entry in (self.root / directory).iterdir())
        except FileNotFoundError:
            return []

    def mkdirs(self, directory: str) -> None:
        target = self.root / directory
        missing = [d for d in (target, *target.parents) if not d.exists()]
        target.mkdir(parents=True, exist_ok=True)
        # The entries of those it made durable before a manifest names what they hold: a power
        # loss must not keep the manifest and lose a generation's directory.
        for made in missing:
            _fsync_dir(made.parent)

    def rename(self, name: str, new_name: str) -> None:
        os.rename(self.root / name, self.root / new_name)
        _fsync_dir((self.root / new_name).parent)

    def modified(self, name: str) -> float:
        """When object `name` was last written, in seconds since the epoch."""
        return (self.root / name).stat().st_mtime

    def write(self, name: str, data: bytes, exclusive: bool = False) -> None:
        """Writes object `name` whole or not at all; `exclusive`: only if there is none
        (FileExistsError), so that of two writers of one name exactly one succeeds."""
        target = self.root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
        try:
            _fault_point("create")
            with open(temporary, "wb") as out:
                _fault_point("write")
                out.write(data)
                out.flush()
                _fault_point("fsync")
                os.fsync(out.fileno())
            _fault_point("link" if exclusive else "rename")
            if exclusive:
                os.link(temporary, target)
            else:
                os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)
        _fsync_dir(target.parent)

    def write_file(self, name: str, source: Path) -> None:
        """Moves the local file `source` (written and fsynced) to object `name`."""
        target = self.root / name
        _fault_point("rename")
        shutil.move(source, target)
        _fsync_dir(target.parent)

    def read_file(self, name: str, target: Path) -> None:
        shutil.copyfile(self.root / name, target)

    def delete(self, name: str) -> None:
        path = self.root / name
        if path.is_dir() and not path.is_symlink():
            # A task attempt still running after its job failed may add a file while the tree
            # is removed, leaving the directory: remove again until it is gone. Gone, it stays
            # gone, as tasks only write into a run's existing directory.
            for attempt in range(_DELETE_ATTEMPTS):
                shutil.rmtree(path, ignore_errors=True)
                if not path.exists():
                    return
                time.sleep(0.01 * attempt)
            _log.warning("%s: could not remove %s; the next commit removes it", self.uri, name)
        else:
            path.unlink(missing_ok=True)


class _HadoopStore:
    """A filter directory on any other Hadoop filesystem (hdfs:, s3a:, gs:, abfs:, viewfs: ...),
    through the driver JVM's org.apache.hadoop.fs.FileSystem as Spark configures it. Every object
    is written once under a name no other run uses; the one name two runs may want, the next
    manifest's, is created with overwrite off and S3A's conditional create (If-None-Match: an
    atomic PUT-if-absent checked at close), which HDFS, S3 (Hadoop 3.4.2 on) and the local
    filesystem refuse when the object exists."""

    def __init__(self, jvm: Any, fs: Any, root: Any) -> None:
        self._jvm, self._fs, self._root = jvm, fs, root
        self.local: Optional[Path] = None
        self.uri = str(root.toString())

    def _path(self, name: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self._root, name) if name else self._root

    def path(self, name: str) -> str:
        return str(self._path(name).toString())

    def exists(self, name: str) -> bool:
        return bool(self._fs.exists(self._path(name)))

    def read(self, name: str) -> bytes:
        stream = _hadoop_call(lambda: self._fs.open(self._path(name)), self.path(name))
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def list(self, directory: str = "") -> List[str]:
        try:
            found = self._fs.listStatus(self._path(directory))
        except Exception as error:  # py4j's error for a FileNotFoundException
            if "FileNotFoundException" in str(error):
                return []
            raise
        return sorted(str(status.getPath().getName()) for status in found)

    def mkdirs(self, directory: str) -> None:
        self._fs.mkdirs(self._path(directory))

    def modified(self, name: str) -> float:
        status = _hadoop_call(lambda: self._fs.getFileStatus(self._path(name)), self.path(name))
        return status.getModificationTime() / 1000.0

    def rename(self, name: str, new_name: str) -> None:
        if not self._fs.rename(self._path(name), self._path(new_name)):
            raise OSError(f"cannot rename {self.path(name)} to {self.path(new_name)}")

    def write(self, name: str, data: bytes, exclusive: bool = False) -> None:
        path = self._path(name)
        _fault_point("create")
        builder = self._fs.createFile(path).overwrite(not exclusive).recursive()
        if exclusive:
            builder = builder.opt("fs.option.create.conditional.overwrite", True)
        out = _hadoop_call(builder.build, self.path(name))
        try:
            _fault_point("write")
            out.write(bytearray(data))
            _fault_point("close")
        except BaseException:
            self._discard(out, path)
            raise
        # A close that fails (a lost reply, a pipeline failure) may still have made the object, or
        # lost an exclusive create to another writer whose object it then is: it stays, for the
        # caller to read (_publish), and an object cut short is found by _open.
        _hadoop_call(out.close, self.path(name))

    def _discard(self, out: Any, path: Any) -> None:
        """Drops a stream whose bytes are not all written, so that no reader takes them for an
        object: aborted where the store can (S3A uploads nothing), else closed and the object
        removed, the one this create made (a create that succeeded owns its name; if the close
        fails, the name may be another writer's, and what it names stays)."""
        try:
            if out.hasCapability("fs.capability.outputstream.abortable"):
                out.abort()
                return
        except Exception:  # a Hadoop before 3.3.1, without Abortable
            pass
        try:
            out.close()
        except Exception:
            return
        self._fs.delete(path, False)

    def write_file(self, name: str, source: Path) -> None:
        _fault_point("create")
        local = self._jvm.org.apache.hadoop.fs.Path(source.resolve().as_uri())
        _hadoop_call(lambda: self._fs.copyFromLocalFile(True, True, local, self._path(name)),
                     self.path(name))

    def read_file(self, name: str, target: Path) -> None:
        local = self._jvm.org.apache.hadoop.fs.Path(target.resolve().as_uri())
        _hadoop_call(lambda: self._fs.copyToLocalFile(False, self._path(name), local, True),
                     self.path(name))

    def delete(self, name: str) -> None:
        self._fs.delete(self._path(name), True)


def _hadoop_call(call: Callable[[], Any], where: str) -> Any:
    """`call()`, with Hadoop's FileAlreadyExistsException and FileNotFoundException raised as
    Python's FileExistsError and FileNotFoundError."""
    try:
        return call()
    except Exception as error:
        java = getattr(error, "java_exception", None)
        name = "" if java is None else str(java.getClass().getName())
        if name.endswith("FileAlreadyExistsException"):
            raise FileExistsError(f"{where} exists") from None
        if name.endswith("FileNotFoundException"):
            raise FileNotFoundError(f"{where} does not exist") from None
        raise


_Store = Union[_LocalStore, _HadoopStore]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


def _store_of(path: PathLike, spark: Any = None) -> _Store:
    """The store of the filter directory `path`: a URI of any Hadoop filesystem, or a path
    resolved against Spark's default filesystem (``fs.defaultFS``) as Spark resolves the paths it
    reads. Without a Spark session (None and none active) a plain path or file: URI is local."""
    text = os.fspath(path)
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    jvm = None if spark is None else getattr(spark, "_jvm", None)
    if jvm is None:
        match = _URI_SCHEME.match(text)
        if match is not None and match.group(1).lower() != "file":
            raise ValueError(
                f"filter {text!r}: a filter directory on a {match.group(1)}: filesystem is read "
                "through Spark's Hadoop filesystems: pass a classic (not Spark Connect) session"
            )
        return _LocalStore(Path(urllib.parse.urlparse(text).path if match else text))
    hadoop_path = jvm.org.apache.hadoop.fs.Path(text)
    fs = hadoop_path.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
    root = fs.makeQualified(hadoop_path)
    if str(root.toUri().getScheme()) == "file":
        return _LocalStore(Path(str(root.toUri().getPath())))
    return _HadoopStore(jvm, fs, root)


# -- the committed state --------------------------------------------------------------------------

_MANIFESTS = "manifests"
_MANIFEST = re.compile(r"^(\d{6,})\.json$")
# Version 1's layout (a CURRENT file naming gen-N/, which holds manifest.json), still read.
_LEGACY_GENERATION = re.compile(r"^gen-(\d{6,})$")
_GENERATION = re.compile(r"^gen-(\d{6,})(-[0-9a-f]+)?$")


class ShardedFilter:
    """The committed state of a sharded filter directory: its generation's manifest, whose
    ``shards`` and ``drops`` name objects relative to the directory."""

    def __init__(self, store: _Store, number: int, manifest: dict) -> None:
        self.store = store
        self.number = number
        self.manifest = manifest

    @property
    def root(self) -> Union[Path, str]:
        """The directory: a local Path, or the URI of one on another Hadoop filesystem."""
        return self.store.local if self.store.local is not None else self.store.uri

    @property
    def generation(self) -> str:
        """The name of the directory the generation wrote its objects in (``gen-000007-<run>``)."""
        return str(self.manifest["directory"])

    @property
    def directory(self) -> Union[Path, str]:
        return self._where(self.generation)

    @property
    def num_shards(self) -> int:
        return int(self.manifest["num_shards"])

    @property
    def layout(self) -> bulkbloom.Layout:
        return _layout_from_json(self.manifest["layout"])

    @property
    def key_count(self) -> Optional[int]:
        """A filter's distinct keys, those its runs' shards took as new (None for a window, and
        for a filter committed before bulkbloom recorded them)."""
        value = self.manifest.get("key_count")
        return None if value is None else int(value)

    @property
    def fpr(self) -> Optional[float]:
        """The false-positive rate the filter was sized to promise (None for a window)."""
        return None if self.window is not None else float(self.manifest["fpr"])

    @property
    def target(self) -> Optional[float]:
        """The rate at which a filter is full and a run that passes it is refused (``on_full``):
        three quarters of ``fpr``, the command line's first generation's; a filter committed
        before bulkbloom recorded it was sized at ``fpr`` itself. None for a window."""
        return None if self.window is not None else _full_at(self.manifest)

    @property
    def expected_fpr(self) -> Optional[float]:
        """A filter's modelled false-positive rate at ``key_count`` keys (``Layout``'s
        ``expected_fpr``, the model the command line judges its filter's fullness by)."""
        keys = self.key_count
        return None if keys is None else self.layout.expected_fpr(keys)

    @property
    def expected_false_drops(self) -> Optional[float]:
        """A window's: the never-seen keys the run that made this generation is expected to have
        dropped, the sum of its window shards' own ``WindowShard.expected_false_drops`` (each at
        its generations' rates as its records came). None for a filter, whose rate is its
        layout's model (``Layout``'s ``expected_fpr``), and for a window committed before
        bulkbloom recorded it."""
        value = self.manifest.get("expected_false_drops")
        return None if value is None else float(value)

    @property
    def window(self) -> Optional[bulkbloom.WindowConfig]:
        """The window's configuration, or None for a filter."""
        values = self.manifest.get("window")
        return None if values is None else _window_config(values, self.layout)

    def _where(self, name: str) -> Union[Path, str]:
        return Path(self.store.path(name)) if self.store.local is not None else self.store.path(
            name)

    def shard_path(self, index: int) -> Union[Path, str]:
        return self._where(self.manifest["shards"][index])

    def load(self, index: int) -> Any:
        """Shard `index` (a FilterShard or WindowShard), read and checked against the manifest."""
        name = self.manifest["shards"][index]
        with _local_copy(self.store, name) as path:
            if self.window is None:
                shard = bulkbloom.FilterShard.load(path, backend="cpu")
                layout = shard.layout
            else:
                shard = bulkbloom.WindowShard.load(path, backend="cpu")
                layout = shard.config.generation
        self._check_is(index, shard, layout)
        return shard

    def _check_is(self, index: int, shard: Any, layout: bulkbloom.Layout) -> None:
        """Refuses `shard` (of `layout`) read from shard `index`'s object unless it is that."""
        if (shard.index, shard.num_shards, tuple(layout)[:5]) != (
            index, self.num_shards, tuple(self.layout)[:5]
        ):
            raise bulkbloom.FormatError(
                f"{self.store.path(self.manifest['shards'][index])} is shard {shard.index} of "
                f"{shard.num_shards} of {layout.description}, but the manifest says shard "
                f"{index} of {self.num_shards} of {self.layout.description}"
            )


class _local_copy:
    """A local path holding object `name` of `store`: the object itself where the store is local,
    else a temporary copy, removed on exit."""

    def __init__(self, store: _Store, name: str) -> None:
        self._store, self._name = store, name
        self._temporary: Optional[str] = None

    def __enter__(self) -> Path:
        if self._store.local is not None:
            return self._store.local / self._name
        self._temporary = tempfile.mkdtemp(prefix="bulkbloom-spark-")
        path = Path(self._temporary) / Path(self._name).name
        self._store.read_file(self._name, path)
        return path

    def __exit__(self, *exc: Any) -> None:
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)


def _empty_shard(layout: bulkbloom.Layout, window: Optional[bulkbloom.WindowConfig], index: int,
                 num_shards: int) -> Any:
    if window is None:
        return bulkbloom.FilterShard(layout, index, num_shards, backend="cpu")
    return bulkbloom.WindowShard(window, index, num_shards, backend="cpu")


def _layout_to_json(layout: bulkbloom.Layout) -> dict:
    return {
        "shape": layout.shape,
        "num_blocks": layout.num_blocks,
        "hash": layout.hash,
        "seed": layout.seed,
        "index": layout.index,
    }


def _layout_from_json(values: dict) -> bulkbloom.Layout:
    return bulkbloom.Layout.of(
        values["shape"], int(values["num_blocks"]), int(values["seed"]), values["hash"],
        values["index"],
    )


def _manifest_name(number: int) -> str:
    return f"{_MANIFESTS}/{number:06d}.json"


def _manifest_numbers(store: _Store) -> List[int]:
    return sorted(int(m.group(1)) for m in map(_MANIFEST.match, store.list(_MANIFESTS)) if m)


# What every manifest holds (a version-1 one names its directory by CURRENT instead).
_MANIFEST_FIELDS = ("num_shards", "layout", "shards", "drops")


def _parse_manifest(store: _Store, name: str, data: bytes) -> dict:
    try:
        manifest = json.loads(data)
    except ValueError as error:
        raise bulkbloom.FormatError(f"{store.path(name)}: {error}") from None
    if (not isinstance(manifest, dict) or manifest.get("format") != FORMAT
            or manifest.get("version") not in (1, FORMAT_VERSION)):
        raise bulkbloom.FormatError(
            f"{store.path(name)} is not a version-{FORMAT_VERSION} {FORMAT} manifest"
        )
    required = _MANIFEST_FIELDS + (("directory",) if manifest["version"] == FORMAT_VERSION else ())
    missing = [field for field in required if field not in manifest]
    if missing or not isinstance(manifest["shards"], list) or len(manifest["shards"]) != \
            manifest["num_shards"]:
        raise bulkbloom.FormatError(
            f"{store.path(name)} is damaged: "
            + (f"it lacks {', '.join(missing)}" if missing else
               f"it names {len(manifest['shards'])} shards of {manifest['num_shards']}")
        )
    return dict(manifest)


# A manifest whose run died while writing it: on filesystems that show a file from its creation
# (HDFS, ABFS, a local disk through Hadoop) it is left empty or cut short. It was never committed
# (its run did not return), but it holds the next manifest's name: commits are refused while it
# may still be a commit in progress, and the first commit after this age sets it aside.
_UNFINISHED_MANIFEST_AGE = 3600.0


def _cut_short(data: bytes) -> bool:
    """Whether manifest bytes are a manifest's beginning only: empty, or JSON that ends before
    its value does (not other damage, which stays an error: that manifest may have been
    committed)."""
    text = data.decode("utf-8", errors="replace").rstrip()
    if not text:
        return True
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        # A whole manifest ends with its object's "}" (json.dumps); a cut may also fall right
        # after an inner one, or inside a string.
        return (not text.endswith("}") or error.pos >= len(text)
                or error.msg.startswith("Unterminated string"))
    return False


def _open(store: _Store, committing: bool = False) -> Optional[ShardedFilter]:
    """The committed state of `store`: the newest manifest's, or a version-1 directory's
    (CURRENT), or None (a new or empty directory, or one that only runs that never committed
    wrote in). A file, or a directory holding anything else, is refused (bulkbloom.FormatError):
    a new filter made in it would mix its objects with another tool's.

    A newest manifest cut short (_cut_short) is a commit in progress or a killed one: a reader
    reads the commit before it; a run that will commit (`committing`) is refused while it is
    younger than _UNFINISHED_MANIFEST_AGE, and sets it aside after."""
    if store.local is not None and store.local.exists() and not store.local.is_dir():
        raise bulkbloom.FormatError(
            f"{store.uri} is a file, not a sharded filter directory (a bulkbloom filter file is "
            "the command line's: bulkbloom.spark keeps a directory of shard files)"
        )
    numbers = _manifest_numbers(store)
    while numbers:
        name = _manifest_name(numbers[-1])
        try:
            data = store.read(name)
            try:
                return ShardedFilter(store, numbers[-1], _parse_manifest(store, name, data))
            except bulkbloom.FormatError:
                if not _cut_short(data):
                    raise
            if committing:
                age = time.time() - store.modified(name)
                if age < _UNFINISHED_MANIFEST_AGE:
                    raise bulkbloom.FormatError(
                        f"{store.path(name)} is incomplete ({len(data)} bytes, last written "
                        f"{age / 60:.0f} minutes ago): a commit to {store.uri} in progress, or "
                        "one whose driver was killed. A run commits once it was last written an "
                        "hour ago (it is then set aside), or once you remove it, when no job "
                        "writes to this filter"
                    )
                # Set aside, not removed: a committed manifest cut short later by damage looks
                # the same, and its generation would be lost.
                aside = f"{name}.cut-short-{int(time.time())}"
                _log.warning("%s: %s is incomplete, last written %.1f hours ago: set aside as %s",
                             store.uri, store.path(name), age / 3600, store.path(aside))
                store.rename(name, aside)
                return _open(store, committing)
        except FileNotFoundError:  # removed by a commit since the listing: read again
            return _open(store, committing)
        numbers.pop()  # a reader reads the commit before it
    legacy = _legacy_state(store)
    if legacy is None:
        # Runs that never committed leave generations and PENDING objects; hidden names are
        # temporaries (and LocalFileSystem's checksums).
        foreign = [name for name in store.list() if not (
            name == _MANIFESTS or _GENERATION.match(name) or name.startswith((_PENDING, ".")))]
        if foreign:
            raise bulkbloom.FormatError(
                f"{store.uri} holds no sharded filter (no {_MANIFESTS}/) but is not empty "
                f"({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}): another "
                "tool's directory (a state directory of the command line's?); pass a new or "
                "empty directory for a new filter"
            )
    return legacy


def _legacy_state(store: _Store) -> Optional[ShardedFilter]:
    """A version-1 directory's committed state (CURRENT names gen-N/, which holds the manifest
    and names its objects within it), in version 2's terms; None where there is no CURRENT."""
    try:
        generation = store.read("CURRENT").decode().strip()
    except FileNotFoundError:
        return None
    match = _LEGACY_GENERATION.match(generation)
    if not match:
        raise bulkbloom.FormatError(f"{store.path('CURRENT')} names {generation!r}, not a "
                                    "generation")
    name = f"{generation}/manifest.json"
    manifest = _parse_manifest(store, name, store.read(name))
    # Version 1 names its objects within the generation's directory.
    manifest["directory"] = generation
    for kind in ("shards", "drops"):
        manifest[kind] = [f"{generation}/{entry}" for entry in manifest[kind]]
    return ShardedFilter(store, int(match.group(1)), manifest)


def _check_shards(state: ShardedFilter) -> None:
    """Refuses a generation whose shard objects are not all there (removed by hand), before a
    job reads them: a listing of each directory they are in. A local filter's shard files are
    also mapped, which reads their headers alone (0.2 ms for a 59 MiB shard): one truncated,
    or another shard's, is refused too (ShardedFilter.load's check)."""
    listed: dict = {}
    for index, name in enumerate(state.manifest["shards"]):
        folder, _, leaf = name.rpartition("/")
        if folder not in listed:
            listed[folder] = set(state.store.list(folder))
        if leaf not in listed[folder]:
            raise bulkbloom.FormatError(
                f"{state.store.path(name)}, shard {index} of the current generation "
                f"({state.store.path(_manifest_name(state.number))}), is missing: the filter "
                "cannot be read without it; restore it, or make a new filter"
            )
        if state.store.local is not None and state.window is None:
            shard = bulkbloom.FilterShard.map(state.store.local / name, verify=False)
            state._check_is(index, shard, shard.layout)


def open_filter(path: PathLike, spark: Any = None) -> Optional[ShardedFilter]:
    """The committed state of the sharded filter directory at `path` (any URI Spark reads, or a
    path on Spark's default filesystem; module documentation, "The sharded filter directory"), or
    None if none was ever committed there. `spark`: the session whose Hadoop configuration reads
    it (None: the active one; with none, `path` must be local). Raises ``bulkbloom.FormatError``
    for a directory that is not one."""
    return _open(_store_of(path, spark))


# -- staging and committing a generation ----------------------------------------------------------


class _Staged(NamedTuple):
    """A generation whose objects are written in full in a directory no other run writes to, and
    its manifest, not yet created: nothing reads it but the run that staged it."""

    store: _Store
    base: Optional[ShardedFilter]  # the state the run started from
    number: int
    manifest: dict

    @property
    def generation(self) -> str:
        return str(self.manifest["directory"])


def _stage(
    store: _Store,
    base: Optional[ShardedFilter],
    current: Optional[ShardedFilter],
    directory: str,
    number: int,
    rows: list,
    layout: bulkbloom.Layout,
    window: Optional[bulkbloom.WindowConfig],
    time: Optional[int],
    num_shards: int,
    manifest_extra: dict,
    drops: Optional[dict] = None,
    drops_by: str = "shard",
    sizing: Optional[_WindowSizing] = None,
) -> _Staged:
    """Makes what the successful tasks handed in (`rows`) a complete generation in `directory`:
    each row names its shard's file (an attempt's, in `directory`: renamed to the shard's name)
    or holds its bytes (written as an object), and `drops` (name in the generation: attempt file
    or bytes) likewise, grouped by `drops_by` ("shard" or "input partition"). A shard no record
    of this run went to is the base generation's object, named again. A window's manifest
    records the whole window's keys in each filter (``"window_keys"``, the sum of the shards'
    filter_keys()), which the next run gives its shards (`sizing`: what this run's shards were
    given), and the run's ``"expected_false_drops"`` (the sum of the shards' own). Returns the
    manifest to commit (``_publish``)."""
    by_shard = {row["shard"]: row for row in rows}
    if len(by_shard) != len(rows):
        # Each shard's rows must all reach one task; two tasks' halves would each look complete.
        raise RuntimeError("a shard was decided by two tasks: the routing split its rows")
    store.mkdirs(directory)
    shards = []
    window_keys: Optional[List[int]] = None
    for index in range(num_shards):
        name = f"{directory}/shard-{index:05d}.{'bbf' if window is None else 'bbw'}"
        row = by_shard.get(index)
        filter_keys: Optional[List[int]] = None
        if row is not None:
            _place(store, name, row["shard_file"], row["shard_bytes"])
            if window is not None:
                filter_keys = list(row["filter_keys"])
        elif window is not None:
            # No record of this run went to it, but its clock moves with the window's, and its
            # generations are sized with the others'.
            shard = base.load(index) if base is not None else _empty_shard(
                layout, window, index, num_shards)
            _prepare_window_shard(shard, sizing)
            shard.advance_to(time)
            _save(store, name, shard)
            filter_keys = shard.filter_keys()
        elif base is not None:
            name = base.manifest["shards"][index]  # unchanged: the same object
        else:
            _save(store, name, _empty_shard(layout, None, index, num_shards))
        shards.append(name)
        if window is not None and filter_keys is not None:
            if window_keys is None:
                window_keys = filter_keys
            elif len(window_keys) != len(filter_keys):
                raise RuntimeError(
                    f"window shard {index} has {len(filter_keys)} filters, shard 0 has "
                    f"{len(window_keys)}: its shards sized their generations apart"
                )
            else:
                window_keys = [a + b for a, b in zip(window_keys, filter_keys)]
    named_drops = []
    for name, (attempt_file, data) in sorted((drops or {}).items()):
        named_drops.append(f"{directory}/{name}")
        _place(store, named_drops[-1], attempt_file, data)
    if store.local is not None:
        # Files of attempts Spark did not count (a retried or speculative task's), and what the
        # regrouping of drops left, are no part of the generation.
        named = set(shards) | set(named_drops)
        for entry in store.list(directory):
            if f"{directory}/{entry}" not in named:
                store.delete(f"{directory}/{entry}")
        _fsync_dir(store.local / directory)
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "generation": number,
        "directory": directory,
        "base": None if current is None else current.number,
        "writer": uuid.uuid4().hex,
        "num_shards": num_shards,
        "layout": _layout_to_json(layout),
        **manifest_extra,
        **({} if window is None else {
            "window": _window_to_json(window), "time": time, "window_keys": window_keys,
            "expected_false_drops": sum(row["expected_false_drops"] for row in rows)}),
        "shards": shards,
        "drops": named_drops,
        "drops_by": drops_by,
    }
    return _Staged(store, current, number, manifest)


def _place(store: _Store, name: str, attempt_file: Optional[str], data: Optional[bytes]) -> None:
    """Object `name`: a task's attempt file renamed (a local store's), or its bytes written."""
    if data is not None:
        store.write(name, data)
    else:
        assert store.local is not None and attempt_file is not None
        _fault_point("rename")
        os.rename(attempt_file, store.local / name)


def _save(store: _Store, name: str, shard: Any) -> None:
    if store.local is not None:
        shard.save(store.local / name)
        return
    with tempfile.TemporaryDirectory(prefix="bulkbloom-spark-") as temporary:
        path = Path(temporary) / Path(name).name
        shard.save(path)
        store.write_file(name, path)


class CommitConflictError(RuntimeError):
    """Another job committed the filter while this run ran: nothing of this run is committed,
    and what it wrote is removed (an output that run wrote stays). Run it again against the new
    state."""


def _conflict(store: _Store, number: int) -> CommitConflictError:
    return CommitConflictError(
        f"{store.uri}: another job committed generation {number} while this one ran (it "
        f"created {store.path(_manifest_name(number))}); this run's generation is not "
        "committed and its output is removed (an output it replaced with mode='overwrite' stays "
        "as written, with keys the filter does not hold): run it again against the new state"
    )


def _committed_by(store: _Store, number: int, directory: str) -> str:
    """Who committed generation `number`, which a run staged in `directory`: "none", "this run",
    "another run", "later runs" (its manifest is gone, removed by the clean-up of commits after
    it), or "unknown" when its manifest cannot be read or parsed (a failing store, or one cut
    short: _open)."""
    try:
        data = store.read(_manifest_name(number))
    except FileNotFoundError:
        try:
            later = any(n > number for n in _manifest_numbers(store))
        except Exception:
            return "unknown"
        return "later runs" if later else "none"
    except Exception:
        return "unknown"
    try:
        manifest = json.loads(data)
    except ValueError:
        return "unknown"
    if not isinstance(manifest, dict):
        return "unknown"
    return "this run" if manifest.get("directory") == directory else "another run"


def _undo_failed_run(store: _Store, generation: Tuple[int, str], error: BaseException,
                     undo: Callable[[], None], committing: bool) -> None:
    """After `error` failed a run staging `generation` (number, directory): `undo` what it did
    and raise CommitConflictError from `error` when another run committed that number, which is
    why this one failed (its commit removed this run's staged objects) or would have. When the
    run was `committing` (its manifest's write had begun), a commit that may be its own (the
    write reported an error, and reading the state back failed too) leaves everything as a crash
    would, for the rerun to tell (module documentation, "Committing a run")."""
    committed = _committed_by(store, *generation)
    # _publish's refused create, where the manifest is not this run's: another run's, whether it
    # reads whole yet or not (on HDFS it is visible, and empty, from its creation).
    if isinstance(error, CommitConflictError) and committed != "this run":
        committed = "another run"
    if committed == "later runs":  # this run's own only if two more came in its commit's moment
        committed = "unknown" if committing else "another run"
    if committing and committed in ("this run", "unknown"):
        _log.warning("%s: this run failed, and whether its generation %d is committed cannot be "
                     "told now; its objects stay, as after a crash: run it again", store.uri,
                     generation[0])
        return
    undo()
    if committed == "another run" and isinstance(error, Exception) and \
            not isinstance(error, CommitConflictError):
        raise _conflict(store, generation[0]) from error


def _publish(staged: _Staged) -> ShardedFilter:
    """Commits a staged generation: its manifest, the next one's name, created only if no other
    run created it (module documentation, "The sharded filter directory"). What neither it nor
    the manifest before it names is removed afterwards (_clean_up), never before."""
    store, number = staged.store, staged.number
    data = json.dumps(staged.manifest, indent=1).encode() + b"\n"
    _fault_point("manifest")
    try:
        store.write(_manifest_name(number), data, exclusive=True)
    except FileExistsError:
        # Another run's, unless the create was retried after its first try had landed (NFS, an
        # object store's conditional put): then the manifest there is this run's own.
        if _committed_by(store, number, staged.generation) != "this run":
            raise _conflict(store, number) from None
        _log.warning("%s: the manifest's create reported that it exists, but it is this run's",
                     store.path(_manifest_name(number)))
    except BaseException:
        # A failure after the create (a lost reply, a failing close) may still have committed.
        committed = _open(store)
        if committed is None or committed.manifest.get("writer") != staged.manifest["writer"]:
            raise
        _log.warning("%s: the manifest's write reported an error, but it is committed",
                     store.path(_manifest_name(number)))
    return ShardedFilter(store, number, staged.manifest)


def _remove_unreferenced(store: _Store, current: ShardedFilter) -> None:
    """Removes what the current manifest and the one before it (which a DataFrame returned
    earlier may still read) do not name, of generations up to the current one: older manifests
    and generations, and what crashed or refused runs left. A generation numbered past the
    current one is a running job's, and is left alone."""
    keep = set(current.manifest["shards"]) | set(current.manifest["drops"])
    keep_directories = {current.generation}
    base = current.manifest.get("base")
    previous = None
    if base is not None:
        try:
            previous = _parse_manifest(store, _manifest_name(base),
                                       store.read(_manifest_name(base)))
        except FileNotFoundError:
            # The first commit over a version-1 directory: its generation is the previous one.
            legacy = _legacy_state(store)
            previous = None if legacy is None else legacy.manifest
    if previous is not None:
        keep |= set(previous["shards"]) | set(previous["drops"])
        keep_directories.add(str(previous.get("directory")))
    elif base is not None:
        return  # the manifest before is gone: nothing can tell what it named
    for number in _manifest_numbers(store):
        if base is not None and number < base:
            store.delete(_manifest_name(number))
    entries = store.list()
    # Version 1's objects, in a directory it wrote (CURRENT, removed last, says so): no name
    # of another's is taken for one.
    migrated = "CURRENT" in entries
    for entry in entries:
        match = _GENERATION.match(entry)
        if match is not None and int(match.group(1)) <= current.number:
            names = [f"{entry}/{name}" for name in store.list(entry)]
            if entry not in keep_directories and not any(name in keep for name in names):
                store.delete(entry)
                continue
            for name in names:
                if name not in keep and not (entry in keep_directories and name.endswith(
                        "manifest.json")):
                    store.delete(name)
        elif migrated and (entry in ("LOCK", "PENDING") or entry.startswith(("tmp-",
                                                                             ".CURRENT."))):
            store.delete(entry)
    if migrated:
        store.delete("CURRENT")  # it names the generation before this
        _log.warning("%s: a version-1 filter directory, now committed by manifest (version 2); "
                     "bulkbloom before this version cannot read it", store.uri)


def _new_generation(current: Optional[ShardedFilter]) -> Tuple[int, str]:
    """(number, directory name) of the generation a run starting from `current` makes: the next
    manifest's number, and a directory named for the run alone, so that two runs never write the
    same object. A run that fails removes it (_undo_failed_run)."""
    number = 1 if current is None else current.number + 1
    return number, f"gen-{number:06d}-{uuid.uuid4().hex[:16]}"


def _clean_up(store: _Store, state: ShardedFilter) -> None:
    """_remove_unreferenced after a commit; what it fails to remove the next commit removes."""
    try:
        _remove_unreferenced(store, state)
    except Exception as error:  # the commit stands; this is tidying only
        _log.warning("%s: could not remove what the new generation no longer needs: %s",
                     store.uri, error)


def _scratch_store(spark: Any, parent: Optional[PathLike] = None) -> _Store:
    """A new directory for one dedup's filter, in `parent` (any filesystem a filter may be on),
    else in the driver's temporary directory (which only local mode's executors see), removed
    when the driver's Python exits."""
    if parent is None:
        path = Path(tempfile.mkdtemp(prefix="bulkbloom-spark-"))
        atexit.register(shutil.rmtree, path, True)
        return _LocalStore(path)
    store = _store_of(parent, spark)
    name = f"bulkbloom-spark-{uuid.uuid4().hex}"
    store.mkdirs(name)
    atexit.register(_delete_quietly, store, name)
    return _store_of(store.path(name), spark)


def _delete_quietly(store: _Store, name: str) -> None:
    try:
        store.delete(name)
    except Exception:  # at exit, the JVM may be gone before us: the directory stays
        pass


# The objects in a filter directory that name the output a dedup_and_write run is writing, one
# a run: PENDING-<run>.json.
_PENDING = "PENDING-"


def _write_pending(store: _Store, output: str, staged: _Staged) -> str:
    name = f"{_PENDING}{staged.manifest['writer']}.json"
    pending = {"output": output, "base": None if staged.base is None else staged.base.number,
               "generation": staged.generation}
    store.write(name, json.dumps(pending).encode() + b"\n")
    return name


def _pending_for(store: _Store, output: str, own: Optional[str]) -> bool:
    """Whether a PENDING object other than `own` names `output`: once a run has staged, it has
    removed those of crashed runs (_crashed_runs), so such a one is a run's that started since."""
    for name in store.list():
        if name.startswith(_PENDING) and name != own:
            try:
                pending = json.loads(store.read(name))
            except (FileNotFoundError, ValueError):
                continue
            if isinstance(pending, dict) and pending.get("output") == output:
                return True
    return False


def _crashed_runs(store: _Store, current: Optional[ShardedFilter], output: str) -> tuple:
    """(whether a dedup_and_write run that crashed before its commit was writing `output` from
    the current state, so that what is there is its, to be replaced; the PENDING objects of runs
    that crashed or committed, to remove once this run's own is written). A run from the current
    state writing another output may be running: its PENDING is left alone."""
    ours, stale = False, []
    base = None if current is None else current.number
    for name in store.list():
        if not name.startswith(_PENDING):
            continue
        try:
            pending = json.loads(store.read(name))
        except FileNotFoundError:
            continue
        except ValueError as error:
            raise bulkbloom.FormatError(f"{store.path(name)}: {error}") from None
        if not isinstance(pending, dict):
            raise bulkbloom.FormatError(f"{store.path(name)} is not a PENDING object (JSON "
                                        "{output, base, generation})")
        committed = current is not None and pending.get("generation") == current.generation
        if not committed and pending.get("base") == base:
            if pending.get("output") != output:
                continue
            ours = True
        elif not committed:
            _log.warning(
                "%s: a run that crashed before its commit was writing %s, which may hold its "
                "partial output", store.uri, pending.get("output"),
            )
        stale.append(name)
    return ours, stale


# A drops file is one int64 column of row ids, ascending.
_DROPPED = "row_id"


def _drops_table(dropped: np.ndarray) -> pa.Table:
    return pa.table({_DROPPED: pa.array(dropped, pa.int64())})


def _write_drops(path: str, dropped: np.ndarray) -> None:
    with open(path, "wb") as out:
        pq.write_table(_drops_table(dropped), out, use_dictionary=False)
        out.flush()
        os.fsync(out.fileno())


def _drops_bytes(dropped: np.ndarray) -> bytes:
    out = pa.BufferOutputStream()
    pq.write_table(_drops_table(dropped), out, use_dictionary=False)
    return bytes(out.getvalue())


def _input_drops_name(partition: int) -> str:
    return f"drops-p{partition:06d}.parquet"


def _input_drops(directory: str, partition: int) -> np.ndarray:
    """The sorted row ids dropped from input `partition`, from its file in the generation
    `directory` (an input partition that lost no row has none)."""
    path = os.path.join(directory, _input_drops_name(partition))
    try:
        return pq.read_table(path, columns=[_DROPPED]).column(0).to_numpy()
    except FileNotFoundError:
        if not os.path.isdir(directory):
            raise FileNotFoundError(
                f"{directory}, the filter generation this DataFrame filters by, was removed: "
                "dedup's scratch filter lives until the driver's Python exits"
            ) from None
        return np.zeros(0, dtype=np.int64)
