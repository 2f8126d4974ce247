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
       identity hash, which sets the bits the keys would (a window's shard task gives them to
       ``WindowShard.insert_hashes_if_absent``, the same flags and bits). For any other layout
       (a carried filter keeps its seed) the shard is ``bulkbloom.shard_of`` in a vectorised
       Arrow function and the key is shuffled. Only the hash (or
       key), the row id and the order values are shuffled, never whole records,
       hash-partitioned so that each shard has a partition, and so a task, of its own. The task
       (``mapInArrow``) gathers its shard's rows in its Python worker, sorts them by (order, row
       id), opens that shard's file of the current generation (or an empty shard), runs
       ``insert_if_absent``, saves the shard under a name unique to the task attempt, writes the
       row ids it dropped, sorted, beside it, and returns one row naming both files.
       Where the filter is sized from the input's row count (no ``capacity``, a new filter; a
       window's run sizing, "Sliding windows"), a Parquet input read whole (no filter on a
       column) is counted from its files' footers, which reads no column, and the routing reads
       the input; any other input's counting job computes the routed columns and caches them
       (``persist``: Spark's storage memory, spilling to disk; about 16 bytes a row and the
       order values), and the routing reads them from the cache, so the input is read once for
       both; the cache is dropped once the shards are decided.
    2. Staging (the driver, after every shard's task succeeded): the files the successful
       attempts named become a complete new generation in the job's work directory. ``dedup``
       and ``build`` commit it at once (below); ``dedup_and_write`` only after step 3's write
       ("Committing a run").
    3. Filtering (lazy, in the returned DataFrame, or in ``dedup_and_write``'s write job): each
       input partition is read again with the same row ids. When the run dropped at most
       ``broadcast_drops`` rows (default: as many as
       ``spark.sql.autoBroadcastJoinThreshold`` holds at 8 bytes a row id, 1,310,720 at its
       default 10 MiB; the broadcast took about 80 bytes of Spark's storage memory a dropped
       row in bench/RESULTS.md), the driver reads the drops files and makes them a bitmap over
       the row ids, a stride of 64-bit words for each input partition up to the last row any
       partition dropped (row ``r`` of partition ``p`` is bit ``r & 63`` of word
       ``p * stride + (r >> 6)``), and where it takes at most 768 KiB (and the bytes of
       ``broadcast_drops`` row ids) it is a literal array in the filtering's plan, which Spark's
       generated code indexes: no job, no broadcast, no join, and the records never leave the
       JVM. A larger bitmap (an input of more than about 6M rows; its size is in the manifest,
       ``"drops_words"``, so the driver does not read the files for it) goes as rows, one a
       word with a dropped row (``row_id >> 6``, its bits ``row_id & 63``), which Spark reads
       from the drops files in one task and broadcasts to every task, and a left anti join on
       the word and its bit removes the dropped rows: 64 records in turn look up one entry. Beyond
       ``broadcast_drops`` (a dump of billions of
       rows drops too many to broadcast) the staging waits for one more Spark job, which
       shuffles the dropped row ids alone (8 bytes a dropped row) to regroup them into one
       sorted file per input partition, and ``filter`` on a vectorised pandas function of the
       row id removes them: only the row ids go to Python, a batch at a time, and each input
       partition's task reads its own drops file once, so no row id list is broadcast or
       joined, and no task reads the drops of every shard (at 22,000 shards that would be
       22,000 files a task). All three give the same rows in the same order.

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
    checked: keep the input still while the job runs. How Spark cuts files into partitions
    depends on the cores the cluster has when it plans a query (``spark.sql.files.minPartitionNum``,
    by default ``spark.sql.leafNodeDefaultParallelism`` or the executors' cores), so executors
    that join or leave between the routing and the filtering (dynamic allocation) would number
    the rows otherwise: unless set, ``minPartitionNum`` is set to its value at the call,
    ``dedup_and_write`` unsetting it when it returns, ``dedup`` leaving it for the DataFrame it
    returns, which reads the input again at each action.

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
    window (one period's share, as ``--capacity``), else for every row of the run (counted
    with the routing's read, "How it runs"), as the CLI does for its input.

Task retries and speculative execution
    An attempt only reads the committed generation and writes files named for itself (or, on a
    filter directory the executors cannot reach, hands in its files' bytes); the driver takes
    what the attempt Spark counted handed in, so a retried task starts from the shard as it was,
    and a duplicate attempt's files are left out and removed. A job that fails changes nothing
    that any reader reads.

Committing a run (``dedup_and_write``)
    The order is: (a) the routing job stages the new generation, its objects in a directory of
    its own (``PATH/gen-<N>-<run>/``); (b) ``PATH/PENDING-<run>.json`` is written, naming the
    output path, the generation current when the run began and the staged one; (c) Spark writes
    the output and commits it (its output committer: ``_SUCCESS`` and the files in place); (d)
    the staged generation is committed by creating its manifest (below), with the run's record
    in it; (e) ``PENDING-<run>.json`` is removed. A failure the driver sees (a failing task, a
    write that raises, another run that committed first: ``CommitConflictError``, a
    ``RuntimeError``, also when that commit removed this run's staged files under it) removes
    the output if it was not there before, the staged generation and its ``PENDING``, and
    changes nothing else. A driver killed
    before (d) leaves the filter as it was: the rerun finds the ``PENDING`` naming its output and
    the current generation, so it replaces what the crashed run left at the output (also with
    ``mode="error"``) and writes exactly what the crashed run would have; a crashed run's
    ``PENDING`` naming another output is logged and its output left alone. After (d) the
    manifest's ``"run"`` (the output, its format, the key, the order and a SHA-256 of the input's
    sorted file names, each with its size and modification time: a file rewritten under its name
    is another input) matches a rerun of the same job, which changes nothing and returns the
    committed state, or, if the output is gone, raises (the filter already holds the run's
    keys; ``force=True`` runs it again anyway). Each manifest also recalls the records of the 99
    runs before its own (``"earlier_runs"``), so a run retried after other jobs committed, or a
    day's job run again later, is recognised the same way, unless a later one of them wrote its
    output again (``force=True``): the output is then that run's. An input that reads no files
    (an in-memory DataFrame) has no such record: its rerun after (d) dedups again. Any other run
    to an output that a recalled run wrote (a local output named by its real path, through
    symbolic links) is refused before anything runs, in any mode, as the CLI refuses it (its
    keys are in the filter: nearly every record would be dropped), unless ``force=True``, and so
    is an output inside the filter directory or holding it (Spark's overwrite would remove the
    filter). A
    run that fails leaves an output that a run which committed meanwhile wrote, or whose
    ``PENDING`` names it, is writing (the same job started twice). Nothing is removed until a
    run commits (d); then what neither the new manifest nor the one before it names is
    removed.
    Nothing tells a run still writing from one that crashed: a ``PENDING`` from the current
    state naming this run's output is taken for a crashed run's (logged), so run one job a
    filter at a time.

The sharded filter directory (``filter=`` / ``build`` / ``query`` / ``scratch=``)
    Any URI Spark reads (``hdfs://``, ``s3a://``, ``gs://``, ``abfs://``, ``viewfs://``,
    ``file://``), or a path, resolved against Spark's default filesystem (``fs.defaultFS``) as
    Spark resolves the paths it reads, through the driver JVM's
    ``org.apache.hadoop.fs.FileSystem`` with Spark's Hadoop configuration. On the local
    filesystem (a ``file:`` URI, or a path where ``fs.defaultFS`` is ``file:``) the executors
    read and write the shard files in place, so the directory must be at the same place on every
    host (local mode, a shared mount), and every object is written under a temporary name,
    fsynced and renamed (the manifest linked) into place. On any other filesystem the executors
    never open it: Spark reads the base generation's shard files to the shard tasks (its
    ``binaryFile`` source, in the routing's shuffle), and the tasks hand their new shard and
    drops files to the driver, which writes them: the driver then holds one run's changed shard
    files at once (``spark.driver.maxResultSize`` must allow them), and ``query`` is refused.
    Nothing relies on an atomic rename or a lock, so object stores hold it::

    PATH/manifests/000007.json      the commit of generation 7 (JSON; the newest names the current
                                    state), created last, only if absent
    PATH/gen-000007-<run>/shard-00000.bbf ... shard-{S-1}.bbf
    PATH/gen-000007-<run>/drops-00000.parquet ...   dedup's dropped row ids of that run (row_id,
                                    sorted) by shard, or drops-p000000.parquet ... by input
                                    partition (the row id's upper 31 bits; local filesystem only)
    PATH/PENDING-<run>.json         a dedup_and_write run's output between its staging and commit
                                    (JSON: output, base, generation)

    Every object but a manifest is written once, under a name no other run uses (the run's
    directory). A run starting from manifest N stages generation N + 1 and commits it by
    creating ``manifests/<N+1>.json`` with overwrite off and, on S3A, the conditional create
    (``If-None-Match``, Hadoop 3.4.2 on): HDFS, S3 and the local filesystem (link(2)) create it
    for exactly one of two runs, and the other is refused with an error naming the generation
    the other committed, its staged objects and output removed. A store without a conditional
    create (S3A before Hadoop 3.4.2, some S3-compatible stores) cannot tell two runs apart: there,
    run one job a filter at a time. Where a file is visible from its creation (HDFS, ABFS, the
    local disk through Hadoop), a driver killed while writing a manifest leaves it empty or cut
    short, never committed: readers read the manifest before it, and a run that would commit is
    refused (``bulkbloom.FormatError`` naming it) until it is an hour old, then removes it; a
    manifest damaged otherwise stays an error. A write that fails before its stream is closed is
    aborted where the store can (S3A: nothing is uploaded), else the object it made removed. A
    manifest records ``"format": "bulkbloom sharded filter"``,
    ``"version": 2``, the generation number, its ``directory``, the ``base`` generation it was
    made from, a ``writer`` id unique to the run, ``num_shards`` (S), the whole filter's
    ``layout`` (shape, num_blocks, hash, seed, index), the key kind (``"integer"`` or
    ``"bytes"``), the sizing (capacity, fpr; a filter's also its ``target``, the rate at which it
is full, and ``key_count``, its distinct keys: docs/FORMAT.md, "Sharded filter directories"), the
``shards`` and ``drops`` objects (paths within
    PATH: a shard no record of the run went to is the earlier generation's object, named again),
    how the drops are grouped (``"drops_by"``: ``"shard"`` or ``"input partition"``), how many
    rows were dropped (``"dropped"``) and the words of their bitmap (``"drops_words"``, "How it
    runs", 3), and, written by ``dedup_and_write``, the ``"run"`` that made
    it ("Committing a run"), with the ``"earlier_runs"`` it recalls; a sliding window's (``window=``) also its ``window`` (clock, window,
    generations, lateness), the event ``time`` of the last run, the whole window's keys in each
    filter (``window_keys``) and the run's ``expected_false_drops`` (the sum of its window
    shards' own, ``ShardedFilter.expected_false_drops``), and its shards are window
    shard files (``shard-00000.bbw``, ``bulkbloom.WindowShard``). Each shard file is a shard file
    of the filter file format (docs/FORMAT.md): its header records the whole layout and which
    shard of S it is, and stores the shard's distinct-key count; ``bulkbloom.FilterShard.load``
    reads one, and ``bulkbloom.concat`` of all S gives the one filter, which ``bulkbloom`` (the
    CLI) reads. After a commit, what neither the new manifest nor the one before it names (a
    DataFrame returned earlier may still read that one) is removed, up to the new generation's
    number: older manifests and generations, and what crashed or refused runs left; a generation
    numbered past it is a running job's, left alone. A new filter is made only in a new or
    empty directory (or one that only runs that never committed wrote in): a file, or a
    directory holding anything else (another tool's, such as the CLI's state directory), is
    refused (``bulkbloom.FormatError``), as is a manifest without the fields above or a
    generation whose shard file is missing (or, on the local filesystem, truncated or another
    shard's: the driver maps each, reading its header), before any job runs. A directory of
    version 1 (a ``CURRENT`` file naming ``gen-N/``, which holds ``manifest.json``) is read as
    it is, and its first commit writes version 2 (logged), after which older bulkbloom
    versions cannot read it.
"""

from __future__ import annotations

import importlib.util

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
    # Found, not imported: every Python worker that runs a shard task imports this package, and
    # pandas (0.36 s of its 0.65 s import) is needed only by the filtering's pandas function.
    if importlib.util.find_spec("pandas") is None:
        raise ImportError("No module named 'pandas'")
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ImportError(
        "bulkbloom.spark needs pyspark (4.0 or newer), pyarrow and pandas: pip install"
        f" 'bulkbloom[spark]' ({error})"
    ) from error

from ._api import build, dedup, dedup_and_write, query
from ._plan import (  # the routing's parts, which the tests check against Spark's own
    _KEY, _ROW, SPARK_SEED, _default_shards, _hashed_layout, _partition_keys, _routed,
    _spark_hash_of_ints, _spark_seeded, _sql_shard,
)
from ._store import FORMAT, FORMAT_VERSION, CommitConflictError, ShardedFilter, _empty_shard, \
    _publish, _stage, open_filter

__all__ = ["dedup", "dedup_and_write", "build", "query", "open_filter", "CommitConflictError",
           "FORMAT", "FORMAT_VERSION", "SPARK_SEED"]
