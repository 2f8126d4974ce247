"""Planning a dedup (module documentation of bulkbloom.spark, "How it runs"): the order, the
routing of keys (or their hashes) to shards, and the shard tasks that decide them."""

from __future__ import annotations

import math
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import SparkContext, TaskContext
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

import bulkbloom

from ._store import _DROPPED, ShardedFilter, _drops_bytes, _empty_shard, _input_drops_name, \
    _write_drops
from ._windows import _prepare_window_shard, _WindowSizing

# Working column names, chosen not to meet a user's.
_ROW = "__bulkbloom_row"
_KEY = "__bulkbloom_key"
_SHARD = "__bulkbloom_shard"
_ORDER = "__bulkbloom_order_"
_BLOB = "__bulkbloom_blob"

OrderLike = Union[None, str, Column, Sequence[Union[str, Column]]]


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
    hashed = _sql_hash(key, kind, (layout.hash, layout.seed))
    if hashed is None or layout.num_blocks * num_shards >= 2**63:
        return None
    return _shard_of_hash(hashed, layout, num_shards)


def _sql_hash(key: Column, kind: str, hashing: Tuple[str, int]) -> Optional[Column]:
    """The 64-bit hash of each key that a layout's hash and seed (`hashing`) give, as a Spark
    SQL expression (a long holding its bit pattern), or None where Spark has no function for
    it."""
    hash_name, seed = hashing
    if kind == "integer":
        key = key.cast(T.LongType())  # integers hash as their 64-bit pattern, sign-extended
    if hash_name == "xxh64" and seed == SPARK_SEED:
        return F.xxhash64(key)
    if hash_name == "identity" and kind == "integer":
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


class _Narrow(NamedTuple):
    """What routing moves of each record, before the filter's size is known: (key, row id,
    order values...) in `frame`, the key column holding the keys' hashes where `hashed`; and
    whether records with a null key (a null key column) are to be left out (`drop_nulls`)."""

    frame: DataFrame
    hashed: bool
    drop_nulls: bool


def _narrowed(
    df: DataFrame, key: str, kind: str, order: List[_OrderTerm], hashing: Tuple[str, int],
    nulls: str = "error",
) -> _Narrow:
    """`df`'s routed columns (_Narrow). Where Spark computes the keys' hash under `hashing` (the
    filter's hash and seed: its size need not be known yet), the key column is the keys'
    hashes: a string key then costs the shuffle 8 bytes, as an integer does, and its shard keeps
    the bits the key would set (_hashed_layout, WindowShard.insert_hashes_if_absent). Records
    with a null key are kept, with a null key column, to be left out by _route (`nulls` "keep"
    or "drop": every record is counted, as the command line counts its input), or stop the job
    as it reads the first ("error")."""
    orders = [term.values.alias(f"{_ORDER}{i}") for i, term in enumerate(order)]
    # Numbered before anything is left out: the row ids are those of every record.
    numbered = df.withColumn(_ROW, F.monotonically_increasing_id())
    key_column = F.col(key)
    drop_nulls = False
    if df.schema[key].nullable:
        if nulls == "error":
            message = (f"bulkbloom.spark: key column {key!r} is null in a record; pass "
                       "nulls='keep' or nulls='drop'")
            key_column = F.when(key_column.isNull(), F.raise_error(F.lit(message))).otherwise(
                key_column)
        else:
            drop_nulls = True
    hashed = _sql_hash(key_column, kind, hashing)
    if hashed is None:
        return _Narrow(numbered.select(key_column.alias(_KEY), F.col(_ROW), *orders), False,
                       drop_nulls)
    if drop_nulls:  # xxhash64 of a null is its seed, not a null
        hashed = F.when(key_column.isNotNull(), hashed)
    return _Narrow(numbered.select(hashed.alias(_KEY), F.col(_ROW), *orders), True, drop_nulls)


def _route(
    narrow: _Narrow, layout: bulkbloom.Layout, num_shards: int,
    base_blobs: Optional[DataFrame] = None,
) -> DataFrame:
    """`narrow`'s records, each shard's in a partition of its own: all the routing moves.
    `base_blobs` (a filter directory the executors cannot read: _with_blobs): each shard's file
    of the base generation, one row a shard with its index as the row id and its bytes in a
    column of their own, routed to the shard's partition with its records."""
    rows = narrow.frame.where(F.col(_KEY).isNotNull()) if narrow.drop_nulls else narrow.frame
    # Partitioning by key_of[shard] gives each shard a partition of its own (_partition_keys).
    key_of = F.expr(f"array({', '.join(map(str, _partition_keys(num_shards)))})")
    if narrow.hashed and layout.num_blocks * num_shards < 2**63:
        rows, shard = _with_blobs(rows, _shard_of_hash(F.col(_KEY), layout, num_shards),
                                  base_blobs)
        return rows.repartition(num_shards, F.element_at(key_of, shard + 1))
    schema = T.StructType(rows.schema.fields + [T.StructField(_SHARD, T.IntegerType(), False)])
    key_layout = tuple(_hashed_layout(layout) if narrow.hashed else layout)

    def add_shard(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        layout_value = bulkbloom.Layout(*key_layout)
        for batch in batches:
            shards = bulkbloom.shard_of(layout_value, batch.column(_KEY), num_shards)
            yield batch.append_column(_SHARD, pa.array(shards.view(np.int32)))

    routed, shard = _with_blobs(rows.mapInArrow(add_shard, schema), F.col(_SHARD), base_blobs)
    return routed.repartition(num_shards, F.element_at(key_of, shard + 1)).drop(_SHARD)


def _routed(
    df: DataFrame, key: str, kind: str, order: List[_OrderTerm], layout: bulkbloom.Layout,
    num_shards: int, nulls: str = "error",
) -> tuple:
    """(_route of `df`'s _narrowed columns, whether the key column holds the keys' hashes)."""
    narrow = _narrowed(df, key, kind, order, (layout.hash, layout.seed), nulls)
    return _route(narrow, layout, num_shards), narrow.hashed


class _RowCount:
    """The input's row count, taken at most once (a callable). Where Spark counts the rows from
    the files' footers (_counted_from_footers), the count reads no column and the routing then
    reads the input itself; elsewhere a job that counts also caches the narrow columns it
    counts, which the routing then reads instead of the input: with a count the input is read
    twice (counting, filtering), not three times. A context manager: the cache is dropped on
    leaving."""

    def __init__(self, narrow: _Narrow, df: DataFrame) -> None:
        self._frame = narrow.frame
        self._df = df
        self._rows: Optional[int] = None
        self._cached = False

    def __call__(self) -> int:
        """The rows (at least 1: a size)."""
        return max(1, self.counted)

    @property
    def counted(self) -> int:
        if self._rows is None:
            if _counted_from_footers(self._df):
                self._rows = self._df.count()
            else:
                self._cached = True
                self._rows = self._frame.persist().count()
        return self._rows

    def __enter__(self) -> "_RowCount":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._cached:
            self._frame.unpersist()


def _counted_from_footers(df: DataFrame) -> bool:
    """Whether counting `df`'s rows reads no column: every leaf of the count's physical plan is
    a Parquet scan that reads no column and filters none (Spark then takes the row counts from
    the files' footers). Caching the narrow columns in the counting job (_RowCount) cost more
    than the routing's reading them again from such an input: for a 5M-row Parquet dump the
    count with the cache took 3.4-3.7 s of task CPU and 3.0-3.5 s of GC, with int64 and UUID
    keys alike (bench/RESULTS.md, "Spark")."""
    return _reads_footers_only(df.groupBy().count()._jdf.queryExecution().executedPlan())


def _reads_footers_only(node: Any) -> bool:
    name = node.getClass().getSimpleName()
    if name == "AdaptiveSparkPlanExec":  # AQE: the plan before it runs
        return _reads_footers_only(node.inputPlan())
    children = node.children()
    if children.size() == 0:
        return (name == "FileSourceScanExec"
                and node.relation().fileFormat().getClass().getSimpleName() == "ParquetFileFormat"
                and node.requiredSchema().isEmpty() and node.dataFilters().isEmpty())
    return all(_reads_footers_only(children.apply(index)) for index in range(children.size()))


def _with_blobs(narrow: DataFrame, shard: Column, blobs: Optional[DataFrame]) -> tuple:
    """(`narrow` with `blobs`' rows, their shard): where the executors cannot read the base
    generation's shard files, each goes to its shard's task with the records, read by Spark
    (the binaryFile source, through the Hadoop filesystem the filter is on)."""
    if blobs is None:
        return narrow, shard
    rows = narrow.withColumn(_BLOB, F.lit(None).cast(T.BinaryType()))
    together = rows.unionByName(blobs, allowMissingColumns=True)
    return together, F.when(F.col(_BLOB).isNull(), shard).otherwise(F.col(_ROW).cast("int"))


_DECIDED = T.StructType(
    [
        T.StructField("shard", T.IntegerType(), False),
        T.StructField("shard_file", T.StringType(), True),
        T.StructField("drops_file", T.StringType(), True),
        # Where the executors cannot write the filter directory, the files' bytes, which the
        # driver writes (module documentation, "The sharded filter directory").
        T.StructField("shard_bytes", T.BinaryType(), True),
        T.StructField("drops_bytes", T.BinaryType(), True),
        T.StructField("keys", T.LongType(), False),
        T.StructField("new_keys", T.LongType(), False),
        # A window shard's filter_keys() after the run (an empty list for a filter).
        T.StructField("filter_keys", T.ArrayType(T.LongType(), False), False),
        # A window shard's own expected_false_drops over the run's records (None for a filter).
        T.StructField("expected_false_drops", T.DoubleType(), True),
        # The extent of the dropped rows' bitmap (_dropped_bitmap) this shard's drops need: the
        # input partitions up to its last dropped row's, and the words of its furthest dropped
        # row within its partition (0 and 0 where it dropped none or writes no drops).
        T.StructField("drops_partitions", T.LongType(), False),
        T.StructField("drops_stride", T.LongType(), False),
    ]
)


def _decide_shards(
    routed: DataFrame,
    base: Optional[ShardedFilter],
    layout: tuple,
    window: Optional[bulkbloom.WindowConfig],
    time: Optional[int],
    num_shards: int,
    work: Optional[Path],
    order: List[tuple],
    write_drops: bool,
    on_task: Optional[Callable[[], None]],
    hashed: bool = False,
    sizing: Optional[_WindowSizing] = None,
) -> list:
    """Runs each shard's task (see the module's documentation) and returns their rows. `hashed`:
    the routed key column holds the keys' hashes (_narrowed), which each task inserts into its
    filter shard's bits under _hashed_layout, or into its window shard with
    insert_hashes_if_absent. `sizing`: what a window's shards are given first. `work`: the
    local directory (the generation's, on a filter directory every executor sees) the tasks
    save their attempt files in; None: the tasks take the base shards' bytes from the routed
    rows (_with_blobs) and hand in their files' bytes."""
    key_layout = tuple(_hashed_layout(bulkbloom.Layout(*layout))) if hashed else layout
    # A filter shard takes hashes as keys under the hashed twin of its layout (_relaid); a window
    # shard keeps its layout and takes them through insert_hashes_if_absent.
    relaid = hashed and window is None
    shard_type = bulkbloom.FilterShard if window is None else bulkbloom.WindowShard
    suffix = ".bbf" if window is None else ".bbw"
    # The tasks' closures take plain values only (a ShardedFilter holds the driver's JVM).
    has_base = base is not None
    base_files = None if base is None or work is None else [
        str(base.shard_path(i)) for i in range(num_shards)]
    # The order's terms, ties broken by the row id (the input's order).
    sort_keys = [(f"{_ORDER}{i}", *how) for i, how in enumerate(order)] + [(_ROW, False, True)]
    work_dir = None if work is None else str(work)

    def load(index: int, blob: Optional[bytes]) -> Any:
        if base_files is not None:
            return shard_type.load(base_files[index], backend="cpu")
        if blob is None:
            raise RuntimeError(f"shard {index}'s task was not sent its base generation's file")
        with tempfile.TemporaryDirectory(prefix="bulkbloom-spark-") as temporary:
            path = os.path.join(temporary, f"base{suffix}")
            with open(path, "wb") as out:
                out.write(blob)
            return shard_type.load(path, backend="cpu")

    def saved(shard: Any, path: Optional[str]) -> Optional[bytes]:
        """Saves `shard` at `path`, or returns its file's bytes (path None)."""
        if path is not None:
            shard.save(path)
            return None
        with tempfile.TemporaryDirectory(prefix="bulkbloom-spark-") as temporary:
            shard.save(os.path.join(temporary, f"shard{suffix}"))
            with open(os.path.join(temporary, f"shard{suffix}"), "rb") as saved_file:
                return saved_file.read()

    def decide(index: int, table: pa.Table, blob: Optional[bytes]) -> pa.RecordBatch:
        table = _sorted(table, sort_keys)
        if not has_base:
            shard = _empty_shard(bulkbloom.Layout(*key_layout), window, index, num_shards)
        else:
            shard = load(index, blob)
            if relaid:
                shard = _relaid(shard, key_layout)
        keys = table.column(_KEY)
        filter_keys: List[int] = []
        expected_false_drops = None
        if window is not None:
            _prepare_window_shard(shard, sizing)
            insert = shard.insert_hashes_if_absent if hashed else shard.insert_if_absent
            fresh = insert(keys, np.full(len(table), time, dtype=np.int64))
            shard.advance_to(time)
            filter_keys = shard.filter_keys()
            expected_false_drops = shard.expected_false_drops
        else:
            # Also where no drops are written (build): the count of new keys, which the filter's
            # fullness is judged by, is then exact, a key repeated within the run counted once.
            fresh = shard.insert_if_absent(keys)
        new_keys = int(np.count_nonzero(fresh))
        shard.keys_inserted += new_keys
        name = _attempt_name()
        shard_file = drops_file = drops_bytes = None
        drops_partitions = drops_stride = 0  # where no drops are written
        if work_dir is not None:
            shard_file = os.path.join(work_dir, f"shard-{index:05d}.{name}{suffix}")
        shard_bytes = saved(_relaid(shard, layout) if relaid else shard, shard_file)
        if write_drops:
            dropped = np.sort(table.column(_ROW).to_numpy()[~fresh])
            if work_dir is None:
                drops_bytes = _drops_bytes(dropped)
            else:
                drops_file = os.path.join(work_dir, f"drops-{index:05d}.{name}.parquet")
                _write_drops(drops_file, dropped)
            drops_partitions, drops_stride = _bitmap_extent(dropped)
        if on_task is not None:
            on_task()
        return pa.RecordBatch.from_pydict(
            {
                "shard": pa.array([index], pa.int32()),
                "shard_file": pa.array([shard_file], pa.string()),
                "drops_file": pa.array([drops_file], pa.string()),
                "shard_bytes": pa.array([shard_bytes], pa.binary()),
                "drops_bytes": pa.array([drops_bytes], pa.binary()),
                "keys": pa.array([len(table)], pa.int64()),
                "new_keys": pa.array([new_keys], pa.int64()),
                "filter_keys": pa.array([filter_keys], pa.list_(pa.int64())),
                "expected_false_drops": pa.array([expected_false_drops], pa.float64()),
                "drops_partitions": pa.array([drops_partitions], pa.int64()),
                "drops_stride": pa.array([drops_stride], pa.int64()),
            }
        )

    def decide_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # The partition's routed rows, held in this worker; normally one shard's (_routed).
        received = list(batches)
        if not received:
            return
        table = pa.Table.from_batches(received)
        blobs: dict = {}
        if _BLOB in table.column_names:
            is_blob = table.column(_BLOB).is_valid()
            held = table.filter(is_blob)
            blobs = dict(zip(held.column(_ROW).to_pylist(), held.column(_BLOB).to_pylist()))
            table = table.filter(pc.invert(is_blob)).drop_columns([_BLOB])
            if table.num_rows == 0:
                return
        # The shard is not shipped: hashing again here costs less than moving it from the JVM.
        shards = bulkbloom.shard_of(bulkbloom.Layout(*key_layout), table.column(_KEY), num_shards)
        present = np.unique(shards)
        for index in present.tolist():
            part = table if len(present) == 1 else table.filter(pa.array(shards == index))
            yield decide(index, part, blobs.get(index))

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


# monotonically_increasing_id puts the input partition's index above this many bits.
_PARTITION_SHIFT = 33
# Dropped row ids a regrouping task takes (8 MiB of them).
_REGROUP_TASK_ROWS = 1 << 20


def _bitmap_extent(row_ids: np.ndarray) -> Tuple[int, int]:
    """(partitions, stride) of the bitmap of the dropped rows `row_ids` (the driver's
    _dropped_bitmap): the input partitions up to the last with a dropped row, and the 64-bit
    words of each partition's stretch, up to the furthest dropped row within any partition;
    (0, 0) for none."""
    if len(row_ids) == 0:
        return 0, 0
    within = row_ids & ((1 << _PARTITION_SHIFT) - 1)
    return int(row_ids.max() >> _PARTITION_SHIFT) + 1, int(within.max() >> 6) + 1
