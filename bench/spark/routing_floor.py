"""Times the ways a dump's keys can reach their shard's task on Spark, without deciding anything:
what moving the routed rows costs, apart from what the shard tasks do with them.

    python bench/spark/routing_floor.py --dump /tmp/spark-dump-20M --rounds 3

Each variant routes every (key, row id) of the dump to its shard's partition as `bulkbloom.spark`
does (the filter sized for the dump's rows at 0.1 %, the module's default shards) and ends in a
sink that touches every routed row and keeps nothing:
  jvm       the routed rows sorted by row id in the JVM (`sortWithinPartitions`) into Spark's
            `noop` sink: the least a shard task written for the JVM would pay.
  python    the routed rows into a `mapInArrow` that counts them: what the module's shard stage
            pays before its own work (sort, insert_if_absent, writes).
  packed    no row-by-row shuffle: a `mapInArrow` over the key and row-id columns computes each
            key's shard and sends one row per (map partition, shard) holding its keys and row ids
            as one binary value; a second `mapInArrow` counts them.
  grouped   the same packing in the JVM: `collect_list` of the keys and row ids grouped by shard
            and map partition, then a `mapInArrow` counts them.
The variants alternate (forward, then reversed) after one warm-up round, which is not reported.
Each variant but `jvm` counts the rows it received, and the run stops if any row went missing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import bulkbloom
    from bulkbloom import spark as bbspark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.appName("bulkbloom-routing-floor")
        .config("spark.master", args.master)
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.parquet(str(args.dump))
    rows = df.count()
    layout = bbspark._spark_seeded(bulkbloom.Layout.promising(rows, 0.001))
    num_shards = bbspark._default_shards(spark, layout, rows)
    layout_args = tuple(layout)
    routed, _ = bbspark._routed(df, "event_id", "integer", [], layout, num_shards)
    by_shard = F.element_at(
        F.expr(f"array({', '.join(map(str, bbspark._partition_keys(num_shards)))})"),
        F.col("shard") + 1,
    )

    def count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})

    def pack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = list(batches)
        if not received:
            return
        table = pa.Table.from_batches(received)
        keys = table.column(0).to_numpy()
        row_ids = table.column(1).to_numpy()
        shards = bulkbloom.shard_of(bulkbloom.Layout(*layout_args), keys, num_shards)
        order = np.argsort(shards, kind="stable")
        ends = np.cumsum(np.bincount(shards.astype(np.int64), minlength=num_shards))
        keys, row_ids = keys[order], row_ids[order]
        present, payloads = [], []
        for shard in range(num_shards):
            begin = 0 if shard == 0 else ends[shard - 1]
            if ends[shard] > begin:
                present.append(shard)
                payloads.append(
                    keys[begin : ends[shard]].tobytes() + row_ids[begin : ends[shard]].tobytes()
                )
        yield pa.RecordBatch.from_pydict(
            {"shard": pa.array(present, pa.int32()), "payload": pa.array(payloads, pa.binary())}
        )

    def count_packed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        total = sum(pc.sum(pc.binary_length(b.column(1))).as_py() or 0 for b in batches)
        yield pa.RecordBatch.from_pydict({"n": [total // 16]})

    def count_grouped(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pydict(
            {"n": [sum(len(pc.list_flatten(b.column(2))) for b in batches)]}
        )

    narrow = df.select(
        F.col("event_id").alias("key"), F.monotonically_increasing_id().alias("row")
    )
    packed = narrow.mapInArrow(pack, "shard int, payload binary").repartition(
        num_shards, by_shard
    )
    shard = bbspark._sql_shard(F.col("key"), "integer", layout, num_shards)
    grouped = (
        narrow.select("key", "row", shard.alias("shard"), F.spark_partition_id().alias("map"))
        .groupBy("shard", "map")
        .agg(F.collect_list("key").alias("keys"), F.collect_list("row").alias("rows"))
        .repartition(num_shards, by_shard)
    )

    def total(frame) -> int:
        return sum(row.n for row in frame.collect())

    def into_jvm_sort() -> Optional[int]:
        routed.sortWithinPartitions(bbspark._ROW).write.format("noop").mode("overwrite").save()
        return None  # the noop sink counts nothing

    variants: Dict[str, Callable[[], Optional[int]]] = {
        "jvm": into_jvm_sort,
        "python": lambda: total(routed.mapInArrow(count_rows, "n long")),
        "packed": lambda: total(packed.mapInArrow(count_packed, "n long")),
        "grouped": lambda: total(grouped.mapInArrow(count_grouped, "n long")),
    }
    times: Dict[str, List[float]] = {name: [] for name in variants}
    print(f"{rows:,} rows, {num_shards} shards, {args.master}", flush=True)
    for round_number in range(args.rounds + 1):
        names = list(variants) if round_number % 2 == 0 else list(variants)[::-1]
        for name in names:
            started = time.monotonic()
            moved = variants[name]()
            elapsed = time.monotonic() - started
            if moved is not None and moved != rows:
                raise SystemExit(f"{name} moved {moved:,} rows, not {rows:,}")
            if round_number > 0:
                times[name].append(elapsed)
            print(f"round {round_number} {name}: {elapsed:.2f} s", flush=True)
    spark.stop()
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.2f} s "
              f"({', '.join(f'{v:.2f}' for v in sorted(values))})")


if __name__ == "__main__":
    main()
