"""bulkbloom.spark on a local Spark keeps exactly the records `bulkbloom dedup` keeps, with the same
filter layout and order, for any shard count and core count, also across dumps with a carried
filter, through task retries and failed jobs. Skipped only where Java is absent."""

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet  # noqa: F401  (pa.parquet)
import pytest

import bulkbloom
from conftest import run_cli, write_rfc4180_csv

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java (Spark needs Java 17 or newer): apt-get install openjdk-17-jre-headless",
                allow_module_level=True)

from pyspark import TaskContext  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from bulkbloom import spark as bbspark  # noqa: E402
from bulkbloom.spark import _api, _store  # noqa: E402

RECORDS = 24_000
FPR = 0.2  # so that false drops are many, and an answer out of order shows


@pytest.fixture(scope="module", params=["local[1,4]", "local[2,4]"])
def spark(request):
    """One Spark per core count (local[N,F]: N cores, a task may fail F - 1 times), one at a time."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(request.param)
        .appName("bulkbloom-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "3")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def dump(seed: int, count: int = RECORDS, old: np.ndarray = None) -> np.ndarray:
    """Keys with a quarter repeats (and, given `old`, some keys of an earlier dump)."""
    rng = np.random.default_rng(seed)
    fresh = rng.integers(0, 2**64, size=count * 3 // 4, dtype=np.uint64)
    repeats = rng.choice(fresh if old is None else np.concatenate([fresh, old]), count - len(fresh))
    keys = np.concatenate([fresh, repeats])
    rng.shuffle(keys)
    return keys


def records(keys: np.ndarray, first_seq: int = 0) -> pa.Table:
    """(event_id, seq, payload) records of `keys` in order, seq numbering them from first_seq."""
    seq = np.arange(first_seq, first_seq + len(keys), dtype=np.int64)
    return pa.table({
        "event_id": keys.view(np.int64),
        "seq": seq,
        "payload": [f"p{s}" for s in seq],
    })


def frame(spark, keys: np.ndarray, first_seq: int = 0, shuffled: bool = False):
    """records() as a DataFrame; shuffled: the rows in another order, so that only
    `order="seq"` gives theirs."""
    table = records(keys, first_seq)
    if shuffled:
        table = table.take(np.random.default_rng(7).permutation(len(keys)))
    return spark.createDataFrame(table.to_pandas())


def parquet_dump(spark, folder: Path, keys: np.ndarray, files: int):
    """records() of `keys` written as `files` Parquet files of equal rows in `folder`, read back."""
    table = records(keys)
    folder.mkdir()
    for part in range(files):
        pa.parquet.write_table(table.slice(part * len(keys) // files, len(keys) // files),
                               folder / f"part-{part}.parquet")
    return spark.read.parquet(str(folder))


def cli_dedup(cli, tmp_path, name, keys, *args):
    """The keys `bulkbloom dedup` keeps, in order."""
    source = tmp_path / f"{name}.u64"
    out = tmp_path / f"{name}.out.u64"
    keys.astype("<u8").tofile(source)
    run_cli(cli, "dedup", str(source), "-o", str(out), "--stats", "none", *args)
    return np.fromfile(out, dtype="<u8")


def kept_records(keys: np.ndarray, kept_keys: np.ndarray, first_seq: int = 0) -> np.ndarray:
    """The seq of each kept key: a key is kept, if at all, at its first occurrence."""
    unique, first = np.unique(keys, return_index=True)
    at = np.searchsorted(unique, kept_keys)
    assert (unique[at] == kept_keys).all()
    return first[at] + first_seq


def spark_kept(df) -> tuple:
    table = df.toArrow().sort_by("seq")
    return (table.column("event_id").to_numpy().view(np.uint64), table.column("seq").to_numpy(),
            table.column("payload").to_pylist())


def assert_same_records(df, keys, cli_kept, first_seq=0):
    expected_seq = kept_records(keys, cli_kept, first_seq)
    got_keys, got_seq, payload = spark_kept(df)
    np.testing.assert_array_equal(got_keys, cli_kept)
    np.testing.assert_array_equal(got_seq, expected_seq)
    assert payload == [f"p{s}" for s in expected_seq]


def written(spark, df, key, **options):
    """What dedup_and_write wrote of `df`, read back: the records it kept (a new output path in
    the filter's parent directory)."""
    out = Path(options["filter"]).parent / f"out-{uuid.uuid4().hex}"
    bbspark.dedup_and_write(df, key, out, **options)
    return spark.read.parquet(str(out))


def plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def shards_filter(path) -> bulkbloom.Filter:
    state = bbspark.open_filter(path)
    return bulkbloom.concat(state.load(i) for i in range(state.num_shards))


def entries(path: Path) -> list:
    """The filter directory's entries, a generation's directory without its run's suffix."""
    return sorted(re.sub(r"^(gen-\d+)-[0-9a-f]+$", r"\1", p.name) for p in path.iterdir())


def listing(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else None
            for p in sorted(path.rglob("*"))}


# Seed 42 is routed by Spark's own xxhash64, seed 0 by bulkbloom.shard_of in an Arrow function.
ROUTINGS = [pytest.param(bbspark.SPARK_SEED, id="sql-routing"), pytest.param(0, id="arrow-routing")]


@pytest.mark.parametrize("seed", ROUTINGS)
@pytest.mark.parametrize("num_shards", [1, 3, 7])
def test_dedup_keeps_what_the_cli_keeps(spark, cli, tmp_path, num_shards, seed, monkeypatch):
    keys = dump(1)
    expected = cli_dedup(cli, tmp_path, "cli", keys, "--capacity", str(RECORDS), "--fpr", str(FPR),
                         "--seed", str(seed), "--filter", str(tmp_path / "cli.bbf"))
    layout = bulkbloom.Filter.load(tmp_path / "cli.bbf").layout
    assert RECORDS * 3 // 4 - len(expected) > 20  # false drops, which the order decides

    df = frame(spark, keys, shuffled=True)
    unique = written(spark, df, "event_id", order="seq", layout=layout, fpr=FPR,
                     num_shards=num_shards, filter=tmp_path / "f")
    assert unique.columns == df.columns
    assert_same_records(unique, keys, expected)
    state = bbspark.open_filter(tmp_path / "f")
    assert state.num_shards == num_shards and state.layout == layout
    # The manifest's size of the dropped rows' bitmap is the one the drops files make.
    words, _ = _api._dropped_bitmap(state.store, state.manifest["drops"], 1 << 40)
    assert state.manifest["drops_words"] == len(words) > 0
    # The input's own order when no order is given (createDataFrame keeps it), the dropped rows
    # as a bitmap in the plan, as the bitmap's words broadcast to a join (a bitmap larger than a
    # plan takes) and, past broadcast_drops, looked up by a Python function of the row id.
    # The driver reads the drops files only for a bitmap that fits in the plan: the join's
    # are read by Spark alone.
    read_by_driver = []
    bitmap_of = _api._dropped_bitmap
    monkeypatch.setattr(_api, "_dropped_bitmap",
                        lambda *args: read_by_driver.append(1) or bitmap_of(*args))
    for broadcast_drops, bitmap_bytes, how in ((None, _api._BITMAP_BYTES, "bitmap"),
                                               (None, 0, "join"), (0, _api._BITMAP_BYTES, "udf")):
        monkeypatch.setattr(_api, "_BITMAP_BYTES", bitmap_bytes)
        read_by_driver.clear()
        in_order = bbspark.dedup(frame(spark, keys), "event_id", layout=layout, fpr=FPR,
                                 num_shards=num_shards, broadcast_drops=broadcast_drops)
        assert filtering(in_order) == how
        assert len(read_by_driver) == (how == "bitmap"), how
        assert_same_records(in_order, keys, expected)


def filtering(df) -> str:
    """How dedup's DataFrame `df` removes the dropped rows: "bitmap" (in the plan: a local
    relation's is evaluated in planning, so the analyzed plan shows it), "join" or "udf"."""
    if "UnsafeArrayData" in df._jdf.queryExecution().analyzed().toString():
        return "bitmap"
    physical = plan(df)
    if "BroadcastHashJoin" in physical:
        return "join"
    return "udf" if "ArrowEvalPython" in physical else "none"


def test_the_bitmap_of_dropped_rows_ends_at_each_partitions_last_drop(spark, cli, tmp_path):
    """The dropped rows' bitmap in the filtering's plan gives each input partition the words up to
    the last row dropped from any: a later row is kept, not looked up in the next partition's
    words (which have its bits set here), in Spark's generated code over a file input."""
    files, rng = 4, np.random.default_rng(31)
    # Each file: 64 keys, their repeats (dropped), then 128 new keys; an input partition holds
    # whole files, so its last two words (after its last drop) meet the next partition's first.
    fresh = rng.integers(0, 2**64, size=(files, 192), dtype=np.uint64)
    keys = np.concatenate([np.concatenate([f[:64], f[:64], f[64:]]) for f in fresh])
    expected = cli_dedup(cli, tmp_path, "cli", keys, "--capacity", str(len(keys)), "--fpr",
                         "0.001", "--seed", str(bbspark.SPARK_SEED), "--filter",
                         str(tmp_path / "cli.bbf"))
    assert len(expected) == fresh.size
    df = parquet_dump(spark, tmp_path / "in", keys, files)
    rows = df.select(F.monotonically_increasing_id().alias("row")).toArrow().column(0).to_numpy()
    assert len(np.unique(rows >> 33)) > 1
    layout = bulkbloom.Filter.load(tmp_path / "cli.bbf").layout
    unique = bbspark.dedup(df, "event_id", layout=layout, num_shards=3)
    assert filtering(unique) == "bitmap" and "UnsafeArrayData" in plan(unique)
    assert_same_records(unique, keys, expected)


MASK = 2**64 - 1
PRIME1, PRIME2 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F
PRIME3, PRIME4, PRIME5 = 0x165667B19E3779F9, 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def rotl(x: int, bits: int) -> int:
    return ((x << bits) | (x >> (64 - bits))) & MASK


def xxh64_of_u64(key: int, seed: int) -> int:
    """XXH64 of a uint64's 8 little-endian bytes (include/bulkbloom/detail/block_math.hpp)."""
    h = (seed + PRIME5 + 8) & MASK
    h ^= rotl(key * PRIME2 & MASK, 31) * PRIME1 & MASK
    h = (rotl(h, 27) * PRIME1 + PRIME4) & MASK
    for shift, prime in ((33, PRIME2), (29, PRIME3), (32, 1)):
        h = (h ^ (h >> shift)) * prime & MASK
    return h


def key_with_xxh64(target: int, seed: int) -> int:
    """The uint64 key whose XXH64 is `target`: every step of XXH64 of 8 bytes is invertible."""
    def unshift(y: int, shift: int) -> int:
        x = y
        for _ in range(64 // shift + 1):
            x = y ^ (x >> shift)
        return x

    h = target
    for shift, prime in ((32, 1), (29, PRIME3), (33, PRIME2)):
        h = unshift(h * pow(prime, -1, 2**64) & MASK, shift)
    h = rotl((h - PRIME4) * pow(PRIME1, -1, 2**64) & MASK, 64 - 27)
    h ^= (seed + PRIME5 + 8) & MASK
    return rotl(h * pow(PRIME1, -1, 2**64) & MASK, 64 - 31) * pow(PRIME2, -1, 2**64) & MASK


def boundary_hashes(num_blocks: int, num_shards: int, index: str) -> list:
    """The hashes either side of where each shard (some of them, for many) begins."""
    shards = range(num_shards) if num_shards <= 70 else [
        *range(20), *range(num_shards - 20, num_shards), *range(0, num_shards, num_shards // 20)]
    hashes = []
    for shard in shards:
        block = shard * num_blocks // num_shards
        # The smallest hash of `block`: high32 scales h >> 32, full64 the whole h.
        if index == "high32":
            first = -(-block * 2**32 // num_blocks) << 32
        else:
            first = -(-block * 2**64 // num_blocks)
        hashes += [h for h in (first - 1, first, first + 1) if 0 <= h <= MASK]
    return hashes


SHARD_CASES = [
    (num_blocks, num_shards)
    for num_blocks in (1, 7, 130, 30_713, 3_071_211_965, 2**32 - 1)
    for num_shards in (1, 2, 3, 7, 64, 22_000, num_blocks, 2**31)
    if num_shards <= num_blocks and num_blocks * num_shards < 2**63
]


def test_the_sql_shard_is_shard_of_at_the_shard_boundaries(spark):
    """Spark's xxhash64 is the library's hash with seed 42, for integer, string and binary keys,
    and the SQL shard expression computes DESIGN §9's shard without overflowing Spark's signed,
    ANSI-checked longs, at the hashes either side of every shard's first block."""
    extremes = [0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, MASK]
    hashes = set(extremes)
    for num_blocks, num_shards in SHARD_CASES:
        for index in ("high32", "full64"):
            hashes.update(boundary_hashes(num_blocks, num_shards, index))
    hashes = np.array(sorted(hashes), dtype=np.uint64)
    keys = np.array([key_with_xxh64(int(h), bbspark.SPARK_SEED) for h in hashes], dtype=np.uint64)
    assert [xxh64_of_u64(int(k), bbspark.SPARK_SEED) for k in keys[:50]] == hashes[:50].tolist()
    rng = np.random.default_rng(14)
    # Strings of every length XXH64 treats differently (< 4, < 8, < 32, >= 32 bytes), not ASCII.
    words = ["".join(map(chr, rng.integers(32, 0x3000, size=n))) for n in rng.integers(0, 90, 600)]
    blobs = [rng.bytes(n) for n in rng.integers(0, 90, 600)]
    integers = spark.createDataFrame(pa.table({"hash": hashes.view(np.int64),
                                               "key": keys.view(np.int64),
                                               "small": (keys % 2**31).astype(np.int32)}))
    texts = spark.createDataFrame(pa.table({"word": words, "blob": pa.array(blobs, pa.binary())}))
    expected, columns = {}, {"integers": [], "texts": []}
    for num_blocks, num_shards in SHARD_CASES:
        for index in ("high32", "full64"):
            for hash_name in ("identity", "xxh64"):
                layout = bulkbloom.Layout.of("sb512", num_blocks, bbspark.SPARK_SEED, hash_name,
                                             index)
                cases = [("integers", "hash" if hash_name == "identity" else "key",
                          hashes if hash_name == "identity" else keys, "integer")]
                if hash_name == "xxh64":
                    cases += [("integers", "small", (keys % 2**31).astype(np.int32), "integer"),
                              ("texts", "word", np.array(words, dtype=object), "bytes"),
                              ("texts", "blob", np.array(blobs, dtype=object), "bytes")]
                for frame_name, column, values, kind in cases:
                    name = f"c{len(expected)}"
                    shard = bbspark._sql_shard(F.col(column), kind, layout, num_shards)
                    columns[frame_name].append(shard.alias(name))
                    expected[name] = bulkbloom.shard_of(layout, values, num_shards)
    got = {}
    for frame_name, frame_df in (("integers", integers), ("texts", texts)):
        got.update(frame_df.select(*columns[frame_name]).toArrow().to_pydict())
    for name, shards in expected.items():
        np.testing.assert_array_equal(np.array(got[name], dtype=np.uint32), shards, err_msg=name)
    # Other seeds and hashes have no Spark function: those layouts are routed in Python.
    assert bbspark._sql_shard(F.col("key"), "integer", bulkbloom.Layout.of("sb512", 7), 2) is None
    identity = bulkbloom.Layout.of("sb512", 7, 0, "identity")
    assert bbspark._sql_shard(F.col("word"), "bytes", identity, 2) is None
    # Nor does a product (block + 1) * S reaching 2^63, which no real filter has.
    widest = bulkbloom.Layout.of("sb512", 2**32 - 1, bbspark.SPARK_SEED)
    assert bbspark._sql_shard(F.col("key"), "integer", widest, 2**32 - 1) is None


def test_each_shard_gets_a_partition_of_its_own(spark):
    """Routing hash-partitions by a key per shard that Spark's partitioning sends to the shard's
    own partition, so that no two shards share a task while another task has none."""
    for count in (1, 2, 3, 7, 64, 1000):
        keys = bbspark._partition_keys(count)
        partitions = spark.createDataFrame(pa.table({"v": pa.array(keys, pa.int32())})).select(
            F.pmod(F.hash("v"), F.lit(count))).toArrow().column(0).to_pylist()
        assert partitions == list(range(count)), count
    keys = dump(15, 5_000)
    for seed in (bbspark.SPARK_SEED, 0):  # routed by Spark SQL, and by an Arrow function
        layout = bulkbloom.Layout.of("sb512", 1000, seed)
        routed, hashed = bbspark._routed(frame(spark, keys), "event_id", "integer", [], layout, 7)
        # Routed by Spark SQL, the keys' hashes travel, and route as the keys under the identity.
        assert hashed == (seed == bbspark.SPARK_SEED)
        key_layout = bbspark._hashed_layout(layout) if hashed else layout
        got = routed.select(bbspark._KEY, F.spark_partition_id()).toArrow()
        np.testing.assert_array_equal(got.column(1).to_numpy(),
                                      bulkbloom.shard_of(key_layout, got.column(0), 7))
        assert len(got) == len(keys)


def test_string_keys_shuffle_their_hash(spark):
    """A string key costs the routing's shuffle 8 bytes, its 64-bit hash, not its bytes."""
    words = spark.createDataFrame([(f"user-{i}",) for i in range(10)], ["word"])
    layout = bulkbloom.Layout.of("sb512", 1000, bbspark.SPARK_SEED)
    routed, hashed = bbspark._routed(words, "word", "bytes", [], layout, 3)
    # The repartition is routed's last step: what it shuffles is routed's columns.
    assert hashed and routed.schema.simpleString() == (
        f"struct<{bbspark._KEY}:bigint,{bbspark._ROW}:bigint>")


@pytest.mark.parametrize("seed", ROUTINGS)
def test_string_keys_as_the_clis_text_keys(spark, cli, tmp_path, seed):
    rng = np.random.default_rng(11)
    words = np.array([f"user-{i}-ü" for i in rng.integers(0, 12_000, size=RECORDS)])
    source = tmp_path / "words.csv"
    source.write_text("".join(f"{w},{i}\n" for i, w in enumerate(words)))
    run_cli(cli, "dedup", "-f", "csv:1", str(source), "-o", str(tmp_path / "out.csv"),
            "--capacity", str(RECORDS), "--fpr", str(FPR), "--seed", str(seed),
            "--filter", str(tmp_path / "F.bbf"))
    expected = [line.split(",") for line in (tmp_path / "out.csv").read_text().splitlines()]
    layout = bulkbloom.Filter.load(tmp_path / "F.bbf").layout

    df = spark.createDataFrame(pa.table({"word": words, "seq": np.arange(RECORDS)}).to_pandas())
    unique = bbspark.dedup(df, "word", layout=layout, fpr=FPR, num_shards=3)
    unique = unique.toArrow().sort_by("seq")
    assert list(zip(unique.column("word").to_pylist(), unique.column("seq").to_pylist())) == [
        (w, int(s)) for w, s in expected
    ]


def test_csv_keys_are_the_clis(spark, cli, tmp_path):
    """Spark's CSV reader (multiLine, quotes escaped by doubling, as RFC 4180 writes them) reads
    the keys `-f csv:2` reads: quoted keys spanning lines, with commas or doubled quotes, give the
    same filter bytes. Spark reads an empty field as null, the CLI as the empty key."""
    source = tmp_path / "in.csv"
    write_rfc4180_csv(source, rows=3_000)
    run_cli(cli, "build", "-f", "csv:2", str(source), "-o", str(tmp_path / "cli.bbf"),
            "--capacity", "10000")
    cli_filter = bulkbloom.Filter.load(tmp_path / "cli.bbf")
    df = spark.read.option("multiLine", True).option("escape", '"').csv(str(source))
    keys = ["" if k is None else k for k in (row["_c1"] for row in df.select("_c1").collect())]
    assert {'q"q', "two\nlines", "cr\r\nlf", '"'} <= set(keys)
    layout = cli_filter.layout
    f = bulkbloom.Filter.from_layout(layout.shape, layout.num_blocks, layout.seed, layout.hash,
                                     layout.index)
    f.keys_inserted = int(f.insert_if_absent(keys).sum())
    f.metadata = cli_filter.metadata
    assert f.to_bytes() == (tmp_path / "cli.bbf").read_bytes()


def cli_two_dumps(cli, tmp_path, first, second, *sizing):
    """What `bulkbloom dedup --filter F` keeps of two dumps, and F after both."""
    cli_filter = tmp_path / "cli.bbf"
    cli_args = ("--fpr", str(FPR), "--filter", str(cli_filter))
    # Sized for both dumps' records, so that it never grows a second generation.
    kept_first = cli_dedup(cli, tmp_path, "d1", first, "--capacity", str(2 * RECORDS), *sizing,
                           *cli_args)
    kept_second = cli_dedup(cli, tmp_path, "d2", second, *cli_args)
    return kept_first, kept_second, bulkbloom.Filter.load(cli_filter)


def test_a_carried_filter_is_the_clis_across_two_dumps(spark, cli, tmp_path):
    first = dump(2)
    second = dump(3, old=first)
    kept_first, kept_second, cli_bits = cli_two_dumps(cli, tmp_path, first, second)

    path = tmp_path / "filter"
    df1 = frame(spark, first)
    assert_same_records(written(spark, df1, "event_id", filter=path, layout=cli_bits.layout,
                                fpr=FPR, num_shards=3), first, kept_first)
    df2 = frame(spark, second, first_seq=RECORDS)
    assert_same_records(written(spark, df2, "event_id", filter=path), second, kept_second,
                        RECORDS)
    ours = shards_filter(path)
    ours.keys_inserted, ours.metadata = cli_bits.keys_inserted, cli_bits.metadata
    assert ours.to_bytes() == cli_bits.to_bytes()
    assert entries(path) == ["gen-000001", "gen-000002", "manifests"]


def test_the_cli_given_the_manifests_sizing_keeps_what_spark_keeps_day_after_day(
        spark, cli, tmp_path):
    """A new filter is sized as `bulkbloom dedup --capacity N --fpr P` sizes one (at the rate its
    first generation is full at, three quarters of P), so the CLI given the manifest's capacity
    and rate and seed 42, and nothing else, makes its layout and keeps what Spark keeps, day
    after day, without growing. A day that would take the filter past that rate, where the CLI
    grows, is refused and changes nothing; with on_full="pass" it is decided past it."""
    capacity = 36_000  # the two days' keys fit; a filter sized at P itself would grow on day 2
    days = [dump(2)]
    days += [dump(3, old=days[0]), dump(30, old=days[0])]
    path = tmp_path / "f"
    cli_filter = tmp_path / "cli.bbf"
    for day, keys in enumerate(days[:2]):
        df = frame(spark, keys, day * RECORDS)
        unique = written(spark, df, "event_id", order="seq", filter=path, capacity=capacity,
                         fpr=FPR, num_shards=3)
        state = bbspark.open_filter(path)
        sizing = ("--capacity", str(state.manifest["capacity"]), "--fpr", str(state.fpr),
                  "--seed", str(bbspark.SPARK_SEED))
        expected = cli_dedup(cli, tmp_path, f"d{day}", keys, "--filter", str(cli_filter),
                             *(sizing if day == 0 else ()))
        assert_same_records(unique, keys, expected, day * RECORDS)
        [generation] = bulkbloom.GrownFilter.load(cli_filter).generations
        # The same layout, promise, rate at which it is full and keys, and so the same bits.
        assert generation["layout"] == state.layout
        assert (state.fpr, state.target, state.key_count) == (
            FPR, generation["target_fpr"], generation["keys"])
        assert state.expected_fpr <= state.target
        ours, cli_bits = shards_filter(path), bulkbloom.Filter.load(cli_filter)
        ours.keys_inserted, ours.metadata = cli_bits.keys_inserted, cli_bits.metadata
        assert ours.to_bytes() == cli_bits.to_bytes()
    committed = listing(path)
    third = frame(spark, days[2], 2 * RECORDS)
    with pytest.raises(ValueError, match=r"past 0\.15, the rate at which it is full"):
        written(spark, third, "event_id", order="seq", filter=path)
    assert listing(path) == committed
    assert len(list(tmp_path.glob("out-*"))) == 2
    cli_dedup(cli, tmp_path, "d2", days[2], "--filter", str(cli_filter))
    assert len(bulkbloom.GrownFilter.load(cli_filter).generations) == 2
    written(spark, third, "event_id", order="seq", filter=path, on_full="pass")
    state = bbspark.open_filter(path)
    assert state.expected_fpr > state.target and state.number == 3


def test_a_manifest_from_before_the_target_is_judged_at_its_fpr(spark, tmp_path):
    """A directory committed before manifests recorded `target` and `key_count` was sized at its
    rate itself: it is judged full at that rate, and its keys are its shard files' counts."""
    path = tmp_path / "f"
    first = dump(2)
    written(spark, frame(spark, first), "event_id", filter=path, capacity=36_000, fpr=FPR,
            num_shards=3)
    manifest = path / "manifests" / "000001.json"
    older = json.loads(manifest.read_text())
    del older["target"], older["key_count"]
    manifest.write_text(json.dumps(older))
    state = bbspark.open_filter(path)
    assert (state.key_count, state.target, state.fpr) == (None, FPR, FPR)
    written(spark, frame(spark, dump(3, old=first), RECORDS), "event_id", filter=path)
    state = bbspark.open_filter(path)
    assert "target" not in state.manifest and state.target == FPR
    assert state.key_count == sum(state.load(i).keys_inserted for i in range(3))


@pytest.mark.parametrize("seed", ROUTINGS)
def test_a_retried_task_gives_the_exact_result(spark, cli, tmp_path, seed):
    first = dump(4)
    second = dump(5, old=first)
    _, kept_second, cli_bits = cli_two_dumps(cli, tmp_path, first, second, "--seed", str(seed))

    def fail_first_attempt():
        # After the attempt saved its shard: the retry must start from the shard as it was.
        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("the first attempt of every shard task fails")

    path = tmp_path / "filter"
    written(spark, frame(spark, first), "event_id", filter=path, layout=cli_bits.layout,
            fpr=FPR, num_shards=3)
    unique = written(spark, frame(spark, second, RECORDS), "event_id", filter=path,
                     _on_task=fail_first_attempt)
    assert_same_records(unique, second, kept_second, RECORDS)
    state = bbspark.open_filter(path)
    # Only the counted attempts' files, under the shards' names.
    assert sorted(p.name for p in state.directory.iterdir()) == sorted(
        [f"shard-{i:05d}.bbf" for i in range(3)] + [f"drops-{i:05d}.parquet" for i in range(3)]
    )
    assert entries(path) == ["gen-000001", "gen-000002", "manifests"]


@pytest.mark.parametrize("seed", ROUTINGS)
def test_past_broadcast_drops_each_input_partition_has_its_drops_file(spark, cli, tmp_path, seed):
    """Past broadcast_drops the dropped row ids are regrouped by input partition, so that the
    filtering task of a partition reads one file, not one of each shard: each file holds exactly
    the sorted row ids dropped from its partition, and the records kept are the CLI's."""
    keys = dump(8)
    expected = cli_dedup(cli, tmp_path, "cli", keys, "--capacity", str(RECORDS), "--fpr", str(FPR),
                         "--seed", str(seed), "--filter", str(tmp_path / "cli.bbf"))
    layout = bulkbloom.Filter.load(tmp_path / "cli.bbf").layout
    # Input partitions of a file source (a local relation's row ids are all of partition 0).
    df = parquet_dump(spark, tmp_path / "in", keys, 5)
    numbered = df.withColumn("row", F.monotonically_increasing_id()).toArrow()
    partitions = len(np.unique(numbered.column("row").to_numpy() >> 33))
    assert partitions > 1
    path = tmp_path / "filter"
    unique = written(spark, df, "event_id", order="seq", filter=path, layout=layout, fpr=FPR,
                     num_shards=7, broadcast_drops=0)
    assert_same_records(unique, keys, expected)
    kept_seq = set(spark_kept(unique)[1].tolist())
    seq, row = numbered.column("seq").to_numpy(), numbered.column("row").to_numpy()
    dropped = np.sort(row[[s not in kept_seq for s in seq.tolist()]])
    state = bbspark.open_filter(path)
    assert state.manifest["drops_by"] == "input partition"
    names = [name.split("/")[-1] for name in state.manifest["drops"]]
    assert names == sorted(p.name for p in state.directory.glob("drops-*"))
    assert len(names) == partitions
    found = []
    for name in names:
        ids = pa.parquet.read_table(state.directory / name).column("row_id").to_numpy()
        assert (np.diff(ids) > 0).all()
        assert (ids >> 33 == int(name[len("drops-p"):-len(".parquet")])).all()
        found.append(ids)
    np.testing.assert_array_equal(np.sort(np.concatenate(found)), dropped)
    # dedup's DataFrame filters lazily: once its generation is gone it says so, not keep every row.
    (tmp_path / "scratch").mkdir()
    lazy = bbspark.dedup(df, "event_id", order="seq", layout=layout, fpr=FPR, num_shards=7,
                         broadcast_drops=0, scratch=tmp_path / "scratch")
    assert_same_records(lazy, keys, expected)
    [scratch] = (tmp_path / "scratch").iterdir()  # the run's filter, in the scratch= directory
    shutil.rmtree(bbspark.open_filter(scratch).directory)
    with pytest.raises(Exception, match="was removed"):
        lazy.count()


def test_a_failed_job_leaves_the_filter_as_it_was(spark, tmp_path):
    def always_fail():
        raise RuntimeError("every attempt fails")

    path = tmp_path / "filter"
    first = dump(6)
    bbspark.dedup_and_write(frame(spark, first), "event_id", tmp_path / "day1", filter=path,
                            capacity=RECORDS, num_shards=3)
    before = listing(path)
    with pytest.raises(Exception, match="every attempt fails"):
        bbspark.dedup_and_write(frame(spark, dump(7)), "event_id", tmp_path / "day2",
                                filter=path, _on_task=always_fail)
    assert listing(path) == before
    assert not (tmp_path / "day2").exists()


def test_a_shard_decided_by_two_tasks_is_refused(tmp_path):
    """Were the routing ever to split a shard's records between two tasks, each would hand in a
    complete-looking shard of part of its keys: the commit refuses both, and commits nothing."""
    layout = bulkbloom.Layout.of("sb512", 1000, bbspark.SPARK_SEED)
    root = tmp_path / "filter"
    store = _store._LocalStore(root)
    work = root / "gen-000001-0a"
    work.mkdir(parents=True)

    def attempt(shard: int, name: str) -> dict:
        path = work / name
        bbspark._empty_shard(layout, None, shard, 2).save(path)
        return {"shard": shard, "shard_file": str(path), "shard_bytes": None}

    halves = [attempt(0, "a.bbf"), attempt(0, "b.bbf"), attempt(1, "c.bbf")]
    with pytest.raises(RuntimeError, match="decided by two tasks"):
        bbspark._stage(store, None, None, work.name, 1, halves, layout, None, None, 2, {})
    assert bbspark.open_filter(root) is None
    assert all(Path(row["shard_file"]).is_file() for row in halves)
    # The same hand-in with one task a shard commits.
    state = bbspark._publish(
        bbspark._stage(store, None, None, work.name, 1, halves[1:], layout, None, None, 2, {}))
    assert state.num_shards == 2 and (root / "manifests/000001.json").is_file()
    assert bbspark.open_filter(root).manifest == state.manifest


def test_build_and_query(spark, tmp_path):
    keys = dump(9)
    probes = dump(10, old=keys)
    path = bbspark.build(frame(spark, keys), "event_id", tmp_path / "built", capacity=RECORDS,
                         fpr=0.01, num_shards=7)
    # A new filter has Spark's xxhash64 seed, so that Spark computes the shards itself.
    whole = bulkbloom.Filter.from_layout(*bulkbloom.Layout.promising(RECORDS, 0.01)[:2],
                                         seed=bbspark.SPARK_SEED)
    whole.insert(keys)
    ours = shards_filter(path)
    ours.keys_inserted = whole.keys_inserted = 0
    assert ours.to_bytes() == whole.to_bytes()

    answered = bbspark.query(frame(spark, probes), "event_id", path).toArrow().sort_by("seq")
    np.testing.assert_array_equal(answered.column("maybe_present").to_numpy(),
                                  whole.contains(probes))
    with pytest.raises(ValueError, match="integer keys"):
        bbspark.query(spark.createDataFrame([("a",)], ["word"]), "word", path)


def test_the_default_shards_bound_the_rows_of_a_shard(spark, tmp_path):
    # 17M rows asked for, in a filter far below 128 MiB, on 3 cores: 17 shards of at most a
    # million rows, rounded up to 18, a multiple of the cores.
    path = bbspark.build(frame(spark, dump(13, 100)), "event_id", tmp_path / "many",
                         capacity=17_000_000, fpr=FPR)
    assert bbspark.open_filter(path).num_shards == 18


@pytest.mark.parametrize("seed", ROUTINGS)
def test_a_window_carried_across_dumps_is_the_clis(spark, cli, tmp_path, seed):
    start = 1_700_000_000
    rng = np.random.default_rng(12)
    cli_window = tmp_path / "cli.bbw"
    path = tmp_path / "window"
    seq = 0
    # One window both carry, its generations sized per period in multiples of the 7 shards
    # (docs/WINDOW.md "Sizing shards"), made empty for the CLI to carry from the first dump.
    # Seed 42's shards take the keys' hashes from Spark (routing shuffles them), seed 0's the
    # keys.
    sized = bulkbloom.WindowConfig.for_event_time(12_000 / 129_600, 129_600, FPR)
    layout = sized.generation
    config = bulkbloom.WindowConfig.of(
        sized.clock, sized.window,
        bulkbloom.Layout.of(layout.shape, layout.num_blocks, seed, layout.hash, layout.index),
        generations=sized.generations, lateness=sized.lateness, fpr=sized.fpr,
        block_multiple=sized.block_multiple).shardable_by(7)
    bulkbloom.WindowedFilter.from_config(config).save(cli_window)
    # Daily dumps under a 36 h window: a key comes back within it (dropped) or after it
    # (kept again); a dump of 5x the keys makes both grow their generations; the last dump is so
    # small that most of the 7 shards get no record, and their clocks must still move.
    for day, (count, capacity) in enumerate(
            [(6_000, 12_000), (6_000, 12_000), (30_000, 60_000), (6_000, 12_000), (3, 300_000)]):
        time = start + day * 86_400
        keys = [str(k) for k in rng.integers(0, 45_000 if day == 2 else 9_000, size=count)]
        source = tmp_path / f"day{day}.csv"
        source.write_text("".join(f"{k},{seq + i},{time}\n" for i, k in enumerate(keys)))
        out = tmp_path / f"day{day}.out.csv"
        summary = json.loads(run_cli(
            cli, "dedup", "-f", "csv:1", str(source), "-o", str(out), "--window", "36h",
            "--time-field", "3", "--filter", str(cli_window), "--stats", "json",
            "--capacity", str(capacity)).stderr.splitlines()[-1])
        expected = [(k, int(s)) for k, s, _ in
                    (line.split(",") for line in out.read_text().splitlines())]

        df = spark.createDataFrame(
            pa.table({"word": keys, "seq": np.arange(seq, seq + count)}).to_pandas())
        unique = written(spark, df, "word", filter=path, time=time, num_shards=7,
                         window_config=config if day == 0 else None,
                         window=None if day == 0 else 36 * 3600, capacity=capacity)
        got = unique.toArrow().sort_by("seq")
        assert list(zip(got.column("word").to_pylist(), got.column("seq").to_pylist())) == \
            expected, day
        # The run's expected false drops are its shards' own (each at its blocks' rate), the
        # CLI's whole window's within the shards' uneven loads; not the configured
        # generation's one-filter model (#34), nor a sum over the days.
        assert bbspark.open_filter(path).expected_false_drops == pytest.approx(
            summary["expected_wrongly_dropped"], rel=0.1), day
        seq += count
    state = bbspark.open_filter(path)
    assert state.window == config
    shards = [state.load(i) for i in range(7)]
    assert all(shard.sizes_per_period for shard in shards)
    # The generations grew past the configured size, in multiples of the 7 shards.
    blocks = shards[0].filter_blocks()
    assert max(blocks) > config.generation.num_blocks and all(b % 7 == 0 for b in blocks)
    ours = bulkbloom.concat(shards)
    theirs = bulkbloom.WindowedFilter.load(cli_window)
    ours.keys_inserted, ours.metadata = theirs.keys_inserted, theirs.metadata
    ours.save(tmp_path / "ours.bbw")
    assert (tmp_path / "ours.bbw").read_bytes() == cli_window.read_bytes()


def exchange_schema(df) -> str:
    """The schema of the rows the first shuffle of `df`'s physical plan moves."""
    node = df._jdf.queryExecution().sparkPlan()
    while node.nodeName() != "Exchange":
        node = node.children().apply(0)
    return node.schema().simpleString()


def test_a_windows_routing_shuffles_the_hash_not_the_key(spark, tmp_path, monkeypatch):
    """A window's UUID keys cost the routing's shuffle their 8-byte hash, as a filter's do."""
    routed = []
    decide = _api._decide_shards

    def spy(frame, *args):
        routed.append(exchange_schema(frame))
        return decide(frame, *args)

    monkeypatch.setattr(_api, "_decide_shards", spy)
    rng = np.random.default_rng(16)
    ids = [str(uuid.UUID(int=int(k))) for k in rng.integers(0, 2**63, size=3_000)]
    table = pa.table({"id": ids + ids[:500], "seq": np.arange(3_500)})
    df = spark.createDataFrame(table.to_pandas())
    unique = written(spark, df, "id", filter=tmp_path / "window", window=86_400,
                     time=1_700_000_000, num_shards=3)
    assert unique.count() == 3_000
    assert routed == [f"struct<{bbspark._KEY}:bigint,{bbspark._ROW}:bigint>"]


def test_a_count_reads_the_input_once_for_the_routing_too(spark, tmp_path):
    """Sized from its row count (no capacity), a run reads its input once to count and route it
    (the routing reads the columns the count cached), then once to filter it; a new window,
    sized from the count twice, too."""
    reads = spark.sparkContext.accumulator(0)

    def counted(batches):
        for batch in batches:
            reads.add(batch.num_rows)
            yield batch

    source = frame(spark, dump(17, 2_000))
    df = source.mapInArrow(counted, source.schema)
    unique = bbspark.dedup(df, "event_id", fpr=FPR)
    assert reads.value == 2_000
    unique.count()
    assert reads.value == 4_000
    written(spark, df, "event_id", filter=tmp_path / "window", window=86_400,
            time=1_700_000_000).count()
    assert reads.value == 8_000


def test_a_parquet_input_is_counted_from_its_footers_and_routed_from_its_files(
        spark, cli, tmp_path, monkeypatch):
    """A Parquet dump read whole is counted from its files' footers, reading no column, so the
    count caches nothing and the routing reads the keys from the files; the records kept are the
    CLI's. Where the count reads a column (a filter on one), it caches the routed columns."""
    keys = dump(23)
    df = parquet_dump(spark, tmp_path / "in", keys, 4)
    cached = []
    persist = type(df).persist  # the classic session's DataFrame class
    monkeypatch.setattr(type(df), "persist",
                        lambda self, *args: cached.append(self.columns) or persist(self, *args))
    unique = written(spark, df, "event_id", order="seq", fpr=FPR, filter=tmp_path / "f")
    assert cached == []
    # Sized for the rows counted as the CLI sizes a filter for them, which keeps the same records.
    layout = bbspark.open_filter(tmp_path / "f").layout
    assert layout == bbspark._spark_seeded(bulkbloom.Layout.promising(RECORDS, FPR))
    expected = cli_dedup(cli, tmp_path, "cli", keys, "--capacity", str(RECORDS), "--fpr", str(FPR),
                         "--seed", str(layout.seed))
    assert_same_records(unique, keys, expected)
    unique = written(spark, df.where("seq >= 0"), "event_id", order="seq", fpr=FPR,
                     filter=tmp_path / "g")
    assert len(cached) == 1 and cached[0][:2] == [bbspark._KEY, bbspark._ROW]
    assert bbspark.open_filter(tmp_path / "g").layout == layout
    assert_same_records(unique, keys, expected)


def test_a_shard_tasks_worker_does_not_import_pandas():
    """A Python worker that runs a shard task imports bulkbloom.spark (the task's functions live
    in it); pandas, needed only by the filtering's pandas function, is not imported with it."""
    probe = ("import sys, bulkbloom.spark._plan; "
             "sys.exit('pandas' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe]).returncode == 0


def test_partition_keys_hash_as_sparks_own_hash(spark):
    """Routing picks, for each shard, an int that Spark's hash partitioning sends to a partition of
    its own (_partition_keys), computing Spark's `hash` of ints itself (Murmur3, seed 42): it must
    be Spark's own, or shards would share partitions and leave cores idle."""
    values = np.concatenate([np.arange(-3000, 3000), [2**31 - 1, -(2**31), 123_456_789]])
    df = spark.createDataFrame([(int(v),) for v in values], "v int")
    sparks = np.array([row[0] for row in df.select(F.hash("v")).collect()], dtype=np.int32)
    assert np.array_equal(bbspark._spark_hash_of_ints(values), sparks)
