"""bulkbloom.dedup over Arrow record-batch streams and Parquet files: each key's first row in
stream order, the rows `bulkbloom dedup` keeps (and drops) of the same records, batch by batch."""

import io

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

import bulkbloom
from conftest import run_cli


@pytest.fixture
def records(tmp_path):
    """A csv of 20,000 records (key, row, note) with repeated keys, and its rows as a table cut
    into batches of 1,000 (the key read as a string: the CLI's csv keys are the field's bytes)."""
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 12_000, size=20_000)
    path = tmp_path / "records.csv"
    path.write_text("".join(f"u{k},{row},note {row % 7}\n" for row, k in enumerate(keys)))
    table = pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=["key", "row", "note"]),
        convert_options=pacsv.ConvertOptions(column_types={"key": pa.string()}),
    )
    return path, pa.Table.from_batches(table.to_batches(max_chunksize=1000))


def rows(reader):
    table = reader if isinstance(reader, pa.Table) else reader.read_all()
    return table.column("row").to_pylist()


def test_kept_and_dropped_rows_are_the_clis(cli, tmp_path, records):
    path, table = records
    run_cli(cli, "dedup", "-f", "csv:1", str(path), "-o", str(tmp_path / "kept.csv"),
            "--dups", str(tmp_path / "dropped.csv"), "--capacity", "15000",
            "--filter", str(tmp_path / "cli.bbf"))
    cli_filter = bulkbloom.Filter.load(tmp_path / "cli.bbf")
    layout = cli_filter.layout

    def empty():
        return bulkbloom.Filter.from_layout(layout.shape, layout.num_blocks, layout.seed)

    def cli_rows(name):
        return [int(line.split(",")[1]) for line in (tmp_path / name).read_text().splitlines()]

    f = empty()
    assert rows(bulkbloom.dedup(table, "key", filter=f)) == cli_rows("kept.csv")
    assert f == cli_filter
    assert rows(bulkbloom.dedup(table, "key", filter=empty(), dropped=True)) == cli_rows(
        "dropped.csv")


def test_a_filter_is_carried_across_runs_and_saved_by_the_caller(tmp_path, records):
    _, table = records
    whole = rows(bulkbloom.dedup(table, "key", capacity=15_000))
    carried = bulkbloom.GrownFilter(15_000)
    kept = rows(bulkbloom.dedup(table.slice(0, 8000), "key", filter=carried))
    carried.save(tmp_path / "carried.bbf")  # once the rows are written
    carried = bulkbloom.load(tmp_path / "carried.bbf")
    kept += rows(bulkbloom.dedup(table.slice(8000), "key", filter=carried))
    assert kept == whole


def test_batches_are_read_as_the_output_is_read(records):
    _, table = records
    pulled = []

    def source():
        for i, batch in enumerate(table.to_batches()):
            pulled.append(i)
            yield batch

    reader = bulkbloom.dedup(pa.RecordBatchReader.from_batches(table.schema, source()), "key",
                             capacity=15_000)
    reader.read_next_batch()
    assert len(pulled) <= 2  # memory: the filter and a batch or two, not the stream


def test_a_window_and_bad_columns(records):
    _, table = records
    w = bulkbloom.WindowedFilter.for_records(3000, 0.001)
    expected = bulkbloom.WindowedFilter.for_records(3000, 0.001).insert_if_absent(
        table.column("key"))
    assert rows(bulkbloom.dedup(table, "key", filter=w)) == np.flatnonzero(expected).tolist()
    with pytest.raises(ValueError, match="key column 'id' is not in the stream .*key, row, note"):
        bulkbloom.dedup(table, "id", capacity=10)
    with pytest.raises(ValueError, match="capacity"):
        bulkbloom.dedup(table, "key")
    nulls = pa.table({"key": ["a", "b", None], "row": [0, 1, 2]})
    with pytest.raises(ValueError, match="row 2: the key column 'key' is null"):
        bulkbloom.dedup(pa.Table.from_batches(nulls.to_batches(max_chunksize=2)), "key",
                        capacity=10).read_all()
    with pytest.raises(TypeError, match="Arrow stream"):
        bulkbloom.dedup([1, 2], "key", capacity=10)


def test_duckdb_to_polars():
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    relation = duckdb.sql(
        "select 'u' || (i * 7919 % 500) as key, i as row from range(5000) t(i) order by i")
    kept = pl.from_arrow(bulkbloom.dedup(relation, "key", capacity=1000))
    expected = pl.from_arrow(relation.arrow().read_all()).unique("key", keep="first",
                                                                 maintain_order=True)
    assert kept["row"].to_list() == expected["row"].to_list()
    # polars in, DuckDB out
    frame = pl.DataFrame({"key": [3, 1, 3, 2, 1], "row": range(5)})
    reader = bulkbloom.dedup(frame, "key", capacity=100)
    assert duckdb.sql("select row from reader").fetchall() == [(0,), (1,), (3,)]


class CountingFile(io.FileIO):
    """A file that counts the bytes read from it, and the most read at once."""

    def __init__(self, path):
        super().__init__(path, "rb")
        self.total = self.largest = 0

    def read(self, size=-1):
        data = super().read(size)
        self.total += len(data)
        self.largest = max(self.largest, len(data))
        return data


def test_parquet_is_read_a_batch_at_a_time(tmp_path, monkeypatch):
    """Parquet sources are read as the output is read, through a small buffer: not the whole
    file, nor a row group or a column chunk at once (memory independent of the file's size)."""
    pq = pytest.importorskip("pyarrow.parquet")
    count, group = 100_000, 50_000
    letters = np.random.default_rng(36).integers(ord("a"), ord("z") + 1, count * 100, np.uint8)
    payload = pa.StringArray.from_buffers(
        count, pa.py_buffer(np.arange(count + 1, dtype=np.int32) * 100), pa.py_buffer(letters))
    table = pa.table({"key": pa.array(np.arange(count) * 7 % 60_000).cast(pa.string()),
                      "row": np.arange(count), "payload": payload})
    (tmp_path / "dir").mkdir()
    path = tmp_path / "dir" / "b.parquet"
    # 2 row groups whose payload chunks (5 MB each) are larger than the read buffer.
    pq.write_table(table, path, row_group_size=group, compression="none")
    row_group = pq.ParquetFile(path).metadata.row_group(0)
    assert row_group.column(2).total_compressed_size > 4 * bulkbloom._dedup.PARQUET_BUFFER_BYTES
    expected = rows(bulkbloom.dedup(table, "key", capacity=count))
    assert expected == list(range(60_000))

    # Batches of 8Ki rows (~1 MB of these ~125-byte rows).
    monkeypatch.setattr(bulkbloom._dedup, "PARQUET_BATCH_BYTES", 1 << 20)
    with CountingFile(path) as file:
        reader = bulkbloom.dedup(file, "key", capacity=count)
        batches = [reader.read_next_batch()]
        assert file.total < row_group.total_byte_size
        batches += list(reader)
        assert file.largest <= 2 * bulkbloom._dedup.PARQUET_BUFFER_BYTES
    assert max(batch.num_rows for batch in batches) == 8192
    assert rows(pa.Table.from_batches(batches)) == expected

    # A directory is its files in name order, as is a list of paths.
    first = table.slice(0, 30_000)
    pq.write_table(first, tmp_path / "dir" / "a.parquet", row_group_size=group)
    both = rows(bulkbloom.dedup(pa.concat_tables([first, table]), "key", capacity=count))
    assert rows(bulkbloom.dedup(tmp_path / "dir", "key", capacity=count)) == both
    assert rows(bulkbloom.dedup([str(tmp_path / "dir" / "a.parquet"), path], "key",
                                capacity=count)) == both
    pq.write_table(table.drop_columns(["payload"]), tmp_path / "dir" / "c.parquet")
    with pytest.raises(ValueError, match="c.parquet' has the columns"):
        bulkbloom.dedup(tmp_path / "dir", "key", capacity=count).read_all()
