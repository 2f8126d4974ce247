"""Sliding windows: ``WindowConfig`` and ``WindowedFilter``, and what window shards share with
them."""

from __future__ import annotations

import os
from typing import Any, NamedTuple, Optional, Union

import numpy as np

from . import _core, _keys
from ._common import (
    Keys, Layout, PathLike, _Saved, _count, _flags, _layout_args, _options,
    _run_pieces, _shard_count,
)


class WindowConfig(NamedTuple):
    """A window's clock, length T, generations G, lateness L and the layout of each generation."""

    clock: str
    window: int
    generations: int
    lateness: int
    period: int
    forget_after: int
    memory_bytes: int
    generation: Layout
    description: str
    #: The promised false-positive rate (0.0: not known, a window from a version 1 file).
    fpr: float = 0.0
    #: Every generation's block count is a multiple of it: S window shards size their
    #: generations per period when S divides it (``shardable_by``; docs/WINDOW.md).
    block_multiple: int = 1

    def __str__(self) -> str:
        return self.description

    @classmethod
    def of(
        cls, clock: str, window: int, generation: Layout, *, generations: int = 4,
        lateness: int = 0, fpr: float = 0.0, block_multiple: int = 1,
    ) -> "WindowConfig":
        """An explicit configuration (arguments as for the ``WindowedFilter`` constructor, the
        generation's layout as a ``Layout``; ``fpr`` the promise, 0.0 when not known;
        ``block_multiple`` a divisor of the generation's block count), checked."""
        return cls._from_dict(
            _core.window_config_of(
                clock, _count(window, "window"), _count(generations, "generations"),
                _count(lateness, "lateness"), *_layout_args(generation), float(fpr),
                _count(block_multiple, "block_multiple"), 0,
            )
        )

    def shardable_by(self, num_shards: int) -> "WindowConfig":
        """This configuration with ``block_multiple`` a multiple of ``num_shards`` too and the
        generation's block count rounded up to it, so that ``num_shards`` window shards of it
        size their generations per period (with a promise, ``fpr``)."""
        return type(self)._from_dict(
            _core.window_config_of(
                self.clock, self.window, self.generations, self.lateness,
                *_layout_args(self.generation), float(self.fpr), self.block_multiple,
                _shard_count(num_shards),
            )
        )

    @classmethod
    def for_event_time(
        cls, records_per_unit: float, window: int, fpr: float = 0.001, *, generations: int = 4,
        lateness: int = 0,
    ) -> "WindowConfig":
        """The configuration ``WindowedFilter.for_event_time`` has, without allocating it."""
        return cls._from_dict(
            _core.window_config_for_event_time(
                float(records_per_unit), _count(window, "window"), float(fpr),
                _count(generations, "generations"), _count(lateness, "lateness"),
            )
        )

    @classmethod
    def _from_dict(cls, values: dict) -> "WindowConfig":
        values["generation"] = Layout(**values["generation"])
        return cls(**values)


class _WindowState(_Saved):
    """What windows and window shards share: the configuration, the clock and reads."""

    __slots__ = ()

    @property
    def config(self) -> WindowConfig:
        """The (whole) window's configuration."""
        values = self._core.config
        values["generation"] = Layout(**values["generation"])
        return WindowConfig(**values)

    @property
    def records_seen(self) -> int:
        """Records processed so far (new and dropped); a window shard on event time counts its
        own, on the records clock the whole window's as far as it knows."""
        return self._core.records_seen

    @property
    def clock_time(self) -> Optional[int]:
        """Event-time clock: the largest time seen, or None before the first record."""
        return self._core.clock_time

    @property
    def rotations(self) -> int:
        """Periods the clock has moved on since it started. Each clears a generation, but a jump
        of G or more periods clears all G once and still counts every period."""
        return self._core.rotations

    def contains(self, keys: Keys) -> np.ndarray:
        """A bool array: True where some generation may hold the key. A pure read."""
        pieces = _keys.key_pieces(keys)
        out = _flags(sum(map(_keys.piece_length, pieces)))
        _run_pieces(pieces, out, self._core.contains, self._core.contains_bytes)
        return out

    def advance_to(self, time: Any) -> None:
        """Event-time clock: moves the clock to ``time`` with no record (an idle source's
        progress), rotating as due; ``time`` is read as ``insert_if_absent`` reads each record's
        (an integer, or a datetime64 taken in seconds). Earlier times change nothing. (A window
        shard on the records clock takes the whole window's record count.)"""
        self._core.advance_to(_keys.event_time(time))

    def current_fpr(self) -> float:
        """The false-positive rate as it is now (of a shard: of its blocks)."""
        return self._core.current_fpr()

    def set_sizing(self, min_keys: int = 0, max_keys: int = 0) -> None:
        """Sizes the generations started from now on for the most keys a generation took in
        its period, at least ``min_keys`` (and the configuration's size), at most ``max_keys``
        (0: no bound). Give ``min_keys`` when a batch of more keys than before is coming (e.g. a
        larger day): a newest generation sized for fewer is sealed and a larger one takes the
        rest of its period. docs/WINDOW.md, "Sizing per period". A window shard takes the whole
        window's keys: give every shard what the single window would be given. The bounds are
        not saved or pickled: a loaded copy sizes from its configuration until it is told again
        (as the command line does on every run)."""
        self._core.set_sizing(_count(min_keys, "min_keys"), _count(max_keys, "max_keys"))

    @property
    def overfull_generations(self) -> int:
        """Generations that took more keys in their period than they were sized for, since
        this object was made or loaded: until they leave the window, its rate is past
        ``config.fpr`` (a shard's: counted in the whole window's keys as it knows them)."""
        return self._core.overfull_generations

    @property
    def expected_false_drops(self) -> float:
        """Never-seen keys expected to have been reported seen by this object's
        ``insert_if_absent`` calls, summed at the window's rate as each record came (a shard's:
        its records, at its blocks' rate)."""
        return self._core.expected_false_drops

    @property
    def memory_bytes(self) -> int:
        """Bytes of all generations as they are now (they grow with the periods' keys)."""
        return self._core.memory_bytes

    def save_dir(self, directory: PathLike) -> int:
        """Commits it (with ``keys_inserted`` and ``metadata``) into the state directory
        ``directory`` (created if missing; docs/FORMAT.md "State directories"), writing what
        changed since this object last saved there or was loaded from there: sealed generations
        once, the open one as a log of the hashes it took. A crash leaves the last commit.
        Returns the bytes written. One writer per directory (``bulkbloom dedup --filter DIR/``
        locks ``DIR.lock``; Python leaves that to the caller)."""
        return self._core.save_dir(os.fspath(directory), self.keys_inserted, self.metadata)


def _timed_dedup(
    core: Any, pieces: list, times: Any, name: str, hashes: bool = False
) -> np.ndarray:
    """insert_if_absent of a window or window shard, piece by piece, with each record's time
    (`times`, the argument `name`); `hashes`: the pieces are the keys' 64-bit hashes
    (insert_hashes_if_absent)."""
    count = sum(map(_keys.piece_length, pieces))
    all_times = _keys.event_times(times, count, name)
    out = _flags(count)
    start = 0
    for piece in _keys.resolved(pieces):
        length = _keys.piece_length(piece)
        piece_times = None if all_times is None else all_times[start : start + length]
        flags = out[start : start + length].view(np.uint8)
        if isinstance(piece, _keys.U64Piece):
            insert = core.insert_hashes_if_absent if hashes else core.insert_if_absent
            insert(piece.keys, piece_times, flags)
        elif hashes:
            raise TypeError("hashes must be 64-bit integers, not byte strings")
        else:
            core.insert_if_absent_bytes(*_keys.bytes_args(piece), piece_times, flags)
        start += length
    return out


class WindowedFilter(_WindowState):
    """Sliding-window dedup: a record is dropped if its key arrived within the last ``window``
    clock units, and forgotten some time after (``config.forget_after``), in bounded memory.

    A ring of ``generations`` filters; every record, new or dropped, is inserted into the newest
    and the oldest is cleared each ``config.period`` (docs/WINDOW.md has the exact rules). The
    clock is ``"records"`` (the count of records processed) or ``"event_time"`` (the records' own
    integer times: pass ``times`` to ``insert_if_absent``). Build one with ``for_records`` or
    ``for_event_time`` (sized from a false-positive rate), or explicitly with the constructor.
    """

    __slots__ = ()
    _core_type = _core.WindowedFilter

    def __init__(
        self,
        clock: str,
        window: int,
        shape: str,
        num_blocks: int,
        *,
        generations: int = 4,
        lateness: int = 0,
        seed: int = 0,
        hash: str = "xxh64",
        index: str = "high32",
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> None:
        self._core = _core.WindowedFilter(
            clock, _count(window, "window"), _count(generations, "generations"),
            _count(lateness, "lateness"), shape, _count(num_blocks, "num_blocks"), hash,
            _count(seed, "seed"), index, *_options(backend, implementation, threads),
        )
        self.keys_inserted = 0
        self.metadata = b""

    @classmethod
    def for_records(
        cls,
        window_records: int,
        fpr: float = 0.001,
        *,
        generations: int = 4,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> "WindowedFilter":
        """A window over the last ``window_records`` records whose false-positive rate stays at
        or under ``fpr`` when full."""
        core = _core.WindowedFilter.for_records(
            _count(window_records, "window_records"), float(fpr),
            _count(generations, "generations"), *_options(backend, implementation, threads),
        )
        return cls._wrap(core)

    @classmethod
    def for_event_time(
        cls,
        records_per_unit: float,
        window: int,
        fpr: float = 0.001,
        *,
        generations: int = 4,
        lateness: int = 0,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> "WindowedFilter":
        """An event-time window of length ``window`` (any unit, e.g. seconds) for at most
        ``records_per_unit`` records per unit, at false-positive rate ``fpr``; records may trail
        the largest time seen by up to ``lateness``."""
        core = _core.WindowedFilter.for_event_time(
            float(records_per_unit), _count(window, "window"), float(fpr),
            _count(generations, "generations"), _count(lateness, "lateness"),
            *_options(backend, implementation, threads),
        )
        return cls._wrap(core)

    @classmethod
    def from_config(
        cls, config: WindowConfig, *, backend: str = "auto", implementation: str = "",
        threads: int = 0,
    ) -> "WindowedFilter":
        """An empty window of ``config`` as it stands: promise and block multiple included
        (e.g. ``WindowConfig.for_event_time(...).shardable_by(7)``)."""
        if not isinstance(config, WindowConfig):
            raise TypeError(f"config must be a bulkbloom.WindowConfig, not {type(config).__name__}")
        return cls._wrap(
            _core.window_of_config(
                config.clock, config.window, config.generations, config.lateness,
                *_layout_args(config.generation), float(config.fpr), config.block_multiple,
                *_options(backend, implementation, threads),
            )
        )

    def __repr__(self) -> str:
        return f"<bulkbloom.WindowedFilter {self.config.description} on {self.implementation}>"

    def insert_if_absent(self, keys: Keys, times: Any = None) -> np.ndarray:
        """Dedups a batch in order: True where no generation held the key. Every key is inserted
        into the newest generation. ``times`` (event-time windows only, required there) gives each
        record's time: integers, or datetime64 (taken in seconds); ``ValueError`` names a null,
        NaT or integer outside int64 (the clock's range)."""
        return _timed_dedup(self._core, _keys.key_pieces(keys), times, "times")

    def __contains__(self, key: Union[int, str, bytes]) -> bool:
        value = _keys.scalar_key(key)
        batch = (
            _keys.U64Piece(np.array([value], dtype=np.uint64))
            if isinstance(value, int)
            else _keys.bytes_piece(value)
        )
        out = _flags(1)
        _run_pieces([batch], out, self._core.contains, self._core.contains_bytes)
        return bool(out[0])

    def expected_fpr(self, keys_per_generation: int) -> float:
        """The modelled false-positive rate when each generation holds this many keys."""
        return self._core.expected_fpr(_count(keys_per_generation, "keys_per_generation"))

    @classmethod
    def load_dir(
        cls, directory: PathLike, *, backend: str = "auto", implementation: str = "",
        threads: int = 0,
    ) -> "WindowedFilter":
        """Reads and fully verifies the window a state directory holds (``save_dir``, or
        ``bulkbloom dedup --window ... --filter DIR/``); its next ``save_dir`` there writes what
        changed since."""
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.WindowedFilter.load_dir(os.fspath(directory), *options))

    def save_checkpoint(self, directory: PathLike) -> None:
        """Saves a checkpoint into ``directory`` (created if missing): the window,
        ``keys_inserted`` and ``metadata`` (e.g. a source offset) in one atomically written
        file, so they always belong to the same moment."""
        self._core.save_checkpoint(os.fspath(directory), self.keys_inserted, self.metadata)

    @classmethod
    def load_checkpoint(
        cls,
        directory: PathLike,
        *,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> Optional["WindowedFilter"]:
        """The latest checkpoint in ``directory``, or None if none was ever completed there (or
        ``directory`` does not exist); resuming from it and replaying the records after it gives
        the answers an uninterrupted run would have given. ``NotADirectoryError`` if
        ``directory`` is a file."""
        options = _options(backend, implementation, threads)
        found = _core.WindowedFilter.load_checkpoint(os.fspath(directory), *options)
        return None if found is None else cls._wrap(*found)

