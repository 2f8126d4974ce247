"""bulkbloom.dedup over Arrow record-batch streams: each key's first row in stream order, the
rows `bulkbloom dedup` keeps (and drops) of the same records, batch by batch."""

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
    return reader.read_all().column("row").to_pylist()


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


def test_a_filter_file_is_carried_across_runs_and_saved_at_the_end(tmp_path, records):
    _, table = records
    whole = rows(bulkbloom.dedup(table, "key", capacity=15_000))
    carried = tmp_path / "carried.bbf"
    first = bulkbloom.dedup(table.slice(0, 8000), "key", filter=carried, capacity=15_000)
    assert not carried.exists()  # nothing saved before the stream was read
    kept = rows(first)
    assert carried.exists()
    kept += rows(bulkbloom.dedup(table.slice(8000), "key", filter=carried))
    assert kept == whole
    before = carried.read_bytes()
    fresh = pa.table({"key": [f"new{i}" for i in range(3000)]})
    stopped = bulkbloom.dedup(pa.Table.from_batches(fresh.to_batches(max_chunksize=1000)), "key",
                              filter=carried)
    stopped.read_next_batch()
    del stopped  # a consumer that stops early commits nothing
    assert carried.read_bytes() == before


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
