import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

import bulkbloom
from bulkbloom import spark as bbspark

work = Path(tempfile.mkdtemp(prefix="spark-dedup-example-"))


def write_dump(day: int, first_ids: np.ndarray) -> str:
    """A day's events in 4 Parquet files: 10 % of the rows repeat an earlier event_id."""
    rng = np.random.default_rng(day)
    repeats = rng.choice(first_ids, len(first_ids) // 9)
    ids = np.concatenate([first_ids, repeats])
    rng.shuffle(ids)
    ts = day * 86_400 + np.arange(len(ids))
    table = pa.table({"event_id": ids, "ts": ts, "payload": [f"event {i}" for i in ids]})
    path = work / f"day{day}"
    path.mkdir()
    for part, rows in enumerate(np.array_split(np.arange(len(ids)), 4)):
        pq.write_table(table.take(rows), path / f"part-{part}.parquet")
    return str(path)


os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this Python
spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "8")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
filter_dir = str(work / "events.filter")  # a sharded filter kept across daily dumps

seen = None  # the event_ids of earlier days, for the exact answer beside bulkbloom's
for day, first_ids in [(1, np.arange(0, 90_000)), (2, np.arange(60_000, 150_000))]:
    events = spark.read.parquet(write_dump(day, first_ids))
    # The first occurrence of each event_id by ts; event_ids seen on an earlier day are dropped too.
    # The filter's new state is committed only once the output is written.
    bbspark.dedup_and_write(events, "event_id", str(work / f"unique-day{day}"), filter=filter_dir,
                            order="ts", capacity=150_000, fpr=0.001, num_shards=4)

    rows_in = events.count()
    kept = spark.read.parquet(str(work / f"unique-day{day}")).count()
    ids = events.select("event_id").distinct()
    new_ids = ids if seen is None else ids.join(seen, "event_id", "left_anti")
    exact = new_ids.count()  # what an exact dedup across the days keeps
    seen = ids if seen is None else seen.union(ids).distinct()
    # The model: each new key is dropped falsely at the filter's rate for the keys before it.
    state = bbspark.open_filter(filter_dir)
    model = bulkbloom.Filter.from_layout(state.layout.shape, state.layout.num_blocks,
                                         seed=state.layout.seed, hash=state.layout.hash,
                                         index=state.layout.index)
    before = seen.count() - exact
    expected = sum(model.expected_fpr(before + n) for n in range(exact))
    print(f"day {day}: {rows_in:,} rows in, {kept:,} kept, {rows_in - kept:,} dropped; "
          f"exact dedup keeps {exact:,}: {exact - kept} false drops (model {expected:.1f})")

print(f"filter: {state.num_shards} shards of {state.layout}")
spark.stop()
shutil.rmtree(work)
