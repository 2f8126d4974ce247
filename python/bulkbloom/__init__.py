"""bulkbloom: blocked Bloom filters for billions of keys, on numpy and Arrow batches at C++ speed.

>>> import numpy as np, bulkbloom
>>> f = bulkbloom.Filter(1_000_000, 0.001)
>>> ids = np.array([7, 42, 7, 99, 42], dtype=np.uint64)
>>> ids[f.insert_if_absent(ids)]
array([ 7, 42, 99], dtype=uint64)

Keys
    A bulk call (``insert``, ``contains``, ``insert_if_absent``) takes a batch: a 1-D numpy
    integer array (``uint64`` and ``int64`` used in place; a negative ``int64`` key is its
    two's-complement 64-bit pattern, so ``-1`` and ``2**64 - 1`` are one key), any object with
    the buffer protocol of integers or ``__dlpack__`` (host memory), a pyarrow integer, string, binary or
    fixed-size binary array or chunked array (its buffers used in place; a ``uuid`` array's keys
    are its 16 bytes, as Parquet stores them), a pandas Series (nullable ``Int64``, ``str``,
    categorical: through Arrow), any object with the Arrow PyCapsule interface
    (``__arrow_c_array__`` / ``__arrow_c_stream__``: polars Series, DuckDB results, nanoarrow,
    pandas >= 3; a one-column table) read in place chunk by chunk (string and binary views, what
    polars holds, included), a numpy ``str`` / ``bytes`` / ``StringDType`` array, or a list
    or tuple (all ints, all ``str`` or all ``bytes`` / ``bytearray``); ``update`` also takes any
    iterable. A filter's ``insert``, ``contains`` and ``insert_if_absent`` read an Arrow stream
    (a DuckDB relation, a RecordBatchReader) as they use it, a batch at a time, never whole. A
    null, NA or NaN among the keys is a ``ValueError`` naming its position, raised before any key
    is used (of a stream, before any of its first 65,536 keys: past them, when its batch is read,
    as a ``StreamNullError`` that gives how many keys before it were applied and their answers). A buffer of single bytes (``bytes``, ``bytearray``, ``memoryview(b"abc")``) is
    one key everywhere, like ``bytes``: ``add`` and ``in`` take it, a bulk call wants a list.
    Integer keys are hashed as their 8 little-endian bytes; ``str`` keys as their UTF-8 bytes and
    ``bytes`` keys as they are, exactly like the command line's ``dec`` and ``lines`` keys, so a
    filter built here has the bits of the one ``bulkbloom build`` makes of the same keys.

Shards
    A filter can be cut into S block ranges that live in different processes (DESIGN §9):
    ``shard_of(layout, keys, S)`` routes each key to its shard, a ``FilterShard`` (or, of a
    sliding window, a ``WindowShard``) answers for the keys it owns, and ``split``, ``concat`` and
    ``reshard`` copy bytes between one filter or window and S shards. The shards' bytes, concatenated, are byte for byte the one filter built from the same
    keys, so every answer is the same (``split`` says where ``keys_inserted`` and ``metadata``
    go). ``bulkbloom.spark`` builds on them.

Threads
    Bulk calls release the GIL and are cut into chunks of ``chunk_keys`` keys; a call on a filter
    waits for another thread's call on the same filter to finish its chunk. Ctrl-C
    (KeyboardInterrupt) is honoured between chunks: the chunks done stay applied, none is left
    half done.

Errors
    ``ValueError`` for bad parameters and malformed batches, ``TypeError`` for keys of the wrong
    type, ``FormatError`` for a damaged or foreign file, ``IoError`` (an ``OSError``, with
    ``errno`` and ``filename``) when the operating system fails a call, ``BackendUnavailable``
    for a backend this build or machine lacks, ``MemoryError`` when the filter's memory cannot be
    had. Where Python's own ``OSError`` would be a ``FileNotFoundError``, ``PermissionError`` and
    so on, the ``IoError`` raised is one too (``IoError.FileNotFoundError``, ...).
"""


from __future__ import annotations

import os
from typing import Union

from . import _core
from ._common import Keys, Layout, PathLike
from ._core import BackendUnavailable, Error, FormatError, IoError
from ._dedup import dedup
from ._filter import Filter, GrownFilter
from ._keys import StreamNullError
from ._shards import FilterShard, WindowShard, concat, reshard, shard_of, split
from ._window import WindowConfig, WindowedFilter

__all__ = [
    "Filter",
    "GrownFilter",
    "WindowedFilter",
    "Layout",
    "WindowConfig",
    "FilterShard",
    "WindowShard",
    "shard_of",
    "split",
    "concat",
    "reshard",
    "load",
    "Error",
    "FormatError",
    "IoError",
    "BackendUnavailable",
    "StreamNullError",
    "available_implementations",
    "chunk_keys",
    "dedup",
]
__version__ = "0.1.0"

# IoError's subclass for each OSError subclass Python picks by errno: the core raises
# IoError.FileNotFoundError for a missing file. Class attributes named by their qualified names,
# so that pickle finds them in any process.
for _kind in (
    BlockingIOError, ChildProcessError, ConnectionError, BrokenPipeError, ConnectionAbortedError,
    ConnectionRefusedError, ConnectionResetError, FileExistsError, FileNotFoundError,
    InterruptedError, IsADirectoryError, NotADirectoryError, PermissionError, ProcessLookupError,
    TimeoutError,
):
    setattr(IoError, _kind.__name__, type(_kind.__name__, (IoError, _kind), {
        "__module__": __name__,
        "__qualname__": f"IoError.{_kind.__name__}",
        "__doc__": f"An IoError that Python's own OSError would raise as {_kind.__name__}.",
    }))
del _kind

#: Keys per chunk of a bulk call (the GIL is released per chunk; Ctrl-C is seen between chunks).
chunk_keys: int = _core.chunk_keys


def available_implementations() -> list[str]:
    """Names of every CPU implementation this build can run on this machine, best first."""
    return _core.available_implementations()



def load(
    path: PathLike, *, backend: str = "auto", implementation: str = "", threads: int = 0
) -> Union[Filter, GrownFilter, WindowedFilter, FilterShard, WindowShard]:
    """Opens any file bulkbloom writes as the object of its kind: a filter file as a ``Filter``,
    a grown filter file (``bulkbloom dedup --filter`` once it grew) as a ``GrownFilter``, a
    window file as a ``WindowedFilter``, a shard's file as a ``FilterShard`` or ``WindowShard``;
    a state directory (``save_dir``, ``bulkbloom dedup --filter DIR/``) as the ``GrownFilter``,
    ``WindowedFilter`` or ``WindowShard`` it holds. ``FormatError`` for a file of none of these
    kinds."""
    options = dict(backend=backend, implementation=implementation, threads=threads)
    if os.path.isdir(path):
        held = _core.state_kind(os.fspath(path))
        if held == "window":
            return WindowedFilter.load_dir(path, **options)
        if held == "window shard":
            return WindowShard.load_dir(path, **options)
        return GrownFilter.load_dir(path, **options)
    kind = _core.file_kind(os.fspath(path))
    if kind == "filter":
        return Filter.load(path, **options)
    if kind == "filter shard":
        return FilterShard.load(path, **options)
    if kind == "grown filter":
        return GrownFilter.load(path, **options)
    if kind == "window":
        # One reader for both: a whole window's file reads as shard 0 of 1.
        shard = WindowShard.load(path, **options)
        return concat([shard]) if shard.num_shards == 1 else shard
    raise FormatError(f"{os.fspath(path)}: not a file bulkbloom writes (its first bytes are no "
                      "bulkbloom magic)")



# The public names are documented, repr'd and pickled as bulkbloom.NAME wherever they are defined,
# so that pickles and documentation do not depend on the package's module layout.
for _public in (Filter, GrownFilter, WindowedFilter, Layout, WindowConfig, FilterShard,
                WindowShard, shard_of, split, concat, reshard):
    _public.__module__ = __name__
del _public
