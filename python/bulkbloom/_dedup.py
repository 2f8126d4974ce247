"""bulkbloom.dedup: each key's first row of an Arrow record-batch stream, batch by batch, in the
memory of the filter and a batch or two."""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional, Union

import numpy as np

from . import _keys

PathLike = Union[str, "os.PathLike[str]"]


def dedup(
    source: Any,
    key: str,
    *,
    filter: Any = None,
    capacity: Optional[int] = None,
    fpr: float = 0.001,
    time: Optional[str] = None,
    dropped: bool = False,
) -> Any:
    """The rows of ``source`` whose ``key`` no earlier row had, in stream order, as a
    ``pyarrow.RecordBatchReader`` that reads ``source`` as it is read (pass it to polars,
    DuckDB, ``pyarrow.parquet.write_table``... or iterate its batches).

    ``source`` is anything with ``__arrow_c_stream__`` that streams record batches: a pyarrow
    Table or RecordBatchReader (``pyarrow.dataset.dataset(path).scanner().to_reader()`` for a
    Parquet directory), a DuckDB relation, a polars DataFrame. ``key`` names its key column; its
    values are hashed as ``Filter.insert_if_absent`` hashes them (a string column as its UTF-8
    bytes, which is how the command line's ``-f csv:N`` hashes a field: read such keys as
    strings, not integers, to keep the CLI's rows). A null key is a ``ValueError`` naming its row.

    ``filter`` is what remembers the keys: a ``Filter``, a ``WindowedFilter`` (its sliding
    window; ``time`` names the column of each row's event time for an event-time window), or
    the path of a filter file carried across runs, as the command line's ``--filter`` is: loaded
    if it exists, else made as ``Filter(capacity, fpr)``, and saved (atomically) only once the
    whole stream was read, so that a run stopped early leaves the file as it was. Without
    ``filter``, a new ``Filter(capacity, fpr)``; ``capacity`` is then needed, since a stream
    does not say its length.

    ``dropped=True`` gives the other rows instead: each key's repeats (and, at the filter's
    false-positive rate, a first sighting taken for one).
    """
    pa = _keys._import_pyarrow("bulkbloom.dedup")
    if not hasattr(source, "__arrow_c_stream__"):
        raise TypeError(
            f"dedup reads an Arrow stream of record batches (__arrow_c_stream__), not a "
            f"{type(source).__name__}"
        )
    reader = pa.RecordBatchReader.from_stream(source)
    schema = reader.schema
    key_column = _column_index(schema, key, "key")
    time_column = None if time is None else _column_index(schema, time, "time")
    target, save_to = _target(filter, capacity, fpr)
    windowed = hasattr(target, "config")  # a WindowedFilter
    if time is not None and not windowed:
        raise ValueError("time= needs filter= to be an event-time WindowedFilter")

    def batches() -> Iterator[Any]:
        rows_before = 0
        for batch in reader:
            keys = batch.column(key_column)
            if keys.null_count:
                first = int(np.flatnonzero(np.asarray(keys.is_null()))[0])
                raise ValueError(f"row {rows_before + first}: the key column {key!r} is null")
            if windowed:
                times = None if time_column is None else batch.column(time_column)
                new = target.insert_if_absent(keys, times)
            else:
                new = target.insert_if_absent(keys)
            rows_before += batch.num_rows
            chosen = ~new if dropped else new
            if chosen.any():
                yield batch.filter(pa.array(chosen))
        if save_to is not None:
            target.save(save_to)

    return pa.RecordBatchReader.from_batches(schema, batches())


def _column_index(schema: Any, name: str, what: str) -> int:
    index = schema.get_field_index(name)
    if index < 0:
        raise ValueError(
            f"{what} column {name!r} is not in the stream (its columns: {', '.join(schema.names)})"
        )
    return int(index)


def _target(filter: Any, capacity: Optional[int], fpr: float) -> tuple:
    """The filter or window that remembers the keys, and the path to save it to at the end."""
    from . import Filter  # the package imports this module

    if filter is not None and not isinstance(filter, (str, os.PathLike)):
        return filter, None
    if filter is not None and os.path.exists(filter):
        return Filter.load(filter), filter
    if capacity is None:
        raise ValueError("dedup needs capacity= (or filter=): a stream does not say its length")
    return Filter(capacity, fpr), filter
