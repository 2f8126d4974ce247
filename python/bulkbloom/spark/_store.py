"""The sharded filter directory (module documentation of bulkbloom.spark, "The sharded filter
directory"): its files, the lock, staging and committing a generation."""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import re
import shutil
import tempfile
import urllib.parse
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List, NamedTuple, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import bulkbloom

from ._windows import _window_config, _window_to_json

_log = logging.getLogger("bulkbloom.spark")

FORMAT = "bulkbloom sharded filter"
FORMAT_VERSION = 1

PathLike = Union[str, "os.PathLike[str]"]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: Path, data: bytes) -> None:
    """Writes `path` through a temporary name: fsync the file, rename, fsync the directory."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    with open(temporary, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    _fsync_dir(path.parent)


class ShardedFilter:
    """The committed state of a sharded filter directory: its generation and manifest."""

    def __init__(self, root: Path, generation: str, manifest: dict) -> None:
        self.root = root
        self.generation = generation
        self.manifest = manifest

    @property
    def directory(self) -> Path:
        return self.root / self.generation

    @property
    def num_shards(self) -> int:
        return int(self.manifest["num_shards"])

    @property
    def layout(self) -> bulkbloom.Layout:
        return _layout_from_json(self.manifest["layout"])

    @property
    def window(self) -> Optional[bulkbloom.WindowConfig]:
        """The window's configuration, or None for a filter."""
        values = self.manifest.get("window")
        return None if values is None else _window_config(values, self.layout)

    def shard_path(self, index: int) -> Path:
        return self.directory / self.manifest["shards"][index]

    def load(self, index: int) -> Any:
        """Shard `index` (a FilterShard or WindowShard), read and checked against the manifest."""
        path = self.shard_path(index)
        if self.window is None:
            shard = bulkbloom.FilterShard.load(path, backend="cpu")
            layout = shard.layout
        else:
            shard = bulkbloom.WindowShard.load(path, backend="cpu")
            layout = shard.config.generation
        if (shard.index, shard.num_shards, tuple(layout)[:5]) != (
            index, self.num_shards, tuple(self.layout)[:5]
        ):
            raise bulkbloom.FormatError(
                f"{path} is shard {shard.index} of {shard.num_shards} of {layout.description}, "
                f"but the manifest says shard {index} of {self.num_shards} of "
                f"{self.layout.description}"
            )
        return shard


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


_GENERATION = re.compile(r"^gen-(\d{6,})$")


def open_filter(path: PathLike) -> Optional[ShardedFilter]:
    """The committed state of the sharded filter directory at `path`, or None if none was ever
    committed there. Raises ``bulkbloom.FormatError`` for a directory that is not one."""
    root = _filter_root(path)
    current = root / "CURRENT"
    if not current.exists():
        return None
    generation = current.read_text().strip()
    if not _GENERATION.match(generation):
        raise bulkbloom.FormatError(f"{current} names {generation!r}, not a generation")
    manifest_path = root / generation / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as error:
        raise bulkbloom.FormatError(f"{manifest_path}: {error}") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise bulkbloom.FormatError(
            f"{manifest_path} is not a version-{FORMAT_VERSION} {FORMAT} manifest"
        )
    return ShardedFilter(root, generation, manifest)


@contextmanager
def _locked(root: Path, wait: bool) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    lock_path = root / "LOCK"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise RuntimeError(
                f"{root} is being changed by another job (it holds {lock_path}); pass "
                "wait_lock=True to wait for it"
            ) from None
        yield
    finally:
        os.close(fd)


def _remove_leftovers(root: Path, keep: set) -> None:
    """Removes what is not the current or previous generation: files of crashed or old jobs."""
    for entry in root.iterdir():
        if entry.name in keep or entry.name in ("LOCK", "CURRENT"):
            continue
        if entry.name.startswith(("tmp-", "gen-", ".CURRENT.", f".{_PENDING}.")):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def _generations(root: Path) -> List[str]:
    found = [e.name for e in root.iterdir() if _GENERATION.match(e.name) and e.is_dir()]
    return sorted(found, key=lambda name: int(name[4:]))


class _Staged(NamedTuple):
    """A generation decided and written in full in a job's work directory, not yet published:
    nothing reads it but the job that staged it."""

    root: Path
    previous: Optional[str]  # the generation current when the job took the lock
    directory: Path  # ROOT/tmp-<job>/gen-N
    manifest: dict

    @property
    def generation(self) -> str:
        return self.directory.name


def _stage(
    root: Path,
    base: Optional[ShardedFilter],
    previous: Optional[str],
    work: Path,
    rows: list,
    layout: bulkbloom.Layout,
    window: Optional[bulkbloom.WindowConfig],
    time: Optional[int],
    num_shards: int,
    manifest_extra: dict,
    drops: Optional[dict] = None,
    drops_by: str = "shard",
) -> _Staged:
    """Makes the attempt files the successful tasks named a complete generation in `work`:
    `rows`' shard files, and `drops` (name in the generation: attempt file), grouped by
    `drops_by` ("shard" or "input partition"), written and fsynced; ``_publish`` commits it."""
    by_shard = {row["shard"]: row for row in rows}
    if len(by_shard) != len(rows):
        # Each shard's rows must all reach one task; two tasks' halves would each look complete.
        raise RuntimeError("a shard was decided by two tasks: the routing split its rows")
    generations = _generations(root)
    number = int(generations[-1][4:]) + 1 if generations else 1
    generation = f"gen-{number:06d}"
    staging = work / generation
    staging.mkdir()
    shards = []
    for index in range(num_shards):
        name = f"shard-{index:05d}.bbf" if window is None else f"shard-{index:05d}.bbw"
        target = staging / name
        row = by_shard.get(index)
        if row is not None:
            os.rename(row["shard_file"], target)
        elif window is not None:
            # No record of this run went to it, but its clock moves with the window's.
            shard = base.load(index) if base is not None else _empty_shard(
                layout, window, index, num_shards)
            shard.advance_to(time)
            shard.save(target)
        elif base is not None:
            # A shard no key of this run went to is the same file: a link shares its bytes.
            source = base.shard_path(index)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
        else:
            _empty_shard(layout, None, index, num_shards).save(target)
        shards.append(name)
    drops = drops or {}
    for name, attempt_file in drops.items():
        os.rename(attempt_file, staging / name)
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "generation": number,
        "num_shards": num_shards,
        "layout": _layout_to_json(layout),
        **manifest_extra,
        **({} if window is None else {"window": _window_to_json(window), "time": time}),
        "shards": shards,
        "drops": sorted(drops),
        "drops_by": drops_by,
    }
    _write_durably(staging / "manifest.json", json.dumps(manifest, indent=1).encode() + b"\n")
    _fsync_dir(staging)
    return _Staged(root, previous, staging, manifest)


def _publish(staged: _Staged) -> ShardedFilter:
    """Commits a staged generation, atomically: renamed into place, then CURRENT replaced (module
    documentation, the directory). The generation before it is kept, older ones removed."""
    root, generation = staged.root, staged.generation
    os.rename(staged.directory, root / generation)
    _fsync_dir(root)
    _write_durably(root / "CURRENT", f"{generation}\n".encode())
    keep = {generation} | ({staged.previous} if staged.previous is not None else set())
    _remove_leftovers(root, keep)
    return ShardedFilter(root, generation, staged.manifest)


@contextmanager
def _changing(root: Path, wait_lock: bool) -> Iterator[Optional[ShardedFilter]]:
    """Holds `root`'s lock and yields its committed state, after removing what crashed or older
    jobs left: all but the current generation and the one before it, which a DataFrame returned
    earlier may still read."""
    with _locked(root, wait_lock):
        current = open_filter(root)
        keep = set()
        if current is not None:
            generations = _generations(root)
            at = generations.index(current.generation)
            keep = set(generations[max(0, at - 1) : at + 1])
        _remove_leftovers(root, keep)
        yield current


@contextmanager
def _work_directory(root: Path) -> Iterator[Path]:
    """A job's directory for its attempt files and staged generation, removed when it ends."""
    work = root / f"tmp-{uuid.uuid4().hex}"
    work.mkdir()
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _scratch_directory(parent: Optional[PathLike] = None) -> Path:
    """A new directory for one dedup's filter (in `parent`, else the driver's temporary
    directory), removed when the driver's Python exits."""
    where = None if parent is None else _filter_root(parent)
    path = Path(tempfile.mkdtemp(prefix="bulkbloom-spark-", dir=where))
    atexit.register(shutil.rmtree, path, True)
    return path


# The file in a filter directory that names the output a dedup_and_write run is writing.
_PENDING = "PENDING"


def _crashed_run_wrote(root: Path, current: Optional[ShardedFilter], output: str) -> bool:
    """Whether a dedup_and_write run that crashed before its commit was writing `output` from
    the current state (so that what is there is its, to be replaced); removes PENDING when it
    names another output or a run that committed."""
    path = root / _PENDING
    try:
        pending = json.loads(path.read_text())
    except FileNotFoundError:
        return False
    except ValueError as error:
        raise bulkbloom.FormatError(f"{path}: {error}") from None
    committed = current is not None and pending.get("generation") == current.generation
    base = None if current is None else current.generation
    if not committed and pending.get("base") == base and pending.get("output") == output:
        return True
    if not committed:
        _log.warning(
            "%s: a run that crashed before its commit was writing %s, which may hold its partial "
            "output", root, pending.get("output"),
        )
    path.unlink()
    _fsync_dir(root)
    return False


_URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


def _filter_root(path: PathLike) -> Path:
    """The local directory a filter path names: a plain path or a file: URI. Any other scheme is
    refused before anything is done, not taken for a relative path."""
    text = os.fspath(path)
    match = _URI_SCHEME.match(text)
    if match is None:
        return Path(text)
    if match.group(1).lower() == "file":
        return Path(urllib.parse.urlparse(text).path)
    raise ValueError(
        f"filter {text!r}: a sharded filter directory is a local path that every executor sees "
        f"at the same place (a shared mount); {match.group(1)}: filesystems are not supported"
    )


# A drops file is one int64 column of row ids, ascending.
_DROPPED = "row_id"


def _write_drops(path: str, dropped: np.ndarray) -> None:
    table = pa.table({_DROPPED: pa.array(dropped, pa.int64())})
    with open(path, "wb") as out:
        pq.write_table(table, out, use_dictionary=False)
        out.flush()
        os.fsync(out.fileno())


def _input_drops_name(partition: int) -> str:
    return f"drops-p{partition:06d}.parquet"


def _input_drops(directory: str, partition: int) -> np.ndarray:
    """The sorted row ids dropped from input `partition`, from its file in the generation
    `directory` (an input partition that lost no row has none)."""
    path = os.path.join(directory, _input_drops_name(partition))
    try:
        return pq.read_table(path, columns=[_DROPPED]).column(0).to_numpy()
    except FileNotFoundError:
        if not os.path.exists(os.path.join(directory, "manifest.json")):
            raise FileNotFoundError(
                f"{directory}, the filter generation this DataFrame filters by, was removed: "
                "dedup's scratch filter lives until the driver's Python exits"
            ) from None
        return np.zeros(0, dtype=np.int64)
