"""Exact Bloom-filter dedup on Apache Spark with one filter cut into shards across the executors.

``pip install bulkbloom[spark]`` (pyspark 4.0 or newer, with pyarrow and pandas).

>>> from bulkbloom import spark as bbspark
>>> bbspark.dedup_and_write(df, "event_id", "/data/unique/2026-12-01",
...                         filter="/shared/filters/events")  # doctest: +SKIP

``dedup_and_write`` writes a dump deduplicated against a filter carried from one dump to the next
and commits the filter only once the output is written; ``dedup`` returns one DataFrame
deduplicated by itself. Both keep each key's first occurrence, "first" by ``order``, and drop
exactly the records that ``bulkbloom dedup`` drops when it reads the same records in that order with the same filter
layout: a filter of S shards gives the bits and answers of the one filter (docs/DESIGN.md §9).

How it runs
    1. Routing (one Spark job, run when ``dedup``, ``dedup_and_write`` or ``build`` is
       called): every record gets a row id (``monotonically_increasing_id``: the partition index
       in the upper bits, the row within the partition below), its shard and its order values.
       Where the filter's hash is XXH64 with seed 42 (``SPARK_SEED``, which new filters get),
       Spark computes the key's hash itself (Spark's ``xxhash64`` is that hash) and the shard
       from it (docs/DESIGN.md §9's formula in 64-bit integers split so that nothing
       overflows), and the hash, not the key, is shuffled: 8 bytes whatever the key, a UUID
       string as an int64; the shard task inserts the hashes into its shard's bits under the
       identity hash, which sets the bits the keys would. For any other layout (a carried
       filter keeps its seed) the shard is ``bulkbloom.shard_of`` in a vectorised Arrow
       function and the key is shuffled, as it is for a window's shards. Only the hash (or
       key), the row id and the order values are shuffled, never whole records,
       hash-partitioned so that each shard has a partition, and so a task, of its own. The task
       (``mapInArrow``) gathers its shard's rows in its Python worker, sorts them by (order, row
       id), opens that shard's file of the current generation (or an empty shard), runs
       ``insert_if_absent``, saves the shard under a name unique to the task attempt, writes the
       row ids it dropped, sorted, beside it, and returns one row naming both files.
    2. Staging (the driver, after every shard's task succeeded): the files the successful
       attempts named become a complete new generation in the job's work directory. ``dedup``
       and ``build`` commit it at once (below); ``dedup_and_write`` only after step 3's write
       ("Committing a run").
    3. Filtering (lazy, in the returned DataFrame, or in ``dedup_and_write``'s write job): each
       input partition is read again with the same row ids. When the run dropped at most
       ``broadcast_drops`` rows (default: as many as
       ``spark.sql.autoBroadcastJoinThreshold`` holds at 8 bytes a row id, 1,310,720 at its
       default 10 MiB; the broadcast took about 80 bytes of Spark's storage memory a dropped
       row in bench/RESULTS.md), Spark reads the drops files, broadcasts their row ids to every
       task, and a left anti join on the row id removes those rows: the records never leave the
       JVM. Beyond that (a dump of billions of rows drops too many to broadcast) the staging waits
       for one more Spark job, which shuffles the dropped row ids alone (8 bytes a dropped row)
       to regroup them into one sorted file per input partition, and ``filter`` on a vectorised
       pandas function of the row id removes them: only the row ids go to Python, a batch at a
       time, and each input partition's task reads its own drops file once, so no row id list
       is broadcast or joined, and no task reads the drops of every shard (at 22,000 shards
       that would be 22,000 files a task). Both give the same rows in the same order, and took
       about the same time in bench/RESULTS.md.

What is assumed of the input
    The input must give the same rows in the same partitions, in the same order, each time it is
    read (a file source does: Parquet, ORC, CSV, JSON); ``order=None`` takes that order (the
    partitions in turn, each from its first row) as the records' order. Spark packs the files of
    a file source into partitions largest first, so to mean "the files in name order, each from its
    first row", pass ``order`` explicitly (e.g. a column with the file's name or date and one with
    the row's position). Rows with equal ``order`` values keep their row-id order. The physical
    plan is checked before anything runs: a shuffle in it (``repartition``, a join, an
    aggregation, a sort: a reducer takes its blocks in the order they arrive), a
    non-deterministic expression (``rand()``, a UDF marked so) or an RDD Spark calls
    indeterminate make ``dedup`` read the input from ``df.localCheckpoint()``, with a warning
    logged (``unstable_input="error"``: a ValueError instead). What no plan shows, a source
    whose data changes between the two reads (files replaced, a table written to), is not
    checked: keep the input still while the job runs.

Sliding windows (``window=``, ``time=``)
    With ``dedup_and_write(..., window=T)`` each shard is a ``bulkbloom.WindowShard`` of one
    event-time window of length T, as ``bulkbloom dedup --window`` keeps, carried in ``filter``: a record is dropped if
    its key came within the last T. A run is one dump stamped with one event ``time`` (e.g. the
    dump's date in seconds), the single window's clock for every record of it (the window shard
    contract, bulkbloom/window_shard.hpp): every shard, also one no record went to, is moved to
    that time, so the shards together are byte for byte the window the CLI keeps when every
    record of the dump carries that time, dumps in time order.

    Its generations are sized per period as the CLI sizes them (docs/WINDOW.md, "Sizing
    shards"): a window made here is ``shardable_by`` its shard count (a ``window_config`` given
    must be, with a promise, else its generations keep the configured size); each run gives
    every shard the whole window's keys in each filter, which the last run's manifest records
    (``"window_keys"``), and sizes the run's generations for ``capacity`` records over the
    window (one period's share, as ``--capacity``), else for every row of the run (one more
    count of the input), as the CLI does for its input.

Task retries and speculative execution
    An attempt only reads the committed generation and writes files named for itself; the driver
    takes the files of the attempt Spark counted, so a retried task starts from the shard as it
    was, and a duplicate attempt's files are left out and removed. A job that fails changes
    nothing in the directory.

Committing a run (``dedup_and_write``)
    The order is: (a) the routing job stages the new generation in ``PATH/tmp-<job>/``; (b)
    ``PATH/PENDING`` is written, naming the output path, the generation current when the run
    began and the staged one; (c) Spark writes the output and commits it (its output committer:
    ``_SUCCESS`` and the files in place); (d) the staged generation is committed (below), with
    the run's record in its manifest; (e) ``PENDING`` is removed. A failure the driver sees
    (a failing task, a write that raises) removes the output if it was not there before and
    ``PENDING``, and changes nothing else. A driver killed before (d) leaves the filter as it
    was: the rerun finds ``PENDING`` naming its output and the current generation, so it
    replaces what the crashed run left at the output (also with ``mode="error"``) and writes
    exactly what the crashed run would have; a crash of another run that left ``PENDING`` is
    logged and its output left alone. After (d) the current manifest's ``"run"`` (the output,
    its format, the key, the order and a SHA-256 of the input's sorted file names) matches a
    rerun of the same job, which changes nothing and returns the committed state, or, if the
    output is gone, raises (the filter already holds the run's keys). An input that reads no
    files (an in-memory DataFrame) has no such record: its rerun after (d) dedups again. No
    generation is removed until a later run commits (d); then the one before the new current
    one is kept, older ones are removed.

The sharded filter directory (``filter=`` / ``build`` / ``query``; a POSIX path or ``file:`` URI
every executor sees at the same place, e.g. a shared mount, since shard files are mapped and
renamed; another URI scheme, ``hdfs:`` or ``s3a:``, is refused before anything runs)::

    PATH/LOCK                 held (flock) by the driver of a job that changes the filter
    PATH/CURRENT              the name of the current generation and a newline, replaced by rename
    PATH/PENDING              a dedup_and_write run's output between its staging and commit (JSON:
                              output, base, generation)
    PATH/gen-000007/manifest.json
    PATH/gen-000007/shard-00000.bbf ... shard-{S-1}.bbf
    PATH/gen-000007/drops-00000.parquet ...   dedup's dropped row ids of that run (row_id, sorted)
                                              by shard, or drops-p000000.parquet ... by input
                                              partition (the row id's upper 31 bits)
    PATH/tmp-<job>/            a running job's attempt files (removed when it ends)

``manifest.json`` records ``"format": "bulkbloom sharded filter"``, ``"version": 1``, the
generation number, ``num_shards`` (S), the whole filter's ``layout`` (shape, num_blocks, hash,
seed, index), the key kind (``"integer"`` or ``"bytes"``), the sizing (capacity, fpr), the
shard and drops file names and how the drops are grouped (``"drops_by"``: ``"shard"`` or
``"input partition"``), and, written by ``dedup_and_write``, the ``"run"`` that made it
("Committing a run"); a sliding window's (``window=``) also its ``window`` (clock,
window, generations, lateness) and the event ``time`` of the last run, and its shards are window
shard files (``shard-00000.bbw``, ``bulkbloom.WindowShard``). Each shard file is a shard file of the filter file format
(docs/FORMAT.md): its header records the whole layout and which shard of S it is, and stores the
shard's distinct-key count; ``bulkbloom.FilterShard.load`` reads one, and
``bulkbloom.concat`` of all S gives the one filter, which ``bulkbloom`` (the CLI) reads. A commit
renames a fully written and fsynced generation directory into place, then replaces ``CURRENT``
(write, fsync, rename, fsync of the directory); the generation before the current one is kept
(a DataFrame ``query`` returned may still read it) and older ones are removed, as
is anything a crashed job left, by the next job that holds the lock.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import urllib.parse
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence, Union

import numpy as np

import bulkbloom

try:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark import SparkContext, TaskContext
    from pyspark.sql import Column, DataFrame
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ImportError(
        "bulkbloom.spark needs pyspark (4.0 or newer), pyarrow and pandas: pip install"
        f" 'bulkbloom[spark]' ({error})"
    ) from error

__all__ = ["dedup", "dedup_and_write", "build", "query", "open_filter", "FORMAT", "FORMAT_VERSION", "SPARK_SEED"]

FORMAT = "bulkbloom sharded filter"
FORMAT_VERSION = 1

_log = logging.getLogger(__name__)

# Working column names, chosen not to meet a user's.
_ROW = "__bulkbloom_row"
_KEY = "__bulkbloom_key"
_SHARD = "__bulkbloom_shard"
_ORDER = "__bulkbloom_order_"

PathLike = Union[str, "os.PathLike[str]"]
OrderLike = Union[None, str, Column, Sequence[Union[str, Column]]]


# -- the directory --------------------------------------------------------------------------------


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


def _window_to_json(config: bulkbloom.WindowConfig) -> dict:
    return {
        "clock": config.clock,
        "window": config.window,
        "generations": config.generations,
        "lateness": config.lateness,
        "fpr": config.fpr,
        "block_multiple": config.block_multiple,
    }


def _window_config(values: dict, layout: bulkbloom.Layout) -> bulkbloom.WindowConfig:
    return bulkbloom.WindowConfig.of(
        values["clock"], int(values["window"]), layout, generations=int(values["generations"]),
        lateness=int(values["lateness"]), fpr=float(values.get("fpr", 0.0)),
        block_multiple=int(values.get("block_multiple", 1)),
    )


class _WindowSizing(NamedTuple):
    """What every window shard of a run is given before its records, as the single window is
    given them (bulkbloom/window_shard.hpp, "Sizing"): the whole window's keys in each filter
    (the sum of the shards' filter_keys() the last run recorded, or None for a new window), and
    the keys this run's generations are sized for at least."""

    window_keys: Optional[List[int]]
    min_keys: int


def _prepare_window_shard(shard: bulkbloom.WindowShard, sizing: Optional[_WindowSizing]) -> None:
    if sizing is None or not shard.sizes_per_period:
        return
    if sizing.window_keys is not None:
        shard.set_window_keys(sizing.window_keys)
    shard.set_sizing(sizing.min_keys)


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


# -- helpers --------------------------------------------------------------------------------------


def _key_kind(df: DataFrame, key: str) -> str:
    kind = df.schema[key].dataType
    if isinstance(kind, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        return "integer"
    if isinstance(kind, (T.StringType, T.BinaryType)):
        return "bytes"
    raise TypeError(
        f"key column {key!r} is {kind.simpleString()}; it must be an integer, string or binary"
    )


class _OrderTerm(NamedTuple):
    """One term of ``order``: the values it sorts by, and how."""

    values: Column
    descending: bool
    nulls_first: bool


def _order_terms(order: OrderLike) -> List[_OrderTerm]:
    """`order`'s terms. A sort order (``F.col("ts").desc()``, ``.asc_nulls_last()``, ...) is
    taken apart into its values and direction, which the shard tasks sort by; a plain column
    sorts as Spark's ascending order does, nulls first."""
    if order is None:
        return []
    if isinstance(order, (str, Column)):
        order = [order]
    terms = []
    for term in order:
        column = F.col(term) if isinstance(term, str) else term
        node = column._jc.node()
        if node.getClass().getSimpleName() != "SortOrder":
            terms.append(_OrderTerm(column, False, True))
            continue
        values = Column(SparkContext._jvm.org.apache.spark.sql.Column(node.child()))
        descending = node.sortDirection().getClass().getSimpleName().startswith("Descending")
        nulls_first = node.nullOrdering().getClass().getSimpleName().startswith("NullsFirst")
        terms.append(_OrderTerm(values, descending, nulls_first))
    return terms


def _check_names(df: DataFrame) -> None:
    clash = [name for name in df.columns if name.startswith("__bulkbloom_")]
    if clash:
        raise ValueError(f"columns {clash} use the prefix __bulkbloom_ that dedup works with")


def _stable_input(df: DataFrame, unstable_input: str) -> DataFrame:
    """`df`, or, where reading it again may not give the same rows in the same partitions in the
    same order (module documentation, "What is assumed of the input"), `df` checkpointed
    (``unstable_input="checkpoint"``, logged) or a ValueError (``"error"``)."""
    if unstable_input not in ("checkpoint", "error"):
        raise ValueError(f"unstable_input {unstable_input!r} is not 'checkpoint' or 'error'")
    if df.isStreaming:
        raise ValueError("bulkbloom.spark dedups batch DataFrames only; this one is streaming")
    reason = _unstable_reason(df._jdf.queryExecution().executedPlan())
    if reason is None:
        return df
    if unstable_input == "error":
        raise ValueError(
            f"the input may give its rows in another order each time it is read ({reason}), and "
            "dedup numbers the rows of two reads alike; checkpoint or write it first, or pass "
            "unstable_input='checkpoint'"
        )
    _log.warning("the input may give its rows in another order each time it is read (%s): "
                 "dedup reads it from a local checkpoint", reason)
    return df.localCheckpoint(eager=True)


def _unstable_reason(node: Any) -> Optional[str]:
    """What in the physical plan `node` may make a second read of it give other rows, or rows in
    another order (None: nothing): a shuffle (the reducer fetches blocks in whatever order they
    arrive; a round-robin repartition also deals rows by that order), a non-deterministic
    expression (rand(), a UDF marked so), or an RDD Spark itself calls indeterminate."""
    name = node.getClass().getSimpleName()
    if name == "AdaptiveSparkPlanExec":  # AQE: the plan before it ran, with its exchanges
        return _unstable_reason(node.inputPlan())
    if name == "InMemoryTableScanExec":  # a cached DataFrame is recomputed where evicted
        return _unstable_reason(node.relation().cachedPlan())
    if "Shuffle" in name:
        return f"a shuffle: {node.simpleString(8)}"
    if name == "RDDScanExec":
        level = node.rdd().outputDeterministicLevel().toString()
        if level != "DETERMINATE":
            return f"an RDD whose output Spark calls {level.lower()}: {node.simpleString(8)}"
    children = node.children()
    for index in range(children.size()):
        reason = _unstable_reason(children.apply(index))
        if reason is not None:
            return reason
    if not node.deterministic():  # its children are: an expression of its own is not
        return f"a non-deterministic expression: {node.simpleString(8)}"
    return None


def _classic(spark: Any) -> None:
    """Refuses a Spark Connect session: bulkbloom.spark's driver side needs the driver's JVM (its
    plans, its Hadoop filesystems) and a filter directory the executors see."""
    _jvm(spark, "bulkbloom.spark")


def _default_broadcast_drops(spark: Any) -> int:
    """The most dropped rows dedup's filtering broadcasts by default (module documentation, "How
    it runs"): as many 8-byte row ids as Spark's own broadcast threshold holds."""
    threshold = spark.conf.get("spark.sql.autoBroadcastJoinThreshold", "10MB")
    size = spark._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(threshold)
    return max(0, int(size) // 8)


# The most rows a default shard is given: a shard's rows are sorted together in its task's
# Python worker, about 60 bytes a row at the peak (bench/RESULTS.md, "Spark").
_ROWS_PER_SHARD = 1_000_000


def _default_shards(spark: Any, layout: bulkbloom.Layout, rows: Optional[int]) -> int:
    # At least one task per core, shards of at most 128 MiB, and, where the rows are known
    # (counted, or the capacity asked for), at most _ROWS_PER_SHARD of them a shard; a multiple
    # of the cores, since a shard is a task, so that no core waits out a last short wave.
    cores = spark.sparkContext.defaultParallelism
    wanted = max(cores, math.ceil(layout.size_bytes / 2**27))
    if rows is not None:
        wanted = max(wanted, math.ceil(rows / _ROWS_PER_SHARD))
    return min(math.ceil(wanted / cores) * cores, layout.num_blocks)


def _attempt_name() -> str:
    context = TaskContext.get()
    if context is None:
        return uuid.uuid4().hex
    return (
        f"s{context.stageId()}-p{context.partitionId()}-a{context.attemptNumber()}"
        f"-t{context.taskAttemptId()}-{uuid.uuid4().hex[:8]}"
    )


# Spark SQL's xxhash64 is XXH64 with this seed over a long's 8 little-endian bytes and over a
# string's or binary's bytes: the library's hash of integer and byte keys. For a layout with this
# seed (new filters get it) Spark computes each record's shard itself (_sql_shard), and routing
# sends no record through Python; a layout with any other seed or hash (a carried filter keeps
# its own) is routed by bulkbloom.shard_of in an Arrow function.
SPARK_SEED = 42


def _scaled(x: Column, num_blocks: int, carry: Optional[Column] = None) -> Column:
    """floor((x * num_blocks + carry) / 2^32) for x, carry and num_blocks below 2^32, in the
    signed 64-bit arithmetic Spark has (which raises on overflow in ANSI mode). With num_blocks
    = high * 2^16 + low it is floor((x * high + floor((x * low + carry) / 2^16)) / 2^16): no
    product or sum reaches 2^49, and flooring the inner quotient first changes no floor of the
    whole, since x * high is an integer."""
    high, low = num_blocks >> 16, num_blocks & 0xFFFF
    inner = x * F.lit(low) if carry is None else x * F.lit(low) + carry
    return F.shiftrightunsigned(x * F.lit(high) + F.shiftrightunsigned(inner, 16), 16)


def _sql_shard(
    key: Column, kind: str, layout: bulkbloom.Layout, num_shards: int
) -> Optional[Column]:
    """The shard of each key (docs/DESIGN.md §9) as a Spark SQL expression, or None where Spark
    has no function for the layout's hash (or B * S reaches 2^63, which no real filter does)."""
    hashed = _sql_hash(key, kind, layout)
    if hashed is None or layout.num_blocks * num_shards >= 2**63:
        return None
    return _shard_of_hash(hashed, layout, num_shards)


def _sql_hash(key: Column, kind: str, layout: bulkbloom.Layout) -> Optional[Column]:
    """The layout's 64-bit hash of each key as a Spark SQL expression (a long holding its bit
    pattern), or None where Spark has no function for it."""
    if kind == "integer":
        key = key.cast(T.LongType())  # integers hash as their 64-bit pattern, sign-extended
    if layout.hash == "xxh64" and layout.seed == SPARK_SEED:
        return F.xxhash64(key)
    if layout.hash == "identity" and kind == "integer":
        return key
    return None


def _shard_of_hash(hashed: Column, layout: bulkbloom.Layout, num_shards: int) -> Column:
    """DESIGN §9's shard of each 64-bit hash, computed in Spark's signed longs (_scaled)."""
    high = F.shiftrightunsigned(hashed, 32)
    if layout.index == "high32":
        block = _scaled(high, layout.num_blocks)
    else:
        low = hashed.bitwiseAND(F.lit(0xFFFFFFFF))
        block = _scaled(high, layout.num_blocks, _scaled(low, layout.num_blocks))
    # (block + 1) * S <= B * S stays below 2^63.
    shard = F.call_function("div", (block + 1) * F.lit(num_shards) - 1, F.lit(layout.num_blocks))
    return shard.cast(T.IntegerType())


def _spark_hash_of_ints(values: np.ndarray) -> np.ndarray:
    """Spark's ``hash`` of int values (Murmur3_x86_32.hashInt, seed 42), which its hash
    partitioning takes modulo the partition count."""
    def rotl(x: np.ndarray, bits: int) -> np.ndarray:
        return (x << np.uint32(bits)) | (x >> np.uint32(32 - bits))

    k = rotl(values.astype(np.uint32) * np.uint32(0xCC9E2D51), 15) * np.uint32(0x1B873593)
    h = rotl(np.uint32(42) ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
    h ^= np.uint32(4)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h.view(np.int32)


def _spark_seeded(layout: bulkbloom.Layout) -> bulkbloom.Layout:
    return bulkbloom.Layout.of(layout.shape, layout.num_blocks, SPARK_SEED, layout.hash,
                               layout.index)


def _partition_keys(num_partitions: int) -> List[int]:
    """For each partition p, the smallest int Spark's hash partitioning over `num_partitions`
    sends to p: partitioning by key[shard] gives each shard a partition of its own, where
    partitioning by the shard itself would put some shards together and leave cores idle."""
    keys: dict = {}
    start, step = 0, 4 * num_partitions + 64
    while len(keys) < num_partitions:
        values = np.arange(start, start + step, dtype=np.int64)
        partitions = _spark_hash_of_ints(values).astype(np.int64) % num_partitions
        for partition, value in zip(partitions.tolist(), values.tolist()):
            keys.setdefault(partition, value)
        start += step
    return [keys[p] for p in range(num_partitions)]


def _hashed_layout(layout: bulkbloom.Layout) -> bulkbloom.Layout:
    """The layout whose keys are `layout`'s hashes: the same blocks and bits for a key's hash as
    `layout` has for the key (the identity hash takes a 64-bit key as its own hash)."""
    return bulkbloom.Layout.of(layout.shape, layout.num_blocks, layout.seed, "identity",
                               layout.index)


def _routed(
    df: DataFrame, key: str, kind: str, order: List[_OrderTerm], layout: bulkbloom.Layout,
    num_shards: int, route_hashes: bool = True, nulls: str = "error",
) -> tuple:
    """(key, row id, order values...), each shard's rows in a partition of their own: all the
    routing moves; and whether the key column holds the keys' hashes, not the keys. Where Spark
    computes the layout's hash and `route_hashes`, it does: a string key then costs the shuffle
    8 bytes, as an integer does, and its shard keeps the bits the key would set
    (_hashed_layout). Records with a null key are left out (`nulls` "keep" or "drop"), or stop
    the job as it reads the first ("error")."""
    orders = [term.values.alias(f"{_ORDER}{i}") for i, term in enumerate(order)]
    numbered = df.withColumn(_ROW, F.monotonically_increasing_id())
    key_column = F.col(key)
    if df.schema[key].nullable:  # numbered first: the row ids are those of every record
        if nulls == "error":
            message = (f"bulkbloom.spark: key column {key!r} is null in a record; pass "
                       "nulls='keep' or nulls='drop'")
            key_column = F.when(key_column.isNull(), F.raise_error(F.lit(message))).otherwise(
                key_column)
        else:
            numbered = numbered.where(key_column.isNotNull())
    # Partitioning by key_of[shard] gives each shard a partition of its own (_partition_keys).
    key_of = F.expr(f"array({', '.join(map(str, _partition_keys(num_shards)))})")
    hashed = _sql_hash(key_column, kind, layout)
    if hashed is not None and layout.num_blocks * num_shards < 2**63:
        if route_hashes:
            narrow = numbered.select(hashed.alias(_KEY), F.col(_ROW), *orders)
            shard = _shard_of_hash(F.col(_KEY), layout, num_shards)
        else:
            narrow = numbered.select(key_column.alias(_KEY), F.col(_ROW), *orders)
            shard = _shard_of_hash(_sql_hash(F.col(_KEY), kind, layout), layout, num_shards)
        return narrow.repartition(num_shards, F.element_at(key_of, shard + 1)), route_hashes
    narrow = numbered.select(key_column.alias(_KEY), F.col(_ROW), *orders)
    schema = T.StructType(narrow.schema.fields + [T.StructField(_SHARD, T.IntegerType(), False)])
    layout_args = tuple(layout)

    def add_shard(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        layout_value = bulkbloom.Layout(*layout_args)
        for batch in batches:
            shards = bulkbloom.shard_of(layout_value, batch.column(_KEY), num_shards)
            yield batch.append_column(_SHARD, pa.array(shards.view(np.int32)))

    routed = narrow.mapInArrow(add_shard, schema)
    shard_key = F.element_at(key_of, F.col(_SHARD) + 1)
    return routed.repartition(num_shards, shard_key).drop(_SHARD), False


_DECIDED = T.StructType(
    [
        T.StructField("shard", T.IntegerType(), False),
        T.StructField("shard_file", T.StringType(), False),
        T.StructField("drops_file", T.StringType(), True),
        T.StructField("keys", T.LongType(), False),
        T.StructField("new_keys", T.LongType(), False),
        # A window shard's filter_keys() after the run (an empty list for a filter).
        T.StructField("filter_keys", T.ArrayType(T.LongType(), False), False),
    ]
)


def _decide_shards(
    routed: DataFrame,
    base: Optional[ShardedFilter],
    layout: tuple,
    window: Optional[bulkbloom.WindowConfig],
    time: Optional[int],
    num_shards: int,
    work: Path,
    order: List[tuple],
    write_drops: bool,
    on_task: Optional[Callable[[], None]],
    hashed: bool = False,
    sizing: Optional[_WindowSizing] = None,
) -> list:
    """Runs each shard's task (see the module's documentation) and returns their rows. `hashed`:
    the routed key column holds the keys' hashes (_routed), which each task inserts into its
    shard's bits under _hashed_layout. `sizing`: what a window's shards are given first."""
    key_layout = tuple(_hashed_layout(bulkbloom.Layout(*layout))) if hashed else layout
    shard_type = bulkbloom.FilterShard if window is None else bulkbloom.WindowShard
    suffix = ".bbf" if window is None else ".bbw"
    base_dir = None if base is None else str(base.directory)
    base_shards = None if base is None else list(base.manifest["shards"])
    # The order's terms, ties broken by the row id (the input's order).
    sort_keys = [(f"{_ORDER}{i}", *how) for i, how in enumerate(order)] + [(_ROW, False, True)]
    work_dir = str(work)

    def decide(index: int, table: pa.Table) -> pa.RecordBatch:
        table = _sorted(table, sort_keys)
        if base_dir is None:
            shard = _empty_shard(bulkbloom.Layout(*key_layout), window, index, num_shards)
        else:
            shard = shard_type.load(os.path.join(base_dir, base_shards[index]), backend="cpu")
            if hashed:
                shard = _relaid(shard, key_layout)
        keys = table.column(_KEY)
        filter_keys: List[int] = []
        if window is not None:
            _prepare_window_shard(shard, sizing)
            fresh = shard.insert_if_absent(keys, np.full(len(table), time, dtype=np.int64))
            shard.advance_to(time)
            filter_keys = shard.filter_keys()
        elif write_drops:
            fresh = shard.insert_if_absent(keys)
        else:
            fresh = ~shard.contains(keys)
            shard.insert(keys)
        new_keys = int(np.count_nonzero(fresh))
        shard.keys_inserted += new_keys
        name = _attempt_name()
        shard_file = os.path.join(work_dir, f"shard-{index:05d}.{name}{suffix}")
        (_relaid(shard, layout) if hashed else shard).save(shard_file)
        drops_file = None
        if write_drops:
            rows = table.column(_ROW).to_numpy()
            drops_file = os.path.join(work_dir, f"drops-{index:05d}.{name}.parquet")
            _write_drops(drops_file, np.sort(rows[~fresh]))
        if on_task is not None:
            on_task()
        return pa.RecordBatch.from_pydict(
            {
                "shard": pa.array([index], pa.int32()),
                "shard_file": pa.array([shard_file], pa.string()),
                "drops_file": pa.array([drops_file], pa.string()),
                "keys": pa.array([len(table)], pa.int64()),
                "new_keys": pa.array([new_keys], pa.int64()),
                "filter_keys": pa.array([filter_keys], pa.list_(pa.int64(), )),
            }
        )

    def decide_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # The partition's routed rows, held in this worker; normally one shard's (_routed).
        received = list(batches)
        if not received:
            return
        table = pa.Table.from_batches(received)
        # The shard is not shipped: hashing again here costs less than moving it from the JVM.
        shards = bulkbloom.shard_of(bulkbloom.Layout(*key_layout), table.column(_KEY), num_shards)
        present = np.unique(shards)
        for index in present.tolist():
            part = table if len(present) == 1 else table.filter(pa.array(shards == index))
            yield decide(index, part)

    return routed.mapInArrow(decide_partition, _DECIDED).collect()


def _relaid(shard: bulkbloom.FilterShard, layout: tuple) -> bulkbloom.FilterShard:
    """`shard`'s bits under another layout of the same blocks: its _hashed_layout twin, or back."""
    return bulkbloom.FilterShard._from_bits(layout, shard.index, shard.num_shards, shard.bits(),
                                            shard.keys_inserted, shard.metadata)


def _sorted(table: pa.Table, keys: List[tuple]) -> pa.Table:
    """`table` sorted by `keys`: (column, descending, nulls first) each, as Spark sorts."""
    terms = [(name, "descending" if descending else "ascending",
              "at_start" if nulls_first else "at_end") for name, descending, nulls_first in keys]
    try:
        return table.sort_by(terms)
    except (TypeError, ValueError):  # pyarrow before 20: one null placement for every key
        placements = {placement for _, _, placement in terms}
        if len(placements) > 1:
            raise ValueError(
                f"order mixes nulls first and nulls last, which pyarrow {pa.__version__} cannot "
                "sort by (pyarrow 20 can)"
            ) from None
        return table.sort_by([term[:2] for term in terms], null_placement=placements.pop())


_BY_INPUT = T.StructType(
    [
        T.StructField("partition", T.LongType(), False),
        T.StructField("drops_file", T.StringType(), False),
    ]
)


def _regroup_drops(spark: Any, drops: dict, work: Path, dropped: int) -> list:
    """Rewrites the shards' drops files (`drops`: name: attempt file) as one file per input
    partition (module documentation, "How it runs"): a shuffle of the dropped row ids alone, in
    tasks of about _REGROUP_TASK_ROWS of them. Returns a row per file written."""
    # One directory of the successful attempts' files, which Spark lists without a job of its own.
    by_shard = work / "drops-by-shard"
    by_shard.mkdir()
    for name, attempt_file in drops.items():
        os.rename(attempt_file, by_shard / name)
    work_dir = str(work)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [batch.column(0).to_numpy() for batch in batches if batch.num_rows]
        if not parts:
            return
        ids = np.sort(np.concatenate(parts))
        partitions = ids >> _PARTITION_SHIFT
        starts = np.concatenate([[0], np.flatnonzero(np.diff(partitions)) + 1, [len(ids)]])
        name = _attempt_name()
        numbers, paths = [], []
        for begin, end in zip(starts[:-1].tolist(), starts[1:].tolist()):
            number = int(partitions[begin])
            paths.append(os.path.join(work_dir, f"{_input_drops_name(number)}.{name}"))
            _write_drops(paths[-1], ids[begin:end])
            numbers.append(number)
        yield pa.RecordBatch.from_pydict(
            {"partition": pa.array(numbers, pa.int64()), "drops_file": pa.array(paths, pa.string())}
        )

    tasks = max(spark.sparkContext.defaultParallelism, -(-dropped // _REGROUP_TASK_ROWS))
    schema = T.StructType([T.StructField(_DROPPED, T.LongType(), True)])
    ids = spark.read.schema(schema).parquet(str(by_shard))
    by_input = ids.repartition(tasks, F.shiftright(F.col(_DROPPED), _PARTITION_SHIFT))
    return by_input.mapInArrow(write, _BY_INPUT).collect()


class _WindowRequest(NamedTuple):
    """What dedup(window=...) asks for: the window, or its sizing, and this run's time."""

    length: int
    time: int
    generations: int
    lateness: int
    config: Optional[bulkbloom.WindowConfig]


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
    sizing: Optional[_WindowSizing] = None,
) -> _Staged:
    """Makes the attempt files the successful tasks named a complete generation in `work`:
    `rows`' shard files, and `drops` (name in the generation: attempt file), grouped by
    `drops_by` ("shard" or "input partition"), written and fsynced; ``_publish`` commits it.
    A window's manifest records the whole window's keys in each filter (``"window_keys"``, the
    sum of the shards' filter_keys()), which the next run gives its shards (`sizing`: what this
    run's shards were given)."""
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
    window_keys: Optional[List[int]] = None
    for index in range(num_shards):
        name = f"shard-{index:05d}.bbf" if window is None else f"shard-{index:05d}.bbw"
        target = staging / name
        row = by_shard.get(index)
        filter_keys: Optional[List[int]] = None
        if row is not None:
            os.rename(row["shard_file"], target)
            filter_keys = list(row["filter_keys"])
        elif window is not None:
            # No record of this run went to it, but its clock moves with the window's, and its
            # generations are sized with the others'.
            shard = base.load(index) if base is not None else _empty_shard(
                layout, window, index, num_shards)
            _prepare_window_shard(shard, sizing)
            shard.advance_to(time)
            shard.save(target)
            filter_keys = shard.filter_keys()
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
        **({} if window is None else {
            "window": _window_to_json(window), "time": time, "window_keys": window_keys}),
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


def _decide(
    df: DataFrame,
    key: str,
    root: Path,
    current: Optional[ShardedFilter],
    work: Path,
    *,
    order: List[_OrderTerm],
    capacity: Optional[int],
    fpr: float,
    num_shards: Optional[int],
    layout: Optional[bulkbloom.Layout],
    carry: bool,
    write_drops: bool,
    on_task: Optional[Callable[[], None]],
    window: Optional[_WindowRequest] = None,
    regroup_drops_above: Optional[int] = None,
    nulls: str = "error",
    run: Optional[dict] = None,
) -> _Staged:
    """Routes and decides (module documentation, "How it runs") against `current` (carried when
    `carry`), and stages the new generation in `work`, its manifest recording `run` (if any).
    With write_drops, the dropped row ids are regrouped by input partition when there are more
    than `regroup_drops_above`."""
    _check_names(df)
    kind = _key_kind(df, key)
    base = current if carry else None
    if base is not None:
        if base.manifest.get("keys") != kind:
            raise ValueError(
                f"{root} holds {base.manifest.get('keys')} keys; column {key!r} has {kind} keys"
                " (integers and strings hash differently)"
            )
        if num_shards is not None and num_shards != base.num_shards:
            raise ValueError(
                f"{root} has {base.num_shards} shards, not {num_shards}; bulkbloom.reshard "
                "recuts one"
            )
        if layout is not None and tuple(layout)[:5] != tuple(base.layout)[:5]:
            raise ValueError(f"{root} has layout {base.layout}, not {layout}")
        if (base.window is None) != (window is None):
            held = "a filter" if base.window is None else f"a window ({base.window})"
            raise ValueError(f"{root} holds {held}; pass window= exactly for a window")
        the_layout, count = base.layout, base.num_shards
        config = base.window
        extra = {k: base.manifest[k] for k in ("keys", "capacity", "fpr")}
    else:
        config = None
        rows = capacity
        if window is not None:
            config = window.config
            if config is None:
                if rows is None:
                    rows = max(1, df.count())
                sized = bulkbloom.WindowConfig.for_event_time(
                    rows / window.length, window.length, fpr, generations=window.generations,
                    lateness=window.lateness,
                )
                config = bulkbloom.WindowConfig.of(
                    sized.clock, sized.window, _spark_seeded(sized.generation),
                    generations=sized.generations, lateness=sized.lateness, fpr=sized.fpr,
                )
            layout = config.generation
        elif layout is None:
            if rows is None:
                rows = max(1, df.count())
            layout = _spark_seeded(bulkbloom.Layout.for_capacity(rows, fpr))
        the_layout = layout
        if num_shards is not None:
            count = num_shards
        else:
            count = _default_shards(df.sparkSession, layout, rows)
        if (window is not None and window.config is None and config is not None
                and count <= the_layout.num_blocks):
            # A window made here sizes its generations per period in its shards.
            config = config.shardable_by(count)
            the_layout = config.generation
        extra = {"keys": kind, "capacity": capacity, "fpr": fpr}
    if not 1 <= count <= the_layout.num_blocks:
        raise ValueError(f"num_shards {count} is not in [1, {the_layout.num_blocks}]")
    sizing = None
    if config is not None and config.fpr > 0 and config.block_multiple % count == 0:
        # As the command line sizes a run's generations: for `capacity` records over the window
        # (in one period's share), else for every record of the run.
        min_keys = (math.ceil(capacity / config.window * config.period) if capacity is not None
                    else max(1, df.count()))
        window_keys = None if base is None else base.manifest.get("window_keys")
        sizing = _WindowSizing(None if window_keys is None else list(window_keys), min_keys)
    # A window's shards take keys, not hashes (WindowShard has no hashed twin).
    routed, hashed = _routed(df, key, kind, order, the_layout, count, config is None, nulls)
    time = None if window is None else window.time
    rows = _decide_shards(
        routed, base, tuple(the_layout), config, time, count, work,
        [(term.descending, term.nulls_first) for term in order],
        write_drops, on_task, hashed, sizing,
    )
    dropped = sum(row["keys"] - row["new_keys"] for row in rows)
    drops_by, drops = "shard", {
        f"drops-{row['shard']:05d}.parquet": row["drops_file"]
        for row in rows if row["drops_file"] is not None
    }
    if drops and regroup_drops_above is not None and dropped > regroup_drops_above:
        drops_by = "input partition"
        regrouped = _regroup_drops(df.sparkSession, drops, work, dropped)
        drops = {_input_drops_name(r["partition"]): r["drops_file"] for r in regrouped}
    previous = None if current is None else current.generation
    if run is not None:
        extra = {**extra, "run": run}
    return _stage(
        root, base, previous, work, rows, the_layout, config, time, count, extra, drops, drops_by,
        sizing,
    )


def _decide_and_publish(
    df: DataFrame, key: str, root: Path, wait_lock: bool, **decide: Any
) -> ShardedFilter:
    """A job that changes nothing but the filter (``build``, or ``dedup``'s scratch filter):
    decided, staged and committed at once."""
    with _changing(root, wait_lock) as current, _work_directory(root) as work:
        return _publish(_decide(df, key, root, current, work, **decide))


def _scratch_directory(parent: Optional[PathLike] = None) -> Path:
    """A new directory for one dedup's filter (in `parent`, else the driver's temporary
    directory), removed when the driver's Python exits."""
    where = None if parent is None else _filter_root(parent)
    path = Path(tempfile.mkdtemp(prefix="bulkbloom-spark-", dir=where))
    atexit.register(shutil.rmtree, path, True)
    return path


# -- the API --------------------------------------------------------------------------------------


def dedup(
    df: DataFrame,
    key: str,
    *,
    order: OrderLike = None,
    num_shards: Optional[int] = None,
    capacity: Optional[int] = None,
    fpr: float = 0.001,
    layout: Optional[bulkbloom.Layout] = None,
    broadcast_drops: Optional[int] = None,
    unstable_input: str = "checkpoint",
    nulls: str = "error",
    scratch: Optional[PathLike] = None,
    filter: None = None,
    _on_task: Optional[Callable[[], None]] = None,
) -> DataFrame:
    """``df`` without the records whose key an earlier record had (and the filter's rare false
    drops, as ``bulkbloom dedup`` has them): each key's first occurrence kept, "first" by
    ``order``, within this DataFrame alone.

    ``key``: an integer, string or binary column (integers hash as their 64-bit pattern, strings
    as their UTF-8 bytes, like the command line's integer and text keys). ``order``: column names
    or Columns, ascending, or sort orders (``F.col("ts").desc()``, ``.asc_nulls_last()``), ties
    broken by the input's order; None: the input's own order (see "What is assumed of the
    input" in the module's documentation). The filter is sized for
    ``capacity`` keys at rate ``fpr`` (capacity None: the input's row count), or has the explicit
    ``layout``, and ``num_shards`` shards (None: the cores, shards of at most 128 MiB, and of at
    most a million rows where the rows are known: ``capacity`` or the row count; a multiple of
    the cores), with ``SPARK_SEED`` as its hash seed; it lives in a new directory in
    ``scratch`` (None: the driver's temporary directory, which only local mode's executors see;
    on a cluster, a directory on a shared mount), removed when the driver's Python exits.
    ``broadcast_drops``: the most dropped rows removed by a broadcast join (None: as many
    8-byte row ids as ``spark.sql.autoBroadcastJoinThreshold`` holds; 0: always the row-id
    function; module documentation, "How it runs").
    ``unstable_input``: what to do with an input that may give its rows in another order when
    read again (a shuffle in its plan, e.g. ``repartition(n)``, a join or an aggregation, or a
    non-deterministic expression such as ``rand()``), which the row ids of the routing and of
    the filtering would number differently: ``"checkpoint"`` reads it from
    ``df.localCheckpoint()`` (a warning is logged; the checkpoint is one more pass over the input
    and lives in the executors' storage), ``"error"`` raises ``ValueError`` saying what in the
    plan is unstable.
    ``nulls``: what becomes of records whose key is null (no key to dedup by): ``"error"``
    stops the job at the first such record it reads, before anything is shuffled or written,
    with an error naming the key column (a column the schema says is not nullable is not
    checked); ``"keep"`` keeps every one of them (none is a repeat: SQL's nulls are not equal;
    ``dropDuplicates`` would keep one); ``"drop"`` drops them all.

    A filter carried across runs (``filter=``, and so ``window=``) is ``dedup_and_write``'s: its
    new state may only be committed once the output that goes with it is, which only a call
    that does the write can know; ``dedup`` refuses ``filter=``.

    The routing job runs now; the DataFrame returned filters ``df`` lazily (module
    documentation, "How it runs"). A job that fails changes nothing."""
    if filter is not None:
        raise ValueError(
            "dedup() does not carry a filter: its new state would be committed before you write "
            "the DataFrame it returns, and a crash in between would lose the dump on the rerun; "
            "use dedup_and_write(df, key, path, filter=...), which commits the filter only after "
            "the output is written"
        )
    _classic(df.sparkSession)
    _check_nulls(nulls)
    df = _stable_input(df, unstable_input)
    if broadcast_drops is None:
        broadcast_drops = _default_broadcast_drops(df.sparkSession)
    state = _decide_and_publish(
        df, key, _scratch_directory(scratch), False, order=_order_terms(order), capacity=capacity,
        fpr=fpr, num_shards=num_shards, layout=layout, carry=False, write_drops=True,
        on_task=_on_task, regroup_drops_above=broadcast_drops, nulls=nulls,
    )
    return _kept(df, key, nulls, state.directory, state.manifest)


def _check_nulls(nulls: str) -> None:
    if nulls not in ("error", "keep", "drop"):
        raise ValueError(f"nulls {nulls!r} is not 'error', 'keep' or 'drop'")


def _kept(df: DataFrame, key: str, nulls: str, directory: Path, manifest: dict) -> DataFrame:
    """The records dedup keeps of `df`: those the generation in `directory` did not drop, less
    the null keys if `nulls` is "drop"."""
    kept = _without_drops(df, directory, manifest)
    return kept.where(F.col(key).isNotNull()) if nulls == "drop" else kept


def _without_drops(df: DataFrame, directory: Path, manifest: dict) -> DataFrame:
    """`df` less the rows whose row ids the generation in `directory` dropped (module
    documentation, "How it runs", 3)."""
    drops = [str(directory / name) for name in manifest["drops"]]
    if not drops:  # no record at all, or none dropped
        return df
    numbered = df.withColumn(_ROW, F.monotonically_increasing_id())
    if manifest["drops_by"] == "shard":
        # Few enough to send every task all of them: the records never leave the JVM.
        dropped = df.sparkSession.read.parquet(*drops).select(F.col(_DROPPED).alias(_ROW))
        return numbered.join(F.broadcast(dropped), _ROW, "left_anti").drop(_ROW)
    folder = str(directory)
    held: dict = {}

    def kept(rows: pd.Series) -> pd.Series:
        # Only the row ids reach Python; Spark keeps the records and zips the answer back. A
        # batch's rows are of one input partition, whose drops file is read once.
        ids = rows.to_numpy()
        keep = np.ones(len(ids), dtype=bool)
        partitions = ids >> _PARTITION_SHIFT
        for number in np.unique(partitions).tolist():
            if held.get("partition") != number:
                held["partition"], held["ids"] = number, _input_drops(folder, number)
            rows_of = partitions == number
            keep[rows_of] = ~_in_sorted(ids[rows_of], held["ids"])
        return pd.Series(keep)

    keep = F.pandas_udf(kept, T.BooleanType())
    return numbered.filter(keep(F.col(_ROW))).drop(_ROW)


# The file in a filter directory that names the output a dedup_and_write run is writing.
_PENDING = "PENDING"

_WRITE_MODES = {"error": "errorifexists", "errorifexists": "errorifexists",
                "overwrite": "overwrite"}


def dedup_and_write(
    df: DataFrame,
    key: str,
    path: PathLike,
    *,
    filter: PathLike,
    format: str = "parquet",
    mode: str = "error",
    partition_by: Union[None, str, Sequence[str]] = None,
    options: Optional[dict] = None,
    order: OrderLike = None,
    num_shards: Optional[int] = None,
    capacity: Optional[int] = None,
    fpr: float = 0.001,
    layout: Optional[bulkbloom.Layout] = None,
    window: Optional[int] = None,
    time: Optional[int] = None,
    generations: int = 4,
    lateness: int = 0,
    window_config: Optional[bulkbloom.WindowConfig] = None,
    wait_lock: bool = False,
    broadcast_drops: Optional[int] = None,
    unstable_input: str = "checkpoint",
    nulls: str = "error",
    _on_task: Optional[Callable[[], None]] = None,
    _on_step: Optional[Callable[[str], None]] = None,
) -> ShardedFilter:
    """Writes ``df`` deduplicated against the sharded filter directory ``filter`` (carried across
    runs: daily dumps) to ``path``, then commits the filter's new state, and returns it.

    The keys, order, sizing, ``broadcast_drops``, ``unstable_input`` and ``nulls`` are
    ``dedup``'s; a new filter is sized and
    laid out as ``dedup`` sizes one, a carried one keeps what it has. ``format``, ``partition_by``
    and ``options`` go to Spark's ``DataFrameWriter`` (``df.write.format(format)...save(path)``).
    ``mode``: ``"error"`` (``path`` must not exist) or ``"overwrite"``; not ``"append"``, since an
    append that crashed half way cannot be told from the data before it (write each dump to its
    own path, e.g. a date's partition directory, instead).

    ``window``: a sliding window of this length instead of a filter (module documentation,
    "Sliding windows"), in the unit of ``time``, this dump's event time (an integer, e.g. epoch
    seconds, not earlier than the last run's); ``capacity`` is then the keys of one window, and
    ``generations`` and ``lateness`` are as for ``WindowedFilter.for_event_time``, or
    ``window_config`` gives the whole configuration.
    ``wait_lock``: wait for another job holding ``filter`` instead of raising.

    The order of the commit (module documentation, "Committing a run"): the routing job decides
    and stages the new generation in the filter's directory, ``PENDING`` names ``path``, the
    write job writes and commits the output, and only then the new generation becomes the
    current one; nothing earlier is removed until then. A job that fails changes nothing (the
    output is removed if it did not exist before). A rerun after a crash anywhere writes the
    output the run that crashed would have written: before the commit, the filter is as it was
    and ``PENDING`` lets the rerun replace what the crashed run left at ``path``; after it, the
    current generation records the run (``path``, ``format``, the key, the order and the input's
    files), and a rerun of the same run, with file inputs, changes nothing and returns the state.
    """
    spark = df.sparkSession
    _classic(spark)
    _check_nulls(nulls)
    request = _window_request(window, time, generations, lateness, window_config)
    if mode not in _WRITE_MODES:
        raise ValueError(
            f"mode {mode!r}: dedup_and_write writes with mode 'error' or 'overwrite' (an 'append' "
            "that crashed half way cannot be told from the data before it)"
        )
    root = _filter_root(filter)
    output = _OutputPath(spark, path)
    order_terms = _order_terms(order)
    run = _run_record(df, key, order_terms, output.name, format)
    if broadcast_drops is None:
        broadcast_drops = _default_broadcast_drops(spark)
    step = _on_step or (lambda name: None)
    with _changing(root, wait_lock) as current:
        ours = _crashed_run_wrote(root, current, output.name)
        if current is not None and run["inputs"] and current.manifest.get("run") == run:
            if not output.exists():
                raise RuntimeError(
                    f"{root}'s current generation {current.generation} already holds this run's "
                    f"keys (the same inputs, written to {output.name}), but {output.name} is gone: "
                    "it cannot be computed again from this filter; restore the output, or rerun "
                    "against a copy of the filter with its previous generation made current"
                )
            _log.info("%s already committed this run (output %s): nothing to do", root,
                      output.name)
            return current
        existed = output.exists()
        if existed and not ours and _WRITE_MODES[mode] != "overwrite":
            raise FileExistsError(f"{output.name} exists; pass mode='overwrite' to replace it")
        df = _stable_input(df, unstable_input)
        with _work_directory(root) as work:
            try:
                staged = _decide(
                    df, key, root, current, work, order=order_terms, capacity=capacity,
                    fpr=fpr, num_shards=num_shards, layout=layout, carry=True,
                    write_drops=True, on_task=_on_task, window=request,
                    regroup_drops_above=broadcast_drops, nulls=nulls, run=run,
                )
                pending = {"output": output.name, "base": staged.previous,
                           "generation": staged.generation}
                _write_durably(root / _PENDING, json.dumps(pending).encode() + b"\n")
                step("staged")
                writer = _kept(df, key, nulls, staged.directory, staged.manifest).write
                writer = writer.format(format).mode("overwrite" if existed else "errorifexists")
                if partition_by is not None:
                    columns = [partition_by] if isinstance(partition_by, str) else partition_by
                    writer = writer.partitionBy(*columns)
                writer.options(**(options or {})).save(output.name)
                step("written")
            except BaseException:
                # Back as it was: the filter never changed; an output that was not there before
                # (or was a crashed run's) goes; PENDING, last, since it vouches for the output.
                if not existed or ours:
                    output.delete()
                (root / _PENDING).unlink(missing_ok=True)
                raise
            state = _publish(staged)
        step("committed")
        (root / _PENDING).unlink(missing_ok=True)
        return state


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


def _run_record(
    df: DataFrame, key: str, order: List[_OrderTerm], output: str, format: str
) -> dict:
    """What identifies a dedup_and_write run (module documentation, "Committing a run"): the
    output, the format, the key, the order and a hash of the input's files (empty when the input
    reads no files, and then no rerun is recognised)."""
    files = sorted(df.inputFiles())
    inputs = hashlib.sha256("\n".join(files).encode()).hexdigest() if files else ""
    return {"output": output, "format": format, "key": key,
            "order": [list(map(str, term)) for term in order], "inputs": inputs}


class _OutputPath:
    """An output path on the Hadoop filesystem Spark writes it with (any URI Spark writes)."""

    def __init__(self, spark: Any, path: PathLike) -> None:
        jvm = _jvm(spark, "dedup_and_write")
        hadoop_path = jvm.org.apache.hadoop.fs.Path(os.fspath(path))
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        self._fs = hadoop_path.getFileSystem(conf)
        self._path = self._fs.makeQualified(hadoop_path)
        self.name = self._path.toString()

    def exists(self) -> bool:
        return bool(self._fs.exists(self._path))

    def delete(self) -> None:
        self._fs.delete(self._path, True)


def _jvm(spark: Any, what: str) -> Any:
    """The driver's JVM gateway, which Spark Connect clients have not."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        raise RuntimeError(
            f"{what} needs a classic Spark session (the driver's JVM); this is a Spark Connect "
            "session: run the job with spark-submit or a classic SparkSession"
        )
    return jvm


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


def _window_request(
    window: Optional[int], time: Optional[int], generations: int, lateness: int,
    window_config: Optional[bulkbloom.WindowConfig],
) -> Optional[_WindowRequest]:
    if window_config is not None and window is None:
        window = window_config.window
    if window is None:
        return None
    if time is None:
        raise ValueError("a window (window=) needs this dump's time=")
    if window_config is not None and window_config.clock != "event_time":
        raise ValueError("window_config must have the event_time clock")
    return _WindowRequest(int(window), int(time), generations, lateness, window_config)


# A drops file is one int64 column of row ids, ascending.
_DROPPED = "row_id"


def _write_drops(path: str, dropped: np.ndarray) -> None:
    table = pa.table({_DROPPED: pa.array(dropped, pa.int64())})
    with open(path, "wb") as out:
        pq.write_table(table, out, use_dictionary=False)
        out.flush()
        os.fsync(out.fileno())


# monotonically_increasing_id puts the input partition's index above this many bits.
_PARTITION_SHIFT = 33
# Dropped row ids a regrouping task takes (8 MiB of them).
_REGROUP_TASK_ROWS = 1 << 20


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


def _in_sorted(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    if len(sorted_set) == 0:
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(sorted_set, values)
    at[at == len(sorted_set)] = 0
    return sorted_set[at] == values


def build(
    df: DataFrame,
    key: str,
    path: PathLike,
    *,
    capacity: Optional[int] = None,
    fpr: float = 0.001,
    num_shards: Optional[int] = None,
    layout: Optional[bulkbloom.Layout] = None,
    wait_lock: bool = False,
    nulls: str = "error",
) -> str:
    """Builds a new sharded filter of every key of ``df`` in the directory ``path`` (replacing
    the filter there, atomically) and returns ``path``. Sizing as for ``dedup``; ``nulls``
    ``"keep"`` or ``"drop"`` leaves null keys out, ``"error"`` stops at the first."""
    _classic(df.sparkSession)
    _check_nulls(nulls)
    root = _filter_root(path)
    _decide_and_publish(
        df, key, root, wait_lock, order=[], capacity=capacity, fpr=fpr, num_shards=num_shards,
        layout=layout, carry=False, write_drops=False, on_task=None, nulls=nulls,
    )
    return str(root)


def query(
    df: DataFrame, key: str, filter_path: PathLike, *, column: str = "maybe_present"
) -> DataFrame:
    """``df`` with a boolean ``column``: True where the sharded filter at ``filter_path`` may
    hold the record's key (never False for a key it holds). Nothing is shuffled: each task maps
    the shard files its keys need (pages read on first touch). The filter's committed
    generation when ``query`` is called is the one read."""
    state = open_filter(filter_path)
    if state is None:
        raise FileNotFoundError(f"{filter_path} holds no sharded filter (no CURRENT)")
    kind = _key_kind(df, key)
    if state.manifest.get("keys") != kind:
        raise ValueError(
            f"{filter_path} holds {state.manifest.get('keys')} keys; column {key!r} has {kind} keys"
        )
    if column in df.columns:
        raise ValueError(f"df already has a column {column!r}")
    layout = state.layout
    count = state.num_shards
    paths = [str(state.shard_path(i)) for i in range(count)]
    is_window = state.window is not None
    schema = T.StructType(df.schema.fields + [T.StructField(column, T.BooleanType(), False)])
    key_at = df.columns.index(key)

    def answer(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        opened: dict = {}
        for batch in batches:
            keys = batch.column(key_at)
            shards = bulkbloom.shard_of(layout, keys, count)
            present = np.zeros(len(keys), dtype=bool)
            for index in np.unique(shards):
                shard = opened.get(index)
                if shard is None:
                    shard = opened[index] = (
                        bulkbloom.WindowShard.load(paths[index], backend="cpu")
                        if is_window
                        else bulkbloom.FilterShard.map(paths[index])
                    )
                where = np.flatnonzero(shards == index)
                present[where] = shard.contains(keys.take(pa.array(where)))
            yield batch.append_column(column, pa.array(present))

    return df.mapInArrow(answer, schema)
