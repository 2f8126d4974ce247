"""Whole filters: ``Filter`` (one layout) and ``GrownFilter`` (generations that grow)."""

from __future__ import annotations

import itertools
import os
from typing import Any, Iterable, Union

import numpy as np

from . import _core, _keys
from ._common import (
    Keys, Layout, PathLike, _BulkCalls, _byte_buffer, _count, _flags, _is_batch, _map_options,
    _options, _text,
)


class Filter(_BulkCalls):
    """A blocked Bloom filter over 64-bit integer or byte-string keys.

    ``Filter(capacity, fpr)`` is sized as ``bulkbloom build --capacity capacity --fpr fpr`` sizes
    a filter: the smallest (over all block shapes) whose modelled false-positive rate after
    ``capacity`` distinct keys is at most three quarters of ``fpr``, the rest kept for the
    generations the command line adds should it outgrow that (``GrownFilter``). Its ``metadata``
    starts as the sizing record the command line writes (docs/FORMAT.md), so that
    ``bulkbloom dedup --filter`` holds the saved filter to ``fpr`` at ``capacity`` keys; keep it
    in front of bytes of your own (``f.metadata += b"..."``). A key that was inserted is always
    reported present; one that was not is reported present with at most about ``fpr``.

    ``backend`` is ``"auto"`` (CUDA when built and a GPU is present, else the CPU), ``"cpu"`` or
    ``"cuda"``; ``implementation`` forces one (``"cpu/scalar"``, ``"cpu/AVX2"``, ...; empty: the
    best, or the environment variable ``BULKBLOOM_IMPL``); ``threads`` is the worker count of
    bulk calls (0: the library's default, one per hardware thread where that measured faster).
    Every choice gives the same answers and bytes.

    ``keys_inserted`` and ``metadata`` are the caller's counter and bytes that ``save()`` stores
    with the bits (the command line stores the number of distinct keys it inserted) and that
    ``load()`` gives back; the filter itself does not change them.
    """

    __slots__ = ()
    _core_type = _core.Filter

    def __init__(
        self,
        capacity: int,
        fpr: float = 0.001,
        *,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> None:
        capacity = _count(capacity, "capacity")
        sized = _core.promised_layout(capacity, float(fpr))
        self._core = _core.Filter(
            sized["shape"], sized["num_blocks"], sized["hash"], sized["seed"], sized["index"],
            *_options(backend, implementation, threads),
        )
        self.keys_inserted = 0
        self.metadata = _core.sizing_record(capacity, float(fpr), "")

    @classmethod
    def from_layout(
        cls,
        shape: str,
        num_blocks: int,
        seed: int = 0,
        hash: str = "xxh64",
        index: str = "high32",
        *,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> "Filter":
        """An empty filter of an explicit layout: ``shape`` is ``"sb256"`` (Parquet's split
        block), ``"sb256x4"``, ``"sb512"`` or ``"sb512x16"``; ``hash`` is ``"xxh64"`` or
        ``"identity"`` (keys that are already uniform 64-bit hashes); ``index`` is ``"high32"``
        (Parquet's block index) or ``"full64"`` (even block loads beyond ~10^8 blocks)."""
        core = _core.Filter(
            shape, _count(num_blocks, "num_blocks"), hash, _count(seed, "seed"), index,
            *_options(backend, implementation, threads),
        )
        return cls._wrap(core)

    # -- what it is ---------------------------------------------------------------------------

    @property
    def layout(self) -> Layout:
        """The filter's layout."""
        return Layout(**self._core.layout)

    @property
    def threads(self) -> int:
        """Worker threads used by bulk calls."""
        return self._core.threads

    def __repr__(self) -> str:
        return f"<bulkbloom.Filter {self.layout.description} on {self.implementation}>"

    # -- single keys --------------------------------------------------------------------------

    def add(self, key: Union[int, str, bytes]) -> None:
        """Inserts one key (an int in [-2**63, 2**64), a str or bytes)."""
        value = _keys.scalar_key(key)
        if isinstance(value, int):
            self._core.insert_one(value)
        else:
            piece = _keys.bytes_piece(value)
            self._core.insert_bytes(piece.offsets, piece.data)

    def __contains__(self, key: Union[int, str, bytes]) -> bool:
        value = _keys.scalar_key(key)
        if isinstance(value, int):
            return self._core.contains_one(value)
        piece = _keys.bytes_piece(value)
        out = _flags(1)
        self._core.contains_bytes(piece.offsets, piece.data, out.view(np.uint8))
        return bool(out[0])

    # -- batches: insert, contains, insert_if_absent (_BulkCalls) ----------------------------------

    def update(self, *iterables: Iterable[Any]) -> None:
        """Inserts the keys of each argument: a batch as insert() takes, or any iterable of keys
        (read in batches of ``chunk_keys``)."""
        for keys in iterables:
            if _is_batch(keys):
                self.insert(keys)
                continue
            iterator = iter(keys)
            while batch := list(itertools.islice(iterator, _core.chunk_keys)):
                self.insert(batch)

    # -- set operations -----------------------------------------------------------------------

    def __ior__(self, other: "Filter") -> "Filter":
        self._core.merge(_same_kind(other, "|="))
        return self

    def __or__(self, other: "Filter") -> "Filter":
        if not isinstance(other, Filter):
            return NotImplemented
        result = self.copy()
        result |= other
        return result

    def __iand__(self, other: "Filter") -> "Filter":
        self._core.intersect(_same_kind(other, "&="))
        return self

    def __and__(self, other: "Filter") -> "Filter":
        if not isinstance(other, Filter):
            return NotImplemented
        result = self.copy()
        result &= other
        return result

    # Set conventions, as rbloom and Python's set keep them where a Bloom filter can. No len():
    # a Bloom filter cannot count its keys (estimated_count() estimates them from the bits,
    # keys_inserted is the caller's own counter), so it does not pretend to be Sized.

    def __bool__(self) -> bool:
        """False for an empty filter (no bit set), as for an empty set."""
        return self._core.popcount() != 0

    def __eq__(self, other: object) -> bool:
        """Same layout and bits (``keys_inserted`` and ``metadata`` are not compared): true for
        two filters of one layout given the same keys, in any order and batches."""
        if not isinstance(other, Filter):
            return NotImplemented
        return self.layout == other.layout and self._core.same_bits(other._core)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a set

    def issubset(self, other: "Filter") -> bool:
        """True if every bit set here is set in ``other`` (of the same layout, else
        ``ValueError``): always when ``other`` holds every key this one holds, and by chance
        sometimes otherwise, as a key's false positive."""
        return self._core.bits_within(_same_kind(other, "issubset"))

    def issuperset(self, other: "Filter") -> bool:
        """``other.issubset(self)``."""
        return _same_kind(other, "issuperset").bits_within(self._core)

    def __le__(self, other: "Filter") -> bool:
        return self.issubset(other) if isinstance(other, Filter) else NotImplemented

    def __ge__(self, other: "Filter") -> bool:
        return self.issuperset(other) if isinstance(other, Filter) else NotImplemented

    def copy(self) -> "Filter":
        """An independent copy (same layout, bits, backend and options)."""
        return type(self)._wrap(self._core.copy(), self.keys_inserted, self.metadata)

    __copy__ = copy

    def __deepcopy__(self, memo: dict) -> "Filter":
        return self.copy()

    def clear(self) -> None:
        """Clears every bit."""
        self._core.clear()

    # -- what it holds ------------------------------------------------------------------------

    def estimated_count(self) -> float:
        """Estimated number of distinct keys inserted, from the fraction of set bits."""
        return self._core.estimated_count()

    def current_fpr(self) -> float:
        """The false-positive rate as the filter is now (from the bits of each block)."""
        return self._core.current_fpr()

    def expected_fpr(self, n: int) -> float:
        """The modelled false-positive rate after ``n`` distinct keys."""
        return self._core.expected_fpr(_count(n, "n"))

    def popcount(self) -> int:
        """Number of set bits."""
        return self._core.popcount()

    # -- persistence --------------------------------------------------------------------------

    @classmethod
    def map(
        cls, path: PathLike, *, verify: bool = True, implementation: str = "", threads: int = 0
    ) -> "Filter":
        """Maps a filter file into memory without copying it (pages are read on first touch).
        Inserts change only this process's copy of the touched pages, never the file.
        ``verify=False`` skips reading every page for the checksum. A file shorter than its
        header says is a ``FormatError`` here; but a file truncated *in place* while mapped
        is undefined: the next read of a page past its new end kills the process with SIGBUS
        (no check per call can close that race). Replace a mapped file as ``save()`` does,
        by writing another and renaming it over the path: the mapping keeps the old bytes."""
        options = _map_options(verify, implementation, threads)
        return cls._wrap(*_core.Filter.map(os.fspath(path), *options))

    def to_parquet_bytes(self) -> bytes:
        """The Parquet split-block Bloom filter of this filter (Thrift header + bitset), for an
        ``sb256``, ``xxh64``, seed-0 filter with the ``high32`` block index, which is how
        Parquet readers place keys (``ValueError`` otherwise)."""
        return self._core.to_parquet()

    @classmethod
    def from_parquet_bytes(
        cls, data: Any, *, backend: str = "auto", implementation: str = "", threads: int = 0
    ) -> "Filter":
        """A filter from a Parquet split-block Bloom filter (header followed by the bitset)."""
        options = _options(backend, implementation, threads)
        core = _core.Filter.from_parquet(_byte_buffer(data), *options)
        return cls._wrap(core)


class GrownFilter(_BulkCalls):
    """A filter that grows instead of passing its false-positive rate, as the command line's
    ``dedup --filter`` does: generations, oldest first, each sized for the load it was added for;
    a key is present when some generation may hold it. ``GrownFilter(capacity, fpr)`` starts as
    ``Filter(capacity, fpr)`` does; ``insert_if_absent`` adds a generation before a batch whose
    new keys could pass ``fpr`` (docs/FORMAT.md, "Carried filters").

    ``load`` reads what the command line writes with ``--filter`` (a grown filter file, or a
    filter file while it has one generation; a filter without a sizing record is taken as
    promising ``default_fpr``); ``save`` writes the same, with ``metadata`` (the caller's bytes,
    after the sizing record). ``keys_inserted`` is the keys its generations took.
    """

    __slots__ = ()
    _core_type = _core.GrownFilter

    def __init__(
        self,
        capacity: int,
        fpr: float = 0.001,
        *,
        key_format: str = "",
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> None:
        self._core = _core.GrownFilter.for_capacity(
            _count(capacity, "capacity"), float(fpr), _text(key_format, "key_format"),
            *_options(backend, implementation, threads),
        )
        self.metadata = b""

    @classmethod
    def _wrap(cls, core: Any, metadata: bytes = b"") -> "GrownFilter":  # type: ignore[override]
        self = cls.__new__(cls)
        self._core = core
        self.metadata = metadata
        return self

    @property
    def keys_inserted(self) -> int:  # type: ignore[override]
        """Keys the generations took (the saved count; the filter keeps it)."""
        return self._core.keys_inserted

    @property
    def promised_fpr(self) -> float:
        """The rate the filter never passes."""
        return self._core.promised_fpr

    @property
    def capacity(self) -> int:
        """Keys the first generation is sized for."""
        return self._core.capacity

    @property
    def key_format(self) -> str:
        """How its keys were read (the command line's ``--format``; empty: unknown)."""
        return self._core.key_format

    @property
    def generations(self) -> list[dict]:
        """Each generation, oldest first: ``layout`` (a Layout), ``capacity``, ``target_fpr``,
        ``keys``."""
        return [dict(g, layout=Layout(**g["layout"])) for g in self._core.generations]

    def __repr__(self) -> str:
        return (f"<bulkbloom.GrownFilter of {len(self.generations)} generation(s), promising "
                f"{self.promised_fpr:g}>")

    def insert(self, keys: Keys) -> None:
        """Inserts every key of a batch (``insert_if_absent`` without its answers)."""
        self.insert_if_absent(keys)

    update = Filter.update

    def __bool__(self) -> bool:
        """False while no generation has a bit set, as for an empty set."""
        return self._core.current_fpr() != 0.0

    def add(self, key: Union[int, str, bytes]) -> None:
        """Inserts one key (an int in [-2**63, 2**64), a str or bytes)."""
        self.insert([_keys.scalar_key(key)])

    def __contains__(self, key: Union[int, str, bytes]) -> bool:
        return bool(self.contains([_keys.scalar_key(key)])[0])

    def current_fpr(self) -> float:
        """The false-positive rate now, from the bits of every generation."""
        return self._core.current_fpr()

    @classmethod
    def load(
        cls, path: PathLike, *, default_fpr: float = 0.001, backend: str = "auto",
        implementation: str = "", threads: int = 0,
    ) -> "GrownFilter":
        """Reads and fully verifies a grown filter file or a filter file."""
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.GrownFilter.load(os.fspath(path), float(default_fpr), *options))

    def _file_state(self) -> tuple[Any, ...]:
        # Its generations count their keys: the file keeps the caller's metadata only.
        return (self.metadata,)

    @classmethod
    def load_dir(
        cls, directory: PathLike, *, backend: str = "auto", implementation: str = "",
        threads: int = 0,
    ) -> "GrownFilter":
        """Reads and fully verifies the grown filter a state directory holds (``save_dir``, or
        ``bulkbloom dedup --filter DIR/``); its next ``save_dir`` there writes what changed
        since."""
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.GrownFilter.load_dir(os.fspath(directory), *options))

    def save_dir(self, directory: PathLike) -> int:
        """Commits it (with ``metadata``) into the state directory ``directory`` (created if
        missing; docs/FORMAT.md "State directories"), as ``bulkbloom dedup --filter DIR/`` does,
        writing what changed since this object last saved there or was loaded from there:
        sealed generations once, the newest as a log of the hashes it took. A crash leaves the
        last commit. Returns the bytes written. One writer per directory, as for ``save``."""
        return self._core.save_dir(os.fspath(directory), self.metadata)

    @classmethod
    def from_bytes(
        cls, data: Any, *, default_fpr: float = 0.001, backend: str = "auto",
        implementation: str = "", threads: int = 0,
    ) -> "GrownFilter":
        """A grown filter from the bytes of its file (any buffer)."""
        options = _options(backend, implementation, threads)
        image = _byte_buffer(data)
        return cls._wrap(*_core.GrownFilter.from_file_bytes(image, float(default_fpr), *options))


def _same_kind(other: Any, operation: str) -> Any:
    if not isinstance(other, Filter):
        raise TypeError(f"{operation} needs a bulkbloom.Filter, not {type(other).__name__}")
    return other._core
