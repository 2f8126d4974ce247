"""bulkbloom.spark's functions: dedup, dedup_and_write, build and query."""

from __future__ import annotations

import hashlib
import math
import os
import urllib.parse
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

import bulkbloom
from bulkbloom import _core

from ._inputs import (
    _check_names, _check_nulls, _classic, _default_broadcast_drops, _jvm, _log,
    _pin_file_splits, _stable_input,
)
from ._plan import (
    _BLOB, _PARTITION_SHIFT, _ROW, SPARK_SEED, OrderLike, _bitmap_extent, _decide_shards,
    _default_shards, _key_kind, _narrowed, _order_terms, _OrderTerm, _regroup_drops, _route,
    _RowCount, _spark_seeded,
)
from ._store import (
    _DROPPED, PathLike, ShardedFilter, _check_shards, _clean_up, _crashed_runs, _full_at,
    _input_drops, _input_drops_name, _new_generation, _open, _pending_for, _publish,
    _scratch_store, _stage, _Staged, _Store, _store_of, _undo_failed_run, _write_pending,
)
from ._windows import _window_request, _WindowRequest, _WindowSizing


def _decide(
    df: DataFrame,
    key: str,
    store: _Store,
    current: Optional[ShardedFilter],
    generation: tuple,
    *,
    order: List[_OrderTerm],
    capacity: Optional[int],
    fpr: Optional[float],
    num_shards: Optional[int],
    layout: Optional[bulkbloom.Layout],
    carry: bool,
    write_drops: bool,
    on_task: Optional[Callable[[], None]],
    window: Optional[_WindowRequest] = None,
    regroup_drops_above: Optional[int] = None,
    nulls: str = "error",
    run: Optional[dict] = None,
    on_full: str = "error",
) -> _Staged:
    """Routes and decides (module documentation, "How it runs") against `current` (carried when
    `carry`), and stages the new generation (`generation`: its number and directory), its
    manifest recording `run` (if any).
    With write_drops, the dropped row ids are regrouped by input partition when there are more
    than `regroup_drops_above`."""
    _check_names(df)
    kind = _key_kind(df, key)
    base = current if carry else None
    if base is not None:
        if base.manifest.get("keys") != kind:
            raise ValueError(
                f"{store.uri} holds {base.manifest.get('keys')} keys; column {key!r} has {kind} keys"
                " (integers and strings hash differently)"
            )
        if num_shards is not None and num_shards != base.num_shards:
            raise ValueError(
                f"{store.uri} has {base.num_shards} shards, not {num_shards}; bulkbloom.reshard "
                "recuts one"
            )
        if layout is not None and tuple(layout)[:5] != tuple(base.layout)[:5]:
            raise ValueError(f"{store.uri} has layout {base.layout}, not {layout}")
        if (base.window is None) != (window is None):
            held = "a filter" if base.window is None else f"a window ({base.window})"
            raise ValueError(f"{store.uri} holds {held}; pass window= exactly for a window")
        _check_shards(base)
        # As the command line warns of --capacity or --fpr given with a filter that exists (a
        # window's capacity sizes each run's generations).
        ignored = [f"{name}={value}" for name, value, unused in (
            ("capacity", capacity, base.window is None), ("fpr", fpr, True))
            if unused and value is not None and value != base.manifest.get(name)]
        if ignored:
            _log.warning("%s: %s ignored: the filter keeps the layout it was made with "
                         "(capacity %s, fpr %s)", store.uri, ", ".join(ignored),
                         base.manifest.get("capacity"), base.manifest.get("fpr"))
    fpr = _FPR if fpr is None else fpr
    # The keys' hash and seed are known before the filter's size: a carried filter's, a given
    # layout's or window's, else those every new filter gets (_spark_seeded).
    known = base.layout if base is not None else layout if window is None else (
        None if window.config is None else window.config.generation)
    hashing = ("xxh64", SPARK_SEED) if known is None else (known.hash, known.seed)
    narrow = _narrowed(df, key, kind, order, hashing, nulls)

    def sized_from_count() -> int:
        """The input's rows, for which a new filter is sized where no capacity is given."""
        if row_count.counted == 0 and carry:
            # Sized for nothing, the filter carried to the next runs would be full at once.
            raise ValueError(
                f"{store.uri} holds no filter yet, and the input has no rows to size one for: "
                "pass capacity= (the keys it will hold over the runs it is carried through)"
            )
        return row_count()

    with _RowCount(narrow, df) as row_count:
        if base is not None:
            the_layout, count = base.layout, base.num_shards
            config = base.window
            extra = {k: base.manifest[k] for k in ("keys", "capacity", "fpr", "target")
                     if k in base.manifest}
        else:
            config = None
            rows = capacity
            if window is not None:
                config = window.config
                if config is None:
                    if rows is None:
                        rows = sized_from_count()
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
                    rows = sized_from_count()
                # As the command line and bulkbloom.Filter size a filter promising `fpr`: at its
                # first generation's target, so that it holds `rows` keys before it is full.
                layout = _spark_seeded(bulkbloom.Layout.promising(rows, fpr))
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
            if window is None:
                # The capacity sized for (the rows counted where none was given), and the rate at
                # which the one filter is full: what `bulkbloom dedup --capacity --fpr` records.
                extra = {**extra, "capacity": capacity if capacity is not None else rows,
                         "target": _core.first_generation_target(fpr)}
        if not 1 <= count <= the_layout.num_blocks:
            raise ValueError(f"num_shards {count} is not in [1, {the_layout.num_blocks}]")
        sizing = None
        if config is not None and config.fpr > 0 and config.block_multiple % count == 0:
            # As the command line sizes a run's generations: for `capacity` records over the
            # window (in one period's share), else for every record of the run.
            min_keys = (math.ceil(capacity / config.window * config.period)
                        if capacity is not None else row_count())
            window_keys = None if base is None else base.manifest.get("window_keys")
            sizing = _WindowSizing(None if window_keys is None else list(window_keys), min_keys)
        number, directory = generation
        # Where the executors see the directory, the tasks write the generation's files in it;
        # elsewhere, Spark reads the base shards to them and they hand in their files' bytes.
        work = None if store.local is None else store.local / directory
        store.mkdirs(directory)
        blobs = None
        if base is not None and work is None:
            shard_files = [store.path(name) for name in base.manifest["shards"]]
            blobs = df.sparkSession.read.format("binaryFile").load(shard_files).select(
                F.regexp_extract("path", r"shard-(\d+)\.bb[fw]$", 1).cast("long").alias(_ROW),
                F.col("content").alias(_BLOB),
            )
        time = None if window is None else window.time
        rows = _decide_shards(
            _route(narrow, the_layout, count, blobs), base, tuple(the_layout), config, time,
            count, work, [(term.descending, term.nulls_first) for term in order],
            write_drops, on_task, narrow.hashed, sizing,
        )
    dropped = sum(row["keys"] - row["new_keys"] for row in rows)
    if config is None:
        extra = {**extra, "key_count": _key_count(base, rows)}
        _check_full(store, the_layout, extra, on_full)
    drops_by, drops = "shard", {
        f"drops-{row['shard']:05d}.parquet": (row["drops_file"], row["drops_bytes"])
        for row in rows if row["drops_file"] is not None or row["drops_bytes"] is not None
    }
    # Regrouped drops are read by the executors' Python (_without_drops): local stores only.
    if (drops and work is not None and regroup_drops_above is not None
            and dropped > regroup_drops_above):
        drops_by = "input partition"
        regrouped = _regroup_drops(df.sparkSession, {n: f for n, (f, _) in drops.items()}, work,
                                   dropped)
        drops = {_input_drops_name(r["partition"]): (r["drops_file"], None) for r in regrouped}
    extra = {**extra, "dropped": dropped}
    if write_drops:
        # The words of the dropped rows' bitmap, so that the filtering knows whether it fits in
        # the plan before it reads a drops file (_without_drops).
        extra["drops_words"] = max((row["drops_partitions"] for row in rows), default=0) * max(
            (row["drops_stride"] for row in rows), default=0)
    if run is not None:
        extra = {**extra, "run": run}
    earlier = [{"generation": made, "run": record} for made, record in _committed_runs(base)]
    if earlier:
        extra = {**extra, "earlier_runs": earlier[:_RUNS_RECALLED - 1]}
    return _stage(
        store, base, current, directory, number, rows, the_layout, config, time, count, extra,
        drops, drops_by, sizing,
    )


_ON_FULL = ("error", "pass")
# The false-positive rate a new filter promises where none is given.
_FPR = 0.001


def _check_on_full(on_full: str) -> None:
    if on_full not in _ON_FULL:
        raise ValueError(f"on_full={on_full!r}: expected one of {', '.join(map(repr, _ON_FULL))}")


def _key_count(base: Optional[ShardedFilter], rows: list) -> int:
    """The distinct keys the filter holds after the run: the base generation's (its manifest's,
    else its shards' own counts: a directory written before manifests recorded it) and those the
    run's shards took as new."""
    held = 0
    if base is not None:
        held = base.manifest.get("key_count")
        if held is None:
            held = sum(base.load(index).keys_inserted for index in range(base.num_shards))
    return int(held) + sum(int(row["new_keys"]) for row in rows)


def _check_full(store: _Store, layout: bulkbloom.Layout, manifest: dict, on_full: str) -> None:
    """Refuses a run that takes the filter past the rate at which it is full (the manifest's
    ``target``; a directory written before it was recorded: its ``fpr``, which it was sized at),
    where the command line would grow a generation (docs/FORMAT.md, "Growth"); ``on_full="pass"``
    lets it pass, with a warning."""
    keys = manifest["key_count"]
    target = _full_at(manifest)
    rate = layout.expected_fpr(keys)
    if rate <= target:
        return
    what = (f"{store.uri}: this run takes the filter to {keys:,} keys, where its layout "
            f"({layout.description}) gives a false-positive rate of {rate:.6g}, past {target:.6g}, "
            f"the rate at which it is full (promised rate {manifest['fpr']})")
    if on_full == "pass":
        _log.warning("%s; on_full='pass': decided with it anyway", what)
        return
    raise ValueError(
        f"{what}. bulkbloom dedup would grow a second generation here, which a sharded filter "
        "cannot; nothing was written or committed. Pass on_full='pass' to decide with this "
        "filter past that rate; a new filter forgets the keys this one holds, so size a filter "
        "you carry for every key it will hold (capacity=), or forget old keys on purpose with "
        "window="
    )


def _decide_and_publish(df: DataFrame, key: str, store: _Store, **decide: Any) -> ShardedFilter:
    """A job that changes nothing but the filter (``build``, or ``dedup``'s scratch filter):
    decided, staged and committed at once."""
    current = _open(store, committing=True)
    generation = _new_generation(current)
    committing = False
    try:
        staged = _decide(df, key, store, current, generation, **decide)
        committing = True
        state = _publish(staged)
    except BaseException as error:
        _undo_failed_run(store, generation, error, lambda: store.delete(generation[1]),
                         committing)
        raise
    _clean_up(store, state)
    return state


def dedup(
    df: DataFrame,
    key: str,
    *,
    order: OrderLike = None,
    num_shards: Optional[int] = None,
    capacity: Optional[int] = None,
    fpr: float = _FPR,
    layout: Optional[bulkbloom.Layout] = None,
    broadcast_drops: Optional[int] = None,
    unstable_input: str = "checkpoint",
    nulls: str = "error",
    on_full: str = "error",
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
    ``scratch`` (any place a filter directory may be, module documentation, "The sharded filter
    directory"; None: the driver's temporary directory, which only local mode's executors see:
    on a cluster, pass a directory on HDFS, an object store or a shared mount), removed when the
    driver's Python exits.
    ``broadcast_drops``: the most dropped rows removed in the JVM, by a bitmap in the plan or a
    broadcast join (None: as many 8-byte row ids as ``spark.sql.autoBroadcastJoinThreshold``
    holds; 0: always the row-id function; module documentation, "How it runs").
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
    ``on_full``: what to do with a run that takes the filter past the rate at which it is full,
    three quarters of ``fpr`` (where ``bulkbloom dedup`` would grow a second generation, which a
    sharded filter cannot; a filter sized here from the row count never is): ``"error"``
    raises ``ValueError`` naming the keys and the rate, with nothing written or committed;
    ``"pass"`` decides with the filter past that rate, with a warning logged (the records kept
    are then no longer the command line's).

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
    _check_on_full(on_full)
    df = _stable_input(df, unstable_input)
    if broadcast_drops is None:
        broadcast_drops = _default_broadcast_drops(df.sparkSession)
    # Held for the session's life, not unset: the DataFrame returned reads the input again at
    # each action, and must cut it as the routing did.
    if _pin_file_splits(df.sparkSession) is not None:
        _log.info("dedup: spark.sql.files.minPartitionNum set to %s for the DataFrame it returns",
                  df.sparkSession.conf.get("spark.sql.files.minPartitionNum"))
    state = _decide_and_publish(
        df, key, _scratch_store(df.sparkSession, scratch), order=_order_terms(order),
        capacity=capacity, fpr=fpr, num_shards=num_shards, layout=layout, carry=False,
        write_drops=True, on_task=_on_task, regroup_drops_above=broadcast_drops, nulls=nulls,
        on_full=on_full,
    )
    return _kept(df, key, nulls, state.store, state.manifest, broadcast_drops)


def _kept(df: DataFrame, key: str, nulls: str, store: _Store, manifest: dict,
          broadcast_drops: int) -> DataFrame:
    """The records dedup keeps of `df`: those the generation `manifest` describes did not drop,
    less the null keys if `nulls` is "drop"."""
    kept = _without_drops(df, store, manifest, broadcast_drops)
    return kept.where(F.col(key).isNotNull()) if nulls == "drop" else kept


def _without_drops(df: DataFrame, store: _Store, manifest: dict,
                   broadcast_drops: int) -> DataFrame:
    """`df` less the rows whose row ids the generation `manifest` describes dropped (module
    documentation, "How it runs", 3)."""
    drops = [store.path(name) for name in manifest["drops"]]
    # No record at all, or none dropped (said by the manifest: no drops file need be read).
    if not drops or manifest.get("dropped") == 0:
        return df
    numbered = df.withColumn(_ROW, F.monotonically_increasing_id())
    if manifest["drops_by"] == "shard":
        few = int(manifest.get("dropped", 0)) <= broadcast_drops
        most_bytes = min(8 * broadcast_drops, _BITMAP_BYTES)
        # A bitmap the manifest says is too large is not read here: Spark reads the files.
        recorded = manifest.get("drops_words")
        bitmap = None if not few or (recorded is not None and 8 * recorded > most_bytes) else (
            _dropped_bitmap(store, manifest["drops"], most_bytes))
        if bitmap is not None:
            words, stride = bitmap
            if len(words) == 0:  # none dropped
                return df
            # In the plan itself: no job builds or broadcasts it, and no join.
            return numbered.where(~_dropped_by(df.sparkSession, F.col(_ROW), words, stride)).drop(
                _ROW)
        # The schema given: Spark infers none (a job of its own).
        schema = T.StructType([T.StructField(_DROPPED, T.LongType(), True)])
        dropped = df.sparkSession.read.schema(schema).parquet(*drops)
        if not few:
            # Too many to broadcast, on a directory the executors' Python cannot read: a join.
            return numbered.join(dropped.select(F.col(_DROPPED).alias(_ROW)), _ROW,
                                 "left_anti").drop(_ROW)
        # Few enough to send every task all of them: the records never leave the JVM.
        return numbered.join(F.broadcast(_dropped_words(dropped)), _dropped_in(F.col(_ROW)),
                             "left_anti").drop(_ROW)
    import pandas as pd  # here, not above: the shard tasks' workers import this module too

    folder = store.path(str(manifest["directory"]))
    held: dict = {}

    def kept(rows):  # type: ignore[no-untyped-def]
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

    # pandas_udf reads the function's kind (Series to Series) from its annotations, which must
    # name pandas' class itself: pandas is not among this module's names.
    kept.__annotations__ = {"rows": pd.Series, "return": pd.Series}
    keep = F.pandas_udf(kept, T.BooleanType())
    return numbered.filter(keep(F.col(_ROW))).drop(_ROW)


# The most bytes of a bitmap of the dropped rows put in the filtering's plan (_dropped_bitmap):
# the plan travels in each stage's task binary, of which Spark warns past 1,000 KiB, so this
# leaves room for the rest. Past it (inputs of over about 6M rows), a broadcast join of the
# bitmap's words costs its one small job, little against such an input.
_BITMAP_BYTES = 768 << 10


def _dropped_bitmap(store: _Store, names: List[str], most_bytes: int) -> Optional[tuple]:
    """The rows the drops files `names` (of input partitions' row ids) name, as (words, stride):
    a bitmap with a stride of words for each input partition, the row id p << _PARTITION_SHIFT
    | r being bit r & 63 of words[p * stride + (r >> 6)], the stride the words of the largest
    row dropped from any partition (no words where none was dropped); or None where the words
    would take more than `most_bytes`.
    Read by the driver (a broadcast join would read them too, and more)."""
    ids = np.concatenate([np.zeros(0, np.int64)] + [
        pq.read_table(pa.BufferReader(store.read(name)), columns=[_DROPPED]).column(0).to_numpy()
        for name in names])
    if len(ids) == 0:
        return np.zeros(0, dtype=np.uint64), 1
    partitions, stride = _bitmap_extent(ids)  # as the shard tasks recorded it: drops_words
    if 8 * partitions * stride > most_bytes:
        return None
    words = np.zeros(partitions * stride, dtype=np.uint64)
    within = ids & ((1 << _PARTITION_SHIFT) - 1)
    # A row id is dropped once: its bit is set once.
    np.add.at(words, (ids >> _PARTITION_SHIFT) * stride + (within >> 6), np.left_shift(
        np.uint64(1), (within & 63).astype(np.uint64)))
    return words, stride


def _dropped_by(spark: Any, row: Column, words: np.ndarray, stride: int) -> Column:
    """Whether `row` (a row id) is a bit of the bitmap `words` with `stride` (_dropped_bitmap):
    the words are a literal array in the expression, which Spark's generated code indexes."""
    jvm = spark._jvm
    longs = spark.sparkContext._gateway.new_array(jvm.long, len(words))
    jvm.java.nio.ByteBuffer.wrap(bytearray(words.astype("<u8").tobytes())).order(
        jvm.java.nio.ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(longs)
    types = jvm.org.apache.spark.sql.types.DataTypes
    literal = jvm.org.apache.spark.sql.catalyst.expressions.Literal(
        jvm.org.apache.spark.sql.catalyst.expressions.UnsafeArrayData.fromPrimitiveArray(longs),
        types.createArrayType(types.LongType, False))
    bitmap = Column(jvm.org.apache.spark.sql.functions.lit(literal))  # lit takes a Literal as is
    word = F.shiftright(row.bitwiseAND((1 << _PARTITION_SHIFT) - 1), 6)
    at = F.shiftright(row, _PARTITION_SHIFT) * F.lit(stride) + word
    # Past its partition's last dropped row (whose word would be the next partition's), or past
    # the last partition that dropped a row, a row is not dropped.
    at = F.when((word < stride) & (at < len(words)), at.cast(T.IntegerType()))
    bit = F.call_function("shiftright", F.get(bitmap, at), row.bitwiseAND(63).cast("int"))
    return F.coalesce(bit.bitwiseAND(1), F.lit(0)) == 1


# The broadcast holds the dropped row ids as 64-bit words of a bitmap over the row ids: a row
# id's word is row_id >> 6, its bit row_id & 63.
_WORD, _BITS = "__bulkbloom_word", "__bulkbloom_bits"


def _dropped_words(dropped: DataFrame) -> DataFrame:
    """The words of the bitmap of `dropped`'s row ids that have a bit set, one row each (word,
    bits), in one task: no shuffle, for at most broadcast_drops row ids. The
    join's lookups then are one per word in the records' own order, so 64 records in turn look
    up the same entry, where a row id each looked up its own (bench/DECISIONS.md, #34: the
    lookups were the filtering pass's largest cost after reading and writing)."""
    ids = F.col(_DROPPED)
    bit = F.call_function("shiftleft", F.lit(1).cast(T.LongType()),
                          ids.bitwiseAND(63).cast("int"))
    # One partition needs no exchange before the aggregate.
    return dropped.coalesce(1).groupBy(F.shiftright(ids, 6).alias(_WORD)).agg(
        F.bit_or(bit).alias(_BITS))


def _dropped_in(row: Column) -> Column:
    """Whether `row` (a row id) is a bit of _dropped_words: its word's entry, and its bit set."""
    bit = F.call_function("shiftright", F.col(_BITS), row.bitwiseAND(63).cast("int"))
    return (F.shiftright(row, 6) == F.col(_WORD)) & (bit.bitwiseAND(1) == 1)


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
    fpr: Optional[float] = None,
    layout: Optional[bulkbloom.Layout] = None,
    window: Optional[int] = None,
    time: Optional[int] = None,
    generations: int = 4,
    lateness: int = 0,
    window_config: Optional[bulkbloom.WindowConfig] = None,
    broadcast_drops: Optional[int] = None,
    unstable_input: str = "checkpoint",
    nulls: str = "error",
    on_full: str = "error",
    force: bool = False,
    _on_task: Optional[Callable[[], None]] = None,
    _on_step: Optional[Callable[[str], None]] = None,
) -> ShardedFilter:
    """Writes ``df`` deduplicated against the sharded filter directory ``filter`` (carried across
    runs: daily dumps) to ``path``, then commits the filter's new state, and returns it.

    The keys, order, sizing, ``broadcast_drops``, ``unstable_input``, ``nulls`` and ``on_full``
    are ``dedup``'s; a new filter is sized and laid out as ``dedup`` sizes one, a carried one
    keeps what it has (its layout, promised rate and the rate at which it is full: a
    ``capacity``, a filter's, or ``fpr`` given that differs is ignored with a warning, as the
    command line warns; ``fpr`` None: 0.001 for a new one), and a run that would take it past
    that rate is refused (``on_full``). ``format``, ``partition_by`` and ``options`` go to
    Spark's ``DataFrameWriter`` (``df.write.format(format)...save(path)``).
    ``mode``: ``"error"`` (``path`` must not exist) or ``"overwrite"``; not ``"append"``, since an
    append that crashed half way cannot be told from the data before it (write each dump to its
    own path, e.g. a date's partition directory, instead).

    ``window``: a sliding window of this length instead of a filter (module documentation,
    "Sliding windows"), in the unit of ``time``, this dump's event time (an integer, e.g. epoch
    seconds, not earlier than the last run's); ``capacity`` is then the keys of one window, and
    ``generations`` and ``lateness`` are as for ``WindowedFilter.for_event_time``, or
    ``window_config`` gives the whole configuration.

    The order of the commit (module documentation, "Committing a run"): the routing job decides
    and stages the new generation in the filter's directory, ``PENDING`` names ``path``, the
    write job writes and commits the output, and only then the new generation becomes the
    current one; nothing earlier is removed until then. A job that fails changes nothing (the
    output is removed if it did not exist before). A rerun after a crash anywhere writes the
    output the run that crashed would have written: before the commit, the filter is as it was
    and ``PENDING`` lets the rerun replace what the crashed run left at ``path``; after it, the
    new generation records the run (``path``, ``format``, the key, the order and the input's
    files), and a rerun of the same run, with file inputs, changes nothing and returns the state,
    also after later runs committed (the last 100 runs' records are kept). Another run to an
    output that one of those runs wrote is refused (it would replace that output, the command
    line's ``--force``), unless ``force``.
    """
    spark = df.sparkSession
    _classic(spark)
    _check_nulls(nulls)
    _check_on_full(on_full)
    request = _window_request(window, time, generations, lateness, window_config)
    if mode not in _WRITE_MODES:
        raise ValueError(
            f"mode {mode!r}: dedup_and_write writes with mode 'error' or 'overwrite' (an 'append' "
            "that crashed half way cannot be told from the data before it)"
        )
    store = _store_of(filter, spark)
    output = _OutputPath(spark, path)
    held = store.uri if store.local is None else f"file:{os.path.realpath(store.local)}"
    if _one_inside_the_other(output.name, held):
        # Spark's write of an output holding the filter (an overwrite removes what is at its
        # path first) would take the filter with it; an output inside the filter's directory
        # would go with the filter's, and could take a name of its objects.
        raise ValueError(f"the output {output.name} and the filter directory {store.uri} are one "
                         "inside the other: give them paths apart")
    order_terms = _order_terms(order)
    run = _run_record(df, key, order_terms, output.name, format)
    if broadcast_drops is None:
        broadcast_drops = _default_broadcast_drops(spark)
    step = _on_step or (lambda name: None)
    current = _open(store, committing=True)
    ours, stale = _crashed_runs(store, current, output.name)
    committed_runs = _committed_runs(current)
    this_run = _this_run(committed_runs, run, df)
    if this_run is not None and (output.exists() or not force):
        assert current is not None
        since = "" if this_run == current.number else (
            f", and generations up to {current.number} were committed since")
        if not output.exists():
            # Only while no run committed since is the filter before this run still at hand.
            undo = "" if since else (", rerun against a copy of the filter without its newest "
                                     f"manifest ({current.number:06d}.json)")
            raise RuntimeError(
                f"{store.uri}'s generation {this_run} already holds this run's keys (the same "
                f"inputs, written to {output.name}){since}, but {output.name} is gone: it cannot "
                f"be computed again from this filter; restore the output{undo}, or pass "
                "force=True to run it again anyway (the output will hold only the records whose "
                "keys the filter does not hold yet)"
            )
        _log.info("%s already committed this run in generation %d (output %s)%s: nothing to do",
                  store.uri, this_run, output.name, since)
        for name in stale:
            store.delete(name)
        return current
    existed = output.exists()
    if existed and not ours and _WRITE_MODES[mode] != "overwrite":
        raise FileExistsError(f"{output.name} exists; pass mode='overwrite' to replace it")
    wrote_it = next((number for number, record in committed_runs
                     if record.get("output") == output.name), None)
    if existed and not ours and not force and wrote_it is not None:
        # Written again from a filter that holds that run's keys, they would all be dropped.
        raise FileExistsError(
            f"{output.name} is the output of the run that committed {store.uri}'s generation "
            f"{wrote_it}, and this run is not that one (other inputs, key, order or format): it "
            "would replace that output; write to another path, or pass force=True to replace it"
        )
    if ours:
        _log.warning("%s: a run that did not commit was writing %s; it is replaced (two runs "
                     "of one filter at once are not told from a crash: run one at a time)",
                     store.uri, output.name)
    df = _stable_input(df, unstable_input)
    pending = None
    committing = False
    pinned = _pin_file_splits(spark)
    try:
        generation = _new_generation(current)
        try:
            staged = _decide(
                df, key, store, current, generation, order=order_terms, capacity=capacity,
                fpr=fpr, num_shards=num_shards, layout=layout, carry=True, write_drops=True,
                on_task=_on_task, window=request, regroup_drops_above=broadcast_drops,
                nulls=nulls, run=run, on_full=on_full,
            )
            pending = _write_pending(store, output.name, staged)
            for name in stale:  # a crashed run's, which this run's PENDING now stands for
                store.delete(name)
            step("staged")
            writer = _kept(df, key, nulls, store, staged.manifest, broadcast_drops).write
            writer = writer.format(format).mode("overwrite" if existed else "errorifexists")
            if partition_by is not None:
                columns = [partition_by] if isinstance(partition_by, str) else partition_by
                writer = writer.partitionBy(*columns)
            writer.options(**(options or {})).save(output.name)
            step("written")
            committing = True
            state = _publish(staged)
        except BaseException as error:

            def undo() -> None:
                # Back as it was: the filter never changed; an output that was not there before
                # (or was a crashed run's) goes, unless a run that committed meanwhile wrote it;
                # PENDING, then the staged objects, last, since PENDING vouches for the output.
                if (not existed or ours) and not _written_by_another(store, current, output.name,
                                                                     pending):
                    output.delete()
                if pending is not None:
                    store.delete(pending)
                store.delete(generation[1])

            _undo_failed_run(store, generation, error, undo, committing)
            raise
    finally:
        if pinned is not None:
            spark.conf.unset(pinned)
    step("committed")
    _clean_up(store, state)
    store.delete(pending)
    return state


def _one_inside_the_other(a: str, b: str) -> bool:
    """Whether the paths (URIs) `a` and `b` are one, or one holds the other."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def _written_by_another(store: _Store, base: Optional[ShardedFilter], output: str,
                        pending: Optional[str]) -> bool:
    """Whether another run of the same job, at the same time, wrote `output` and committed
    after `base`, or is writing it (its PENDING, not this run's `pending`): this run's failure
    must not take the output from it."""
    try:
        latest = _open(store)
        return (latest is not None and (base is None or latest.number > base.number)
                and (latest.manifest.get("run") or {}).get("output") == output) or (
                    _pending_for(store, output, pending))
    except Exception as error:  # the failure being handled is the one to raise
        _log.warning("%s: could not read the committed state: %s", store.uri, error)
        return False


def _run_record(
    df: DataFrame, key: str, order: List[_OrderTerm], output: str, format: str
) -> dict:
    """What identifies a dedup_and_write run (module documentation, "Committing a run"): the
    output, the format, the key, the order and a hash of the input's files, each with its size
    and modification time (empty when the input reads no files, and then no rerun is
    recognised): a file rewritten under its name is another input."""
    files = sorted(df.inputFiles())
    if not files:
        inputs = ""
    else:
        lines = [f"{name} {size} {modified}" for name, (size, modified) in
                 zip(files, _file_stamps(df.sparkSession, files))]
        inputs = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return {"output": output, "format": format, "key": key,
            "order": [list(map(str, term)) for term in order], "inputs": inputs,
            "inputs_by": "name size time"}


# How many committed runs a filter recalls (its manifest's "run", then its "earlier_runs"), so
# that a run retried, or run again, after other runs committed is still recognised.
_RUNS_RECALLED = 100


def _committed_runs(state: Optional[ShardedFilter]) -> List[Tuple[int, dict]]:
    """(generation, run record) of each dedup_and_write run that `state` recalls committing,
    newest first: the one that made it, then up to _RUNS_RECALLED - 1 before it."""
    if state is None:
        return []
    damaged = f"{state.root}'s manifest {state.number:06d}.json is damaged"
    run = state.manifest.get("run")
    if run is not None and not isinstance(run, dict):
        raise bulkbloom.FormatError(f"{damaged}: its run is not an object")
    earlier = state.manifest.get("earlier_runs", [])
    if not isinstance(earlier, list) or not all(
            isinstance(entry, dict) and isinstance(entry.get("generation"), int)
            and isinstance(entry.get("run"), dict) for entry in earlier):
        raise bulkbloom.FormatError(f"{damaged}: its earlier_runs is not a list of "
                                    "{generation, run}")
    runs = [(state.number, run)] if run else []
    return runs + [(entry["generation"], entry["run"]) for entry in earlier]


def _this_run(committed_runs: List[Tuple[int, dict]], run: dict, df: DataFrame) -> Optional[int]:
    """The generation that committed `run`, of `committed_runs` (newest first), or None. A run
    whose output a later run of them wrote again (``force=True``) is not found: what is there is
    that run's, and replacing it is that run's question (the caller refuses it)."""
    for index, (number, record) in enumerate(committed_runs):
        if _same_run(record, run, df):
            later = committed_runs[:index]
            if any(other.get("output") == record.get("output") for _, other in later):
                return None
            return number
    return None


def _same_run(committed: Optional[dict], run: dict, df: DataFrame) -> bool:
    """Whether the record `committed` (a manifest's "run") is `run`'s. A record of a bulkbloom
    before "inputs_by" hashed the file names alone: it is compared so (a rerun after an upgrade
    is still recognised, though not a file rewritten under its name)."""
    if not committed or not run["inputs"]:
        return False
    if "inputs_by" in committed:
        return committed == run
    names = hashlib.sha256("\n".join(sorted(df.inputFiles())).encode()).hexdigest()
    return committed == {**{k: v for k, v in run.items() if k != "inputs_by"}, "inputs": names}


def _file_stamps(spark: Any, files: List[str]) -> List[tuple]:
    """Each file's (size, modification time), from one listing of each directory they are in;
    (-1, -1) for one the listing does not show. The names are URIs (DataFrame.inputFiles), their
    escapes (a space as %20) kept until Hadoop's path reads them as a URI."""
    jvm = _jvm(spark, "dedup_and_write")
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    folders: dict = {}
    for file in files:
        folders.setdefault(file.rpartition("/")[0], {})
    for folder, stamps in folders.items():
        path = jvm.org.apache.hadoop.fs.Path(jvm.java.net.URI(folder))
        try:
            listed = path.getFileSystem(conf).listStatus(path)
        except Exception as error:  # py4j's error for a FileNotFoundException
            if "FileNotFoundException" not in str(error):
                raise
            continue
        for status in listed:
            stamps[str(status.getPath().getName())] = (int(status.getLen()),
                                                       int(status.getModificationTime()))
    return [folders[file.rpartition("/")[0]].get(urllib.parse.unquote(file.rpartition("/")[2]),
                                                 (-1, -1)) for file in files]


class _OutputPath:
    """An output path on the Hadoop filesystem Spark writes it with (any URI Spark writes)."""

    def __init__(self, spark: Any, path: PathLike) -> None:
        jvm = _jvm(spark, "dedup_and_write")
        hadoop_path = jvm.org.apache.hadoop.fs.Path(os.fspath(path))
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        self._fs = hadoop_path.getFileSystem(conf)
        self._path = self._fs.makeQualified(hadoop_path)
        if str(self._path.toUri().getScheme()) == "file":
            # One name for one local directory, however a symbolic link spells it: a run's
            # record, and the output a committed run wrote, are recognised through any.
            real = os.path.realpath(str(self._path.toUri().getPath()))
            self._path = self._fs.makeQualified(jvm.org.apache.hadoop.fs.Path("file", None, real))
        self.name = self._path.toString()

    def exists(self) -> bool:
        return bool(self._fs.exists(self._path))

    def delete(self) -> None:
        self._fs.delete(self._path, True)


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
    fpr: float = _FPR,
    num_shards: Optional[int] = None,
    layout: Optional[bulkbloom.Layout] = None,
    nulls: str = "error",
    on_full: str = "error",
) -> str:
    """Builds a new sharded filter of every key of ``df`` in the directory ``path`` (replacing
    the filter there, atomically) and returns ``path``. Sizing and ``on_full`` as for ``dedup``;
    ``nulls`` ``"keep"`` or ``"drop"`` leaves null keys out, ``"error"`` stops at the first."""
    _classic(df.sparkSession)
    _check_nulls(nulls)
    _check_on_full(on_full)
    store = _store_of(path, df.sparkSession)
    _decide_and_publish(
        df, key, store, order=[], capacity=capacity, fpr=fpr, num_shards=num_shards,
        layout=layout, carry=False, write_drops=False, on_task=None, nulls=nulls,
        on_full=on_full,
    )
    return str(store.local) if store.local is not None else store.uri


def query(
    df: DataFrame, key: str, filter_path: PathLike, *, column: str = "maybe_present"
) -> DataFrame:
    """``df`` with a boolean ``column``: True where the sharded filter at ``filter_path`` may
    hold the record's key (never False for a key it holds). Nothing is shuffled: each task maps
    the shard files its keys need (pages read on first touch). The filter's committed
    generation when ``query`` is called is the one read. The filter must be on the local
    filesystem, at the same place on every executor (local mode, a shared mount)."""
    _classic(df.sparkSession)
    state = _open(_store_of(filter_path, df.sparkSession))
    if state is None:
        raise FileNotFoundError(f"{filter_path} holds no sharded filter (no manifest)")
    if state.store.local is None:
        raise ValueError(
            f"query maps the shard files of {state.store.uri} on the executors, which only a "
            "filter on the local filesystem allows (a shared mount, or local mode): copy it "
            "to one"
        )
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
