"""Shards (DESIGN §9): ``shard_of``, ``FilterShard``, ``WindowShard``, and ``split``,
``concat`` and ``reshard`` between a whole filter or window and its shards."""

from __future__ import annotations

import os
from typing import Any, Iterable, Sequence, Union

import numpy as np

from . import _core, _keys
from ._common import (
    Keys, Layout, PathLike, _BulkCalls, _byte_buffer, _count, _layout_args, _map_options,
    _options, _shard_count,
)
from ._filter import Filter
from ._window import WindowConfig, WindowedFilter, _timed_dedup, _WindowState

LayoutLike = Union[Layout, Filter, "FilterShard"]


def shard_of(layout: LayoutLike, keys: Keys, num_shards: int) -> np.ndarray:
    """The shard of ``num_shards`` shards of ``layout`` that owns each key, as a uint32 array.

    ``layout`` is a ``Layout`` (or a ``Filter`` or ``FilterShard``, meaning its layout); keys
    are any batch the bulk calls take. The shard of a key is
    ``((block + 1) * num_shards - 1) // num_blocks`` of the key's block (docs/DESIGN.md §9), so
    an engine without this package can compute it too. ``ValueError`` unless
    ``1 <= num_shards <= num_blocks``."""
    return _owners(_layout_args(layout), _keys.key_pieces(keys), _shard_count(num_shards))


def _owners(layout_args: tuple, pieces: list, num_shards: int) -> np.ndarray:
    """shard_of for the pieces of a batch."""
    out = np.empty(sum(map(_keys.piece_length, pieces)), dtype=np.uint32)
    start = 0
    for piece in _keys.resolved(pieces):
        length = _keys.piece_length(piece)
        part = out[start : start + length]
        if isinstance(piece, _keys.U64Piece):
            _core.shard_of(*layout_args, piece.keys, num_shards, part)
        else:
            _core.shard_of_bytes(*layout_args, *_keys.bytes_args(piece), num_shards, part)
        start += length
    return out


class _ShardPlace:
    """Where a shard lies in the whole filter or window."""

    __slots__ = ()
    _core: Any

    @property
    def index(self) -> int:
        """Which shard this is, in ``[0, num_shards)``."""
        return self._core.index

    @property
    def num_shards(self) -> int:
        """How many shards the whole filter or window is cut into."""
        return self._core.num_shards

    @property
    def blocks(self) -> tuple[int, int]:
        """The blocks ``[begin, end)`` of the whole layout (of each generation, for a window) this
        shard holds."""
        return self._core.blocks

    def _whole_description(self) -> str:
        """The description of the whole layout or window configuration."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return (
            f"<bulkbloom.{type(self).__name__} {self.index} of {self.num_shards}, blocks "
            f"{_blocks_text(*self.blocks)} of {self._whole_description()} on "
            f"{self._core.implementation}>"
        )

    def _check_owned(self, layout: Layout, pieces: list) -> None:
        """Raises ValueError, naming the key as the library does, if a key of `pieces` belongs to
        another shard. The library checks each core call before applying it, but a batch of
        several pieces, or of more than ``chunk_keys`` keys, is applied in several calls: checked
        only there, a foreign key in a later call would leave the earlier calls applied and be
        reported at its position in its own call."""
        if len(pieces) == 1 and _keys.piece_length(pieces[0]) <= _core.chunk_keys:
            return
        owners = _owners(_layout_args(layout), pieces, self.num_shards)
        foreign = np.flatnonzero(owners != self.index)
        if len(foreign) == 0:
            return
        position = int(foreign[0])
        owner = int(owners[position])
        # The owner's blocks by DESIGN §9's formula (shard_blocks in C++).
        owner_blocks = _blocks_text(
            owner * layout.num_blocks // self.num_shards,
            (owner + 1) * layout.num_blocks // self.num_shards,
        )
        raise ValueError(
            f"{_describe_key(pieces, position)} belongs to shard {owner} of {self.num_shards} "
            f"(blocks {owner_blocks}), not to shard {self.index} (blocks "
            f"{_blocks_text(*self.blocks)}) of {layout.description}; route keys with shard_of()"
        )


def _describe_key(pieces: list, position: int) -> str:
    """The key at `position` of a batch, named as the library's messages name it."""
    at = position
    for piece in _keys.resolved(pieces):
        length = _keys.piece_length(piece)
        if at < length:
            break
        at -= length
    if isinstance(piece, _keys.U64Piece):
        return f"key {int(piece.keys[at])} at position {position}"
    return f"the byte key at position {position} ({_keys.key_size(piece, at)} bytes)"


def _blocks_text(begin: int, end: int) -> str:
    return f"[{begin}, {end})"


class FilterShard(_BulkCalls, _ShardPlace):
    """Shard ``index`` of ``num_shards`` of a filter's layout: the bits of its block range
    (``blocks``) and nothing else.

    Its bulk calls take only keys it owns (route them with ``shard_of``): a batch holding a key of
    another shard raises ``ValueError`` naming the key, its shard and both block ranges, before
    anything is changed. Answers and bytes are exactly those of the same blocks of one whole
    filter given the same keys in the same order. ``save()`` writes the filter file format with the
    whole layout and the shard's place in the header; ``FilterShard.load`` / ``map`` read it (a
    whole filter's file reads as shard 0 of 1). Pickles through its layout, place and bytes.
    """

    __slots__ = ()
    _core_type = _core.FilterShard

    def __init__(
        self,
        layout: LayoutLike,
        index: int,
        num_shards: int,
        *,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> None:
        self._core = _core.FilterShard(
            *_layout_args(layout), _count(index, "index"), _shard_count(num_shards),
            *_options(backend, implementation, threads),
        )
        self.keys_inserted = 0
        self.metadata = b""

    @property
    def layout(self) -> Layout:
        """The layout of the whole filter this shard is part of."""
        return Layout(**self._core.layout)

    @property
    def size_bytes(self) -> int:
        """Size of the shard's bits in bytes."""
        return self._core.size_bytes

    def _pieces_to_write(self, keys: Keys) -> list:
        pieces = _keys.key_pieces(keys)
        self._check_owned(self.layout, pieces)
        return pieces

    def _whole_description(self) -> str:
        return self.layout.description

    def clear(self) -> None:
        """Clears every bit."""
        self._core.clear()

    def popcount(self) -> int:
        """Number of set bits."""
        return self._core.popcount()

    def bits(self) -> bytes:
        """A copy of the shard's bytes: exactly its blocks' bytes of the whole filter."""
        return self._core.bits()

    @classmethod
    def map(
        cls, path: PathLike, *, verify: bool = True, implementation: str = "", threads: int = 0
    ) -> "FilterShard":
        """Maps a shard file without copying it, as ``Filter.map`` does."""
        options = _map_options(verify, implementation, threads)
        return cls._wrap(*_core.FilterShard.map(os.fspath(path), *options))

    @classmethod
    def _from_bits(
        cls, layout: tuple, index: int, num_shards: int, bits: bytes, keys_inserted: int,
        metadata: bytes,
    ) -> "FilterShard":
        # bulkbloom.spark: the same blocks under another layout of the same size.
        shard = cls(Layout(*layout), index, num_shards)
        shard._core.set_bits(_byte_buffer(bits))
        shard.keys_inserted = keys_inserted
        shard.metadata = metadata
        return shard


class WindowShard(_WindowState, _ShardPlace):
    """Shard ``index`` of ``num_shards`` of a sliding window (``WindowedFilter``): its block
    range of every generation. A shard cannot see the whole window's clock, so the caller gives
    it: ``insert_if_absent(keys, clocks)`` takes, for each record, the single window's clock at
    that record (event time: the running maximum of all times so far, or a daily dump's own time
    when all its records carry it; records clock: the record's position in the whole stream), and
    ``advance_to(clock)`` moves every shard, including those that got no record, to the whole
    window's clock after each batch. Then every flag, and ``concat``'s bytes, are the single
    window's (docs/WINDOW.md, "Shards"). Pickles through its file bytes."""

    __slots__ = ()
    _core_type = _core.WindowShard

    def __init__(
        self,
        config: WindowConfig,
        index: int,
        num_shards: int,
        *,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> None:
        if not isinstance(config, WindowConfig):
            raise TypeError(f"config must be a bulkbloom.WindowConfig, not {type(config).__name__}")
        self._core = _core.WindowShard(
            config.clock, config.window, config.generations, config.lateness,
            *_layout_args(config.generation), _count(index, "index"), _shard_count(num_shards),
            *_options(backend, implementation, threads), float(config.fpr), config.block_multiple,
        )
        self.keys_inserted = 0
        self.metadata = b""

    @property
    def sizes_per_period(self) -> bool:
        """Whether the shard sizes its generations per period: the window's promise is known
        and ``num_shards`` divides ``config.block_multiple`` (docs/WINDOW.md, "Sizing
        shards"); otherwise every generation keeps the configured size."""
        return bool(self._core.sizes_per_period)

    def filter_keys(self) -> list[int]:
        """The keys each filter of the shard's blocks took (its own), oldest generation first,
        a generation's sealed filters before the one taking its keys."""
        return list(self._core.filter_keys())

    def filter_blocks(self) -> list[int]:
        """The whole window's block count of each filter, in ``filter_keys()`` order."""
        return list(self._core.filter_blocks())

    def set_window_keys(self, keys: Sequence[int]) -> None:
        """The whole window's keys in each filter (the sum of every shard's ``filter_keys()``),
        from which the shard sizes its next generations: given to every shard whenever the
        clock is about to enter a new period, the shards choose the single window's sizes.
        ``ValueError`` unless there is one count per filter."""
        self._core.set_window_keys([_count(k, "keys") for k in keys])

    def _whole_description(self) -> str:
        return self.config.description

    def insert_if_absent(self, keys: Keys, clocks: Any) -> np.ndarray:
        """Dedups a batch in order: True where no generation held the key; every key goes into
        the newest generation. ``clocks``: the single window's clock at each record (integers,
        or datetime64 taken in seconds)."""
        if clocks is None:
            raise TypeError("insert_if_absent needs the window's clock at each record")
        pieces = _keys.key_pieces(keys)
        self._check_owned(self.config.generation, pieces)
        return _timed_dedup(self._core, pieces, clocks, "clocks")

    def insert_hashes_if_absent(self, hashes: Keys, clocks: Any) -> np.ndarray:
        """``insert_if_absent`` for keys hashed elsewhere: ``hashes`` holds each key's 64-bit
        hash under ``config.generation``'s hash and seed (the hash ``shard_of`` routes by), as
        64-bit integers (signed ones as their bit pattern), e.g. Spark's ``xxhash64`` of the
        keys for a window with seed 42. The flags and the state are exactly the keys'."""
        if clocks is None:
            raise TypeError("insert_hashes_if_absent needs the window's clock at each record")
        pieces = _keys.key_pieces(hashes)
        generation = self.config.generation
        self._check_owned(Layout.of(generation.shape, generation.num_blocks, generation.seed,
                                    "identity", generation.index), pieces)
        return _timed_dedup(self._core, pieces, clocks, "clocks", hashes=True)

    @classmethod
    def load_dir(
        cls, directory: PathLike, *, backend: str = "auto", implementation: str = "",
        threads: int = 0,
    ) -> "WindowShard":
        """Reads and fully verifies the window shard a state directory holds (``save_dir``); its
        next ``save_dir`` there writes what changed since."""
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.WindowShard.load_dir(os.fspath(directory), *options))



Shards = Union[list[FilterShard], list[WindowShard]]


def split(filter: Union[Filter, WindowedFilter], num_shards: int) -> Shards:
    """A filter cut into ``num_shards`` FilterShards, or a window into WindowShards, each a
    copy of its blocks (and a window's clock): byte-exact. Every shard gets the filter's
    ``metadata``; shard 0 its ``keys_inserted`` and the others 0, so that the shards' counts add
    up to it as the counts of shards that each count the keys they took do (``concat`` adds
    them)."""
    count = _shard_count(num_shards)
    if isinstance(filter, Filter):
        shards: list = [FilterShard._wrap(core) for core in _core.split(filter._core, count)]
    elif isinstance(filter, WindowedFilter):
        cores = _core.split_window(filter._core, count, "auto", "", 0)
        shards = [WindowShard._wrap(core) for core in cores]
    else:
        raise TypeError(
            f"split needs a bulkbloom.Filter or WindowedFilter, not {type(filter).__name__}"
        )
    _hand_out(shards, filter.keys_inserted, filter.metadata)
    return shards


def _hand_out(shards: list, keys_inserted: int, metadata: bytes) -> None:
    """Gives the shards of a whole its keys_inserted and metadata, as split() says."""
    for shard in shards:
        shard.metadata = metadata
    shards[0].keys_inserted = keys_inserted


def _whole_state(shards: list) -> tuple[int, bytes]:
    """The keys_inserted and metadata of the whole of `shards`, as concat() says."""
    kinds_of_metadata = {shard.metadata for shard in shards}
    metadata = kinds_of_metadata.pop() if len(kinds_of_metadata) == 1 else b""
    return sum(shard.keys_inserted for shard in shards), metadata


def _shard_cores(shards: list, operation: str) -> tuple[bool, list]:
    """(whether they are window shards, their cores); all of one kind."""
    kinds = set(map(type, shards))
    if not (kinds <= {FilterShard} or kinds <= {WindowShard}):
        names = ", ".join(sorted(k.__name__ for k in kinds))
        raise TypeError(
            f"{operation} needs bulkbloom.FilterShard or WindowShard objects of one kind, not "
            f"{names}"
        )
    return kinds == {WindowShard}, [shard._core for shard in shards]


def concat(shards: Iterable[Any]) -> Union[Filter, WindowedFilter]:
    """The whole filter (or window) from all its shards, given in any order: byte for byte the
    one they were cut from. ``ValueError`` unless they are exactly shards 0..S-1 of one layout
    (or window configuration and clock) and S. Its ``keys_inserted`` is the sum of the shards',
    its ``metadata`` theirs if all hold the same bytes, else empty (a whole has one; per-shard
    bytes, such as each shard's source offset, have no single value): ``concat(split(f, S))``
    has ``f``'s."""
    shards = list(shards)
    windows, cores = _shard_cores(shards, "concat")
    if windows:
        return WindowedFilter._wrap(_core.concat_window(cores), *_whole_state(shards))
    return Filter._wrap(_core.concat(cores), *_whole_state(shards))


def reshard(shards: Iterable[Any], num_shards: int) -> Shards:
    """The same filter (or window) cut into ``num_shards`` shards instead: a copy of bytes, no
    key is rehashed and no answer changes. ``shards`` as for ``concat``; ``keys_inserted`` and
    ``metadata`` are ``split(concat(shards), num_shards)``'s."""
    shards = list(shards)
    windows, cores = _shard_cores(shards, "reshard")
    if windows:
        result: list = [
            WindowShard._wrap(c) for c in _core.reshard_window(cores, _shard_count(num_shards))
        ]
    else:
        result = [FilterShard._wrap(c) for c in _core.reshard(cores, _shard_count(num_shards))]
    _hand_out(result, *_whole_state(shards))
    return result

